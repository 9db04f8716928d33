#!/usr/bin/env bash
# trlx dpo / cpo / orpo through the real binary: the shipped DPO config runs
# and logs TRL's metrics, whose values obey their definitions (at the first
# step the policy is the reference, so the sigmoid loss is ln 2 and the
# rewards are 0, with LoRA too: the reference is the base with adapters off;
# CPO's and ORPO's rewards are beta x log-probs; margins are chosen minus
# rejected), preview shows the shared prompt and both completions, bad data
# is an input error.
# Usage: dpo.sh <path to trlx> <source dir>
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1
SHORT="--max_steps 6 --logging_steps 1 --eval_strategy no --save_strategy no"

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

# At the first step the policy is the reference: the sigmoid loss is
# -log sigmoid(0) = ln 2 and the rewards are 0.
AT_REFERENCE="close(m['loss'], math.log(2)) and abs(m['rewards/chosen']) < 1e-6 and abs(m['rewards/rejected']) < 1e-6"
MARGINS="close(m['rewards/margins'], m['rewards/chosen'] - m['rewards/rejected'])"
check "steps_hold '$TMP/dpo' \"$AT_REFERENCE\" first"
check "steps_hold '$TMP/dpo' \"$MARGINS\""
# The policy moved away from the reference by the last step.
check "python3 -c 'import math, sys; sys.exit(abs(float(sys.argv[1]) - math.log(2)) < 1e-4)' \$(values loss '$TMP/dpo/metrics.jsonl' | tail -1)"

# LoRA: the reference is the base with adapters off (so the first step is
# ln 2 again: new adapters start at zero); an adapter is saved.
"$TRLX" dpo --config configs/dpo.yaml --model_name_or_path examples/tiny-model $SHORT --use_peft true \
  --lora_r 4 --output_dir "$TMP/dpo_lora" >"$TMP/dpo_lora.log" 2>&1
check "[ $? = 0 ] && [ -f '$TMP/dpo_lora/adapter_model.safetensors' ]"
check "steps_hold '$TMP/dpo_lora' \"$AT_REFERENCE\" first"
check "steps_hold '$TMP/dpo_lora' \"$MARGINS\""

# CPO and ORPO: rewards are beta x the policy's log-probs of each side.
BETA_LOGPS="close(m['rewards/chosen'], 0.2 * m['logps/chosen']) and close(m['rewards/rejected'], 0.2 * m['logps/rejected'])"
for t in cpo orpo; do
  "$TRLX" $t --config configs/$t.yaml --model_name_or_path examples/tiny-model $SHORT --beta 0.2 --output_dir "$TMP/$t" \
    >"$TMP/$t.log" 2>&1
  check "[ $? = 0 ] || { tail -5 '$TMP/$t.log'; false; }"
  check "steps_hold '$TMP/$t' \"$BETA_LOGPS\""
  check "steps_hold '$TMP/$t' \"$MARGINS\""
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

# A row far longer than max_length could ever keep (3 MB with max_length 128:
# past 1 MiB) is refused before it is tokenized whole, naming its line; with
# skip_bad_rows it is skipped and counted.
python3 - "$TMP/long.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(8):
        long = i == 1
        f.write(json.dumps({"prompt": ("word " * 600_000 if long else "") + f"What is {i} plus 2?",
                            "chosen": f"{i + 2}", "rejected": "7"}) + "\n")
PY
"$TRLX" dpo --config configs/dpo.yaml --model_name_or_path examples/tiny-model --dataset_name "$TMP/long.jsonl" \
  --max_length 128 $SHORT --output_dir "$TMP/long" >"$TMP/long.log" 2>&1
check "[ $? = 2 ] && grep -q 'long.jsonl:2: the row holds 3000019 bytes of text, more than the 1048576' '$TMP/long.log'" ||
  tail -3 "$TMP/long.log"
"$TRLX" dpo --config configs/dpo.yaml --model_name_or_path examples/tiny-model --dataset_name "$TMP/long.jsonl" \
  --max_length 128 --skip_bad_rows true --per_device_train_batch_size 2 --max_steps 1 --logging_steps 1 \
  --eval_strategy no --save_strategy no --output_dir "$TMP/long" >"$TMP/long.log" 2>&1
check "[ $? = 0 ] && grep -q 'skipped 1 bad row' '$TMP/long.log'" || tail -3 "$TMP/long.log"

finish
