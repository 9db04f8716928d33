#!/usr/bin/env bash
# The memory savers and DDP through the real binary: SFT with gradient
# checkpointing (both modes) and chunked log-probs logs the plain run's
# losses, LoRA with all three those of LoRA alone; continuing from a saved
# adapter; bad LoRA settings (exit 2); and 2-rank DDP, ZeRO-3 and FSDP runs
# (`trlx launch`), plain and with LoRA, checkpointing and chunked log-probs,
# that end with the model a single process trains on the same global batches
# (compared through `trlx score`) and log its losses, DPO with a synced
# reference model under ZeRO-3 included. Numbers agree to 1e-5 (relative
# above 1), the tolerance the README states.
# Usage: memory_dist.sh <path to trlx> <source dir>
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1
SHORT="--max_steps 6 --logging_steps 2 --save_strategy no --eval_strategy no"

# Each switch alone, then all three together. Checkpointing and chunked
# log-probs compute the same numbers: their runs log the plain run's losses
# and grad norms, and LoRA with all three logs LoRA alone's.
LORA="--use_peft true --lora_r 4 --lora_target_modules all-linear"
i=0
for flags in "" "$LORA" \
             "--gradient_checkpointing true --gradient_checkpointing_kwargs.use_reentrant true" \
             "--gradient_checkpointing true --gradient_checkpointing_kwargs.use_reentrant false" \
             "--use_liger_kernel true --logprob_chunk_size 64" \
             "$LORA --gradient_checkpointing true --use_liger_kernel true --logprob_chunk_size 64"; do
  "$TRLX" sft --config configs/sft.yaml $SHORT $flags --output_dir "$TMP/s$i" >"$TMP/s$i.log" 2>&1
  rc=$?
  check "[ $rc = 0 ] || { tail -5 '$TMP/s$i.log'; false; }"
  i=$((i + 1))
done
check "grep -q 'LoRA r=4' '$TMP/s1.log'"
check "grep -q 'gradient checkpointing (reentrant)' '$TMP/s2.log'"
check "grep -q 'gradient checkpointing (non-reentrant)' '$TMP/s3.log'"
check "grep -q 'chunked log-probs (64 tokens per chunk)' '$TMP/s4.log'"
for run in s2 s3 s4; do
  check "same_metric loss '$TMP/s0' '$TMP/$run' && same_metric grad_norm '$TMP/s0' '$TMP/$run'"
done
check "same_metric loss '$TMP/s1' '$TMP/s5' && same_metric grad_norm '$TMP/s1' '$TMP/s5'"
# LoRA trains: its losses are not the plain run's.
check "! same_metric loss '$TMP/s0' '$TMP/s1' 1e-3"
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
check "same_scores '$TMP/one' '$TMP/two'"
check "same_metric loss '$TMP/one' '$TMP/two'"
# Only rank 0 writes metrics: one line per logged step.
check "[ \$(grep -c '\"loss\"' '$TMP/two/metrics.jsonl') = 4 ]"

# ZeRO-3 and FSDP: parameters sharded per unit, the same model as one
# process at the end; the saved model is whole.
for preset in zero3 fsdp; do
  "$TRLX" launch --nproc_per_node 2 -- "$TRLX" sft $DDP --per_device_train_batch_size 4 --accelerate_config $preset \
    --output_dir "$TMP/$preset" >"$TMP/$preset.log" 2>&1
  rc=$?
  check "[ $rc = 0 ] || { tail -20 '$TMP/$preset.log'; false; }"
  check "grep -q '$preset (mpi communicator' '$TMP/$preset.log'"
  # Weights, gradients and Adam state are all split: the setup table's
  # estimate is per rank, half one process's (fp32 shards are their own
  # masters).
  check "python3 - '$TMP/one.log' '$TMP/$preset.log' <<'PY'
import re, sys
def mb(f):
    line = next(l for l in open(f) if 'memory estimate' in l)
    return float(re.search(r'estimate +([0-9.]+) MB', line).group(1)), 'per rank' in line
one, _ = mb(sys.argv[1]); two, per_rank = mb(sys.argv[2])
sys.exit(0 if per_rank and abs(two - one / 2) <= 0.05 else 1)
PY"
  # The setup table says how much host memory setup held (VmHWM, the
  # largest rank's): a number of MiB, read from /proc on every rank.
  check "grep -Eq 'host memory +[1-9][0-9]* MiB resident at most during setup \\(the largest rank\\)' '$TMP/$preset.log'"
  check "same_scores '$TMP/one' '$TMP/$preset'"
  check "same_metric loss '$TMP/one' '$TMP/$preset'"
done

# LoRA, checkpointing and chunked log-probs together on 2 ranks (DDP and
# ZeRO-3) equal one process with the same settings: the logged losses and
# grad norms, and the saved adapters through `trlx score` of merged models.
# LoRA dropout off: its masks depend on how rows are split across ranks.
SAVERS="$LORA --lora_dropout 0 --gradient_checkpointing true --use_liger_kernel true --logprob_chunk_size 64"
"$TRLX" sft $DDP $SAVERS --per_device_train_batch_size 8 --output_dir "$TMP/savers_one" >"$TMP/savers_one.log" 2>&1
check "[ $? = 0 ] || { tail -5 '$TMP/savers_one.log'; false; }"
for preset in multi_gpu zero3; do
  "$TRLX" launch --nproc_per_node 2 -- "$TRLX" sft $DDP $SAVERS --per_device_train_batch_size 4 \
    --accelerate_config $preset --output_dir "$TMP/savers_$preset" >"$TMP/savers_$preset.log" 2>&1
  rc=$?
  check "[ $rc = 0 ] || { tail -20 '$TMP/savers_$preset.log'; false; }"
  check "same_metric loss '$TMP/savers_one' '$TMP/savers_$preset' && same_metric grad_norm '$TMP/savers_one' '$TMP/savers_$preset'"
  for run in savers_one savers_$preset; do
    "$TRLX" merge-lora --base examples/tiny-model --adapter "$TMP/$run" --out "$TMP/$run.merged" >/dev/null 2>&1
  done
  check "same_scores '$TMP/savers_one.merged' '$TMP/savers_$preset.merged'"
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
check "same_scores '$TMP/dpo_one' '$TMP/dpo_zero3'"
# The logged losses and rewards agree step by step.
for k in loss rewards/chosen rewards/margins; do
  check "same_metric $k '$TMP/dpo_one' '$TMP/dpo_zero3'"
done

finish
