#!/usr/bin/env bash
# SFT training speed, trlx vs TRL's SFTTrainer, same run, same threads, same
# ~25M-parameter Qwen2-shaped model and data:
#  - training tokens/s (non-pad tokens through forward+backward+step)
#  - seconds from process start to the end of the first optimizer step
# Needs python3 with trl (dev time). THREADS (default 2), STEPS (default 12).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
THREADS=${THREADS:-2}
STEPS=${STEPS:-12}
REPEATS=${REPEATS:-3}
TRLX="$BUILD_DIR/apps/trlx/trlx"
cmake --build "$BUILD_DIR" --target trlx -j2 >/dev/null
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# ~25M parameters with the quickstart tokenizer's 304 tokens: most weight is in the layers.
"$TRLX" init-model --arch qwen2 --hidden_size 512 --intermediate_size 1536 --num_layers 8 --num_heads 8 \
  --num_kv_heads 4 --tokenizer examples/tiny-model --tie_word_embeddings --out "$WORK/m25" >/dev/null
head -n $((STEPS * 8)) examples/data/sft/train.jsonl >"$WORK/train.jsonl"
TOKENS=$(python3 - "$WORK/m25" "$WORK/train.jsonl" <<'PY' 2>/dev/null
import json, sys
from transformers import AutoTokenizer
t = AutoTokenizer.from_pretrained(sys.argv[1])
n = 0
for l in open(sys.argv[2]):
    r = json.loads(l); n += len(t(r["prompt"] + r["completion"] + t.eos_token)["input_ids"])
print(n)
PY
)
COMMON="--per_device_train_batch_size 8 --gradient_accumulation_steps 1 --learning_rate 1e-4 --max_steps $STEPS"

export OMP_NUM_THREADS=$THREADS
cat >"$WORK/trl_sft.py" <<'PY'
import sys, time
t0 = time.time()
import torch
from datasets import load_dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from trl import SFTConfig, SFTTrainer
work, steps, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(threads)
class First(TrainerCallback):
    def on_step_end(self, args, state, control, **kw):
        if state.global_step == 1: print("first_step_s", time.time() - t0, flush=True)
tok = AutoTokenizer.from_pretrained(work + "/m25")
model = AutoModelForCausalLM.from_pretrained(work + "/m25", dtype=torch.float32)
ds = load_dataset("json", data_files=work + "/train.jsonl", split="train")
args = SFTConfig(output_dir=work + "/trl_out", per_device_train_batch_size=8, learning_rate=1e-4, max_steps=steps,
                 bf16=False, use_cpu=True, gradient_checkpointing=False, report_to="none", save_strategy="no",
                 logging_steps=1, max_length=128, dataloader_num_workers=0)
tr = SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tok, callbacks=[First()])
t1 = time.time(); tr.train(); print("train_s", time.time() - t1)
PY
load() { cut -d' ' -f1 /proc/loadavg; }
# Each prints "tokens_per_second first_step_seconds".
run_trlx() {
  rm -rf "$WORK/trlx_out"
  "$TRLX" sft --config configs/sft.yaml --model_name_or_path "$WORK/m25" --dataset_name "$WORK/train.jsonl" $COMMON \
    --logging_steps 1 --save_strategy no --eval_strategy no --output_dir "$WORK/trlx_out" >"$WORK/trlx.log" 2>&1
  python3 -c "import json,sys; m=json.loads(open(sys.argv[1]).readlines()[-1]); print(m['train_tokens_per_second'], m['first_step_seconds'])" \
    "$WORK/trlx_out/metrics.jsonl"
}
run_trl() {
  python3 "$WORK/trl_sft.py" "$WORK" "$STEPS" "$THREADS" >"$WORK/trl.out" 2>"$WORK/trl.err"
  grep -q train_s "$WORK/trl.out" || { echo "TRL run failed:" >&2; tail -20 "$WORK/trl.err" >&2; exit 1; }
  python3 -c "
import sys
v = dict(l.split() for l in open(sys.argv[1]) if l.split()[0] in ('first_step_s', 'train_s'))
print($TOKENS / float(v['train_s']), v['first_step_s'])" "$WORK/trl.out"
}
echo "threads $THREADS, $STEPS steps of 8 rows, $TOKENS tokens, $REPEATS repeats"
: >"$WORK/results"
for r in $(seq 1 "$REPEATS"); do
  l0=$(load)
  if (( r % 2 )); then a=$(run_trlx); l1=$(load); b=$(run_trl); else b=$(run_trl); l1=$(load); a=$(run_trlx); fi
  l2=$(load)
  echo "$a $b $l0 $l1 $l2" >>"$WORK/results"
  python3 -c "import sys; a,fa,b,fb=map(float,sys.argv[1:5]); print(f'repeat $r: trlx {a:.0f} tok/s, TRL {b:.0f} tok/s, ratio {a/b:.2f}x; first step trlx {fa:.2f} s, TRL {fb:.2f} s (load $l0 / $l1 / $l2)')" $a $b
done
python3 - "$WORK/results" <<'PY'
import statistics as st, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
ratios = [r[0] / r[2] for r in rows]
first = [r[3] / r[1] for r in rows]
loads = [x for r in rows for x in r[4:]]
print(f"training tokens/s ratio trlx/TRL: median {st.median(ratios):.2f}x (min {min(ratios):.2f}, max {max(ratios):.2f}); "
      f"trlx median {st.median(r[0] for r in rows):.0f}, TRL median {st.median(r[2] for r in rows):.0f} tok/s; "
      f"load {min(loads):.1f}-{max(loads):.1f}")
print(f"process start to first optimizer step: TRL/trlx median {st.median(first):.1f}x")
PY
