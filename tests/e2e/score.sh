#!/usr/bin/env bash
# trlx score: completion log-probs equal what SFT trains on (the mean NLL over
# the fixture rows is TRL's first-step loss), rewards from a score model, errors.
# Usage: score.sh <path to trlx> <source dir>
source "$(dirname "$0")/lib.sh"

"$TRLX" score --model examples/tiny-model --input tests/data/sft/data/train.jsonl >"$TMP/s.jsonl" 2>"$TMP/err"
check "[ $? = 0 ]"
check "[ \$(wc -l <'$TMP/s.jsonl') = 8 ]"
# Mean token NLL over all rows vs TRL's logged loss on the same rows (tests/data/sft/first_step.json).
want=$(sed -n 's/.*"loss": \([0-9.e+-]*\).*/\1/p' tests/data/sft/first_step.json | head -1)
got=$(awk -F'[:,}]' '{for(i=1;i<=NF;i++){if($i ~ /"sum_logprob"/)s+=$(i+1); if($i ~ /"num_tokens"/)n+=$(i+1)}} END{printf "%.8f", -s/n}' "$TMP/s.jsonl")
check "awk 'BEGIN{d=$got-$want; if(d<0)d=-d; exit !(d < 1e-5 * $want)}'"
"$TRLX" score --model examples/tiny-model --input tests/data/sft/data/train.jsonl --tokens >"$TMP/t.jsonl" 2>/dev/null
check "grep -q '\"tokens\":\[{\"id\"' '$TMP/t.jsonl'"

# A reward model scores each row.
"$TRLX" init-model --arch llama --hidden_size 32 --num_layers 1 --num_heads 2 --head score \
  --tokenizer examples/tiny-model --out "$TMP/rm" >/dev/null 2>&1
"$TRLX" score --model "$TMP/rm" --input tests/data/sft/data/train.jsonl >"$TMP/r.jsonl" 2>/dev/null
check "[ \$(grep -c '\"reward\":' '$TMP/r.jsonl') = 8 ]"

# Bad input: exit 2, naming the file.
"$TRLX" score --model examples/tiny-model --input "$TMP/missing.jsonl" >"$TMP/o" 2>&1
check "[ $? = 2 ] && grep -q 'missing.jsonl' '$TMP/o'"
echo '{"question": "x"}' >"$TMP/bad.jsonl"
"$TRLX" score --model examples/tiny-model --input "$TMP/bad.jsonl" >"$TMP/o" 2>&1
check "[ $? = 2 ] && grep -q 'bad.jsonl:1' '$TMP/o'"
"$TRLX" score --model "$TMP" --input tests/data/sft/data/train.jsonl >"$TMP/o" 2>&1
check "[ $? = 2 ] && grep -q 'config.json' '$TMP/o'"

finish
