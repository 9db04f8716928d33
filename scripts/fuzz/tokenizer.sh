#!/usr/bin/env bash
# Fuzz the tokenizer.json loader and the encoder with libFuzzer + ASan/UBSan.
#   scripts/fuzz/tokenizer.sh [seconds=600] [workdir=build-fuzz-tokenizer]
# Builds with clang++ directly (no CMake); seeds the corpus with the
# hand-made tokenizer.json files of the test data.
set -euo pipefail
SECONDS_TO_RUN=${1:-600}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WORK=${2:-$ROOT/build-fuzz-tokenizer}
mkdir -p "$WORK/corpus" "$WORK/artifacts"
CXX=${CXX:-clang++}
FLAGS="-std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I$ROOT/lib $(pkg-config --cflags oniguruma)"
if [ ! -x "$WORK/fuzz_tokenizer" ] || [ -n "$(find "$ROOT/lib/text/tokenizer" "$ROOT/tests/fuzz/fuzz_tokenizer.cpp" -newer "$WORK/fuzz_tokenizer")" ]; then
  $CXX $FLAGS -o "$WORK/fuzz_tokenizer" "$ROOT/tests/fuzz/fuzz_tokenizer.cpp" \
    "$ROOT"/lib/text/tokenizer/*.cpp $(pkg-config --libs oniguruma) -lfmt
fi
for f in "$ROOT"/tests/data/tokenizer/handmade/*/tokenizer.json; do
  n=$(basename "$(dirname "$f")")
  [ "$(stat -c %s "$f")" -lt 200000 ] && cp -n "$f" "$WORK/corpus/$n.json" || true
done
TRLX_FUZZ_WRITE_SEED="$WORK/corpus/all_components.json" "$WORK/fuzz_tokenizer" -runs=0 /dev/null >/dev/null 2>&1 || true
printf 'Hello  world\n\t123 <s> \xff\xfe caf\xc3\xa9 e\xcc\x81' > "$WORK/corpus/text1"
cd "$WORK"
./fuzz_tokenizer -max_total_time="$SECONDS_TO_RUN" -max_len=65536 -rss_limit_mb=4096 -timeout=20 \
  -artifact_prefix="$WORK/artifacts/" "$WORK/corpus" > "$WORK/fuzz.log" 2>&1 || status=$?
grep -E "^#[0-9]+ +(INITED|DONE)|ERROR|SUMMARY|Done [0-9]+ runs|artifact" "$WORK/fuzz.log" | tail -n 20
exit "${status:-0}"
