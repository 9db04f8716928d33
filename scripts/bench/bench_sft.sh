#!/usr/bin/env bash
# SFT training speed and memory, trlx vs TRL's SFTTrainer, same run, same
# threads, same model and data:
#  - training tokens/s (non-pad tokens through forward+backward+step)
#  - seconds from process start to the end of the first optimizer step
#  - peak resident memory of each process
# SIZE picks the model:
#  - 25m (default): ~25M-parameter Qwen2-shaped model, the quickstart tokenizer
#    (304 tokens), 8 rows of up to 128 tokens per step, STEPS 12, REPEATS 3;
#  - 0.5b: a Qwen2.5-0.5B-shaped model (hidden 896, 24 layers, 14/2 heads,
#    MLP 4864, vocabulary 151936, tied head; 494M parameters, fp32), 4 rows
#    of 256 tokens per step, STEPS 3, REPEATS 2 (about 30 s a step on 2 cores
#    and 11 GB of memory per process).
# Needs python3 with trl (dev time). THREADS (default 2), STEPS, REPEATS.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
THREADS=${THREADS:-2}
SIZE=${SIZE:-25m}
TRLX="$BUILD_DIR/apps/trlx/trlx"
cmake --build "$BUILD_DIR" --target trlx -j2 >/dev/null
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
case $SIZE in
  25m)
    STEPS=${STEPS:-12} REPEATS=${REPEATS:-3} BATCH=8 MAXLEN=128
    # Most weight is in the layers.
    "$TRLX" init-model --arch qwen2 --hidden_size 512 --intermediate_size 1536 --num_layers 8 --num_heads 8 \
      --num_kv_heads 4 --tokenizer examples/tiny-model --tie_word_embeddings --out "$WORK/model" >/dev/null
    head -n $((STEPS * BATCH)) examples/data/sft/train.jsonl >"$WORK/train.jsonl" ;;
  0.5b)
    STEPS=${STEPS:-3} REPEATS=${REPEATS:-2} BATCH=4 MAXLEN=256
    "$TRLX" init-model --arch qwen2 --hidden_size 896 --intermediate_size 4864 --num_layers 24 --num_heads 14 \
      --num_kv_heads 2 --vocab_size 151936 --max_position_embeddings 32768 --tokenizer examples/tiny-model \
      --tie_word_embeddings --out "$WORK/model" >/dev/null
    # Rows longer than max_length (every row is truncated to 256 tokens) after a short prompt.
    python3 - "$WORK/train.jsonl" $((STEPS * BATCH)) <<'PY'
import json, random, sys
random.seed(0)
words = "the of and to in is was for on that with as by at from his her an which be this are were had not".split()
with open(sys.argv[1], "w") as f:
    for _ in range(int(sys.argv[2])):
        f.write(json.dumps({"prompt": " ".join(random.choices(words, k=12)) + "\n",
                            "completion": " ".join(random.choices(words, k=200))}) + "\n")
PY
    ;;
  *) echo "SIZE must be 25m or 0.5b, got $SIZE" >&2; exit 2 ;;
esac
TOKENS=$(python3 - "$WORK/model" "$WORK/train.jsonl" "$MAXLEN" <<'PY' 2>/dev/null
import json, sys
from transformers import AutoTokenizer
t = AutoTokenizer.from_pretrained(sys.argv[1])
n = 0
for l in open(sys.argv[2]):
    r = json.loads(l); n += min(int(sys.argv[3]), len(t(r["prompt"] + r["completion"] + t.eos_token)["input_ids"]))
print(n)
PY
)
COMMON="--per_device_train_batch_size $BATCH --gradient_accumulation_steps 1 --learning_rate 1e-4 --max_steps $STEPS --max_length $MAXLEN"
# Runs a command with its output into file $1 (stderr into $1.err); prints
# the command's peak resident memory in MiB.
peak_mib() {
  python3 - "$@" <<'PY'
import resource, subprocess, sys
with open(sys.argv[1], "w") as out, open(sys.argv[1] + ".err", "w") as err:
    rc = subprocess.call(sys.argv[2:], stdout=out, stderr=err)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)
sys.exit(rc)
PY
}

export OMP_NUM_THREADS=$THREADS
cat >"$WORK/trl_sft.py" <<'PY'
import sys, time
t0 = time.time()
import torch
from datasets import load_dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from trl import SFTConfig, SFTTrainer
work, steps, threads, batch, maxlen = sys.argv[1], *map(int, sys.argv[2:6])
torch.set_num_threads(threads)
class First(TrainerCallback):
    def on_step_end(self, args, state, control, **kw):
        if state.global_step == 1: print("first_step_s", time.time() - t0, flush=True)
tok = AutoTokenizer.from_pretrained(work + "/model")
model = AutoModelForCausalLM.from_pretrained(work + "/model", dtype=torch.float32)
ds = load_dataset("json", data_files=work + "/train.jsonl", split="train")
args = SFTConfig(output_dir=work + "/trl_out", per_device_train_batch_size=batch, learning_rate=1e-4, max_steps=steps,
                 bf16=False, use_cpu=True, gradient_checkpointing=False, report_to="none", save_strategy="no",
                 logging_steps=1, max_length=maxlen, dataloader_num_workers=0)
tr = SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tok, callbacks=[First()])
t1 = time.time(); tr.train(); print("train_s", time.time() - t1)
PY
load() { cut -d' ' -f1 /proc/loadavg; }
# Each prints "tokens_per_second first_step_seconds peak_mib".
run_trlx() {
  rm -rf "$WORK/trlx_out"
  local peak
  peak=$(peak_mib "$WORK/trlx.log" "$TRLX" sft --config configs/sft.yaml --model_name_or_path "$WORK/model" \
    --dataset_name "$WORK/train.jsonl" $COMMON --logging_steps 1 --save_strategy no --eval_strategy no \
    --output_dir "$WORK/trlx_out") || { echo "trlx run failed:" >&2; tail -20 "$WORK/trlx.log" "$WORK/trlx.log.err" >&2; exit 1; }
  python3 -c "import json,sys; m=json.loads(open(sys.argv[1]).readlines()[-1]); print(m['train_tokens_per_second'], m['first_step_seconds'], sys.argv[2])" \
    "$WORK/trlx_out/metrics.jsonl" "$peak"
}
run_trl() {
  local peak
  peak=$(peak_mib "$WORK/trl.out" python3 "$WORK/trl_sft.py" "$WORK" "$STEPS" "$THREADS" "$BATCH" "$MAXLEN") \
    || { echo "TRL run failed:" >&2; tail -20 "$WORK/trl.out" "$WORK/trl.out.err" >&2; exit 1; }
  python3 -c "
import sys
v = dict(l.split() for l in open(sys.argv[1]) if l.split()[:1] in (['first_step_s'], ['train_s']))
print($TOKENS / float(v['train_s']), v['first_step_s'], sys.argv[2])" "$WORK/trl.out" "$peak"
}
echo "model $SIZE, threads $THREADS, $STEPS steps of $BATCH rows (max_length $MAXLEN), $TOKENS tokens, $REPEATS repeats"
: >"$WORK/results"
for r in $(seq 1 "$REPEATS"); do
  l0=$(load)
  if (( r % 2 )); then a=$(run_trlx); l1=$(load); b=$(run_trl); else b=$(run_trl); l1=$(load); a=$(run_trlx); fi
  l2=$(load)
  echo "$a $b $l0 $l1 $l2" >>"$WORK/results"
  python3 -c "import sys; a,fa,pa,b,fb,pb=map(float,sys.argv[1:7]); print(f'repeat $r: trlx {a:.0f} tok/s, TRL {b:.0f} tok/s, ratio {a/b:.2f}x; first step trlx {fa:.2f} s, TRL {fb:.2f} s; peak memory trlx {pa:.0f} MiB, TRL {pb:.0f} MiB (load $l0 / $l1 / $l2)')" $a $b
done
python3 - "$WORK/results" <<'PY'
import statistics as st, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
ratios = [r[0] / r[3] for r in rows]
first = [r[4] / r[1] for r in rows]
mem = [r[2] / r[5] for r in rows]
loads = [x for r in rows for x in r[6:]]
print(f"training tokens/s ratio trlx/TRL: median {st.median(ratios):.2f}x (min {min(ratios):.2f}, max {max(ratios):.2f}); "
      f"trlx median {st.median(r[0] for r in rows):.0f}, TRL median {st.median(r[3] for r in rows):.0f} tok/s; "
      f"load {min(loads):.1f}-{max(loads):.1f}")
print(f"process start to first optimizer step: TRL/trlx median {st.median(first):.1f}x")
print(f"peak resident memory trlx/TRL: median {st.median(mem):.3f}x (min {min(mem):.3f}, max {max(mem):.3f}); "
      f"trlx median {st.median(r[2] for r in rows):.0f} MiB, TRL median {st.median(r[5] for r in rows):.0f} MiB")
PY
