#!/usr/bin/env bash
# Builds and runs the dataset reader fuzzer (tests/fuzz/fuzz_data.cpp) with
# libFuzzer, ASan and UBSan. Compiles the sources directly: no CMake.
#
#   scripts/fuzz/data.sh [seconds=60] [work dir=build-fuzz-data]
#
# The corpus lives in <work dir>/corpus (seeded from tests/data/data); crash
# reproducers land in <work dir>/artifacts. Re-run one with
#   <work dir>/fuzz_data <work dir>/artifacts/crash-...
set -euo pipefail

seconds="${1:-60}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
work="${2:-$root/build-fuzz-data}"
mkdir -p "$work/corpus" "$work/artifacts"

bin="$work/fuzz_data"
srcs=("$root/tests/fuzz/fuzz_data.cpp" "$root"/lib/text/data/*.cpp "$root/lib/core/strings.cpp")
if [[ ! -x "$bin" ]] || [[ -n "$(find "${srcs[@]}" "$root"/lib/text/data/*.hpp -newer "$bin" 2>/dev/null)" ]]; then
  echo "building $bin" >&2
  clang++ -std=c++20 -g -O1 -fno-omit-frame-pointer \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -I"$root/lib" "${srcs[@]}" -lfmt -o "$bin"
fi

# Seeds: every fixture under each reader/task mode byte.
if [[ -z "$(ls -A "$work/corpus")" ]]; then
  i=0
  for f in "$root"/tests/data/data/*.jsonl; do
    [[ $(stat -c %s "$f") -gt 4000 ]] && continue
    for mode in 00 01 04 08 0a 0c 10 41; do
      { printf "\\x$mode"; cat "$f"; } > "$work/corpus/seed_${i}_$mode"
    done
    i=$((i + 1))
  done
  printf '\x01[{"prompt": "p", "chosen": "a b", "rejected": "a c"}]' > "$work/corpus/seed_array"
  printf '\x41{"train": [{"text": "x"}], "test": [{"text": "y"}]}' > "$work/corpus/seed_split"
fi

dict="$work/json.dict"
cat > "$dict" <<'EOF'
"{"
"}"
"["
"]"
"\":\""
"\\u"
"\\ud83d\\ude00"
"true"
"false"
"null"
"1e999"
"-0.0"
"\"role\""
"\"content\""
"\"prompt\""
"\"chosen\""
"\"rejected\""
"\"completion\""
"\"label\""
"\"margin\""
"\"messages\""
"\"text\""
"\"tool_calls\""
"\"type\""
"\"conversations\""
"\"from\""
"\"value\""
"\"train\""
"\"data\""
"\xef\xbb\xbf"
"\xc3\xa9"
"\xf0\x9f\x98\x80"
EOF

exec "$bin" "$work/corpus" -dict="$dict" -max_total_time="$seconds" -max_len=4096 -timeout=10 \
  -rss_limit_mb=2048 -artifact_prefix="$work/artifacts/" -print_final_stats=1
