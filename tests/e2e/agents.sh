#!/usr/bin/env bash
# trlx grpo / rloo with tools end to end on the agents test model (Qwen3's
# tool-call tokens and template): tool programs and an environment served by
# the shipped Python adapter, TRL's tool metrics logged, and bad tool set-ups
# refused before training (exit 2, saying what is wrong).
# Usage: agents.sh <path to trlx> <source dir>
source "$(dirname "$0")/lib.sh"

adapter=examples/tools/python_tools.py
common=(--model_name_or_path tests/data/agents/model --dataset_name tests/data/agents --bf16 false
        --gradient_checkpointing false --per_device_train_batch_size 4 --num_generations 2
        --max_completion_length 24 --learning_rate 1e-3 --logging_steps 1 --report_to none --save_strategy no)
tools="{\"command\": \"python3 $adapter tests/data/agents/tools.py\"}"
reward='{"command": "bash examples/rewards/length_reward.sh", "name": "length"}'

# GRPO and RLOO with two tools: every step that generates logs TRL's tool metrics.
for t in grpo rloo; do
  "$TRLX" $t "${common[@]}" --max_steps 2 --output_dir "$TMP/$t" --tools "$tools" \
    --max_tool_calling_iterations 2 --log_completions true --num_completions_to_print 1 --reward_funcs "$reward" \
    >"$TMP/o" 2>&1
  check "[ $? = 0 ] && grep -q \"tool program 'python_tools' offers multiply, get_weather\" '$TMP/o'" || cat "$TMP/o"
  check "grep -q 'training variant' '$TMP/o'"
  check "steps_hold '$TMP/$t' \"'tools/call_frequency' in m and 'tools/failure_frequency' in m\""
done

# An environment alone: its reward is the run's reward, under its class name.
"$TRLX" grpo "${common[@]}" --max_steps 1 --output_dir "$TMP/env" \
  --tools "{\"command\": \"python3 $adapter --environment tests/data/agents/env.py:CalcEnv\"}" >"$TMP/o" 2>&1
check "[ $? = 0 ]" || cat "$TMP/o"
check "steps_hold '$TMP/env' \"'rewards/CalcEnv/mean' in m and 'tools/call_frequency' in m\""

# Bad tool set-ups: exit 2 before training, saying what is wrong.
bad_run() {  # bad_run <grep pattern> <args...>
  local want=$1
  shift
  refused "$want" grpo "${common[@]}" --max_steps 1 --output_dir "$TMP/bad" --reward_funcs "$reward" "$@"
}
bad_run "no_such_tools.py" --tools '{"command": "python3 /nonexistent/no_such_tools.py"}'
bad_run "without tools there are none" --max_tool_calling_iterations 2
# A tool's answer is part of the completion: no stop_grace_seconds for tools.
bad_run "stop_grace_seconds is for reward and judge programs" \
  --tools '{"command": "python3 examples/tools/python_tools.py", "stop_grace_seconds": 1}'
bad_run "<tool_call> as an added token" --model_name_or_path examples/tiny-model --tools "$tools"
bad_run "need conversational prompts" --dataset_name tests/data/grpo/text --tools "$tools"
bad_run "announce a tool named .multiply." --tools "$tools" "$tools"
echo 'print("hello")' >"$TMP/chatty.py"
bad_run "announced 'hello'" --tools "{\"command\": \"python3 $TMP/chatty.py; sleep 5\"}"

finish
