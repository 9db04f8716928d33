#!/usr/bin/env bash
# DPO training speed, trlx vs TRL's DPOTrainer, same run, same threads, same
# ~25M-parameter Qwen2-shaped model and preference data: training tokens/s
# (non-pad tokens of chosen+rejected rows through the policy forward+backward,
# the reference forward and the step), full fine-tune and LoRA.
#
# The machine this runs on is often shared, and a 2-core step slows by 2-10x
# when another job takes a core, so one run per side says little. Each repeat
# runs trlx and TRL back to back (alternating which goes first) and the ratio
# is taken per repeat, between runs that saw about the same load; the summary
# gives the median and the spread of those ratios, the tokens/s of each side,
# and the load average around every run.
#
# Peak memory: scripts/bench/bench_dpo_memory.sh (a real vocabulary, where
# the logits matter).
#
# Needs python3 with trl and peft (dev time). Environment: THREADS (default 2),
# STEPS (default 10), REPEATS (default 3), SEQ=long for ~1000-token rows
# (default: the quickstart's short arithmetic pairs), BUILD_DIR (default build),
# NO_BUILD=1 to skip the build.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
THREADS=${THREADS:-2}
STEPS=${STEPS:-10}
REPEATS=${REPEATS:-3}
SEQ=${SEQ:-short}
TRLX="$BUILD_DIR/apps/trlx/trlx"
[[ -n ${NO_BUILD:-} ]] || cmake --build "$BUILD_DIR" --target trlx -j2 >/dev/null
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
"$TRLX" init-model --arch qwen2 --hidden_size 512 --intermediate_size 1536 --num_layers 8 --num_heads 8 \
  --num_kv_heads 4 --tokenizer examples/tiny-model --tie_word_embeddings --out "$WORK/m25" >/dev/null
if [[ $SEQ == long ]]; then
  # Long prompts (earlier questions and answers as context), short answers:
  # ~1000 tokens per row, 2 pairs per step.
  BATCH=2 MAX_LENGTH=1024
  python3 - examples/data/dpo/train.jsonl "$WORK/train.jsonl" $((STEPS * BATCH)) <<'PY'
import json, random, sys
random.seed(0)
rows = [json.loads(l) for l in open(sys.argv[1])]
with open(sys.argv[2], "w") as f:
    for i in range(int(sys.argv[3])):
        r = rows[i]
        ctx = " ".join(rows[(i + j) % len(rows)]["prompt"].strip() + " " + rows[(i + j) % len(rows)]["chosen"]
                       for j in range(random.randint(36, 42)))
        f.write(json.dumps({"prompt": ctx + "\n" + r["prompt"], "chosen": (r["chosen"] + " ") * random.randint(4, 6),
                            "rejected": (r["rejected"] + " ") * random.randint(4, 6)}) + "\n")
PY
else
  BATCH=8 MAX_LENGTH=128
  head -n $((STEPS * BATCH)) examples/data/dpo/train.jsonl >"$WORK/train.jsonl"
fi
export OMP_NUM_THREADS=$THREADS
LORA_FLAGS=(--use_peft true --lora_r 16 --lora_alpha 32 --lora_dropout 0.05 --lora_target_modules q_proj v_proj)
load() { cut -d' ' -f1 /proc/loadavg; }

run_trlx() {  # $1: name, rest: extra flags; prints tokens/s
  local name=$1; shift
  "$TRLX" dpo --config configs/dpo.yaml --model_name_or_path "$WORK/m25" --dataset_name "$WORK/train.jsonl" \
    --per_device_train_batch_size "$BATCH" --gradient_accumulation_steps 1 --max_length "$MAX_LENGTH" \
    --learning_rate 1e-5 --max_steps "$STEPS" --logging_steps 1 --save_strategy no --eval_strategy no \
    --output_dir "$WORK/trlx_$name" "$@" >"$WORK/trlx_$name.log" 2>&1 ||
    { echo "trlx $name failed:" >&2; tail -20 "$WORK/trlx_$name.log" >&2; exit 1; }
  python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).readlines()[-1])['train_tokens_per_second'])" \
    "$WORK/trlx_$name/metrics.jsonl"
}

run_trl() {  # $1: name, $2: lora 0/1; prints tokens/s
  python3 - "$WORK" "$STEPS" "$THREADS" "$2" "$BATCH" "$MAX_LENGTH" >"$WORK/trl_$1.out" 2>"$WORK/trl_$1.err" <<'PY'
import sys, time
import torch
from datasets import load_dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import DPOConfig, DPOTrainer
work, steps, threads, lora, batch, max_length = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1", int(sys.argv[5]), int(sys.argv[6])
torch.set_num_threads(threads)
tok = AutoTokenizer.from_pretrained(work + "/m25")
model = AutoModelForCausalLM.from_pretrained(work + "/m25", dtype=torch.float32)
peft_config = None
if lora:
    from peft import LoraConfig
    peft_config = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
ds = load_dataset("json", data_files=work + "/train.jsonl", split="train")
args = DPOConfig(output_dir=work + "/trl_out", per_device_train_batch_size=batch, learning_rate=1e-5, max_steps=steps,
                 bf16=False, use_cpu=True, gradient_checkpointing=False, report_to="none", save_strategy="no",
                 logging_steps=1, max_length=max_length, dataloader_num_workers=0, lr_scheduler_type="linear")
tr = DPOTrainer(model=model, args=args, train_dataset=ds, processing_class=tok, peft_config=peft_config)
t1 = time.time(); tr.train(); dt = time.time() - t1
tokens = [h["num_tokens"] for h in tr.state.log_history if "num_tokens" in h][-1]
print("tokens_per_s", tokens / dt)
PY
  grep -q tokens_per_s "$WORK/trl_$1.out" || { echo "TRL $1 failed:" >&2; tail -20 "$WORK/trl_$1.err" >&2; exit 1; }
  awk '/^tokens_per_s /{print $2}' "$WORK/trl_$1.out"
}

RESULTS="$WORK/results.txt"
: >"$RESULTS"
for ((i = 1; i <= REPEATS; i++)); do
  for mode in full lora; do
    flags=()
    [[ $mode == lora ]] && flags=("${LORA_FLAGS[@]}")
    lora=0
    [[ $mode == lora ]] && lora=1
    l0=$(load)
    if ((i % 2)); then
      a=$(run_trlx "$mode" ${flags[@]+"${flags[@]}"}); l1=$(load); b=$(run_trl "$mode" $lora)
    else
      b=$(run_trl "$mode" $lora); l1=$(load); a=$(run_trlx "$mode" ${flags[@]+"${flags[@]}"})
    fi
    l2=$(load)
    echo "$mode $i $a $b $l0 $l1 $l2" >>"$RESULTS"
    printf '%-4s repeat %d: trlx %7.0f tok/s, TRL %7.0f tok/s, ratio %.2fx (load %s / %s / %s)\n' \
      "$mode" "$i" "$a" "$b" "$(python3 -c "print($a/$b)")" "$l0" "$l1" "$l2"
  done
done
echo "threads $THREADS, $STEPS steps of $BATCH pairs ($SEQ rows), ~25M-parameter model, $REPEATS repeats"
python3 - "$RESULTS" <<'PY'
import statistics as st, sys
rows = [l.split() for l in open(sys.argv[1])]
for mode in ("full", "lora"):
    r = [(float(a), float(b), [float(x) for x in ls]) for m, _, a, b, *ls in rows if m == mode]
    ratios = [a / b for a, b, _ in r]
    ta, tb = [a for a, _, _ in r], [b for _, b, _ in r]
    loads = [x for _, _, ls in r for x in ls]
    print(f"{mode:5s} ratio trlx/TRL: median {st.median(ratios):.2f}x (min {min(ratios):.2f}, max {max(ratios):.2f}); "
          f"tokens/s trlx median {st.median(ta):.0f} ({min(ta):.0f}-{max(ta):.0f}), "
          f"TRL median {st.median(tb):.0f} ({min(tb):.0f}-{max(tb):.0f}); load {min(loads):.1f}-{max(loads):.1f}")
PY
