#!/usr/bin/env bash
# trlx online-dpo end to end on the tiny model: short runs ranked by a reward
# model and by a program, a per-epoch beta list, an exact resume under LoRA;
# bad input refused before training (exit 2, saying what is wrong).
# Usage: online_dpo.sh <path to trlx> <source dir>
source "$(dirname "$0")/lib.sh"

# Common settings: the tiny model, 2 prompts (4 completions) per step.
common=(--model_name_or_path examples/tiny-model --bf16 false --gradient_checkpointing false
        --per_device_train_batch_size 2 --max_new_tokens 8 --learning_rate 1e-3 --logging_steps 1
        --report_to none --dataset_name tests/data/grpo/text)
program='{"command": "bash examples/rewards/length_reward.sh", "name": "length"}'

# A reward model (a score head on the tiny model's tokenizer) ranks the pairs:
# every step logs TRL's metrics.
"$TRLX" init-model --arch qwen2 --hidden_size 32 --num_layers 1 --num_heads 2 --head score \
  --tokenizer examples/tiny-model --out "$TMP/rm" >/dev/null 2>&1
"$TRLX" online-dpo "${common[@]}" --max_steps 3 --save_strategy no --output_dir "$TMP/a" --reward_model_path "$TMP/rm" \
  --missing_eos_penalty 1.0 >"$TMP/o" 2>&1
check "[ $? = 0 ]" || cat "$TMP/o"
check "[ -f '$TMP/a/model.safetensors' ]"
check "steps_hold '$TMP/a' \"all(k in m for k in ('objective/kl', 'objective/entropy', 'objective/non_score_reward', 'objective/rlhf_reward', 'objective/scores', 'objective/scores_margin', 'rewards/chosen', 'rewards/rejected', 'rewards/accuracies', 'rewards/margins', 'logps/chosen', 'logps/rejected', 'val/contain_eos_token', 'beta')) and m['objective/scores_margin'] >= 0\""
# The first step's policy is the reference: no KL yet, and the loss is log 2.
check "steps_hold '$TMP/a' \"close(m['objective/kl'], 0) and close(m['loss'], math.log(2), 1e-4)\" first"

# beta as a list: one per epoch (16 prompts, 2 a step: 8 steps an epoch), the last for later epochs.
"$TRLX" online-dpo "${common[@]}" --max_steps 18 --save_strategy no --output_dir "$TMP/b" --reward_funcs "$program" \
  --beta 0.5 0.2 --loss_type ipo >"$TMP/o" 2>&1
check "[ $? = 0 ]" || cat "$TMP/o"
values beta "$TMP/b/metrics.jsonl" | tr '\n' ' ' >"$TMP/betas"
check "[ \"\$(cat '$TMP/betas')\" = '0.5 0.5 0.5 0.5 0.5 0.5 0.5 0.5 0.2 0.2 0.2 0.2 0.2 0.2 0.2 0.2 0.2 0.2 ' ]" || cat "$TMP/betas"

# LoRA (the reference is the base with adapters off), resumed from step 2:
# the last steps log what the uninterrupted run logged.
lora=(--use_peft true --lora_r 4 --lora_dropout 0 --reward_funcs "$program")
"$TRLX" online-dpo "${common[@]}" "${lora[@]}" --max_steps 4 --save_steps 2 --output_dir "$TMP/l" >"$TMP/o" 2>&1
check "[ $? = 0 ]" || cat "$TMP/o"
check "[ -f '$TMP/l/adapter_model.safetensors' ] && [ -d '$TMP/l/checkpoint-2' ]"
values loss "$TMP/l/metrics.jsonl" >"$TMP/loss_full"
"$TRLX" online-dpo "${common[@]}" "${lora[@]}" --max_steps 4 --save_steps 2 --output_dir "$TMP/l" \
  --resume_from_checkpoint "$TMP/l/checkpoint-2" >"$TMP/o" 2>&1
check "[ $? = 0 ]" || cat "$TMP/o"
values loss "$TMP/l/metrics.jsonl" >"$TMP/loss_resumed"
check "[ \"\$(largest_difference '$TMP/loss_resumed' '$TMP/loss_full')\" = 0 ]"

# A judge program ranks the pairs instead of scores: the metrics without scores.
judge='{"command": "python3 examples/rewards/addition_judge.py"}'
"$TRLX" online-dpo "${common[@]}" --max_steps 2 --save_strategy no --output_dir "$TMP/j" --judge "$judge" >"$TMP/o" 2>&1
check "[ $? = 0 ]" || cat "$TMP/o"
check "grep -q 'ranked by: judge addition_judge' '$TMP/o'"
check "steps_hold '$TMP/j' \"'rewards/accuracies' in m and 'objective/kl' in m and 'objective/scores' not in m\""

# Bad input: exit 2 before training, saying what is wrong.
bad_run() {  # bad_run <grep pattern> <args...>
  local want=$1
  shift
  "$TRLX" online-dpo "${common[@]}" --max_steps 1 --save_strategy no --output_dir "$TMP/bad" "$@" >"$TMP/o" 2>&1
  local rc=$?
  check "[ $rc = 2 ] && grep -q '$want' '$TMP/o' && ! grep -q 'step 1/' '$TMP/o'" || cat "$TMP/o"
}
bad_run "nothing ranks the completions"
bad_run "reward_model_path: $TMP/none is not a directory" --reward_model_path "$TMP/none"
bad_run "must be below max_length" --reward_funcs "$program" --max_length 8
bad_run "not a finite value > 0" --reward_funcs "$program" --beta 0.1 0
bad_run "one weight per reward function" --reward_model_path "$TMP/rm" --reward_funcs "$program" --reward_weights 1
bad_run "give either the judge or scores" --judge "$judge" --reward_funcs "$program"
bad_run "no_such_judge" --judge '{"command": "python3 /nonexistent/no_such_judge.py"}'
bad_run "missing_eos_penalty lowers scores" --judge "$judge" --missing_eos_penalty 1
bad_run "evaluation of online-dpo" --reward_funcs "$program" --eval_strategy steps
echo '{"question": "What is 1 plus 2?"}' >"$TMP/noprompt.jsonl"
bad_run "prompt" --reward_funcs "$program" --dataset_name "$TMP/noprompt.jsonl"

# In a config file the judge is a mapping, as a reward_funcs entry is.
cat >"$TMP/judge.yaml" <<'YAML'
trainer: online-dpo
model_name_or_path: examples/tiny-model
dataset_name: tests/data/grpo/text
judge: {command: python3 examples/rewards/addition_judge.py, timeout_seconds: 60}
YAML
"$TRLX" print-config --config "$TMP/judge.yaml" >"$TMP/o" 2>&1
check "[ $? = 0 ] && grep -q 'addition_judge.py' '$TMP/o'" || cat "$TMP/o"

# The shipped config validates.
"$TRLX" validate --config configs/online_dpo.yaml >"$TMP/o" 2>&1
check "[ $? = 0 ]" || cat "$TMP/o"

finish
