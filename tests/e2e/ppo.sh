#!/usr/bin/env bash
# trlx ppo end to end on the tiny model: a short run with a reward model and
# a value model started from it, both saved; an exact resume (policy, value
# model and their optimizer state), also under LoRA; bad input refused before
# training (exit 2, saying what is wrong).
# Usage: ppo.sh <path to trlx> <source dir>
source "$(dirname "$0")/lib.sh"

# A reward model (a score head on the tiny model's tokenizer).
"$TRLX" init-model --arch qwen2 --hidden_size 32 --num_layers 1 --num_heads 2 --head score \
  --tokenizer examples/tiny-model --out "$TMP/rm" >/dev/null 2>&1
common=(--model_name_or_path examples/tiny-model --reward_model_path "$TMP/rm" --bf16 false
        --gradient_checkpointing false --per_device_train_batch_size 4 --response_length 8 --learning_rate 1e-3
        --logging_steps 1 --report_to none --dataset_name tests/data/grpo/text --stop_token eos
        --num_ppo_epochs 2)

# 3 steps (12 responses): TRL's metrics every step, the value model saved beside the policy.
"$TRLX" ppo "${common[@]}" --total_episodes 12 --save_strategy no --output_dir "$TMP/a" >"$TMP/o" 2>&1
check "[ $? = 0 ]" || cat "$TMP/o"
check "[ -f '$TMP/a/model.safetensors' ] && [ -f '$TMP/a/value_model/model.safetensors' ]"
check "grep -q 'value model  *trained with the policy' '$TMP/o'"
check "[ \$(wc -l <'$TMP/a/metrics.jsonl') = 4 ]"
check "steps_hold '$TMP/a' \"all(k in m for k in ('objective/kl', 'objective/entropy', 'objective/non_score_reward', 'objective/rlhf_reward', 'objective/scores', 'policy/approxkl_avg', 'policy/clipfrac_avg', 'loss/policy_avg', 'loss/value_avg', 'val/clipfrac_avg', 'policy/entropy_avg', 'val/ratio', 'val/num_eos_tokens', 'lr', 'episode'))\""
# The first rollout's policy is the reference: no KL yet; episodes count responses.
check "steps_hold '$TMP/a' \"close(m['objective/kl'], 0) and m['episode'] == 4\" first"

# Resumed from step 2 of 4: the last steps log what the uninterrupted run logged.
resume_case() {  # resume_case <dir> <extra args...>
  local dir=$1
  shift
  "$TRLX" ppo "${common[@]}" "$@" --total_episodes 16 --save_steps 2 --output_dir "$dir" >"$TMP/o" 2>&1
  check "[ $? = 0 ]" || cat "$TMP/o"
  check "[ -f '$dir/checkpoint-2/value_model/model.safetensors' ]"
  values loss/value_avg "$dir/metrics.jsonl" >"$TMP/full"
  "$TRLX" ppo "${common[@]}" "$@" --total_episodes 16 --save_steps 2 --output_dir "$dir" \
    --resume_from_checkpoint "$dir/checkpoint-2" >"$TMP/o" 2>&1
  check "[ $? = 0 ]" || cat "$TMP/o"
  values loss/value_avg "$dir/metrics.jsonl" >"$TMP/resumed"
  check "[ \"\$(largest_difference '$TMP/resumed' '$TMP/full')\" = 0 ]"
}
resume_case "$TMP/r"
resume_case "$TMP/l" --use_peft true --lora_r 4 --lora_dropout 0

# A checkpoint that lost its value model is refused, naming what is missing.
cp -r "$TMP/r/checkpoint-2" "$TMP/novalue" && rm -r "$TMP/novalue/value_model"
"$TRLX" ppo "${common[@]}" --total_episodes 16 --output_dir "$TMP/nv" --resume_from_checkpoint "$TMP/novalue" \
  --save_strategy no >"$TMP/o" 2>&1
check "[ $? = 2 ] && grep -q 'holds no value model' '$TMP/o' && ! grep -q 'step 3/' '$TMP/o'" || cat "$TMP/o"

# Bad input: exit 2 before training, saying what is wrong.
bad_run() {  # bad_run <grep pattern> <args...>
  local want=$1
  shift
  "$TRLX" ppo "${common[@]}" --total_episodes 4 --save_strategy no --output_dir "$TMP/bad" "$@" >"$TMP/o" 2>&1
  local rc=$?
  check "[ $rc = 2 ] && grep -q '$want' '$TMP/o' && ! grep -q 'step 1/' '$TMP/o'" || cat "$TMP/o"
}
bad_run "set one of them" --stop_token_id 5
bad_run "multiple of num_mini_batches" --gradient_accumulation_steps 3 --num_mini_batches 2
bad_run "at least 8 responses" --whiten_rewards true
bad_run "$TMP/none" --value_model_path "$TMP/none"
"$TRLX" init-model --arch qwen2 --hidden_size 32 --num_layers 1 --num_heads 2 --head score --num_labels 2 \
  --tokenizer examples/tiny-model --out "$TMP/rm2" >/dev/null 2>&1
bad_run "num_labels 1" --value_model_path "$TMP/rm2"
bad_run "num_labels 1" --reward_model_path "$TMP/rm2"
bad_run "sft_model_path" --sft_model_path examples/tiny-model
bad_run "derived from" --batch_size 8
"$TRLX" ppo --model_name_or_path examples/tiny-model --dataset_name tests/data/grpo/text --output_dir "$TMP/bad" \
  >"$TMP/o" 2>&1
check "[ $? = 2 ] && grep -q 'reward_model_path' '$TMP/o'" || cat "$TMP/o"

# A reward model whose score head holds NaN: the run stops naming it (exit 1)
# instead of training on NaN advantages.
cp -r "$TMP/rm" "$TMP/rm_nan"
python3 - "$TMP/rm_nan/model.safetensors" <<'PY'
import json, struct, sys
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
begin, end = header["score.weight"]["data_offsets"]
assert header["score.weight"]["dtype"] == "F32"
data[8 + n + begin:8 + n + end] = struct.pack("<f", float("nan")) * ((end - begin) // 4)
open(path, "wb").write(data)
PY
"$TRLX" ppo "${common[@]}" --reward_model_path "$TMP/rm_nan" --total_episodes 4 --save_strategy no \
  --output_dir "$TMP/nan" >"$TMP/o" 2>&1
check "[ $? = 1 ] && grep -q 'gave response 0 of this rollout the score nan, which is not a finite float32' '$TMP/o'" || cat "$TMP/o"

# The shipped config validates.
"$TRLX" validate --config configs/ppo.yaml >"$TMP/o" 2>&1
check "[ $? = 0 ]" || cat "$TMP/o"

finish
