#!/usr/bin/env bash
# DPO training speed and memory, trlx vs TRL's DPOTrainer, same run, same
# threads, same ~25M-parameter Qwen2-shaped model and preference data:
#  - training tokens/s (non-pad tokens of chosen+rejected rows through the
#    policy forward+backward, the reference forward and the step), full and LoRA
#  - peak resident memory of the whole process: trlx with use_liger_kernel
#    (chunked log-probs) vs TRL without Liger
# Needs python3 with trl and peft (dev time). THREADS (default 2), STEPS (default 10).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
THREADS=${THREADS:-2}
STEPS=${STEPS:-10}
TRLX="$BUILD_DIR/apps/trlx/trlx"
cmake --build "$BUILD_DIR" --target trlx -j2 >/dev/null
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
"$TRLX" init-model --arch qwen2 --hidden_size 512 --intermediate_size 1536 --num_layers 8 --num_heads 8 \
  --num_kv_heads 4 --tokenizer examples/tiny-model --tie_word_embeddings --out "$WORK/m25" >/dev/null
head -n $((STEPS * 8)) examples/data/dpo/train.jsonl >"$WORK/train.jsonl"
export OMP_NUM_THREADS=$THREADS

peak_kb() { awk '/Maximum resident set size/{print $6}' "$1"; }

run_trlx() {  # $1: name, rest: extra flags
  local name=$1; shift
  /usr/bin/time -v "$TRLX" dpo --config configs/dpo.yaml --model_name_or_path "$WORK/m25" \
    --dataset_name "$WORK/train.jsonl" --per_device_train_batch_size 8 --gradient_accumulation_steps 1 \
    --learning_rate 1e-5 --max_steps "$STEPS" --logging_steps 1 --save_strategy no --eval_strategy no \
    --output_dir "$WORK/trlx_$name" "$@" >"$WORK/trlx_$name.log" 2>"$WORK/trlx_$name.time" ||
    { echo "trlx $name failed:"; tail -20 "$WORK/trlx_$name.log" "$WORK/trlx_$name.time"; exit 1; }
  python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).readlines()[-1])['train_tokens_per_second'])" \
    "$WORK/trlx_$name/metrics.jsonl"
}

run_trl() {  # $1: name, $2: lora 0/1
  /usr/bin/time -v python3 - "$WORK" "$STEPS" "$THREADS" "$2" >"$WORK/trl_$1.out" 2>"$WORK/trl_$1.time" <<'PY'
import sys, time
import torch
from datasets import load_dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import DPOConfig, DPOTrainer
work, steps, threads, lora = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
torch.set_num_threads(threads)
tok = AutoTokenizer.from_pretrained(work + "/m25")
model = AutoModelForCausalLM.from_pretrained(work + "/m25", dtype=torch.float32)
peft_config = None
if lora:
    from peft import LoraConfig
    peft_config = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
ds = load_dataset("json", data_files=work + "/train.jsonl", split="train")
args = DPOConfig(output_dir=work + "/trl_out", per_device_train_batch_size=8, learning_rate=1e-5, max_steps=steps,
                 bf16=False, use_cpu=True, gradient_checkpointing=False, report_to="none", save_strategy="no",
                 logging_steps=1, max_length=128, dataloader_num_workers=0, lr_scheduler_type="linear")
tr = DPOTrainer(model=model, args=args, train_dataset=ds, processing_class=tok, peft_config=peft_config)
t1 = time.time(); tr.train(); dt = time.time() - t1
tokens = [h["num_tokens"] for h in tr.state.log_history if "num_tokens" in h][-1]
print("tokens_per_s", tokens / dt)
PY
  grep -q tokens_per_s "$WORK/trl_$1.out" || { echo "TRL $1 failed:"; tail -20 "$WORK/trl_$1.time"; exit 1; }
  awk '/^tokens_per_s /{print $2}' "$WORK/trl_$1.out"
}

full_trlx=$(run_trlx full)
full_trl=$(run_trl full 0)
lora_trlx=$(run_trlx lora --use_peft true --lora_r 16 --lora_alpha 32 --lora_dropout 0.05 --lora_target_modules q_proj v_proj)
lora_trl=$(run_trl lora 1)
liger_trlx=$(run_trlx liger --use_liger_kernel true)
echo "threads $THREADS, $STEPS steps of 8 pairs, ~25M-parameter model"
python3 - "$full_trlx" "$full_trl" "$lora_trlx" "$lora_trl" "$(peak_kb "$WORK/trlx_liger.time")" \
  "$(peak_kb "$WORK/trl_full.time")" "$(peak_kb "$WORK/trlx_full.time")" <<'PY'
import sys
ft, fr, lt, lr, mem_liger, mem_trl, mem_full = map(float, sys.argv[1:])
print(f"full  tokens/s: trlx {ft:.0f}, TRL {fr:.0f}, ratio {ft/fr:.2f}x")
print(f"LoRA  tokens/s: trlx {lt:.0f}, TRL {lr:.0f}, ratio {lt/lr:.2f}x")
print(f"peak RSS: trlx use_liger_kernel {mem_liger/1024:.0f} MiB (plain {mem_full/1024:.0f} MiB), "
      f"TRL without Liger {mem_trl/1024:.0f} MiB, ratio {mem_liger/mem_trl:.2f}x")
PY
