#!/usr/bin/env bash
# GRPO training speed, trlx vs TRL's GRPOTrainer, same run, same threads:
# optimizer steps per second with generation included (TRL generating with
# transformers' generate(), trlx with its own generator), the same model,
# prompts (the quickstart adding task), num_generations, completion length and
# reward (TRL's get_soft_overlong_punishment, a built-in on both sides, so the
# reward costs next to nothing on either). Each trlx run also says where its
# time went: generation, scoring, the round's log-probs, and training.
#
# Each repeat runs trlx and TRL back to back, alternating which goes first, and
# the ratio is taken per repeat; the summary gives the median and spread of the
# ratios, the seconds per step of each side and the load average around runs.
#
# Needs python3 with trl (dev time). Environment: MODEL=quickstart (the tiny
# quickstart model, default) or 25m (a ~25M-parameter Qwen2-shaped model),
# THREADS (2), STEPS (30), REPEATS (3), BATCH (16 completions per step),
# GENERATIONS (8), LENGTH (16 completion tokens), BUILD_DIR (build), NO_BUILD=1.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
THREADS=${THREADS:-2}
STEPS=${STEPS:-30}
REPEATS=${REPEATS:-3}
BATCH=${BATCH:-16}
GENERATIONS=${GENERATIONS:-8}
LENGTH=${LENGTH:-16}
MODEL=${MODEL:-quickstart}
TRLX="$BUILD_DIR/apps/trlx/trlx"
[[ -n ${NO_BUILD:-} ]] || cmake --build "$BUILD_DIR" --target trlx -j2 >/dev/null
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
if [[ $MODEL == 25m ]]; then
  "$TRLX" init-model --arch qwen2 --hidden_size 512 --intermediate_size 1536 --num_layers 8 --num_heads 8 \
    --num_kv_heads 4 --tokenizer examples/tiny-model --tie_word_embeddings --out "$WORK/model" >/dev/null
else
  cp -r examples/tiny-model "$WORK/model"
fi
head -n $((STEPS * BATCH / GENERATIONS + 8)) examples/data/grpo/train.jsonl >"$WORK/train.jsonl"
export OMP_NUM_THREADS=$THREADS
load() { cut -d' ' -f1 /proc/loadavg; }

run_trlx() {  # prints: seconds per step, then the split
  "$TRLX" grpo --model_name_or_path "$WORK/model" --dataset_name "$WORK/train.jsonl" --bf16 false \
    --gradient_checkpointing false --per_device_train_batch_size "$BATCH" --num_generations "$GENERATIONS" \
    --max_completion_length "$LENGTH" --learning_rate 1e-5 --max_steps "$STEPS" --logging_steps 5 \
    --save_strategy no --shuffle_dataset false --output_dir "$WORK/trlx" \
    --reward_funcs "{\"name\": \"get_soft_overlong_punishment\", \"max_completion_len\": $LENGTH, \"soft_punish_cache\": 4}" \
    >"$WORK/trlx.log" 2>&1 || { echo "trlx failed:" >&2; tail -20 "$WORK/trlx.log" >&2; exit 1; }
  python3 - "$WORK/trlx/metrics.jsonl" "$STEPS" <<'PY'
import json, sys
end = json.loads(open(sys.argv[1]).readlines()[-1])
t, n = end["train_runtime"], int(sys.argv[2])
g, s, l = end["generation_seconds"], end["scoring_seconds"], end["round_logprob_seconds"]
print(t / n, f"generation {g / t:.0%}, scoring {s / t:.0%}, round log-probs {l / t:.0%}, training {(t - g - s - l) / t:.0%}")
PY
}

run_trl() {  # prints: seconds per step
  python3 - "$WORK" "$STEPS" "$THREADS" "$BATCH" "$GENERATIONS" "$LENGTH" >"$WORK/trl.out" 2>"$WORK/trl.err" <<'PY'
import sys, time
import torch
from datasets import load_dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer
from trl.rewards import get_soft_overlong_punishment
work, steps, threads, batch, gens, length = sys.argv[1], *map(int, sys.argv[2:])
torch.set_num_threads(threads)
tok = AutoTokenizer.from_pretrained(work + "/model")
model = AutoModelForCausalLM.from_pretrained(work + "/model", dtype=torch.float32)
ds = load_dataset("json", data_files=work + "/train.jsonl", split="train")
args = GRPOConfig(output_dir=work + "/trl_out", per_device_train_batch_size=batch, num_generations=gens,
                  max_completion_length=length, learning_rate=1e-5, max_steps=steps, bf16=False, use_cpu=True,
                  gradient_checkpointing=False, report_to="none", save_strategy="no", logging_steps=5,
                  shuffle_dataset=False, dataloader_num_workers=0)
tr = GRPOTrainer(model=model, args=args, train_dataset=ds, processing_class=tok,
                 reward_funcs=get_soft_overlong_punishment(max_completion_len=length, soft_punish_cache=4))
t1 = time.time(); tr.train(); dt = time.time() - t1
print("seconds_per_step", dt / steps)
PY
  grep -q seconds_per_step "$WORK/trl.out" || { echo "TRL failed:" >&2; tail -20 "$WORK/trl.err" >&2; exit 1; }
  awk '/^seconds_per_step /{print $2}' "$WORK/trl.out"
}

RESULTS="$WORK/results.txt"
: >"$RESULTS"
for ((i = 1; i <= REPEATS; i++)); do
  l0=$(load)
  if ((i % 2)); then
    read -r a split < <(run_trlx); l1=$(load); b=$(run_trl)
  else
    b=$(run_trl); l1=$(load); read -r a split < <(run_trlx)
  fi
  l2=$(load)
  echo "$i $a $b $l0 $l1 $l2" >>"$RESULTS"
  printf 'repeat %d: trlx %.4f s/step, TRL %.4f s/step, speed-up %.2fx (load %s / %s / %s); trlx time: %s\n' \
    "$i" "$a" "$b" "$(python3 -c "print($b/$a)")" "$l0" "$l1" "$l2" "$split"
done
echo "model $MODEL, threads $THREADS, $STEPS steps of $BATCH completions ($GENERATIONS per prompt, $LENGTH tokens), $REPEATS repeats"
python3 - "$RESULTS" <<'PY'
import statistics as st, sys
rows = [[float(x) for x in l.split()] for l in open(sys.argv[1])]
speed = [b / a for _, a, b, *_ in rows]
ta, tb = [r[1] for r in rows], [r[2] for r in rows]
loads = [x for r in rows for x in r[3:]]
print(f"steps/s trlx/TRL: median {st.median(speed):.2f}x (min {min(speed):.2f}, max {max(speed):.2f}); "
      f"s/step trlx median {st.median(ta):.4f} ({min(ta):.4f}-{max(ta):.4f}), "
      f"TRL median {st.median(tb):.4f} ({min(tb):.4f}-{max(tb):.4f}); load {min(loads):.1f}-{max(loads):.1f}")
PY
