#!/usr/bin/env bash
# Hub names end to end: `trlx sft` with model_name_or_path and dataset_name
# given as `org/name`, found in a Hugging Face cache that huggingface_hub
# wrote (tests/data/hub_cache), offline; validate and print-config on the
# same names; the error when a name is neither cached nor downloadable.
# Usage: hub.sh <path to trlx> <source dir>
source "$(dirname "$0")/lib.sh"

export HF_HUB_CACHE="$SRC/tests/data/hub_cache"
export HF_HUB_OFFLINE=1
unset HF_HOME HF_TOKEN HF_ENDPOINT
snap="$HF_HUB_CACHE/models--trlx-test--tiny-qwen2/snapshots/$(cat "$HF_HUB_CACHE/models--trlx-test--tiny-qwen2/refs/main")"
ARGS=(--model_name_or_path trlx-test/tiny-qwen2 --dataset_name trlx-test/tiny-sft --max_length 64
      --per_device_train_batch_size 2 --max_steps 3 --logging_steps 1 --eval_strategy no --bf16 false
      --report_to none)

"$TRLX" sft "${ARGS[@]}" --output_dir "$TMP/run" >"$TMP/run.log" 2>&1
rc=$?
check "[ $rc = 0 ]"
check "grep -q 'model_name_or_path trlx-test/tiny-qwen2@main -> $snap (Hugging Face cache)' '$TMP/run.log'"
check "grep -q 'dataset_name trlx-test/tiny-sft@main' '$TMP/run.log'"
check "[ -f '$TMP/run/model.safetensors' ] && [ -f '$TMP/run/tokenizer.json' ]"

# A LoRA run from a hub name records that name as its adapter's base, as
# PEFT does, so the adapter loads on another machine from its own cache.
"$TRLX" sft "${ARGS[@]}" --use_peft true --lora_r 2 --output_dir "$TMP/lora" >"$TMP/lora.log" 2>&1
check "[ $? = 0 ]"
check "grep -q '\"base_model_name_or_path\": \"trlx-test/tiny-qwen2\"' '$TMP/lora/adapter_config.json'"
# Continuing that adapter (its base found through the cache) keeps the name.
"$TRLX" sft "${ARGS[@]}" --model_name_or_path "$TMP/lora" --use_peft true --lora_r 2 --max_steps 1 --output_dir "$TMP/lora2" >"$TMP/lora2.log" 2>&1
check "[ $? = 0 ]"
check "grep -q '\"base_model_name_or_path\": \"trlx-test/tiny-qwen2\"' '$TMP/lora2/adapter_config.json'"
check "grep -q '\"revision\": null' '$TMP/lora2/adapter_config.json'"
# At a revision other than main, the revision goes beside the name, and a run
# continuing that adapter finds the base at that revision.
commit=$(basename "$snap")
"$TRLX" sft "${ARGS[@]}" --model_revision "$commit" --use_peft true --lora_r 2 --output_dir "$TMP/lora_rev" >"$TMP/lora_rev.log" 2>&1
check "[ $? = 0 ]"
check "grep -q '\"base_model_name_or_path\": \"trlx-test/tiny-qwen2\"' '$TMP/lora_rev/adapter_config.json'"
check "grep -q '\"revision\": \"$commit\"' '$TMP/lora_rev/adapter_config.json'"
"$TRLX" sft "${ARGS[@]}" --model_name_or_path "$TMP/lora_rev" --use_peft true --lora_r 2 --max_steps 1 --output_dir "$TMP/lora_rev2" >"$TMP/lora_rev2.log" 2>&1
check "[ $? = 0 ]"
check "grep -q '\"base_model_name_or_path\": \"trlx-test/tiny-qwen2\"' '$TMP/lora_rev2/adapter_config.json'"
# The pin is kept although it is the commit main names in this cache today.
check "grep -q '\"revision\": \"$commit\"' '$TMP/lora_rev2/adapter_config.json'"
[ $rc = 0 ] || cat "$TMP/run.log"

# validate says where each name is found; print-config keeps the names as written.
"$TRLX" validate sft "${ARGS[@]}" >"$TMP/validate.log" 2>&1
check "[ $? = 0 ]"
check "grep -q '^hub: model_name_or_path trlx-test/tiny-qwen2@main -> $snap' '$TMP/validate.log'"
"$TRLX" print-config sft "${ARGS[@]}" >"$TMP/print.log" 2>&1
check "grep -q '^model_name_or_path: trlx-test/tiny-qwen2' '$TMP/print.log'"
check "grep -q '^# hub: model_name_or_path trlx-test/tiny-qwen2@main -> ' '$TMP/print.log'"

# Not cached, offline: exit 2, the name, the cache searched and the command that fetches it.
"$TRLX" sft "${ARGS[@]}" --model_name_or_path trlx-test/not-cached --output_dir "$TMP/bad" >"$TMP/bad.log" 2>&1
rc=$?
check "[ $rc = 2 ]"
check "grep -q 'hf download trlx-test/not-cached' '$TMP/bad.log'"
check "grep -q 'HF_HUB_OFFLINE' '$TMP/bad.log'"
check "grep -q 'models--trlx-test--not-cached' '$TMP/bad.log'"
check "[ ! -e '$TMP/bad' ]"
# validate already fails on it offline; print-config still prints, with a note.
"$TRLX" validate sft "${ARGS[@]}" --model_name_or_path trlx-test/not-cached >"$TMP/vbad.log" 2>&1
check "[ $? = 2 ]"
check "grep -q 'hf download trlx-test/not-cached' '$TMP/vbad.log'"
"$TRLX" print-config sft "${ARGS[@]}" --model_name_or_path trlx-test/not-cached >"$TMP/pbad.log" 2>&1
check "[ $? = 0 ]"
check "grep -q '^# hub: model_name_or_path trlx-test/not-cached@main is not in the Hugging Face cache' '$TMP/pbad.log'"
# A revision for a local directory is refused, not ignored.
"$TRLX" validate sft "${ARGS[@]}" --model_name_or_path "$snap" --model_revision v2 >"$TMP/rev.log" 2>&1
check "[ $? = 2 ]"
check "grep -q 'no revisions' '$TMP/rev.log'"
finish
