#!/usr/bin/env bash
# trlx dpo / cpo / orpo through the real binary: the shipped DPO config runs
# and logs TRL's metric names, preview shows the shared prompt and both
# completions, bad data is an input error.
# Usage: dpo.sh <path to trlx> <source dir>
set -u
TRLX=$1
SRC=$2
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cd "$SRC"
pass=0
failures=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; failures=$((failures + 1)); }
check() { if eval "$1"; then ok; else bad "$1"; fi; }
export OMP_NUM_THREADS=1
SHORT="--max_steps 6 --logging_steps 2 --eval_strategy no --save_strategy no"

# The shipped config starts from the quickstart's SFT model; a run of the tiny
# model stands in for it here.
"$TRLX" dpo --config configs/dpo.yaml --model_name_or_path examples/tiny-model $SHORT --output_dir "$TMP/dpo" \
  >"$TMP/dpo.log" 2>&1
check "[ $? = 0 ] || { tail -5 '$TMP/dpo.log'; false; }"
for k in loss rewards/chosen rewards/rejected rewards/accuracies rewards/margins logps/chosen logps/rejected \
         logits/chosen logits/rejected; do
  check "grep -q '\"$k\"' '$TMP/dpo/metrics.jsonl'"
done
check "[ -f '$TMP/dpo/model.safetensors' ]"
# LoRA: the reference is the base with adapters off; an adapter is saved.
"$TRLX" dpo --config configs/dpo.yaml --model_name_or_path examples/tiny-model $SHORT --use_peft true \
  --lora_r 4 --output_dir "$TMP/dpo_lora" >"$TMP/dpo_lora.log" 2>&1
check "[ $? = 0 ] && [ -f '$TMP/dpo_lora/adapter_model.safetensors' ]"
for t in cpo orpo; do
  "$TRLX" $t --config configs/$t.yaml --model_name_or_path examples/tiny-model $SHORT --output_dir "$TMP/$t" \
    >"$TMP/$t.log" 2>&1
  check "[ $? = 0 ] || { tail -5 '$TMP/$t.log'; false; }"
done

# Preview: the prompt once, both completions with their loss tokens.
"$TRLX" preview dpo --config configs/dpo.yaml --model_name_or_path examples/tiny-model --num_examples 1 \
  >"$TMP/pv.txt" 2>&1
check "[ $? = 0 ] && grep -qi 'chosen' '$TMP/pv.txt' && grep -qi 'rejected' '$TMP/pv.txt' && grep -q '\\[' '$TMP/pv.txt'"
"$TRLX" preview dpo --config configs/dpo.yaml --model_name_or_path examples/tiny-model --num_examples 2 --json \
  >"$TMP/pv.jsonl" 2>/dev/null
check "[ \$(wc -l <'$TMP/pv.jsonl') = 2 ]"

# Bad data: an empty rejected answer names the file and line, exit 2.
printf '{"prompt": "What is 1 plus 2?\\n", "chosen": "1 plus 2 is 3.", "rejected": ""}\n' >"$TMP/bad.jsonl"
"$TRLX" dpo --config configs/dpo.yaml --model_name_or_path examples/tiny-model --dataset_name "$TMP/bad.jsonl" \
  $SHORT --output_dir "$TMP/bad" >"$TMP/bad.log" 2>&1
check "[ $? = 2 ] && grep -q 'bad.jsonl:1' '$TMP/bad.log'"

echo "$pass passed, $failures failed"
[ "$failures" = 0 ]
