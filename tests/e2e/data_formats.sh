#!/usr/bin/env bash
# The CLI on Parquet and Arrow datasets: the same rows as JSON Lines give the
# same previewed training examples; damaged files exit 2 naming file, row
# group and column; the binary finds Apache Arrow without LD_LIBRARY_PATH.
source "$(dirname "$0")/lib.sh" "$@"
F=tests/data/formats

preview() {  # preview DATASET OUT: SFT examples of DATASET as JSON lines
  env -u LD_LIBRARY_PATH "$TRLX" preview sft --config configs/sft.yaml --dataset_name "$1" --eval_strategy no \
    --num_examples 10 --json >"$2" 2>"$2.err"
}

preview "$F/prompt_completion.parquet" "$TMP/parquet.jsonl"
rc=$?
if [ $rc = 2 ] && grep -q "built without Apache Arrow" "$TMP/parquet.jsonl.err"; then
  # A build without pyarrow refuses these files cleanly.
  check "grep -q 'prompt_completion.parquet: this trlx was built without Apache Arrow' '$TMP/parquet.jsonl.err'"
  finish
  exit $?
fi
check "[ $rc = 0 ]" || cat "$TMP/parquet.jsonl.err"
preview "$F/prompt_completion.jsonl" "$TMP/jsonl.jsonl"
check "[ $? = 0 ]"
preview "$F/prompt_completion_arrow" "$TMP/arrow.jsonl"
check "[ $? = 0 ]"
check "[ \$(wc -l <'$TMP/jsonl.jsonl') = 9 ]"  # row 8: truncation leaves no completion token, SFT drops it
check "cmp -s '$TMP/jsonl.jsonl' '$TMP/parquet.jsonl'"
check "cmp -s '$TMP/jsonl.jsonl' '$TMP/arrow.jsonl'"
preview "$F/conversational.parquet" "$TMP/conv_parquet.jsonl"
preview "$F/conversational.jsonl" "$TMP/conv_jsonl.jsonl"
check "[ \$(wc -l <'$TMP/conv_jsonl.jsonl') = 6 ] && cmp -s '$TMP/conv_jsonl.jsonl' '$TMP/conv_parquet.jsonl'"

# Damaged and unmappable files: exit 2, the file, row group and column named.
preview "$F/errors/corrupt.parquet" "$TMP/bad.jsonl"
check "[ $? = 2 ]"
check "grep -q 'corrupt.parquet: row group 1, column \"completion\": cannot be read' '$TMP/bad.jsonl.err'"
preview "$F/errors/map.parquet" "$TMP/map.jsonl"
check "[ $? = 2 ] && grep -q 'map.parquet: row group 0, column \"attrs\"' '$TMP/map.jsonl.err'"
preview "$F/errors/no_state" "$TMP/nostate.jsonl"
check "[ $? = 2 ] && grep -q 'without state.json' '$TMP/nostate.jsonl.err'"

finish
