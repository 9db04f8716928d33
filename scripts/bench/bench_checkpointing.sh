#!/usr/bin/env bash
# Gradient checkpointing on the ~25M-parameter model: peak memory (max RSS of
# the process) and seconds per step with checkpointing off, reentrant and
# non-reentrant, on long sequences where activations dominate; the same
# comparison for TRL's SFTTrainer in the same run, for reference.
# THREADS (default 2), STEPS (default 4), SEQ (tokens per row, default 1024),
# TRL=0 skips the reference runs.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
THREADS=${THREADS:-2}
STEPS=${STEPS:-4}
SEQ=${SEQ:-1024}
TRL=${TRL:-1}
TRLX="$BUILD_DIR/apps/trlx/trlx"
cmake --build "$BUILD_DIR" --target trlx -j2 >/dev/null
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
"$TRLX" init-model --arch qwen2 --hidden_size 512 --intermediate_size 1536 --num_layers 8 --num_heads 8 \
  --num_kv_heads 4 --tokenizer examples/tiny-model --tie_word_embeddings --out "$WORK/m25" >/dev/null
# Long rows of words the tokenizer knows: about SEQ tokens each.
python3 - "$WORK/train.jsonl" "$SEQ" "$STEPS" <<'PY'
import json, random, sys
random.seed(0)
words = "the cat sat on a mat and the dog ran to the sun while birds sang over green hills".split()
with open(sys.argv[1], "w") as f:
    for _ in range(4 * int(sys.argv[3])):
        f.write(json.dumps({"text": " ".join(random.choice(words) for _ in range(int(sys.argv[2])))}) + "\n")
PY
export OMP_NUM_THREADS=$THREADS
peak_mb() { awk '/Maximum resident set size/{printf "%.0f", $6/1024}' "$1"; }

run_trlx() {  # name, extra flags
  /usr/bin/time -v "$TRLX" sft --config configs/sft.yaml --model_name_or_path "$WORK/m25" \
    --dataset_name "$WORK/train.jsonl" --per_device_train_batch_size 4 --gradient_accumulation_steps 1 \
    --max_length "$SEQ" --max_steps "$STEPS" --logging_steps 1 --save_strategy no --eval_strategy no \
    --bf16 false --output_dir "$WORK/out_$1" "${@:2}" >"$WORK/$1.log" 2>"$WORK/$1.time" ||
    { echo "trlx run $1 failed:"; tail -20 "$WORK/$1.log" "$WORK/$1.time"; exit 1; }
  local s
  s=$(python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).readlines()[-1])['train_runtime'])" \
      "$WORK/out_$1/metrics.jsonl")
  echo "$1 $(peak_mb "$WORK/$1.time") $(python3 -c "print($s/$STEPS)")"
}

run_trl() {  # name, gradient_checkpointing, use_reentrant
  /usr/bin/time -v python3 - "$WORK" "$STEPS" "$THREADS" "$SEQ" "$2" "$3" >"$WORK/$1.out" 2>"$WORK/$1.time" <<'PY'
import sys, time, torch
from datasets import load_dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import SFTConfig, SFTTrainer
work, steps, threads, seq, ckpt, reent = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1", sys.argv[6] == "1"
torch.set_num_threads(threads)
tok = AutoTokenizer.from_pretrained(work + "/m25")
model = AutoModelForCausalLM.from_pretrained(work + "/m25", dtype=torch.float32)
ds = load_dataset("json", data_files=work + "/train.jsonl", split="train")
args = SFTConfig(output_dir=work + "/trl_out", per_device_train_batch_size=4, learning_rate=2e-5, max_steps=steps,
                 bf16=False, use_cpu=True, gradient_checkpointing=ckpt,
                 gradient_checkpointing_kwargs={"use_reentrant": reent} if ckpt else None, report_to="none",
                 save_strategy="no", logging_steps=1, max_length=seq, dataloader_num_workers=0)
tr = SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tok)
t = time.time(); tr.train(); print("step_s", (time.time() - t) / steps)
PY
  grep -q step_s "$WORK/$1.out" || { echo "TRL run $1 failed:"; tail -20 "$WORK/$1.time"; exit 1; }
  echo "$1 $(peak_mb "$WORK/$1.time") $(awk '/^step_s /{print $2}' "$WORK/$1.out")"
}

{
  run_trlx off --gradient_checkpointing false
  run_trlx nonreentrant --gradient_checkpointing true --gradient_checkpointing_kwargs.use_reentrant false
  run_trlx reentrant --gradient_checkpointing true --gradient_checkpointing_kwargs.use_reentrant true
  if [ "$TRL" = 1 ]; then
    run_trl trl_off 0 0
    run_trl trl_nonreentrant 1 0
    run_trl trl_reentrant 1 1
  fi
} >"$WORK/results"
echo "threads $THREADS, $STEPS steps of 4 rows x $SEQ tokens, ~25M-parameter model, fp32"
python3 - "$WORK/results" <<'PY'
import sys
r = {l.split()[0]: (float(l.split()[1]), float(l.split()[2])) for l in open(sys.argv[1])}
print(f"{'run':<22}{'peak MB':>10}{'s/step':>9}{'memory vs off':>15}{'time vs off':>13}")
for who, off in (("", "off"), ("trl_", "trl_off")):
    for mode in ("off", "nonreentrant", "reentrant"):
        k = who + mode
        if k not in r: continue
        m, s = r[k]
        print(f"{('TRL ' if who else 'trlx ') + mode:<22}{m:>10.0f}{s:>9.2f}{m / r[off][0]:>14.2f}x{s / r[off][1]:>12.2f}x")
if "trl_off" in r:
    print(f"trlx / TRL peak memory: off {r['off'][0] / r['trl_off'][0]:.2f}x, "
          f"non-reentrant {r['nonreentrant'][0] / r['trl_nonreentrant'][0]:.2f}x, "
          f"reentrant {r['reentrant'][0] / r['trl_reentrant'][0]:.2f}x")
PY
