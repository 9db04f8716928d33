#!/usr/bin/env bash
# Mixtures of experts through the real binary: `init-model` writes small
# Qwen3-MoE, Mixtral, gpt-oss and DeepSeek-V3 models; SFT adds and logs the load-balancing loss;
# 2-rank DDP, ZeRO-2, ZeRO-3 and FSDP (each decoder layer with its experts
# one unit) end with the same model (through `trlx score`) and log the same
# losses (one process's without the balance loss, which is per rank); LoRA
# on the attention with
# gradient checkpointing under ZeRO-3 equals one process too; DPO and GRPO
# train an MoE model; `score` and `generate` run on one; router_aux_loss_coef
# on a dense model is refused.
# Usage: moe.sh <path to trlx> <source dir>
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1

"$TRLX" init-model --arch qwen3_moe --hidden_size 64 --num_layers 2 --num_heads 4 --num_kv_heads 2 \
  --num_experts 6 --num_experts_per_tok 3 --moe_intermediate_size 32 --tokenizer examples/tiny-model \
  --out "$TMP/qwen_moe" >"$TMP/init.log" 2>&1
check "[ $? = 0 ] || { cat '$TMP/init.log'; false; }"
"$TRLX" init-model --arch mixtral --hidden_size 64 --intermediate_size 48 --num_layers 2 --num_heads 4 \
  --num_kv_heads 2 --num_experts 5 --num_experts_per_tok 2 --tokenizer examples/tiny-model \
  --out "$TMP/mixtral" >"$TMP/init2.log" 2>&1
check "[ $? = 0 ] || { cat '$TMP/init2.log'; false; }"
# The published per-expert layout, and the keys transformers reads.
check "python3 - '$TMP/qwen_moe' '$TMP/mixtral' <<'PY'
import json, struct, sys
def names(d):
    with open(d + '/model.safetensors', 'rb') as f:
        return set(json.loads(f.read(struct.unpack('<Q', f.read(8))[0])))
q, m = names(sys.argv[1]), names(sys.argv[2])
assert 'model.layers.1.mlp.experts.5.down_proj.weight' in q and 'model.layers.0.mlp.gate.weight' in q, q
assert 'model.layers.1.block_sparse_moe.experts.4.w3.weight' in m and 'model.layers.0.block_sparse_moe.gate.weight' in m
qc, mc = json.load(open(sys.argv[1] + '/config.json')), json.load(open(sys.argv[2] + '/config.json'))
assert qc['architectures'] == ['Qwen3MoeForCausalLM'] and qc['num_experts'] == 6 and qc['moe_intermediate_size'] == 32
assert mc['architectures'] == ['MixtralForCausalLM'] and mc['num_local_experts'] == 5 and mc['intermediate_size'] == 48
PY"

# SFT logs aux_loss, and its loss carries router_aux_loss_coef (the config's
# 0.001 by default) times it: a run with a large coefficient logs a larger loss.
SFT="--config configs/sft.yaml --max_steps 4 --logging_steps 1 --save_strategy no --eval_strategy no --bf16 false"
# on_two_ranks OUT MODEL PRESET [FLAGS...]: SFT of $TMP/MODEL on 2 ranks x 4
# rows under the accelerate preset into $TMP/OUT; checks that it ran.
on_two_ranks() {
  local out=$1 model=$2 preset=$3
  shift 3
  "$TRLX" launch --nproc_per_node 2 -- "$TRLX" sft $SFT "$@" --model_name_or_path "$TMP/$model" \
    --per_device_train_batch_size 4 --accelerate_config "$preset" --output_dir "$TMP/$out" >"$TMP/$out.log" 2>&1
  local rc=$?
  check "[ $rc = 0 ] || { tail -20 '$TMP/$out.log'; false; }"
}
for model in qwen_moe mixtral; do
  "$TRLX" sft $SFT --model_name_or_path "$TMP/$model" --per_device_train_batch_size 8 \
    --output_dir "$TMP/one_$model" >"$TMP/one_$model.log" 2>&1
  check "[ $? = 0 ] || { tail -20 '$TMP/one_$model.log'; false; }"
  check "steps_hold '$TMP/one_$model' 'm[\"aux_loss\"] > 0 and math.isfinite(m[\"loss\"])'"
done
"$TRLX" sft $SFT --model_name_or_path "$TMP/qwen_moe" --per_device_train_batch_size 8 --router_aux_loss_coef 1.0 \
  --max_steps 1 --output_dir "$TMP/coef" >"$TMP/coef.log" 2>&1
check "[ $? = 0 ]"
check "python3 - '$TMP/one_qwen_moe' '$TMP/coef' <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1] + '/metrics.jsonl') if '\"loss\"' in l][0]
b = [json.loads(l) for l in open(sys.argv[2] + '/metrics.jsonl') if '\"loss\"' in l][0]
# Same first forward: the same aux; the loss differs by (1 - 0.001) * aux.
assert abs(a['aux_loss'] - b['aux_loss']) < 1e-6, (a, b)
assert abs((b['loss'] - a['loss']) - 0.999 * a['aux_loss']) < 1e-4, (a, b)
PY"

# Every strategy on 2 ranks x 4 rows. The load-balancing loss is each rank's
# own (as the reference: a per-process mean that DDP averages), so with it 2
# ranks are not one process: the sharded strategies equal 2-rank DDP, and
# without it (coefficient 0) every strategy equals one process.
"$TRLX" sft $SFT --model_name_or_path "$TMP/qwen_moe" --per_device_train_batch_size 8 --router_aux_loss_coef 0 \
  --output_dir "$TMP/one_noaux" >"$TMP/one_noaux.log" 2>&1
check "[ $? = 0 ] && ! grep -q aux_loss '$TMP/one_noaux/metrics.jsonl'"
for preset in multi_gpu zero2 zero3 fsdp; do
  on_two_ranks "${preset}_default" qwen_moe $preset
  on_two_ranks "${preset}_0" qwen_moe $preset --router_aux_loss_coef 0
  check "same_scores '$TMP/one_noaux' '$TMP/${preset}_0' && same_metric loss '$TMP/one_noaux' '$TMP/${preset}_0'"
  check "same_scores '$TMP/multi_gpu_default' '$TMP/${preset}_default'"
  check "same_metric loss '$TMP/multi_gpu_default' '$TMP/${preset}_default'"
  check "same_metric aux_loss '$TMP/multi_gpu_default' '$TMP/${preset}_default'"
done
# The 2-rank aux_loss is the mean of the ranks' own: not one process's.
check "! same_metric aux_loss '$TMP/one_qwen_moe' '$TMP/multi_gpu_default' 1e-6"

# Without average_tokens_across_devices the ranks' gradients are averaged by
# the strategy: the balance loss joins once, as the mean of the ranks'.
for coef in 1 0; do
  on_two_ranks "avg_$coef" qwen_moe multi_gpu --average_tokens_across_devices false --router_aux_loss_coef $coef \
    --max_steps 1
done
check "python3 - '$TMP/avg_1' '$TMP/avg_0' <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1] + '/metrics.jsonl') if '\"loss\"' in l][0]
b = [json.loads(l) for l in open(sys.argv[2] + '/metrics.jsonl') if '\"loss\"' in l][0]
assert abs((a['loss'] - b['loss']) - a['aux_loss']) < 1e-4, (a, b)
PY"

# LoRA on the attention (the routers' balance gradient reaches the
# adapters through the hidden states) with gradient checkpointing (through
# the recompute), a large coefficient so that it counts: ZeRO-3 equals DDP.
SAVERS="--use_peft true --lora_r 4 --lora_dropout 0 --lora_target_modules all-linear --gradient_checkpointing true
        --router_aux_loss_coef 0.5"
for preset in multi_gpu zero3; do on_two_ranks "lora_$preset" mixtral $preset $SAVERS; done
check "same_metric loss '$TMP/lora_multi_gpu' '$TMP/lora_zero3' && same_metric grad_norm '$TMP/lora_multi_gpu' '$TMP/lora_zero3'"
check "same_metric aux_loss '$TMP/lora_multi_gpu' '$TMP/lora_zero3'"
# The balance moves the adapters: the coefficient changes the gradient.
on_two_ranks lora_noaux mixtral multi_gpu $SAVERS --router_aux_loss_coef 0
check "! same_metric grad_norm '$TMP/lora_multi_gpu' '$TMP/lora_noaux' 1e-4"

# gpt-oss (attention sinks, biased experts): one process and 2 ranks under
# FSDP and ZeRO-3 train the same model (balance loss off, as above).
"$TRLX" init-model --arch gpt_oss --hidden_size 64 --intermediate_size 32 --num_layers 2 --num_heads 4 \
  --num_kv_heads 2 --num_experts 5 --num_experts_per_tok 2 --tokenizer examples/tiny-model \
  --out "$TMP/gpt_oss" >"$TMP/init3.log" 2>&1
check "[ $? = 0 ] || { cat '$TMP/init3.log'; false; }"
"$TRLX" sft $SFT --model_name_or_path "$TMP/gpt_oss" --per_device_train_batch_size 8 --router_aux_loss_coef 0 \
  --output_dir "$TMP/oss_one" >"$TMP/oss_one.log" 2>&1
check "[ $? = 0 ] || { tail -20 '$TMP/oss_one.log'; false; }"
for preset in zero3 fsdp; do
  on_two_ranks "oss_$preset" gpt_oss $preset --router_aux_loss_coef 0
  check "same_scores '$TMP/oss_one' '$TMP/oss_$preset' && same_metric loss '$TMP/oss_one' '$TMP/oss_$preset'"
done

# DeepSeek-V3 (latent attention, grouped sigmoid routing, shared experts) has
# no balance loss: 2 ranks under ZeRO-3 and FSDP equal one process as they are.
"$TRLX" init-model --arch deepseek_v3 --hidden_size 64 --intermediate_size 64 --moe_intermediate_size 16 \
  --num_layers 2 --num_heads 4 --num_experts 6 --num_experts_per_tok 2 --tokenizer examples/tiny-model \
  --out "$TMP/deepseek" >"$TMP/init4.log" 2>&1
check "[ $? = 0 ] || { cat '$TMP/init4.log'; false; }"
"$TRLX" sft $SFT --model_name_or_path "$TMP/deepseek" --per_device_train_batch_size 8 --output_dir "$TMP/ds_one" \
  >"$TMP/ds_one.log" 2>&1
check "[ $? = 0 ] && ! grep -q aux_loss '$TMP/ds_one/metrics.jsonl' || { tail -20 '$TMP/ds_one.log'; false; }"
for preset in zero3 fsdp; do
  on_two_ranks "ds_$preset" deepseek $preset
  check "same_scores '$TMP/ds_one' '$TMP/ds_$preset' && same_metric loss '$TMP/ds_one' '$TMP/ds_$preset'"
done
refused "no load-balancing loss" sft $SFT --model_name_or_path "$TMP/deepseek" --router_aux_loss_coef 0.01 \
  --output_dir "$TMP/ds_coef"

# LoRA on the experts themselves (lora_target_parameters, PEFT's
# target_parameters): ZeRO-3 trains the adapters DDP does, the adapter
# records its expert weights, and merge-lora folds them in.
EXPERT_LORA="--use_peft true --lora_r 4 --lora_dropout 0 --lora_target_modules q_proj v_proj
             --lora_target_parameters mlp.experts.gate_up_proj mlp.experts.down_proj --learning_rate 1e-2"
for preset in multi_gpu zero3; do on_two_ranks "elora_$preset" qwen_moe $preset $EXPERT_LORA; done
check "grep -q 'expert weights (mlp.experts.gate_up_proj, mlp.experts.down_proj; one adapter per expert)' '$TMP/elora_zero3.log'"
check "same_metric loss '$TMP/elora_multi_gpu' '$TMP/elora_zero3' && same_metric grad_norm '$TMP/elora_multi_gpu' '$TMP/elora_zero3'"
check "python3 -c \"import json,sys; c=json.load(open(sys.argv[1])); sys.exit(0 if sorted(c['target_parameters']) == ['mlp.experts.down_proj', 'mlp.experts.gate_up_proj'] else 1)\" '$TMP/elora_zero3/adapter_config.json'"
"$TRLX" merge-lora --base "$TMP/qwen_moe" --adapter "$TMP/elora_zero3" --out "$TMP/elora_merged" >"$TMP/merge.log" 2>&1
check "[ $? = 0 ] || { cat '$TMP/merge.log'; false; }"
# The merged model scores as the base with the adapter does (score reads adapters).
check "same_scores '$TMP/elora_zero3' '$TMP/elora_merged' 1e-4"
# gpt-oss stores its experts [experts, in, out]: the same adapters, merged the other way round.
"$TRLX" sft $SFT $EXPERT_LORA --model_name_or_path "$TMP/gpt_oss" --per_device_train_batch_size 8 \
  --output_dir "$TMP/elora_oss" >"$TMP/elora_oss.log" 2>&1
check "[ $? = 0 ] || { tail -20 '$TMP/elora_oss.log'; false; }"
"$TRLX" merge-lora --base "$TMP/gpt_oss" --adapter "$TMP/elora_oss" --out "$TMP/elora_oss_merged" >"$TMP/merge2.log" 2>&1
check "[ $? = 0 ] && same_scores '$TMP/elora_oss' '$TMP/elora_oss_merged' 1e-4"
refused "needs lora_dropout 0" sft $SFT --model_name_or_path "$TMP/qwen_moe" --use_peft true --lora_dropout 0.1 \
  --lora_target_modules q_proj --lora_target_parameters mlp.experts.down_proj --output_dir "$TMP/elora_bad"

# DPO and GRPO on an MoE model: they train and log aux_loss.
"$TRLX" dpo --config configs/dpo.yaml --model_name_or_path "$TMP/qwen_moe" --max_steps 2 --logging_steps 1 \
  --save_strategy no --eval_strategy no --bf16 false --output_dir "$TMP/dpo" >"$TMP/dpo.log" 2>&1
check "[ $? = 0 ] || { tail -20 '$TMP/dpo.log'; false; }"
check "steps_hold '$TMP/dpo' 'm[\"aux_loss\"] > 0'"
"$TRLX" grpo --config configs/grpo.yaml --model_name_or_path "$TMP/qwen_moe" --max_steps 1 --logging_steps 1 \
  --save_strategy no --eval_strategy no --bf16 false --output_dir "$TMP/grpo" >"$TMP/grpo.log" 2>&1
check "[ $? = 0 ] || { tail -20 '$TMP/grpo.log'; false; }"
check "steps_hold '$TMP/grpo' 'm[\"aux_loss\"] > 0'"

# score and generate.
"$TRLX" score --model "$TMP/mixtral" --input examples/data/sft/test.jsonl >"$TMP/score.jsonl" 2>"$TMP/score.err"
check "[ $? = 0 ] && [ \$(values sum_logprob '$TMP/score.jsonl' | wc -l) -gt 0 ]"
"$TRLX" generate --model "$TMP/qwen_moe" --prompt "1+1=" --max_new_tokens 5 --ignore_eos --json \
  >"$TMP/gen.jsonl" 2>"$TMP/gen.err"
check "[ $? = 0 ] && grep -q completion '$TMP/gen.jsonl' || { cat '$TMP/gen.err'; false; }"

# A coefficient for a model without experts is refused.
refused "not a mixture of experts" sft $SFT --router_aux_loss_coef 0.01 --output_dir "$TMP/dense"

finish
