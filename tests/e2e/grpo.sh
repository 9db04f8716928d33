#!/usr/bin/env bash
# trlx grpo / rloo end to end on the tiny model: short runs rewarded by a
# program, built-ins and a reward model; an exact resume; bad input refused
# before training (exit 2, saying what is wrong).
# Usage: grpo.sh <path to trlx> <source dir>
source "$(dirname "$0")/lib.sh"

# Common settings: the tiny model, 4 completions (2 prompts x 2) per step.
common=(--model_name_or_path examples/tiny-model --bf16 false
        --gradient_checkpointing false --per_device_train_batch_size 4 --num_generations 2
        --max_completion_length 8 --learning_rate 1e-3 --logging_steps 1 --report_to none)
text=(--dataset_name tests/data/grpo/text)
program='{"command": "bash examples/rewards/length_reward.sh", "name": "length"}'

# GRPO with a program and a built-in: every step logs the rewards under their names.
"$TRLX" grpo "${common[@]}" "${text[@]}" --max_steps 4 --save_steps 2 --output_dir "$TMP/g" \
  --reward_funcs "$program" '{"name": "get_soft_overlong_punishment", "max_completion_len": 8, "soft_punish_cache": 4}' \
  >"$TMP/o" 2>&1
check "[ $? = 0 ]" || cat "$TMP/o"
check "[ -f '$TMP/g/model.safetensors' ] && [ -d '$TMP/g/checkpoint-2' ]"
check "steps_hold '$TMP/g' \"'rewards/length/mean' in m and 'rewards/soft_overlong_punishment_reward/mean' in m and 'reward' in m and 'completions/mean_length' in m and 'clip_ratio/region_mean' in m\""
# Resumed from step 2, the last two steps log what the uninterrupted run logged.
values loss "$TMP/g/metrics.jsonl" >"$TMP/loss_full"
"$TRLX" grpo "${common[@]}" "${text[@]}" --max_steps 4 --save_steps 2 --output_dir "$TMP/g" --resume_from_checkpoint "$TMP/g/checkpoint-2" \
  --reward_funcs "$program" '{"name": "get_soft_overlong_punishment", "max_completion_len": 8, "soft_punish_cache": 4}' \
  >"$TMP/o" 2>&1
check "[ $? = 0 ]" || cat "$TMP/o"
values loss "$TMP/g/metrics.jsonl" >"$TMP/loss_resumed"
check "[ \"\$(largest_difference '$TMP/loss_resumed' '$TMP/loss_full')\" = 0 ]"

# Evaluation on the test split at eval_steps: an eval_* row under TRL's
# names after each step; one completion per prompt gives the held-out reward
# (no spread within a group, so no advantage and a zero loss).
# The same run logs its completions (log_completions): a Parquet file per
# logging step with the round's 4 completions, one of them printed.
"$TRLX" grpo "${common[@]}" "${text[@]}" --max_steps 2 --save_strategy no --output_dir "$TMP/e" \
  --eval_strategy steps --eval_steps 1 --per_device_eval_batch_size 4 --num_generations_eval 1 \
  --log_completions true --num_completions_to_print 1 --reward_funcs "$program" >"$TMP/o" 2>&1
check "[ $? = 0 ] && grep -q 'step 2: eval_loss=-\?0  eval_reward=' '$TMP/o'" || cat "$TMP/o"
check "grep -q 'completions at step 2 (1 of 4' '$TMP/o' && grep -q '^ *length -\\?[0-9.]*  advantage -\\?[0-9.]*$' '$TMP/o'" || cat "$TMP/o"
check "[ \"\$(ls '$TMP/e/completions')\" = \"\$(printf 'completions_00001.parquet\\ncompletions_00002.parquet')\" ]"
check "python3 -c \"import pyarrow.parquet as pq; t = pq.read_table('$TMP/e/completions/completions_00002.parquet'); \
assert t.column_names == ['step', 'prompt', 'completion', 'length', 'advantage'], t.column_names; \
assert t.num_rows == 4 and set(t.column('step').to_pylist()) == {2}\""
check "[ \"\$(values eval_reward '$TMP/e/metrics.jsonl' | wc -l)\" = 2 ]"
check "[ \"\$(values eval_frac_reward_zero_std '$TMP/e/metrics.jsonl' | sort -u)\" = 1.0 ]"
check "[ \"\$(values eval_completions/mean_length '$TMP/e/metrics.jsonl' | wc -l)\" = 2 ]"
# Evaluating samples from seeds of its own: training samples and trains as
# it does without evaluation.
"$TRLX" grpo "${common[@]}" "${text[@]}" --max_steps 2 --save_strategy no --output_dir "$TMP/ne" \
  --reward_funcs "$program" >"$TMP/o" 2>&1
check "[ $? = 0 ]" || cat "$TMP/o"
values loss "$TMP/e/metrics.jsonl" >"$TMP/eloss"
values loss "$TMP/ne/metrics.jsonl" >"$TMP/neloss"
check "[ \"\$(largest_difference '$TMP/eloss' '$TMP/neloss')\" = 0 ]"
values completions/mean_length "$TMP/e/metrics.jsonl" >"$TMP/elen"
values completions/mean_length "$TMP/ne/metrics.jsonl" >"$TMP/nelen"
check "[ \"\$(largest_difference '$TMP/elen' '$TMP/nelen')\" = 0 ]"

# num_iterations 2: a round spans two steps, so checkpoint-1 is saved in the
# middle of one; resumed there, the run trains on the same completions.
"$TRLX" grpo "${common[@]}" "${text[@]}" --max_steps 3 --save_steps 1 --num_iterations 2 --output_dir "$TMP/i" \
  --reward_funcs "$program" >"$TMP/o" 2>&1
check "[ $? = 0 ]" || cat "$TMP/o"
check "[ -f '$TMP/i/checkpoint-1/round_rank0.pt' ]"
values loss "$TMP/i/metrics.jsonl" >"$TMP/iloss_full"
"$TRLX" grpo "${common[@]}" "${text[@]}" --max_steps 3 --save_steps 1 --num_iterations 2 --output_dir "$TMP/i" \
  --resume_from_checkpoint "$TMP/i/checkpoint-1" --reward_funcs "$program" >"$TMP/o" 2>&1
check "[ $? = 0 ]" || cat "$TMP/o"
values loss "$TMP/i/metrics.jsonl" >"$TMP/iloss_resumed"
check "[ \"\$(largest_difference '$TMP/iloss_resumed' '$TMP/iloss_full')\" = 0 ]"

# RLOO with a reward model (a score head on the tiny model's tokenizer), beta > 0: kl is logged.
"$TRLX" init-model --arch qwen2 --hidden_size 32 --num_layers 1 --num_heads 2 --head score \
  --tokenizer examples/tiny-model --out "$TMP/rm" >/dev/null 2>&1
"$TRLX" rloo "${common[@]}" "${text[@]}" --max_steps 2 --save_strategy no --output_dir "$TMP/r" --beta 0.05 \
  --reward_funcs "$TMP/rm" >"$TMP/o" 2>&1
check "[ $? = 0 ]" || cat "$TMP/o"
check "steps_hold '$TMP/r' \"'rewards/rm/mean' in m and 'kl' in m\""
# The older RLOO names still work (with a warning naming the new one).
"$TRLX" rloo "${common[@]}" "${text[@]}" --max_steps 1 --save_strategy no --output_dir "$TMP/r2" --rloo_k 2 --kl_coef 0 \
  --reward_funcs "$TMP/rm" >"$TMP/o" 2>&1
check "[ $? = 0 ] && grep -q 'old name of --num_generations' '$TMP/o'"

# Bad input: exit 2 before training, saying what is wrong.
bad_run() {  # bad_run <grep pattern> <args...>
  local want=$1
  shift
  refused "$want" grpo "${common[@]}" --max_steps 1 --save_strategy no --output_dir "$TMP/bad" "$@"
}
echo '{"question": "What is 1 plus 2?"}' >"$TMP/noprompt.jsonl"
# A prompt that leaves no room for max_completion_length in the model's
# context is refused when the data is read, naming its line.
python3 -c 'import json; print(json.dumps({"prompt": "a"})); print(json.dumps({"prompt": "word " * 600}))' >"$TMP/long.jsonl"
bad_run "long.jsonl:2: the prompt has .* tokens; with max_completion_length 8 it needs .* positions, beyond the model.s context of 512" \
  --dataset_name "$TMP/long.jsonl" --reward_funcs "$program"
# A reward beyond float32 (or NaN, inf) stops the run, naming the function.
cat >"$TMP/huge_reward.py" <<'PY'
import json, sys
for line in sys.stdin:
    print(json.dumps({"rewards": [1e39] * len(json.loads(line)["completions"])}), flush=True)
PY
"$TRLX" grpo "${common[@]}" "${text[@]}" --max_steps 1 --save_strategy no --output_dir "$TMP/bad" \
  --reward_funcs "{\"command\": \"python3 $TMP/huge_reward.py\", \"name\": \"huge\"}" >"$TMP/o" 2>&1
check "[ $? = 1 ] && grep -q 'reward function huge gave completion 0 of this round the reward 1e+39, which is not a finite float32' '$TMP/o' && ! grep -q 'step 1/' '$TMP/o'" || cat "$TMP/o"
# Rewards that teach nothing: every answer null. The run goes on (as TRL's),
# warns with the count each such round, and counts the nulls in the metrics.
cat >"$TMP/null_reward.py" <<'PY'
import json, sys
for line in sys.stdin:
    print(json.dumps({"rewards": [None] * len(json.loads(line)["completions"])}), flush=True)
PY
"$TRLX" grpo "${common[@]}" "${text[@]}" --max_steps 2 --save_strategy no --output_dir "$TMP/nulls" \
  --reward_funcs "{\"command\": \"python3 $TMP/null_reward.py\", \"name\": \"nothing\"}" >"$TMP/o" 2>&1
check "[ $? = 0 ] && [ \"\$(grep -c 'no reward function gave any of the round.s 4 completions a reward' '$TMP/o')\" = 2 ]" || cat "$TMP/o"
check "steps_hold '$TMP/nulls' \"m['rewards/nothing/null_frac'] == 1 and m['frac_reward_zero_std'] == 0\""
# A reward program's background children end with it (its process group).
cat >"$TMP/forking_reward.sh" <<SH
sleep 300 >/dev/null 2>&1 </dev/null &
echo \$! >"$TMP/forked.pid"
while read -r line; do
  n=\$(printf '%s' "\$line" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["completions"]))')
  python3 -c "import json; print(json.dumps({'rewards': [1.0] * \$n}))"
done
SH
"$TRLX" grpo "${common[@]}" "${text[@]}" --max_steps 1 --save_strategy no --output_dir "$TMP/forking" \
  --reward_funcs "{\"command\": \"bash $TMP/forking_reward.sh\", \"name\": \"forking\"}" >"$TMP/o" 2>&1
rc=$?
sleep 0.5
# Gone, or a zombie no one has reaped yet (a container's init may not).
state=$(ps -o stat= -p "$(cat "$TMP/forked.pid" 2>/dev/null || echo 0)" 2>/dev/null | tr -d ' ')
check "[ $rc = 0 ] && [ -s '$TMP/forked.pid' ] && { [ -z '$state' ] || [ '${state:0:1}' = Z ]; }" || cat "$TMP/o"
bad_run "prompt" --dataset_name "$TMP/noprompt.jsonl" --reward_funcs "$program"
bad_run "has no score head" "${text[@]}" --reward_funcs examples/tiny-model
bad_run "multiple of num_generations" "${text[@]}" --generation_batch_size 5 --reward_funcs "$program"
bad_run "no_such_reward.py" "${text[@]}" --reward_funcs '{"command": "python3 /nonexistent/no_such_reward.py"}'
bad_run "not a built-in reward" "${text[@]}" --reward_funcs no_such_function
bad_run "reward_funcs is empty" "${text[@]}"
bad_run "online trainers do not use it" "${text[@]}" --max_length 64 --reward_funcs "$program"
bad_run "named .length." "${text[@]}" --reward_funcs "$program" "$program"
bad_run "printed only with log_completions" "${text[@]}" --num_completions_to_print 2 --reward_funcs "$program"
bad_run "whole groups of num_generations_eval 2" "${text[@]}" --eval_strategy steps --per_device_eval_batch_size 3 \
  --reward_funcs "$program"
# A reward model with its own tokenizer and no chat template cannot score conversations.
cp -r "$TMP/rm" "$TMP/rm_plain"
python3 - "$TMP/rm_plain/tokenizer_config.json" <<'PY'
import json, sys
p = sys.argv[1]
c = json.load(open(p))
c.pop("chat_template", None)
json.dump(c, open(p, "w"))
PY
rm -f "$TMP/rm_plain/chat_template.jinja"
bad_run "no chat template" --dataset_name tests/data/grpo/chat --reward_funcs "$TMP/rm_plain"

# A model whose generation_config.json is broken is named, not guessed around.
cp -r examples/tiny-model "$TMP/badgen"
echo '{"eos_token_id": "two"}' >"$TMP/badgen/generation_config.json"
"$TRLX" grpo --model_name_or_path "$TMP/badgen" --bf16 false --per_device_train_batch_size 4 --num_generations 2 \
  --max_completion_length 8 --max_steps 1 --save_strategy no --output_dir "$TMP/bg" "${text[@]}" \
  --reward_funcs think_format_reward >"$TMP/o" 2>&1
check "[ $? = 2 ] && grep -q 'badgen/generation_config.json' '$TMP/o'" || cat "$TMP/o"

# SIGTERM while a reward program is still answering: the answer gets its
# stop_grace_seconds (1 here; 5 by default), not its timeout_seconds (600),
# then the program is killed, the unfinished step dropped and the last
# finished one saved; resumed there, the run logs what an uninterrupted one
# logs. The program answers as length_reward.sh does, but from its third
# request on it only marks the file and hangs.
cat >"$TMP/hang_third.sh" <<'SH'
n=0
while IFS= read -r line; do
  n=$((n + 1))
  if [ $n -ge 3 ]; then touch "$HANG_MARK"; exec sleep 1000; fi
  printf '%s\n' "$line" | bash examples/rewards/length_reward.sh
done
SH
hang='{"command": "bash '"$TMP"'/hang_third.sh", "name": "length", "stop_grace_seconds": 1}'
HANG_MARK="$TMP/hang_mark" "$TRLX" grpo "${common[@]}" "${text[@]}" --max_steps 4 --save_steps 100 \
  --output_dir "$TMP/st" --reward_funcs "$hang" >"$TMP/st.log" 2>&1 &
pid=$!
for _ in $(seq 1 600); do [ -f "$TMP/hang_mark" ] && break; sleep 0.1; done
start=$(date +%s)
kill -TERM $pid
wait $pid
rc=$?
check "[ $rc = 1 ] && [ \$((\$(date +%s) - start)) -lt 10 ]" || { echo "rc $rc"; tail -5 "$TMP/st.log"; }
check "grep -q 'step 3 is dropped, saving step 2' '$TMP/st.log' && grep -q 'stop_grace_seconds' '$TMP/st.log'" ||
  tail -5 "$TMP/st.log"
check "[ -f '$TMP/st/checkpoint-2/trainer_state.json' ] && [ ! -d '$TMP/st/checkpoint-3' ]"
"$TRLX" grpo "${common[@]}" "${text[@]}" --max_steps 4 --save_steps 100 --output_dir "$TMP/st" \
  --resume_from_checkpoint latest --reward_funcs "$program" >"$TMP/o" 2>&1
check "[ $? = 0 ]" || cat "$TMP/o"
values loss "$TMP/st/metrics.jsonl" >"$TMP/loss_stopped"
"$TRLX" grpo "${common[@]}" "${text[@]}" --max_steps 4 --save_strategy no --output_dir "$TMP/st_ref" \
  --reward_funcs "$program" >"$TMP/o" 2>&1
values loss "$TMP/st_ref/metrics.jsonl" >"$TMP/loss_unstopped"
check "[ \$(wc -l <'$TMP/loss_stopped') = 4 ] && [ \"\$(largest_difference '$TMP/loss_stopped' '$TMP/loss_unstopped')\" = 0 ]"

# generation_kwargs override the sampler's settings, as TRL applies them last:
# top_k 1 samples the most likely token, so a prompt's two completions are
# the same and every group has zero spread; without it they differ.
cat >"$TMP/idsum.py" <<'PY'
import json, sys
for line in sys.stdin:
    ids = json.loads(line)["completion_ids"]
    print(json.dumps({"rewards": [sum(c) % 97 for c in ids]}), flush=True)
PY
idsum='{"command": "python3 '"$TMP"'/idsum.py", "name": "idsum"}'
for gk in '{"top_k": 1}' '{}'; do
  "$TRLX" grpo "${common[@]}" "${text[@]}" --max_steps 2 --save_strategy no --output_dir "$TMP/gk" \
    --generation_kwargs "$gk" --reward_funcs "$idsum" >"$TMP/o" 2>&1
  check "[ $? = 0 ]" || cat "$TMP/o"
  values frac_reward_zero_std "$TMP/gk/metrics.jsonl" | sort -u >"$TMP/zero_std_$([ "$gk" = '{}' ] && echo plain || echo top1)"
done
check "[ \"\$(cat '$TMP/zero_std_top1')\" = 1.0 ] && [ \"\$(cat '$TMP/zero_std_plain')\" != 1.0 ]" ||
  cat "$TMP/zero_std_top1" "$TMP/zero_std_plain"
# The rules of generation_kwargs shape the completions the reward program
# sees: eos_token_id replaces the model's eos ids and suppress_tokens bans
# the rest of the vocabulary, so every completion is one token below 150;
# stop_strings end completions (with no eos) once their text appears.
cat >"$TMP/record.py" <<PY
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    with open("$TMP/recorded.jsonl", "a") as f:
        for ids, text in zip(r["completion_ids"], r["completions"]):
            f.write(json.dumps({"ids": ids, "text": text}) + "\\n")
    print(json.dumps({"rewards": [0.0] * len(r["completions"])}), flush=True)
PY
record='{"command": "python3 '"$TMP"'/record.py", "name": "record"}'
rm -f "$TMP/recorded.jsonl"
"$TRLX" grpo "${common[@]}" "${text[@]}" --max_steps 2 --save_strategy no --output_dir "$TMP/gk" --reward_funcs "$record" \
  --generation_kwargs "{\"eos_token_id\": [$(seq -s, 0 149)], \"suppress_tokens\": [$(seq -s, 150 303)]}" >"$TMP/o" 2>&1
check "[ $? = 0 ]" || cat "$TMP/o"
check "python3 -c 'import json,sys; rows=[json.loads(l) for l in open(sys.argv[1])]; assert len(rows) >= 4 and all(len(r[\"ids\"]) <= 1 and all(i < 150 for i in r[\"ids\"]) for r in rows), rows' '$TMP/recorded.jsonl'"
rm -f "$TMP/recorded.jsonl"
"$TRLX" grpo "${common[@]}" "${text[@]}" --max_steps 2 --save_strategy no --output_dir "$TMP/gk" --reward_funcs "$record" \
  --generation_kwargs '{"stop_strings": ["e", "a"], "eos_token_id": []}' >"$TMP/o" 2>&1
check "[ $? = 0 ]" || cat "$TMP/o"
# Each stopped completion holds a stop text, and some stopped.
check "python3 -c 'import json,sys; rows=[json.loads(l) for l in open(sys.argv[1])]; short=[r for r in rows if len(r[\"ids\"]) < 8]; assert len(rows) >= 4 and short and all(\"e\" in r[\"text\"] or \"a\" in r[\"text\"] for r in short), rows' '$TMP/recorded.jsonl'"
bad_run "bad_words_ids. expects a non-empty list of non-empty lists" "${text[@]}" --reward_funcs "$program" \
  --generation_kwargs '{"bad_words_ids": [[5], []]}'
bad_run "num_beams.: completions are sampled one by one" "${text[@]}" --reward_funcs "$program" \
  --generation_kwargs '{"num_beams": 4}'
bad_run "max_new_tokens.: the completion length is max_completion_length" "${text[@]}" --reward_funcs "$program" \
  --generation_kwargs '{"max_new_tokens": 4}'

# The shipped configs validate.
for c in grpo rloo; do
  "$TRLX" validate --config configs/$c.yaml >"$TMP/o" 2>&1
  check "[ $? = 0 ]" || cat "$TMP/o"
done

finish
