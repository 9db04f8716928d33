#!/usr/bin/env bash
# trlx distill end to end: the tiny model learns from a wider, deeper teacher
# with its vocabulary; an exact resume, a resume against another teacher
# refused, and bad input refused before training (exit 2, saying what is
# wrong).
# Usage: distill.sh <path to trlx> <source dir>
source "$(dirname "$0")/lib.sh"

common=(--model_name_or_path examples/tiny-model --teacher_model_name_or_path tests/data/distill/teacher
        --dataset_name tests/data/grpo/text --bf16 false --gradient_checkpointing false
        --per_device_train_batch_size 4 --max_completion_length 8 --learning_rate 1e-3 --logging_steps 1
        --report_to none)

# Four steps with a checkpoint at 2: TRL's metric names in every row, the
# divergence named in the log, and the teacher recorded in the checkpoint.
"$TRLX" distill "${common[@]}" --beta 0.5 --max_steps 4 --save_steps 2 --output_dir "$TMP/d" >"$TMP/o" 2>&1
check "[ $? = 0 ]" || cat "$TMP/o"
check "[ -f '$TMP/d/model.safetensors' ] && [ -d '$TMP/d/checkpoint-2' ]"
check "steps_hold '$TMP/d' \"'loss' in m and 'entropy' in m and 'completions/mean_length' in m and 'num_tokens' in m and 'reward' not in m\""
check "grep -q 'generalized JSD' '$TMP/o'" || cat "$TMP/o"
# The startup table names the teacher beside the student.
check "grep -q '^  teacher  *1.08M parameters, frozen$' '$TMP/o'" || cat "$TMP/o"
check "grep -rq 'fingerprint' '$TMP/d/checkpoint-2'"
# Resumed from step 2, the last two steps log what the uninterrupted run logged.
values loss "$TMP/d/metrics.jsonl" >"$TMP/loss_full"
"$TRLX" distill "${common[@]}" --beta 0.5 --max_steps 4 --save_steps 2 --output_dir "$TMP/d" \
  --resume_from_checkpoint "$TMP/d/checkpoint-2" >"$TMP/o" 2>&1
check "[ $? = 0 ]" || cat "$TMP/o"
values loss "$TMP/d/metrics.jsonl" >"$TMP/loss_resumed"
check "[ \"\$(largest_difference '$TMP/loss_resumed' '$TMP/loss_full')\" = 0 ]"

# The same checkpoint resumed against another teacher (here the student's
# own model): refused, naming both teachers, and the checkpoint untouched.
before=$(cksum "$TMP/d/checkpoint-2/model.safetensors")
"$TRLX" distill "${common[@]}" --teacher_model_name_or_path examples/tiny-model --beta 0.5 --max_steps 4 \
  --save_steps 2 --output_dir "$TMP/d" --resume_from_checkpoint "$TMP/d/checkpoint-2" >"$TMP/o" 2>&1
check "[ $? = 2 ] && grep -q 'trained against the teacher' '$TMP/o' && grep -q 'examples/tiny-model' '$TMP/o'" || cat "$TMP/o"
check "[ \"$before\" = \"\$(cksum '$TMP/d/checkpoint-2/model.safetensors')\" ]"

# Evaluation on the test split, and the completion logs: each logging step's
# round as Parquet (step, prompt and completion as text, as TRL's
# DistillationTrainer writes them), one completion printed.
"$TRLX" distill "${common[@]}" --max_steps 2 --save_strategy no --output_dir "$TMP/e" --eval_strategy steps \
  --eval_steps 1 --per_device_eval_batch_size 4 --log_completions true --num_completions_to_print 1 >"$TMP/o" 2>&1
check "[ $? = 0 ] && grep -q 'step 2: eval_loss=' '$TMP/o' && grep -q 'completions at step 2 (1 of 4' '$TMP/o'" || cat "$TMP/o"
check "[ \"\$(values eval_entropy '$TMP/e/metrics.jsonl' | wc -l)\" = 2 ]"
check "python3 -c \"import pyarrow.parquet as pq, sys; t = pq.read_table('$TMP/e/completions/completions_00002.parquet'); sys.exit(0 if t.column_names == ['step', 'prompt', 'completion'] and t.num_rows == 4 and t.column('prompt').type in ('string', 'large_string') else 1)\""

# Bad input: no teacher; a teacher with another vocabulary; beta out of
# range; vLLM.
bad_run() {  # bad_run <grep pattern> <args...>
  local want=$1
  shift
  refused "$want" distill "${common[@]}" --max_steps 1 --save_strategy no --output_dir "$TMP/bad" "$@"
}
bad_run "teacher_model_name_or_path" --teacher_model_name_or_path null
bad_run "the teacher tests/data/models/llama has 96" --teacher_model_name_or_path tests/data/models/llama
bad_run "beta" --beta 1.5
bad_run "vLLM" --use_vllm true

finish
