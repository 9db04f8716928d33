#!/usr/bin/env bash
# accelerate's parallelism_config through the real binary, on CPU ranks:
# sequence parallelism (sp_size, DeepSpeed-Ulysses) and context parallelism
# (cp_size, keys and values all-gathered, load-balanced chunks) split every
# row over the ranks of a group and train the model one process trains (SFT
# plain and packed, DPO, LoRA with gradient checkpointing; under DDP, ZeRO-3
# and FSDP; fewer key/value heads than ranks), hybrid sharding (dp_replicate
# x dp_shard) trains it too, and what trlx cannot run is refused with the
# numbers: sizes that do not multiply to the processes, tensor parallelism,
# cp with sp, heads that do not split, GRPO under sp, the ring exchange,
# unknown keys, a DeepSpeed value that disagrees with the training config.
# Usage: mesh.sh <path to trlx> <source dir>
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1

# acc NAME TYPE [parallelism_config lines...]: an accelerate file $TMP/NAME.yaml
# of distributed_type TYPE (MULTI_CPU, FSDP, ZERO3, ZERO2).
acc() {
  local name=$1 type=$2 f="$TMP/$1.yaml"
  shift 2
  case $type in
    ZERO3 | ZERO2) printf 'distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: %s\n' "${type#ZERO}" >"$f" ;;
    FSDP) printf 'distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 2\n' >"$f" ;;
    *) printf 'distributed_type: %s\n' "$type" >"$f" ;;
  esac
  if [ $# -gt 0 ]; then
    echo "parallelism_config:" >>"$f"
    for line in "$@"; do echo "  parallelism_config_$line" >>"$f"; done
  fi
}

SFT="--config configs/sft.yaml --max_steps 3 --logging_steps 1 --save_strategy no --eval_strategy no --bf16 false
     --learning_rate 5e-3"
# ranks N OUT TRAINER [FLAGS...]: N processes into $TMP/OUT; checks that it ran.
ranks() {
  local n=$1 out=$2 trainer=$3
  shift 3
  local base=$SFT
  [ "$trainer" = dpo ] && base=$DPO
  case $trainer in kto | reward | cpo | orpo) base="--config configs/$trainer.yaml $OTHER" ;; esac
  "$TRLX" launch --nproc_per_node "$n" -- "$TRLX" "$trainer" $base "$@" --output_dir "$TMP/$out" \
    >"$TMP/$out.log" 2>&1
  local rc=$?
  check "[ $rc = 0 ] || { tail -20 '$TMP/$out.log'; false; }"
}
# same_run A B: the same losses and gradient norms at every step, and the
# same trained model.
same_run() {
  same_metric loss "$TMP/$1" "$TMP/$2" && same_metric grad_norm "$TMP/$1" "$TMP/$2" &&
    same_scores "$TMP/$1" "$TMP/$2"
}

# --- sequence parallelism: sp 2 on 2 processes is one process ------------
acc sp_ddp MULTI_CPU "sp_size: 2"
acc sp_zero3 ZERO3 "sp_size: 2"
acc sp_fsdp FSDP "sp_size: 2" "dp_shard_size: 1"
"$TRLX" sft $SFT --output_dir "$TMP/one" >"$TMP/one.log" 2>&1
check "[ $? = 0 ] || { tail -20 '$TMP/one.log'; false; }"
for kind in ddp zero3 fsdp; do
  ranks 2 "sp_$kind" sft --accelerate_config "$TMP/sp_$kind.yaml"
  check "same_run one sp_$kind"
done
check "grep -q 'mesh sp 2 (Ulysses)' '$TMP/sp_ddp.log'"
# The rows were split, not merely the same run twice: the exchanges around
# attention add to what plain 2-rank DDP hands to collectives per step.
ranks 2 ddp sft --per_device_train_batch_size 8 --accelerate_config multi_gpu
bytes() { values comm_bytes_per_step "$TMP/$1/metrics.jsonl"; }
show_bytes() { echo "  bytes/step: $1 $(bytes "$1"), $2 $(bytes "$2")"; }
check "python3 -c 'import sys; a, b = map(float, sys.argv[1:]); sys.exit(0 if a > 1.5 * b else 1)' \$(bytes sp_ddp) \$(bytes ddp)"
show_bytes sp_ddp ddp
# Each rank takes the log-probs of its share of the positions: the gathered
# entropy and accuracy are one process's.
check "same_metric entropy '$TMP/one' '$TMP/sp_ddp' && same_metric mean_token_accuracy '$TMP/one' '$TMP/sp_ddp'"

# Packed rows (each document attends only within itself, positions restart)
# and odd lengths (the last share padded).
"$TRLX" sft $SFT --packing true --max_length 61 --output_dir "$TMP/one_packed" >"$TMP/one_packed.log" 2>&1
check "[ $? = 0 ] || { tail -20 '$TMP/one_packed.log'; false; }"
ranks 2 sp_packed sft --packing true --max_length 61 --accelerate_config "$TMP/sp_zero3.yaml"
check "same_run one_packed sp_packed"

# LoRA with gradient checkpointing (the recompute exchanges again), and
# without average_tokens_across_devices (the strategy averages gradients).
SAVERS="--use_peft true --lora_r 4 --lora_dropout 0 --lora_target_modules all-linear --gradient_checkpointing true"
"$TRLX" sft $SFT $SAVERS --output_dir "$TMP/one_lora" >"$TMP/one_lora.log" 2>&1
check "[ $? = 0 ] || { tail -20 '$TMP/one_lora.log'; false; }"
ranks 2 sp_lora sft $SAVERS --accelerate_config "$TMP/sp_fsdp.yaml"
check "same_metric loss '$TMP/one_lora' '$TMP/sp_lora' && same_metric grad_norm '$TMP/one_lora' '$TMP/sp_lora'"
"$TRLX" sft $SFT --average_tokens_across_devices false --output_dir "$TMP/one_avg" >"$TMP/one_avg.log" 2>&1
ranks 2 sp_avg sft --average_tokens_across_devices false --accelerate_config "$TMP/sp_ddp.yaml"
check "same_run one_avg sp_avg"

# Fewer key/value heads than ranks: one head, repeated for both.
"$TRLX" init-model --hidden_size 64 --intermediate_size 96 --num_layers 2 --num_heads 4 --num_kv_heads 1 \
  --tokenizer examples/tiny-model --out "$TMP/mqa" >"$TMP/init.log" 2>&1
check "[ $? = 0 ] || { cat '$TMP/init.log'; false; }"
"$TRLX" sft $SFT --model_name_or_path "$TMP/mqa" --output_dir "$TMP/one_mqa" >"$TMP/one_mqa.log" 2>&1
ranks 2 sp_mqa sft --model_name_or_path "$TMP/mqa" --accelerate_config "$TMP/sp_ddp.yaml"
check "same_run one_mqa sp_mqa"

# DPO: the reference forwards split the same way.
"$TRLX" sft $SFT --max_steps 20 --output_dir "$TMP/base" >"$TMP/base.log" 2>&1
DPO="--config configs/dpo.yaml --model_name_or_path $TMP/base --max_steps 3 --logging_steps 1 --save_strategy no
     --eval_strategy no --bf16 false --per_device_train_batch_size 8"
"$TRLX" dpo $DPO --output_dir "$TMP/one_dpo" >"$TMP/one_dpo.log" 2>&1
check "[ $? = 0 ] || { tail -20 '$TMP/one_dpo.log'; false; }"
ranks 2 sp_dpo dpo --accelerate_config "$TMP/sp_zero3.yaml"
check "same_run one_dpo sp_dpo && same_metric rewards/margins '$TMP/one_dpo' '$TMP/sp_dpo'"
ranks 2 sp_dpo_pre dpo --precompute_ref_log_probs true --accelerate_config "$TMP/sp_ddp.yaml"
check "same_run one_dpo sp_dpo_pre"
# The other offline trainers: KTO (its KL term pairs rows of the batch),
# the reward model's score head, CPO and ORPO.
OTHER="--model_name_or_path $TMP/base --max_steps 2 --logging_steps 1 --save_strategy no --eval_strategy no
       --bf16 false --per_device_train_batch_size 8"
for trainer in kto reward cpo orpo; do
  "$TRLX" "$trainer" --config "configs/$trainer.yaml" $OTHER --output_dir "$TMP/one_$trainer" \
    >"$TMP/one_$trainer.log" 2>&1
  check "[ $? = 0 ] || { tail -20 '$TMP/one_$trainer.log'; false; }"
  ranks 2 "sp_$trainer" "$trainer" --accelerate_config "$TMP/sp_ddp.yaml"
  check "same_metric loss '$TMP/one_$trainer' '$TMP/sp_$trainer' && same_metric grad_norm '$TMP/one_$trainer' '$TMP/sp_$trainer'"
done

# --- context parallelism: cp 2 on 2 processes is one process too -------
acc cp_fsdp FSDP "cp_size: 2" "dp_shard_size: 1"
ranks 2 cp_fsdp sft --accelerate_config "$TMP/cp_fsdp.yaml"
check "same_run one cp_fsdp"
check "grep -q 'mesh cp 2 (keys and values all-gathered)' '$TMP/cp_fsdp.log'"
ranks 2 fsdp sft --per_device_train_batch_size 8 --accelerate_config fsdp
check "python3 -c 'import sys; a, b = map(float, sys.argv[1:]); sys.exit(0 if a > 1.2 * b else 1)' \$(bytes cp_fsdp) \$(bytes fsdp)"
show_bytes cp_fsdp fsdp
# Packed rows keep their documents apart (the mask's rows go with the
# queries), odd lengths pad the last chunk.
ranks 2 cp_packed sft --packing true --max_length 61 --accelerate_config "$TMP/cp_fsdp.yaml"
check "same_run one_packed cp_packed"
ranks 2 cp_lora sft $SAVERS --accelerate_config "$TMP/cp_fsdp.yaml"
check "same_metric loss '$TMP/one_lora' '$TMP/cp_lora' && same_metric grad_norm '$TMP/one_lora' '$TMP/cp_lora'"
ranks 2 cp_dpo dpo --accelerate_config "$TMP/cp_fsdp.yaml"
check "same_run one_dpo cp_dpo"

# --- four processes: sp inside data parallelism, hybrid sharding --------
# 2 data ranks x sp 2 (ZeRO-3 splits the parameters over all 4) is one
# process with twice the per-device batch; so are 2 replicas x 2 shards.
"$TRLX" sft $SFT --per_device_train_batch_size 32 --output_dir "$TMP/one32" >"$TMP/one32.log" 2>&1
acc dp_sp ZERO3 "dp_shard_size: 2" "sp_size: 2"
ranks 4 dp_sp sft --accelerate_config "$TMP/dp_sp.yaml"
check "same_run one32 dp_sp"
"$TRLX" sft $SFT --per_device_train_batch_size 64 --output_dir "$TMP/one64" >"$TMP/one64.log" 2>&1
acc dp_cp FSDP "dp_shard_size: 2" "cp_size: 2"
ranks 4 dp_cp sft --accelerate_config "$TMP/dp_cp.yaml"
check "same_run one32 dp_cp"
acc hybrid FSDP "dp_replicate_size: 2" "dp_shard_size: 2"
ranks 4 hybrid sft --accelerate_config "$TMP/hybrid.yaml"
check "same_run one64 hybrid"
check "grep -q 'mesh dp_replicate 2 x dp_shard 2' '$TMP/hybrid.log'"
# Hybrid sharding, not full sharding over 4: gathers of halves within each
# replica and an all-reduce across replicas send more per step (about 10
# parameter-bytes against 6).
acc flat FSDP
ranks 4 flat sft --accelerate_config "$TMP/flat.yaml"
check "same_run one64 flat"
check "python3 -c 'import sys; a, b = map(float, sys.argv[1:]); sys.exit(0 if a > 1.4 * b else 1)' \$(bytes hybrid) \$(bytes flat)"
show_bytes hybrid flat
# A checkpoint of the hybrid run resumes exactly on the same mesh, and is
# refused on another (its optimizer state is split within each replica).
ranks 4 hybrid_ck sft --accelerate_config "$TMP/hybrid.yaml" --save_strategy steps --save_steps 2
ranks 4 hybrid_resumed sft --accelerate_config "$TMP/hybrid.yaml" --save_strategy no \
  --resume_from_checkpoint "$TMP/hybrid_ck/checkpoint-2"
check "[ \"\$(values loss '$TMP/hybrid/metrics.jsonl' | tail -1)\" = \"\$(values loss '$TMP/hybrid_resumed/metrics.jsonl' | tail -1)\" ]"
check "same_scores '$TMP/hybrid' '$TMP/hybrid_resumed'"
"$TRLX" launch --nproc_per_node 4 -- "$TRLX" sft $SFT --accelerate_config "$TMP/flat.yaml" \
  --resume_from_checkpoint "$TMP/hybrid_ck/checkpoint-2" --output_dir "$TMP/flat_resumed" >"$TMP/o" 2>&1
check "[ $? = 2 ] && grep -q 'saved on the mesh dp_replicate 2 x dp_shard 2, and this run.s is dp_shard 4' '$TMP/o'" ||
  tail -5 "$TMP/o"
acc hybrid_z2 ZERO2 "dp_replicate_size: 2" "dp_shard_size: 2"
ranks 4 hybrid_z2 sft --accelerate_config "$TMP/hybrid_z2.yaml"
check "same_run one64 hybrid_z2"

# --- refused, with the numbers --------------------------------------------
refused_on() {  # refused_on N PATTERN TRAINER [FLAGS...]: exit 2 on N ranks, saying PATTERN
  local n=$1 want=$2 trainer=$3
  shift 3
  "$TRLX" launch --nproc_per_node "$n" -- "$TRLX" "$trainer" "$@" --output_dir "$TMP/refused" >"$TMP/o" 2>&1
  local rc=$?
  check "[ $rc = 2 ] && grep -q \"$want\" '$TMP/o' && ! grep -q 'step 1/' '$TMP/o'" || tail -5 "$TMP/o"
}
acc bad_sizes FSDP "dp_shard_size: 2" "sp_size: 2"
refused_on 2 "dp_replicate_size 1 x dp_shard_size 2 x cp_size 1 x sp_size 2 = 4, but 2 processes" sft $SFT \
  --accelerate_config "$TMP/bad_sizes.yaml"
acc bad_heads MULTI_CPU "sp_size: 3"
refused_on 3 "the model's 4 heads do not divide" sft $SFT --accelerate_config "$TMP/bad_heads.yaml"
acc tp FSDP "tp_size: 2"
refused "tensor parallelism (tp_size 2) is not built" sft $SFT --accelerate_config "$TMP/tp.yaml"
acc cp_sp FSDP "cp_size: 2" "sp_size: 2"
refused "mutually exclusive" sft $SFT --accelerate_config "$TMP/cp_sp.yaml"
acc ddp_shard MULTI_CPU "dp_shard_size: 2"
refused_on 2 "keeps it whole on every rank" sft $SFT --accelerate_config "$TMP/ddp_shard.yaml"
acc typo FSDP "sp_sise: 2"
refused "did you mean .parallelism_config_sp_size." sft $SFT --accelerate_config "$TMP/typo.yaml"
printf 'distributed_type: MULTI_CPU\nnum_proceses: 2\n' >"$TMP/typo2.yaml"
refused "num_proceses. is not an accelerate key" sft $SFT --accelerate_config "$TMP/typo2.yaml"
printf 'distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 2\n  gradient_accumulation_steps: 4\n' \
  >"$TMP/ds_ga.yaml"
refused "gradient_accumulation_steps is 4 but the training config's gradient_accumulation_steps is 1" sft $SFT \
  --accelerate_config "$TMP/ds_ga.yaml"
printf 'distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 2\n  gradient_accumulation_steps: auto\n  gradient_clipping: 1.0\n' \
  >"$TMP/ds_auto.yaml"
"$TRLX" sft $SFT --max_steps 1 --accelerate_config "$TMP/ds_auto.yaml" --output_dir "$TMP/ds_auto" >"$TMP/o" 2>&1
check "[ $? = 0 ]"
refused_on 2 "does not support sequence parallelism" grpo --config configs/grpo.yaml --max_steps 1 \
  --model_name_or_path examples/tiny-model --accelerate_config "$TMP/sp_ddp.yaml"
acc ring FSDP "cp_size: 2" "cp_comm_strategy: alltoall"
refused_on 2 "cp_comm_strategy alltoall (keys and values passed around the ring) is not built" sft $SFT \
  --accelerate_config "$TMP/ring.yaml"

finish
