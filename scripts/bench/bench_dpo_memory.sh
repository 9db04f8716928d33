#!/usr/bin/env bash
# DPO peak memory where the logits matter, as in real LLM training: a small
# Qwen2-shaped model (hidden 256, 4 layers, ~42M parameters of which ~39M are
# the tied embedding) with Qwen3's real 151k-token vocabulary, and rows of
# ~500 tokens (a 200-word prompt, ~300-word completions). Peak resident memory
# of the whole process, trlx with use_liger_kernel (chunked log-probs) and
# without, vs TRL's DPOTrainer without Liger (TRL 1.x scores every position
# through its own tiled LM head), same model, data, batch and threads. The
# tokens/s of each run are printed too (memory runs, not speed runs).
#
# Needs python3 with trl (dev time). Environment: THREADS (default 2), STEPS
# (default 2), BATCH pairs per step (default 2), TOKENIZER (default the Qwen3
# tokenizer in $TRLX_SHARED_DIR/fixtures/tokenizers, /work/shared when unset),
# BUILD_DIR (default build), NO_BUILD=1 to skip the build.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
THREADS=${THREADS:-2}
STEPS=${STEPS:-2}
BATCH=${BATCH:-2}
TOKENIZER=${TOKENIZER:-${TRLX_SHARED_DIR:-/work/shared}/fixtures/tokenizers/qwen3}
TRLX="$BUILD_DIR/apps/trlx/trlx"
[[ -f $TOKENIZER/tokenizer.json ]] || { echo "no tokenizer.json in $TOKENIZER (set TOKENIZER)" >&2; exit 1; }
[[ -n ${NO_BUILD:-} ]] || cmake --build "$BUILD_DIR" --target trlx -j2 >/dev/null
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
"$TRLX" init-model --arch qwen2 --hidden_size 256 --intermediate_size 768 --num_layers 4 --num_heads 4 \
  --num_kv_heads 2 --tokenizer "$TOKENIZER" --tie_word_embeddings --out "$WORK/model" >/dev/null
python3 - "$WORK/train.jsonl" $((STEPS * BATCH)) <<'PY'
import json, random, sys
random.seed(0)
words = ("the of and to in is that for it as was with be by on not he this are or his from at which but have an they "
         "you were her all she there would their we him been has when who will more no if out so said what up its about "
         "into than them can only other new some could time these two may then do first any my now such like our over "
         "man me even most made after also did many before must through back years where much your way well down should "
         "because each just those people how too little state good very make world still own see men work long get here "
         "between both life being under never day same another know while last might us great old year off come since "
         "against go came right used take three").split()
s = lambda k: " ".join(random.choice(words) for _ in range(k))
with open(sys.argv[1], "w") as f:
    for _ in range(int(sys.argv[2])):
        f.write(json.dumps({"prompt": s(200) + "\n", "chosen": s(300), "rejected": s(300 - random.randint(0, 40))}) + "\n")
PY
export OMP_NUM_THREADS=$THREADS
peak_mb() { awk '/Maximum resident set size/{printf "%.0f", $6/1024}' "$1"; }

run_trlx() {  # $1: name, rest: extra flags; prints "peak_MB tokens/s"
  local name=$1; shift
  /usr/bin/time -v "$TRLX" dpo --config configs/dpo.yaml --model_name_or_path "$WORK/model" \
    --dataset_name "$WORK/train.jsonl" --per_device_train_batch_size "$BATCH" --gradient_accumulation_steps 1 \
    --max_length 1024 --learning_rate 1e-5 --max_steps "$STEPS" --logging_steps 1 --save_strategy no \
    --eval_strategy no --output_dir "$WORK/trlx_$name" "$@" >"$WORK/trlx_$name.log" 2>"$WORK/trlx_$name.time" ||
    { echo "trlx $name failed:" >&2; tail -20 "$WORK/trlx_$name.log" "$WORK/trlx_$name.time" >&2; exit 1; }
  echo "$(peak_mb "$WORK/trlx_$name.time") $(python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).readlines()[-1])['train_tokens_per_second'])" "$WORK/trlx_$name/metrics.jsonl")"
}

run_trl() {  # prints "peak_MB tokens/s"
  /usr/bin/time -v python3 - "$WORK" "$STEPS" "$THREADS" "$BATCH" >"$WORK/trl.out" 2>"$WORK/trl.time" <<'PY'
import sys, time
import torch
from datasets import load_dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import DPOConfig, DPOTrainer
work, steps, threads, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(threads)
tok = AutoTokenizer.from_pretrained(work + "/model")
model = AutoModelForCausalLM.from_pretrained(work + "/model", dtype=torch.float32)
ds = load_dataset("json", data_files=work + "/train.jsonl", split="train")
args = DPOConfig(output_dir=work + "/trl_out", per_device_train_batch_size=batch, learning_rate=1e-5, max_steps=steps,
                 bf16=False, use_cpu=True, gradient_checkpointing=False, report_to="none", save_strategy="no",
                 logging_steps=1, max_length=1024, dataloader_num_workers=0, use_liger_kernel=False)
tr = DPOTrainer(model=model, args=args, train_dataset=ds, processing_class=tok)
t1 = time.time(); tr.train(); dt = time.time() - t1
tokens = [h["num_tokens"] for h in tr.state.log_history if "num_tokens" in h][-1]
print("tokens_per_s", tokens / dt)
PY
  grep -q tokens_per_s "$WORK/trl.out" || { echo "TRL failed:" >&2; tail -20 "$WORK/trl.time" >&2; exit 1; }
  echo "$(peak_mb "$WORK/trl.time") $(awk '/^tokens_per_s /{print $2}' "$WORK/trl.out")"
}

l0=$(cut -d' ' -f1 /proc/loadavg)
read -r liger_mb liger_tps < <(run_trlx liger --use_liger_kernel true)
read -r plain_mb plain_tps < <(run_trlx plain)
read -r trl_mb trl_tps < <(run_trl)
l1=$(cut -d' ' -f1 /proc/loadavg)
echo "threads $THREADS, $STEPS steps of $BATCH pairs (~500-token rows), vocab $(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['vocab_size'])" "$WORK/model/config.json"), load $l0 -> $l1"
python3 - "$liger_mb" "$plain_mb" "$trl_mb" "$liger_tps" "$plain_tps" "$trl_tps" <<'PY'
import sys
lm, pm, tm, lt, pt, tt = map(float, sys.argv[1:])
print(f"peak RSS: trlx use_liger_kernel {lm:.0f} MiB, TRL without Liger {tm:.0f} MiB: ratio {lm/tm:.2f}x")
print(f"peak RSS: trlx plain log-probs {pm:.0f} MiB: ratio {pm/tm:.2f}x")
print(f"tokens/s (memory runs): trlx liger {lt:.0f}, trlx plain {pt:.0f}, TRL {tt:.0f}")
PY
