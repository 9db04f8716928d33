#!/usr/bin/env bash
# trlx generate end to end on the shipped tiny model: several samples per
# prompt, token ids and finish reasons in --json, batches smaller than the
# rows (continuous batching) giving the same greedy completions, seeded
# sampling, and clear errors (exit 2) for bad settings.
# Usage: generate.sh <path to trlx> <source dir>
source "$(dirname "$0")/lib.sh"
M=examples/tiny-model

"$TRLX" generate --model $M --prompt "What is 3 plus 4?" --prompt "Add 10 and 20." --num_return_sequences 3 \
  --max_new_tokens 6 --do_sample --seed 7 --json >"$TMP/s.jsonl" 2>"$TMP/s.log"
check "[ \$? = 0 ]"
check "[ \$(wc -l <'$TMP/s.jsonl') = 6 ]"
check "python3 -c \"
import json
rows = [json.loads(l) for l in open('$TMP/s.jsonl')]
assert [r['sample'] for r in rows] == [0, 1, 2, 0, 1, 2], rows
for r in rows:
    assert r['finish_reason'] in ('eos', 'stop', 'length'), r
    assert 1 <= len(r['completion_ids']) <= 6 and r['prompt_ids'], r
    assert r['finish_reason'] != 'length' or len(r['completion_ids']) == 6, r
\""
# Seeded: the same seed gives the same samples.
"$TRLX" generate --model $M --prompt "What is 3 plus 4?" --prompt "Add 10 and 20." --num_return_sequences 3 \
  --max_new_tokens 6 --do_sample --seed 7 --json >"$TMP/s2.jsonl" 2>/dev/null
check "cmp -s '$TMP/s.jsonl' '$TMP/s2.jsonl'"

# Greedy through one slot (each prompt waits for the one before) equals all at once.
printf '{"prompt": "What is %s plus %s?"}\n' 1 2 30 4 5 66 7 8 >"$TMP/p.jsonl"
"$TRLX" generate --model $M --prompts "$TMP/p.jsonl" --max_new_tokens 8 --json >"$TMP/all.jsonl" 2>/dev/null
"$TRLX" generate --model $M --prompts "$TMP/p.jsonl" --max_new_tokens 8 --batch_size 1 --json >"$TMP/one.jsonl" 2>/dev/null
check "[ \$(wc -l <'$TMP/all.jsonl') = 4 ] && cmp -s '$TMP/all.jsonl' '$TMP/one.jsonl'"

# Bad settings: exit 2 and a message naming the field.
expect_error() {  # expect_error <text in the message> <flags...>
  local want=$1; shift
  "$TRLX" generate --model $M --prompt "Hi" "$@" >/dev/null 2>"$TMP/err.log"
  local rc=$?
  check "[ $rc = 2 ] && grep -q -- '$want' '$TMP/err.log'"
}
expect_error "max_new_tokens" --max_new_tokens 0
expect_error "top_p" --top_p 1.5 --do_sample
expect_error "stop_token_ids" --stop_token_ids 100000
expect_error "context" --max_new_tokens 100000
expect_error "more than 2^63" --max_new_tokens 9223372036854775807

# A tokenizer with an id beyond the model's embeddings: refused before any
# forward, naming the file, the token and both sizes (sft, score, generate).
cp -r $M "$TMP/wrongtok"
python3 - "$TMP/wrongtok/tokenizer.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
t["model"]["vocab"]["\u0120plus"] = 100000
json.dump(t, open(sys.argv[1], "w"))
PY
"$TRLX" generate --model "$TMP/wrongtok" --prompt "Hi" >/dev/null 2>"$TMP/wt1.log"
check "[ \$? = 2 ] && grep -q 'tokenizer.json: token .*plus. has id 100000, but the model in .* has 304 token embeddings' '$TMP/wt1.log'"
printf '{"prompt": "What is 1 plus 2?", "completion": " 3"}\n' >"$TMP/rows.jsonl"
"$TRLX" score --model "$TMP/wrongtok" --input "$TMP/rows.jsonl" >/dev/null 2>"$TMP/wt2.log"
check "[ \$? = 2 ] && grep -q 'has id 100000' '$TMP/wt2.log'"
"$TRLX" sft --config configs/sft.yaml --model_name_or_path "$TMP/wrongtok" --max_steps 1 --output_dir "$TMP/wt" \
  >/dev/null 2>"$TMP/wt3.log"
check "[ \$? = 2 ] && grep -q 'has id 100000' '$TMP/wt3.log'"

# An eos_token the vocabulary lacks, and an empty vocabulary: named when the
# tokenizer is read (exit 2), not met later as literal text or a length error.
cp -r examples/tiny-model "$TMP/noeos"
cp -r examples/tiny-model "$TMP/novocab"
python3 - "$TMP/noeos/tokenizer_config.json" "$TMP/novocab/tokenizer.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["eos_token"] = "<|no_such_eos|>"
json.dump(c, open(sys.argv[1], "w"))
t = json.load(open(sys.argv[2]))
t["model"]["vocab"], t["model"]["merges"], t["added_tokens"] = {}, [], []
json.dump(t, open(sys.argv[2], "w"))
PY
"$TRLX" sft --config configs/sft.yaml --model_name_or_path "$TMP/noeos" --max_steps 1 --output_dir "$TMP/ne" \
  >/dev/null 2>"$TMP/ne.log"
check "[ \$? = 2 ] && grep -q 'eos_token.*no_such_eos.* is not in the vocabulary of .*noeos/tokenizer.json' '$TMP/ne.log'"
"$TRLX" generate --model "$TMP/novocab" --prompt "Hi" >/dev/null 2>"$TMP/nv.log"
check "[ \$? = 2 ] && grep -q 'novocab/tokenizer.json: the vocabulary is empty' '$TMP/nv.log'"
finish
