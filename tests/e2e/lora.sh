#!/usr/bin/env bash
# trlx merge-lora: a PEFT adapter folded into its base gives a plain HF model
# that trlx loads and that differs from the base; bad input exits 2.
# Usage: lora.sh <path to trlx> <source dir>
source "$(dirname "$0")/lib.sh"

check "\"$TRLX\" --help | grep -q merge-lora"
ADAPTER=tests/data/lora/all_linear/adapter
"$TRLX" merge-lora --base examples/tiny-model --adapter $ADAPTER --out "$TMP/merged" >"$TMP/o" 2>&1
check "[ $? = 0 ]"
check "grep -q '14 adapted layers' '$TMP/o'"
for f in config.json model.safetensors generation_config.json tokenizer.json tokenizer_config.json; do
  check "[ -f '$TMP/merged/$f' ]"
done
check "! ls '$TMP/merged' | grep -q adapter"
# The merged model loads as a plain model, and the adapter changed it.
"$TRLX" score --model examples/tiny-model --input tests/data/sft/data/train.jsonl >"$TMP/base.jsonl" 2>/dev/null
"$TRLX" score --model "$TMP/merged" --input tests/data/sft/data/train.jsonl >"$TMP/merged.jsonl" 2>"$TMP/err"
check "[ $? = 0 ]"
check "[ \$(wc -l <'$TMP/merged.jsonl') = 8 ]"
check "! cmp -s '$TMP/base.jsonl' '$TMP/merged.jsonl'"
# A second merge into the same directory replaces it whole.
"$TRLX" merge-lora --base examples/tiny-model --adapter tests/data/lora/default/adapter --out "$TMP/merged" >"$TMP/o" 2>&1
check "[ $? = 0 ] && grep -q '4 adapted layers' '$TMP/o'"
"$TRLX" merge-lora --base examples/tiny-model --adapter tests/data/lora/default/adapter --out "$TMP/merged" --dtype bfloat16 >/dev/null 2>&1
check "[ $? = 0 ] && grep -q '\"bfloat16\"' '$TMP/merged/config.json'"

# score and generate take an adapter directory too: the adapter on the base
# it names, giving what the merged model gives. The same for a DoRA adapter
# trained by sft (use_dora), which carries its magnitudes in PEFT's names.
for dora in false true; do
  "$TRLX" sft --config configs/sft.yaml --max_steps 2 --use_peft true --use_dora $dora --learning_rate 1e-2 \
    --eval_strategy no --save_strategy no --output_dir "$TMP/ad_$dora" >"$TMP/sft.log" 2>&1
  check "[ $? = 0 ]" || tail -5 "$TMP/sft.log"
  if [ $dora = true ]; then
    check "grep -q '\"use_dora\": true' '$TMP/ad_$dora/adapter_config.json' && grep -q 'DoRA: r 16' '$TMP/sft.log'"
    check "python3 -c 'import json,struct,sys; f=open(sys.argv[1],\"rb\"); n=struct.unpack(\"<Q\", f.read(8))[0]; h=json.loads(f.read(n)); assert sum(k.endswith(\".lora_magnitude_vector\") for k in h) == 4, list(h)' '$TMP/ad_$dora/adapter_model.safetensors'"
  fi
  "$TRLX" merge-lora --base examples/tiny-model --adapter "$TMP/ad_$dora" --out "$TMP/ad_merged" >/dev/null 2>&1
  "$TRLX" score --model "$TMP/ad_$dora" --input tests/data/sft/data/train.jsonl >"$TMP/ad.jsonl" 2>"$TMP/err"
  check "[ $? = 0 ] && grep -q 'a LoRA adapter on' '$TMP/err'" || cat "$TMP/err"
  "$TRLX" score --model "$TMP/ad_merged" --input tests/data/sft/data/train.jsonl >"$TMP/ad_merged.jsonl" 2>/dev/null
  values sum_logprob "$TMP/ad.jsonl" >"$TMP/a1"
  values sum_logprob "$TMP/ad_merged.jsonl" >"$TMP/a2"
  d=$(largest_difference "$TMP/a1" "$TMP/a2")
  check "python3 -c 'import sys; sys.exit(not float(\"$d\") < 1e-5)'" || echo "use_dora $dora: difference $d"
  "$TRLX" generate --model "$TMP/ad_$dora" --prompt 'What is 2 plus 3?' --max_new_tokens 6 --json >"$TMP/g1" 2>/dev/null
  "$TRLX" generate --model "$TMP/ad_merged" --prompt 'What is 2 plus 3?' --max_new_tokens 6 --json >"$TMP/g2" 2>/dev/null
  check "[ -s '$TMP/g1' ] && cmp -s '$TMP/g1' '$TMP/g2'"
done

# QLoRA: sft on a 4-bit base trains adapters that PEFT's format holds, and
# merge-lora folds them into the unquantized base; a 4-bit base needs
# adapters and is not sharded.
"$TRLX" sft --config configs/sft.yaml --max_steps 2 --use_peft true --load_in_4bit true --use_bnb_nested_quant true \
  --learning_rate 1e-2 --eval_strategy no --save_strategy no --output_dir "$TMP/qlora" >"$TMP/q.log" 2>&1
check "[ $? = 0 ] && grep -q 'QLoRA: 14 linear layers kept in 4 bits (nf4, double-quantized scales)' '$TMP/q.log'" ||
  tail -5 "$TMP/q.log"
check "[ -f '$TMP/qlora/adapter_model.safetensors' ] && grep -q '\"r\": 16' '$TMP/qlora/adapter_config.json'"
"$TRLX" merge-lora --base examples/tiny-model --adapter "$TMP/qlora" --out "$TMP/qlora_merged" >"$TMP/o" 2>&1
check "[ $? = 0 ]" || cat "$TMP/o"
"$TRLX" sft --config configs/sft.yaml --max_steps 1 --load_in_4bit true --output_dir "$TMP/q2" >"$TMP/o" 2>&1
check "[ $? = 2 ] && grep -q 'use_peft' '$TMP/o'" || cat "$TMP/o"
"$TRLX" sft --config configs/sft.yaml --max_steps 1 --use_peft true --load_in_4bit true --accelerate_config zero3 \
  --output_dir "$TMP/q3" >"$TMP/o" 2>&1
check "[ $? = 2 ] && grep -q 'sharding a 4-bit base is not built' '$TMP/o'" || cat "$TMP/o"

# QLoRA under DDP: 2 ranks x 4 rows train as 1 rank x 8 rows (adapter
# dropout off: its masks follow the split), each rank with its 4-bit base.
Q="--config configs/sft.yaml --max_steps 3 --logging_steps 1 --save_strategy no --eval_strategy no --bf16 false
   --use_peft true --lora_dropout 0 --load_in_4bit true"
"$TRLX" sft $Q --per_device_train_batch_size 8 --output_dir "$TMP/q_one" >"$TMP/q_one.log" 2>&1
check "[ $? = 0 ]" || tail -5 "$TMP/q_one.log"
"$TRLX" launch --nproc_per_node 2 -- "$TRLX" sft $Q --per_device_train_batch_size 4 --output_dir "$TMP/q_two" \
  >"$TMP/q_two.log" 2>&1
check "[ $? = 0 ] && grep -q 'ddp (mpi communicator' '$TMP/q_two.log'" || tail -20 "$TMP/q_two.log"
check "same_metric loss '$TMP/q_one' '$TMP/q_two'"

# 8-bit AdamW (the QLoRA recipes' paged_adamw_8bit) with a 4-bit base: a
# run interrupted at step 2 and resumed ends as the uninterrupted one; DDP
# on 2 ranks equals one process (each rank quantizes the whole state), and
# ZeRO-2 stays close (each rank quantizes its shard, in its own blocks).
O="--config configs/sft.yaml --max_steps 4 --logging_steps 1 --save_steps 2 --eval_strategy no --bf16 false
   --use_peft true --lora_dropout 0 --lora_target_modules all-linear --load_in_4bit true --optim paged_adamw_8bit
   --learning_rate 1e-2"
"$TRLX" sft $O --per_device_train_batch_size 8 --output_dir "$TMP/o8" >"$TMP/o8.log" 2>&1
check "[ $? = 0 ] && grep -q 'moments in 8 bits' '$TMP/o8.log' && grep -q 'not paged' '$TMP/o8.log'" || tail -5 "$TMP/o8.log"
"$TRLX" sft $O --per_device_train_batch_size 8 --output_dir "$TMP/o8r" --resume_from_checkpoint "$TMP/o8/checkpoint-2" \
  >"$TMP/o8r.log" 2>&1
check "[ $? = 0 ]" || tail -5 "$TMP/o8r.log"
check "python3 - '$TMP/o8/metrics.jsonl' '$TMP/o8r/metrics.jsonl' <<'PY'
import json, sys
loss = lambda f: {r['step']: r['loss'] for r in map(json.loads, open(f)) if 'loss' in r}
a, b = loss(sys.argv[1]), loss(sys.argv[2])
assert sorted(k for k in b if k > 2) == [3, 4] and all(a[k] == b[k] for k in (3, 4)), (a, b)
PY"
"$TRLX" launch --nproc_per_node 2 -- "$TRLX" sft $O --per_device_train_batch_size 4 --save_strategy no \
  --output_dir "$TMP/o8ddp" >"$TMP/o8ddp.log" 2>&1
check "[ $? = 0 ]" || tail -5 "$TMP/o8ddp.log"
check "same_metric loss '$TMP/o8' '$TMP/o8ddp'"
"$TRLX" launch --nproc_per_node 2 -- "$TRLX" sft $O --per_device_train_batch_size 4 --save_strategy no \
  --accelerate_config zero2 --output_dir "$TMP/o8z2" >"$TMP/o8z2.log" 2>&1
check "[ $? = 0 ]" || tail -5 "$TMP/o8z2.log"
check "same_metric loss '$TMP/o8' '$TMP/o8z2' 1e-3"

# Bad input: exit 2, naming what is wrong; a failed merge leaves --out alone.
"$TRLX" merge-lora --base examples/tiny-model --adapter "$TMP/nothing" --out "$TMP/m2" >"$TMP/o" 2>&1
check "[ $? = 2 ] && grep -q 'adapter_config.json' '$TMP/o' && [ ! -e '$TMP/m2' ]"
mkdir -p "$TMP/bad"
cp $ADAPTER/adapter_model.safetensors "$TMP/bad/"
sed 's/"model.layers.0.self_attn.q_proj"/"no_such_proj"/' $ADAPTER/adapter_config.json >"$TMP/bad/adapter_config.json"
"$TRLX" merge-lora --base examples/tiny-model --adapter "$TMP/bad" --out "$TMP/merged" >"$TMP/o" 2>&1
check "[ $? = 2 ] && grep -q 'no_such_proj' '$TMP/o' && grep -q 'bfloat16' '$TMP/merged/config.json'"
"$TRLX" merge-lora --base examples/tiny-model --adapter $ADAPTER --out examples/tiny-model >"$TMP/o" 2>&1
check "[ $? = 2 ] && grep -q 'must differ' '$TMP/o'"
"$TRLX" merge-lora --base examples/tiny-model --adapter $ADAPTER >"$TMP/o" 2>&1
check "[ $? = 2 ]"

finish
