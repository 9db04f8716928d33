#!/usr/bin/env bash
# `trlx tokenize` and `trlx render-template` against golden output from
# transformers (scripts/fixtures/inspect_fixtures.py -> tests/data/inspect/).
# JSON lines are compared as text: trlx prints them in the same compact form
# and key order as the generator. The Qwen3 and Llama-3 cases need the shared
# tokenizers ($TRLX_SHARED_DIR/fixtures/tokenizers) and are skipped without them;
# the small tokenizer in tests/data/inspect/tiny covers the rest.
# Usage: inspect.sh <path to trlx> <source dir>
source "$(dirname "$0")/lib.sh"
D=$SRC/tests/data/inspect

fail() {
  echo "FAIL: $1"
  failures=$((failures + 1))
}

# run <expected exit code> <args...>: stdout in $TMP/out, stderr in $TMP/err,
# both in $OUT
run() {
  local want=$1
  shift
  "$TRLX" "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  OUT=$(cat "$TMP/out" "$TMP/err")
  LAST="trlx $*"
  if [ "$rc" != "$want" ]; then
    fail "$LAST exited $rc, expected $want"
    echo "$OUT" | head -20 | sed 's/^/    /'
  else
    pass=$((pass + 1))
  fi
}
# has <text>: the last output (stdout or stderr) contains text
has() {
  if ! grep -qF -- "$1" <<<"$OUT"; then
    fail "$LAST: output lacks '$1'"
    echo "$OUT" | head -20 | sed 's/^/    /'
  else
    pass=$((pass + 1))
  fi
}
lacks() {
  if grep -qF -- "$1" <<<"$OUT"; then
    fail "$LAST: output has '$1'"
  else
    pass=$((pass + 1))
  fi
}
# same <expected file>: the last stdout is byte for byte that file
same() {
  if ! cmp -s "$TMP/out" "$1"; then
    fail "$LAST: stdout differs from $1"
    diff "$1" "$TMP/out" | head -10 | sed 's/^/    /'
  else
    pass=$((pass + 1))
  fi
}
# lines <file> <sed range>: a slice of a fixture, for comparing with `same`
lines() { sed -n "$2p" "$1" >"$TMP/want"; }

run 0 tokenize --help
has "--add_special_tokens"
run 0 render-template --help
has "--chat_template"

# --- the golden comparisons for one tokenizer: tokenize, decode, render with
# the {% generation %} template of tests/data/inspect
check_tokenizer() {
  local name=$1 dir=$2
  run 0 tokenize --tokenizer "$dir" --input "$D/texts.jsonl" --json
  same "$D/${name}_tokenize.jsonl"
  run 0 tokenize --tokenizer "$dir" --input "$D/texts.jsonl" --json --add_special_tokens false
  same "$D/${name}_tokenize_nospecial.jsonl"
  # --text gives the same lines as --input
  run 0 tokenize --tokenizer "$dir" --json --text "Hello, world!" --text "Numbers 12345 and 3.14159"
  lines "$D/${name}_tokenize.jsonl" '1p;6'
  same "$TMP/want"
  run 0 tokenize --tokenizer "$dir" --json --text "naïve café 日本語 😀 done" --text $'line one\nline two\t tabbed\n\n'
  lines "$D/${name}_tokenize.jsonl" '3,4'
  same "$TMP/want"
  # decode the golden ids back (the tokenize fixture is itself the input)
  run 0 tokenize --tokenizer "$dir" --decode --json --input "$D/${name}_tokenize.jsonl" --field ids
  same "$D/${name}_decode.jsonl"
  run 0 tokenize --tokenizer "$dir" --decode --json --input "$D/${name}_tokenize.jsonl" --field ids --skip_special_tokens
  same "$D/${name}_decode_skip.jsonl"
  local ids
  ids=$(sed -n '5s/^{"ids":\[\([0-9,]*\)\].*/\1/p' "$D/${name}_decode.jsonl")
  run 0 tokenize --tokenizer "$dir" --decode --json --ids "$ids"
  lines "$D/${name}_decode.jsonl" 5
  same "$TMP/want"
  run 0 render-template --tokenizer "$dir" --messages "$D/conversation.json" --chat_template "$D/gen_template.jinja" --json
  lines "$D/${name}_render_gen.jsonl" 1
  same "$TMP/want"
  lacks "generation %} block"
  run 0 render-template --tokenizer "$dir" --messages "$D/conversations.jsonl" --chat_template "$D/gen_template.jinja" --json
  lines "$D/${name}_render_gen.jsonl" '2,3'
  same "$TMP/want"
  # tokens that cross a span's start or end, or an empty span, count as assistant tokens
  run 0 render-template --tokenizer "$dir" --messages "$D/straddle_conversation.json" --chat_template "$D/straddle_template.jinja" --json
  same "$D/${name}_render_straddle.jsonl"
}

# --- the small tokenizer in the repository
TINY=$D/tiny
check_tokenizer tiny "$TINY"
# its tokenizer_config.json carries the {% generation %} template itself
run 0 render-template --tokenizer "$TINY" --messages "$D/conversation.json" --json
lines "$D/tiny_render_gen.jsonl" 1
same "$TMP/want"
# the mask is not trivially all 0 or all 1
has '"assistant_masks":[0,'
has '1,1,1'

# plain output: readable tokens, [separated] when not on a terminal
run 0 tokenize --tokenizer "$TINY" --text "Hello, world!"
has "11 tokens"
has "ids:    0 284 280 15 224 90 82 85 79 71 4"
has "tokens: [<s>][He][llo][,][Ġ][w][o][r][l][d][!]"
has "text:   [<s>][He][llo][,][ ][w][o][r][l][d][!]"
lacks $'\033['
run 0 tokenize --tokenizer "$TINY" --text $'a\tb\n' --add_special_tokens false
has 'text:   [a][\t][b][\n]'
run 0 tokenize --tokenizer "$TINY" --decode --ids 0,284,280,15
has "<s>Hello,"
# a bracketed value stays one value (CLI11 would split it into a list)
run 0 tokenize --tokenizer "$TINY" --text "[INST] hi [/INST]" --json
has '"text":"[INST] hi [/INST]"'
[ "$(wc -l <"$TMP/out")" = 1 ] && pass=$((pass + 1)) || fail "--text [INST] hi [/INST] gave more than one input"
run 0 tokenize --tokenizer "$TINY" --decode --ids "[0, 284, 280, 15]" --skip_special_tokens
has "Hello,"
lacks "<s>"
# an id the tokenizer does not have is refused, not dropped from the text
run 2 tokenize --tokenizer "$TINY" --decode --ids 0,99999,15
has "token id 99999, outside the tokenizer's vocabulary"
run 2 tokenize --tokenizer "$TINY" --decode --ids 0,-3
has "token id -3"
run 0 render-template --tokenizer "$TINY" --messages "$D/conversation.json" --add_generation_prompt
has "<|im_start|>assistant"
has "Tokyo (東京).<|im_end|>"
lacks '"ids"'
tail -c 23 "$TMP/out" | grep -qF $'<|im_start|>assistant\n' && pass=$((pass + 1)) || fail "add_generation_prompt: no assistant header at the end"

# a chat_template.jinja file wins over tokenizer_config.json, as in transformers
mkdir -p "$TMP/jinja"
cp "$TINY/tokenizer.json" "$TMP/jinja/"
cp "$D/gen_template.jinja" "$TMP/jinja/chat_template.jinja"
run 0 render-template --tokenizer "$TMP/jinja" --messages "$D/conversation.json" --json
lines "$D/tiny_render_gen.jsonl" 1
same "$TMP/want"

# a template without {% generation %}: masks all 0 and a warning
printf '%s' "{% for m in messages %}<|im_start|>{{ m.role }}{{ '\n' }}{{ m.content }}<|im_end|>{{ '\n' }}{% endfor %}" >"$TMP/plain.jinja"
run 0 render-template --tokenizer "$TINY" --messages "$D/conversation.json" --chat_template "$TMP/plain.jinja" --json
has "no {% generation %} block"
has '"generation_spans":[]'
lacks '"assistant_masks":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,1'
grep -q '"assistant_masks":\[0\(,0\)*\]' "$TMP/out" && pass=$((pass + 1)) || fail "masks not all 0 without a generation block"

# --- bad input: exit 2, naming the file and line
printf '{"text":"ok"}\n{"text": oops}\n' >"$TMP/bad.jsonl"
run 2 tokenize --tokenizer "$TINY" --input "$TMP/bad.jsonl"
has "bad.jsonl:2: not valid JSON"
run 2 tokenize --tokenizer "$TINY" --input "$D/texts.jsonl" --field prompt
has "texts.jsonl:1: no field \`prompt\`"
run 2 tokenize --tokenizer "$TINY" --input "$D/texts.jsonl" --field id
has "texts.jsonl:1: field \`id\` must be a string"
printf '"fine"\n\n[1,2]\n' >"$TMP/list.jsonl"
run 2 tokenize --tokenizer "$TINY" --input "$TMP/list.jsonl"
has "list.jsonl:3: expected a string"
run 2 tokenize --tokenizer "$TINY" --input "$TMP/missing.jsonl"
has "missing.jsonl: cannot read"
run 2 tokenize --tokenizer "$TINY" --input "$TMP"
has "is a directory"
run 2 tokenize --tokenizer "$TINY" --decode --input "$D/texts.jsonl"
has "texts.jsonl:1: no field \`ids\`"
printf '{"ids":[1,2]}\n{"ids":[1,"x"]}\n' >"$TMP/ids.jsonl"
run 2 tokenize --tokenizer "$TINY" --decode --input "$TMP/ids.jsonl"
has "ids.jsonl:2"
run 2 tokenize --tokenizer "$TINY" --decode --ids 1,x,3
has "\`x\` is not a token id"
run 2 tokenize --tokenizer "$TINY"
has "nothing to tokenize"
run 2 tokenize --text hi
has "--tokenizer"
mkdir -p "$TMP/empty"
run 2 tokenize --tokenizer "$TMP/empty" --text hi
has "no tokenizer.json"
has "$TMP/empty"
run 2 tokenize --tokenizer "$TMP/missing_dir" --text hi
has "no such directory"
run 2 tokenize --tokenizer "$TINY/tokenizer.json" --text hi
has "is a file, not a directory"
mkdir -p "$TMP/notpl"
cp "$TINY/tokenizer.json" "$TMP/notpl/"
run 2 render-template --tokenizer "$TMP/notpl" --messages "$D/conversation.json"
has "has no chat template"
has "--chat_template"
run 2 render-template --tokenizer "$TINY" --messages "$TMP/missing.json"
has "missing.json: cannot read"
printf '[{"role": "user", "content": "hi"}' >"$TMP/trunc.json"
run 2 render-template --tokenizer "$TINY" --messages "$TMP/trunc.json"
has "trunc.json: not valid JSON"
printf '[{"role":"user","content":"hi"}]\n{"prompt":"x"}\n' >"$TMP/convs.jsonl"
run 2 render-template --tokenizer "$TINY" --messages "$TMP/convs.jsonl"
has "convs.jsonl:2: expected a list of messages or an object with a \`messages\` key"
printf '[{"role":"user","content":"hi"}]\n[{"role":"user",\n' >"$TMP/convs2.jsonl"
run 2 render-template --tokenizer "$TINY" --messages "$TMP/convs2.jsonl"
has "convs2.jsonl:2: not valid JSON"
run 2 render-template --tokenizer "$TINY" --messages "$D/conversation.json" --chat_template "$TMP/none.jinja"
has "none.jinja: cannot read"
printf '{%% for m in messages %%}{{ m.content | nosuchfilter }}{%% endfor %%}' >"$TMP/badfilter.jinja"
run 2 render-template --tokenizer "$TINY" --messages "$D/conversation.json" --chat_template "$TMP/badfilter.jinja"
has "badfilter.jinja"

# --- the real tokenizers (shared fixtures)
SHARED=${TRLX_SHARED_DIR:-}
if [ -z "$SHARED" ] || [ ! -f "$SHARED/fixtures/tokenizers/qwen3/tokenizer.json" ]; then
  echo "skipped: Qwen3 and Llama-3 cases (set TRLX_SHARED_DIR to the folder holding fixtures/tokenizers)"
else
  TOK=$SHARED/fixtures/tokenizers
  check_tokenizer qwen3 "$TOK/qwen3"
  check_tokenizer llama3 "$TOK/llama3"
  # Qwen3's own template has no {% generation %} block
  run 0 render-template --tokenizer "$TOK/qwen3" --messages "$D/conversation.json" --add_generation_prompt --json
  same "$D/qwen3_render_stock.jsonl"
  has "no {% generation %} block"
  run 0 render-template --tokenizer "$TOK/qwen3" --messages "$D/conversation.json" --add_generation_prompt
  same "$D/qwen3_render_stock.txt"
  lacks "generation %} block"
  # A row's tools reach the system turn and its chat_template_kwargs win over
  # --chat_template_kwargs (enable_thinking false: the empty thinking block)
  printf '%s\n' '{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "add_numbers"}}], "chat_template_kwargs": {"enable_thinking": false}}' >"$TMP/tool_row.jsonl"
  run 0 render-template --tokenizer "$TOK/qwen3" --messages "$TMP/tool_row.jsonl" --add_generation_prompt \
    --chat_template_kwargs '{"enable_thinking": true}'
  has '"name": "add_numbers"'
  has "<think>"
  # Without the row's switch the CLI's applies (thinking on: no empty block)
  printf '%s\n' '{"messages": [{"role": "user", "content": "hi"}]}' >"$TMP/plain_row.jsonl"
  run 0 render-template --tokenizer "$TOK/qwen3" --messages "$TMP/plain_row.jsonl" --add_generation_prompt \
    --chat_template_kwargs '{"enable_thinking": true}'
  lacks "<think>"
  # Llama-3's template writes bos_token from the tokenizer
  run 0 render-template --tokenizer "$TOK/llama3" --messages "$D/conversation.json"
  has "<|begin_of_text|><|start_header_id|>system<|end_header_id|>"
fi

finish
