#!/usr/bin/env bash
# The trlx command line as a user meets it: help, version, env, the config
# tools over every shipped config, exit codes and error messages.
# Usage: cli.sh <path to trlx> <source dir>
source "$(dirname "$0")/lib.sh"

# run <expected exit code> <args...>: runs trlx, keeps stdout+stderr in $OUT
run() {
  local want=$1
  shift
  OUT=$("$TRLX" "$@" 2>&1)
  local rc=$?
  if [ "$rc" != "$want" ]; then
    echo "FAIL: trlx $* exited $rc, expected $want"
    echo "$OUT" | sed 's/^/    /'
    failures=$((failures + 1))
  else
    pass=$((pass + 1))
  fi
}
# has <text>: the last output contains text
has() {
  if ! grep -qF -- "$1" <<<"$OUT"; then
    echo "FAIL: output lacks '$1'"
    echo "$OUT" | sed 's/^/    /'
    failures=$((failures + 1))
  else
    pass=$((pass + 1))
  fi
}
lacks() {
  if grep -qF -- "$1" <<<"$OUT"; then
    echo "FAIL: output has '$1'"
    echo "$OUT" | sed 's/^/    /'
    failures=$((failures + 1))
  else
    pass=$((pass + 1))
  fi
}

run 0 --help
has "Commands:"
for c in sft dpo kto reward validate print-config env docs; do has "  $c "; done
run 2
has "Usage: trlx"
run 0 --version
has "trlx 0."
run 2 dpoo --config configs/dpo.yaml
has "unknown command \`dpoo\` (did you mean \`dpo\`?)"

run 0 env
for k in LibTorch "CUDA available" NCCL MPI threads launcher "local rank" master; do has "$k"; done
OUT=$(env RANK=3 WORLD_SIZE=4 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 MASTER_ADDR=10.1.2.3 MASTER_PORT=29500 "$TRLX" env 2>&1)
has "torchrun"
has "3 of world size 4"
has "10.1.2.3:29500"
OUT=$(env OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 "$TRLX" env 2>&1)
has "Open MPI"

# Every shipped YAML validates, without warnings.
for f in configs/*.yaml accelerate_configs/*.yaml; do
  run 0 validate --config "$f"
  has "valid"
  lacks "[W]"
done

# A section as one JSON object on the command line, as TRL's scripts take
# model_init_kwargs: its keys are set; a key it does not have is named.
run 0 print-config --config configs/dpo.yaml --model_init_kwargs '{"dtype": "bfloat16"}'
has "dtype: bfloat16"
run 2 validate --config configs/distill.yaml --teacher_model_init_kwargs '{"dtypo": "float32"}'
has "teacher_model_init_kwargs.dtypo"

# Trainer help lists the config fields with their defaults.
run 0 dpo --help
has "--beta"
has "--gradient_checkpointing_kwargs.use_reentrant"
has "--loss_type"

# print-config: flags over YAML over defaults, each value with its origin.
run 0 print-config --config configs/dpo.yaml --beta 0.3 --learning_rate 2e-6
has "beta: 0.3"
has "# from --beta"
has "learning_rate: 2.0e-06"
has "loss_type: [sigmoid]"
has "# from configs/dpo.yaml:"
has "max_grad_norm: 1.0"
# The printed config is itself a valid config with the same values.
"$TRLX" print-config --config configs/dpo.yaml --beta 0.3 >"$TMP/resolved.yaml" 2>/dev/null
run 0 print-config --config "$TMP/resolved.yaml"
has "beta: 0.3"

# Config errors: exit 2, before anything runs, with file:line:col.
printf 'trainer: dpo\nbeta: 0.1\nlerning_rate: 1.0e-6\n' >"$TMP/typo.yaml"
run 2 dpo --config "$TMP/typo.yaml"
has "typo.yaml:3:1"
has "did you mean \`learning_rate\`?"
printf 'trainer: dpo\nbeta: high\n' >"$TMP/type.yaml"
run 2 validate --config "$TMP/type.yaml"
has "type.yaml:2:7: \`beta\` expects a finite number, found \`high\`"
# a number beyond a double's range is no number (it would read as infinity)
printf 'trainer: dpo\nbeta: 1e999\n' >"$TMP/huge.yaml"
run 2 validate --config "$TMP/huge.yaml"
has "huge.yaml:2:7"
has "\`beta\` expects a finite number, found \`1e999\`"
run 2 validate dpo --config configs/dpo.yaml --learning_rate 1e400
has "expects a finite number, found \`1e400\`"
run 2 validate dpo --config configs/dpo.yaml --warmup_ratio 0.1 --warmup_steps 5
has "conflicting settings"
run 2 validate dpo --config configs/dpo.yaml --fp16 --bf16 true
has "choose one mixed precision: fp16 (with loss scaling) or bf16"
# A flag given no value does not swallow the next flag; null empties a list.
run 2 validate --config configs/grpo.yaml --reward_funcs --beta 0.1
has "--reward_funcs has no value before --beta"
run 0 print-config --config configs/grpo_tools.yaml --tools null --max_tool_calling_iterations null
has "tools: []"
run 2 validate dpo --config configs/dpo.yaml --betta 0.2
has "did you mean \`--beta\`?"
run 2 validate --config configs/dpo.yaml --accelerate_config zero4
has "did you mean \`zero"
run 2 validate sft --config configs/dpo.yaml
has "says \`trainer: dpo\` but the command is trlx sft"
printf 'beta: 0.1\n' >"$TMP/anonymous.yaml"
run 2 validate --config "$TMP/anonymous.yaml"
has "which trainer"
run 0 validate dpo --config "$TMP/anonymous.yaml"
run 2 dpo --config accelerate_configs/zero3.yaml
has "is an accelerate config"
run 2 validate dpo --config "$TMP/missing.yaml"
has "missing.yaml"

# Renamed fields work, with a warning naming the new key.
printf 'trainer: rloo\nrloo_k: 4\n' >"$TMP/old.yaml"
run 0 print-config --config "$TMP/old.yaml"
has "num_generations: 4"
has "\`rloo_k\` is the old name of \`num_generations\`"

# A flag given twice (a script's default, then an override): the last one wins.
run 0 print-config --config configs/sft.yaml --max_steps 5 --max_steps 7
has "max_steps: 7"
# A list takes its values after one flag; given twice, the last list wins.
run 0 print-config --config configs/dpo.yaml --loss_type sigmoid hinge
has "loss_type: [sigmoid, hinge]"
run 0 print-config --config configs/dpo.yaml --loss_type sigmoid --loss_type hinge
has "loss_type: [hinge]"
run 0 print-config --config configs/dpo.yaml --loss_type sigmoid hinge --loss_weights 1 2 --loss_type ipo apo_zero
has "loss_type: [ipo, apo_zero]"
has "loss_weights: [1.0, 2.0]"
run 0 dpo --help
has "given twice, it takes its last value"

# Accelerate presets and users' files resolve into the distributed setup.
run 0 validate dpo --config configs/dpo.yaml --accelerate_config zero3
has "distributed: ZeRO-3"
# The precision is the training config's (the preset's mixed_precision: bf16
# does not override bf16: false), and validate says which.
run 0 validate dpo --config configs/dpo.yaml --accelerate_config zero3 --bf16 false
has "ZeRO-3; precision fp32"
run 0 validate dpo --config configs/dpo.yaml --accelerate_config tests/data/config/user_accelerate_zero3.yaml \
  --gradient_accumulation_steps 4 --max_grad_norm 1.0
has "optimizer offload cpu"
has "2 warnings"
# Its DeepSpeed accumulation must be the training config's, as transformers wants.
run 2 validate dpo --config configs/dpo.yaml --accelerate_config tests/data/config/user_accelerate_zero3.yaml
has "deepspeed_config.gradient_accumulation_steps is 4 but the training config's gradient_accumulation_steps is"

# A broken launcher environment is reported, not guessed around.
OUT=$(env RANK=5 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=h "$TRLX" env 2>&1)
rc=$?
[ "$rc" = 2 ] && pass=$((pass + 1)) || { echo "FAIL: bad launcher env exit $rc"; failures=$((failures + 1)); }
has "RANK=5 but WORLD_SIZE=2"
# Errors on any rank carry the rank.
OUT=$(env RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 MASTER_ADDR=h "$TRLX" validate --config "$TMP/typo.yaml" 2>&1)
has "[rank 1]"
has "typo.yaml:3:1"

# The reference page under docs/ is what the config tables generate.
"$TRLX" docs >"$TMP/reference.md" 2>&1
if diff -q "$TMP/reference.md" docs/config-reference.md >/dev/null; then
  pass=$((pass + 1))
else
  echo "FAIL: docs/config-reference.md is stale; regenerate it: build/apps/trlx/trlx docs > docs/config-reference.md"
  failures=$((failures + 1))
fi

finish
