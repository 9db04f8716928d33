#!/usr/bin/env bash
# TRL's own recipes (the command lines and config calls of its training
# scripts, tests/data/config/trl_recipes/, written by
# scripts/census/trl_recipes.py) through `trlx validate`: each validates, or
# fails only on settings trlx refuses by name (not built, or a value it does
# not take), never on one it does not know.
# Usage: trl_recipes.sh <path to trlx> <source dir>
source "$(dirname "$0")/lib.sh"

valid=0
refused=0
for f in tests/data/config/trl_recipes/*.args; do
  trainer=$(head -1 "$f")
  args=()
  while IFS= read -r line; do
    eval "set -- $line"
    args+=("--$1")
    shift
    args+=("$@")
  done < <(tail -n +2 "$f")
  out=$("$TRLX" validate "$trainer" "${args[@]}" 2>&1)
  rc=$?
  name=$(basename "$f" .args)
  if [ $rc = 0 ]; then
    valid=$((valid + 1))
    ok
  elif [ $rc = 2 ] && ! grep -qE 'unknown (key|flag|option)|unexpected argument' <<<"$out"; then
    refused=$((refused + 1))
    ok
    echo "$name: refused by name: $(grep -oE '`[a-z_0-9.]+: [^`]*`: not built in trlx|`[a-z_0-9.]+`[^;]*' <<<"$out" | head -3 | tr '\n' ' ')"
  else
    bad "$name ($trainer): exit $rc"
    echo "$out" | sed 's/^/    /'
  fi
done
echo "TRL recipes: $valid validate, $refused refused by name, of $(ls tests/data/config/trl_recipes/*.args | wc -l)"
check "[ $((valid + refused)) -ge 20 ]"

finish
