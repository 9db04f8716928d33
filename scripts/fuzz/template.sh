#!/usr/bin/env bash
# Builds and runs the chat-template fuzzer (tests/fuzz/fuzz_template.cpp) with
# libFuzzer, ASan and UBSan. Compiles the sources directly: no CMake.
#
#   scripts/fuzz/template.sh [seconds=60] [work dir=build-fuzz-template]
#
# The corpus lives in <work dir>/corpus (seeded from the templates under
# tests/data/template and, when TRLX_SHARED_DIR is set, the real tokenizer
# chat templates); crash reproducers land in <work dir>/artifacts. Re-run one
# with  <work dir>/fuzz_template <work dir>/artifacts/crash-...
#
# Differential check against jinja2 (needs python3 with transformers):
#   scripts/fuzz/template.sh diff [dir=<work dir>/corpus]
# renders every input in dir (template [\0 context JSON]; a dir of *.jinja
# chat templates is rendered with a set of conversations instead) with both
# trlx and transformers' jinja2 setup and reports where they differ.
set -euo pipefail

if [[ "${1:-}" == "diff" ]]; then
  root="$(cd "$(dirname "$0")/../.." && pwd)"
  work="$root/build-fuzz-template"
  corpus="${2:-$work/corpus}"
  mkdir -p "$work"
  render="$work/render_template"
  clang++ -std=c++20 -O1 -DTRLX_TEMPLATE_RENDER_MAIN -fsanitize=address,undefined -fno-sanitize-recover=undefined \
    -I"$root/lib" "$root/tests/fuzz/fuzz_template.cpp" "$root"/lib/text/template/*.cpp -lfmt -o "$render"
  exec python3 "$root/scripts/fixtures/template_fixtures.py" --diff "$corpus" --render-bin "$render"
fi

seconds="${1:-60}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
work="${2:-$root/build-fuzz-template}"
mkdir -p "$work/corpus" "$work/artifacts"

bin="$work/fuzz_template"
srcs=("$root/tests/fuzz/fuzz_template.cpp" "$root"/lib/text/template/*.cpp)
if [[ ! -x "$bin" ]] || [[ -n "$(find "${srcs[@]}" "$root"/lib/text/template/*.hpp -newer "$bin" 2>/dev/null)" ]]; then
  echo "building $bin" >&2
  clang++ -std=c++20 -g -O1 -fno-omit-frame-pointer \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -I"$root/lib" "${srcs[@]}" -lfmt -o "$bin"
fi

# Seeds: every feature template and chat template the tests use.
if [[ -z "$(ls -A "$work/corpus")" ]]; then
  python3 - "$root" "$work/corpus" "${TRLX_SHARED_DIR:-}" <<'PY'
import json, os, sys
root, corpus, shared = sys.argv[1:4]
data = os.path.join(root, "tests", "data", "template")
n = 0
def put(text):
    global n
    with open(os.path.join(corpus, f"seed_{n}"), "wb") as f:
        f.write(text.encode())
    n += 1
for case in json.load(open(os.path.join(data, "features.json"), encoding="utf-8")):
    ctx = case["context"]
    put(case["template"] + ("\0" + json.dumps(ctx, ensure_ascii=False) if ctx else ""))
tdir = os.path.join(data, "templates")
for name in sorted(os.listdir(tdir)):
    put(open(os.path.join(tdir, name), encoding="utf-8").read())
if shared:
    for model in ("llama3", "qwen3"):
        p = os.path.join(shared, "fixtures", "tokenizers", model, "tokenizer_config.json")
        if os.path.exists(p):
            put(json.load(open(p, encoding="utf-8"))["chat_template"])
PY
fi

dict="$work/jinja.dict"
cat > "$dict" <<'DICT'
"{%"
"%}"
"{{"
"}}"
"{#"
"#}"
"{%-"
"-%}"
"{{-"
"-}}"
"{%+"
"+%}"
"for"
"endfor"
"if"
"elif"
"else"
"endif"
"set"
"endset"
"macro"
"endmacro"
"call"
"endcall"
"filter"
"endfilter"
"with"
"endwith"
"raw"
"endraw"
"generation"
"endgeneration"
"break"
"continue"
"namespace("
"loop.index"
"loop.last"
"loop.previtem"
"caller()"
"messages"
"message.content"
"tools"
" in "
" not in "
" is "
" is not "
" and "
" or "
"not "
"defined"
"none"
"true"
"|tojson(indent=2)"
"|trim"
"|length"
"|join(', ')"
"|map(attribute='role')"
"|selectattr('role', 'equalto', 'user')"
"|dictsort"
"|default('x', true)"
"|round(2)"
"|indent(4)"
"|list"
".split('x')"
".strip()"
".format("
".startswith("
".items()"
"[::-1]"
"[1:]"
"**"
"//"
"~"
"raise_exception('e')"
"range(100)"
"'%s' % "
"\\u00e9"
"\\x41"
"1e-05"
"0x1F"
DICT

echo "fuzzing for ${seconds}s; corpus $work/corpus" >&2
"$bin" "$work/corpus" -dict="$dict" -artifact_prefix="$work/artifacts/" \
  -max_total_time="$seconds" -max_len=8192 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
