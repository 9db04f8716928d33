#!/usr/bin/env bash
# LoRA vs full fine-tuning on the ~25M-parameter Qwen2-shaped model of
# bench_model.sh, same run:
# trainable parameters, AdamW optimizer-state bytes, gradient bytes and the
# best training-step time (batch 4 x 128), with the LoRA/full ratios. PEFT's
# trainable-parameter count for the same LoRA settings is printed beside
# trlx's when python3 has peft (dev time).
# Settings: R (16), ALPHA (32), TARGETS (all-linear, or a comma list), THREADS (2).
#
# Recorded (2026-11-29, 2 shared CPU cores, fp32, r 16, alpha 32, all-linear):
#   metric               full         lora      ratio
#   trainable_params     39993856     1196032   0.0299
#   adamw_state_bytes    319950848    9568256   0.0299   (305 MiB -> 9.1 MiB)
#   grad_bytes           159975424    4784128   0.0299
#   step_ms (4 x 128)    4970         4073      0.82     (the frozen base still runs backward for its input grads)
#   PEFT trainable_params for the same settings: 1196032 (equal)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
R=${R:-16}
ALPHA=${ALPHA:-32}
TARGETS=${TARGETS:-all-linear}
export OMP_NUM_THREADS=${THREADS:-2}
cmake --build "$BUILD_DIR" --target lora_bench trlx -j2 >/dev/null 2>&1
BENCH="$BUILD_DIR/tests/unit/model/lora_bench"
TRLX="$BUILD_DIR/apps/trlx/trlx"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# The ~25M model of bench_model.sh: hidden 512, 8 layers, MLP 1408, vocab 32000 (tied): 24M
# parameters in the decoder layers, 40M with the embedding.
"$TRLX" init-model --arch qwen2 --hidden_size 512 --intermediate_size 1408 --num_layers 8 --num_heads 8 \
  --num_kv_heads 4 --vocab_size 32000 --tie_word_embeddings --out "$WORK/m25" >/dev/null

full=$("$BENCH" "$WORK/m25" full "$R" "$ALPHA" "$TARGETS" 4 128 3 2>/dev/null)
lora=$("$BENCH" "$WORK/m25" lora "$R" "$ALPHA" "$TARGETS" 4 128 3 2>/dev/null)
field() { echo "$1" | awk -v k="$2" '{for(i=1;i<NF;i++) if($i==k) print $(i+1)}'; }
echo "model: qwen2, hidden 512, 8 layers, vocab 32000 tied (24M in the layers, 40M in all), LoRA r $R alpha $ALPHA targets $TARGETS, fp32"
printf "%-22s %16s %16s %10s\n" metric full lora ratio
for k in trainable_params adamw_state_bytes grad_bytes step_ms; do
  f=$(field "$full" $k)
  l=$(field "$lora" $k)
  printf "%-22s %16s %16s %10s\n" "$k" "$f" "$l" "$(awk -v a="$l" -v b="$f" 'BEGIN{printf "%.4f", a/b}')"
done
echo "total_params (lora, base + adapters): $(field "$lora" total_params)"

if python3 -c "import peft" 2>/dev/null; then
  peft_n=$(python3 - "$WORK/m25" "$R" "$ALPHA" "$TARGETS" <<'PY' 2>/dev/null
import sys, torch
from transformers import AutoModelForCausalLM
from peft import LoraConfig, get_peft_model
d, r, alpha, targets = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
t = targets if targets == "all-linear" else targets.split(",")
m = get_peft_model(AutoModelForCausalLM.from_pretrained(d), LoraConfig(r=r, lora_alpha=alpha, target_modules=t, task_type="CAUSAL_LM"))
print(sum(p.numel() for p in m.parameters() if p.requires_grad))
PY
)
  echo "PEFT trainable_params for the same settings: $peft_n (trlx: $(field "$lora" trainable_params))"
fi
