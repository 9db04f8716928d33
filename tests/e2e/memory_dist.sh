#!/usr/bin/env bash
# The memory savers and DDP through the real binary: SFT with each of LoRA,
# gradient checkpointing (both modes) and chunked log-probs, and all three
# together; continuing from a saved adapter; bad LoRA settings (exit 2); and
# 2-rank DDP, ZeRO-3 and FSDP runs (`trlx launch`) that end with the model a
# single process trains on the same global batches, compared through
# `trlx score`, DPO with a synced reference model under ZeRO-3 included.
# Usage: memory_dist.sh <path to trlx> <source dir>
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
SHORT="--max_steps 6 --logging_steps 2 --save_strategy no --eval_strategy no"

# Each switch alone, then all three together.
i=0
for flags in "--use_peft true --lora_r 4 --lora_target_modules all-linear" \
             "--gradient_checkpointing true --gradient_checkpointing_kwargs.use_reentrant true" \
             "--gradient_checkpointing true --gradient_checkpointing_kwargs.use_reentrant false" \
             "--use_liger_kernel true --logprob_chunk_size 64" \
             "--use_peft true --gradient_checkpointing true --use_liger_kernel true"; do
  i=$((i + 1))
  "$TRLX" sft --config configs/sft.yaml $SHORT $flags --output_dir "$TMP/s$i" >"$TMP/s$i.log" 2>&1
  rc=$?
  check "[ $rc = 0 ] || { tail -5 '$TMP/s$i.log'; false; }"
  check "grep -q '\"loss\"' '$TMP/s$i/metrics.jsonl'"
done
check "grep -q 'LoRA r=4' '$TMP/s1.log'"
check "grep -q 'gradient checkpointing (reentrant)' '$TMP/s2.log'"
check "grep -q 'gradient checkpointing (non-reentrant)' '$TMP/s3.log'"
check "grep -q 'chunked log-probs (64 tokens per chunk)' '$TMP/s4.log'"
# LoRA runs save an adapter in PEFT format, not a full model.
check "[ -f '$TMP/s5/adapter_config.json' ] && [ -f '$TMP/s5/adapter_model.safetensors' ] && [ ! -f '$TMP/s5/model.safetensors' ]"
# A run can start from that adapter.
"$TRLX" sft --config configs/sft.yaml $SHORT --use_peft true --model_name_or_path "$TMP/s5" \
  --output_dir "$TMP/cont" >"$TMP/cont.log" 2>&1
check "[ $? = 0 ] && grep -q 'continuing from the LoRA adapter' '$TMP/cont.log'"

# Bad LoRA settings: exit 2 with a message naming the setting.
"$TRLX" sft --config configs/sft.yaml $SHORT --use_peft true --lora_target_modules no_such_proj \
  --output_dir "$TMP/bad1" >"$TMP/bad1.log" 2>&1
check "[ $? = 2 ] && grep -q 'no_such_proj' '$TMP/bad1.log'"
"$TRLX" sft --config configs/sft.yaml $SHORT --use_peft true --lora_r 0 --output_dir "$TMP/bad2" >"$TMP/bad2.log" 2>&1
check "[ $? = 2 ] && grep -q 'lora_r' '$TMP/bad2.log'"

# DDP: 2 ranks x 4 rows equal 1 rank x 8 rows, step for step.
DDP="--config configs/sft.yaml --max_steps 4 --logging_steps 1 --save_strategy no --eval_strategy no --bf16 false"
"$TRLX" sft $DDP --per_device_train_batch_size 8 --output_dir "$TMP/one" >"$TMP/one.log" 2>&1
check "[ $? = 0 ]"
"$TRLX" launch --nproc_per_node 2 -- "$TRLX" sft $DDP --per_device_train_batch_size 4 \
  --output_dir "$TMP/two" >"$TMP/two.log" 2>&1
rc=$?
check "[ $rc = 0 ] || { tail -20 '$TMP/two.log'; false; }"
check "grep -q 'ddp (mpi communicator' '$TMP/two.log'"
check "grep -q '4 per device x 1 accumulation x 2 process(es) = 8' '$TMP/two.log'"
"$TRLX" score --model "$TMP/one" --input examples/data/sft/test.jsonl >"$TMP/one.score" 2>/dev/null
"$TRLX" score --model "$TMP/two" --input examples/data/sft/test.jsonl >"$TMP/two.score" 2>/dev/null
check "[ -s '$TMP/one.score' ] && [ \$(wc -l <'$TMP/one.score') = \$(wc -l <'$TMP/two.score') ]"
worst=$(paste -d' ' <(sed 's/.*"sum_logprob":\([^,]*\),.*/\1/' "$TMP/one.score") \
                    <(sed 's/.*"sum_logprob":\([^,]*\),.*/\1/' "$TMP/two.score") |
        awk '{d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d} END {printf "%.3g", m}')
echo "largest log-prob difference, 2 ranks vs 1: $worst"
check "awk 'BEGIN{exit !($worst < 1e-3)}'"
# Only rank 0 writes metrics: one line per logged step.
check "[ \$(grep -c '\"loss\"' '$TMP/two/metrics.jsonl') = 4 ]"

# ZeRO-3 and FSDP: parameters sharded per unit, the same model as one
# process at the end; the saved model is whole.
compare_scores() {  # $1 $2: two model dirs; prints the largest difference of their sum log-probs
  "$TRLX" score --model "$1" --input examples/data/sft/test.jsonl >"$1.score" 2>/dev/null
  "$TRLX" score --model "$2" --input examples/data/sft/test.jsonl >"$2.score" 2>/dev/null
  [ -s "$1.score" ] && [ "$(wc -l <"$1.score")" = "$(wc -l <"$2.score")" ] || { echo nan; return; }
  paste -d' ' <(sed 's/.*"sum_logprob":\([^,]*\),.*/\1/' "$1.score") <(sed 's/.*"sum_logprob":\([^,]*\),.*/\1/' "$2.score") |
    awk '{d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d} END {printf "%.3g", m}'
}
for preset in zero3 fsdp; do
  "$TRLX" launch --nproc_per_node 2 -- "$TRLX" sft $DDP --per_device_train_batch_size 4 --accelerate_config $preset \
    --output_dir "$TMP/$preset" >"$TMP/$preset.log" 2>&1
  rc=$?
  check "[ $rc = 0 ] || { tail -20 '$TMP/$preset.log'; false; }"
  check "grep -q '$preset (mpi communicator' '$TMP/$preset.log'"
  worst=$(compare_scores "$TMP/one" "$TMP/$preset")
  echo "largest log-prob difference, $preset on 2 ranks vs 1 process: $worst"
  check "awk 'BEGIN{exit !($worst < 1e-3)}'"
done

# DPO under ZeRO-3 with a separate reference model, sharded the same way and
# synced to the policy on its shards (TR-DPO), equals one process.
DPO="--config configs/dpo.yaml --model_name_or_path examples/tiny-model --max_steps 4 --logging_steps 1
     --save_strategy no --eval_strategy no --bf16 false --sync_ref_model true --ref_model_sync_steps 2
     --ref_model_mixup_alpha 0.5"
"$TRLX" dpo $DPO --per_device_train_batch_size 8 --output_dir "$TMP/dpo_one" >"$TMP/dpo_one.log" 2>&1
check "[ $? = 0 ] || { tail -5 '$TMP/dpo_one.log'; false; }"
"$TRLX" launch --nproc_per_node 2 -- "$TRLX" dpo $DPO --per_device_train_batch_size 4 --accelerate_config zero3 \
  --output_dir "$TMP/dpo_zero3" >"$TMP/dpo_zero3.log" 2>&1
rc=$?
check "[ $rc = 0 ] || { tail -20 '$TMP/dpo_zero3.log'; false; }"
worst=$(compare_scores "$TMP/dpo_one" "$TMP/dpo_zero3")
echo "largest log-prob difference, DPO (TR-DPO) under zero3 on 2 ranks vs 1 process: $worst"
check "awk 'BEGIN{exit !($worst < 1e-3)}'"
# The logged losses agree step by step.
check "[ \"\$(grep -o '\"loss\":[^,]*' '$TMP/dpo_one/metrics.jsonl' | cut -c8-13)\" = \"\$(grep -o '\"loss\":[^,]*' '$TMP/dpo_zero3/metrics.jsonl' | cut -c8-13)\" ]"

echo "$pass passed, $failures failed"
[ "$failures" = 0 ]
