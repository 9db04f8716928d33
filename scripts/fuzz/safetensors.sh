#!/usr/bin/env bash
# Builds and runs the safetensors header/index fuzzer
# (tests/fuzz/fuzz_safetensors.cpp) with libFuzzer, ASan and UBSan. Compiles
# the torch-free format sources directly: no CMake, no LibTorch.
#
#   scripts/fuzz/safetensors.sh [seconds=60] [work dir=build-fuzz-safetensors]
#
# The corpus lives in <work dir>/corpus (seeded from tests/data/safetensors);
# crash reproducers land in <work dir>/artifacts. Re-run one with
#   <work dir>/fuzz_safetensors <work dir>/artifacts/crash-...
set -euo pipefail

seconds="${1:-60}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
work="${2:-$root/build-fuzz-safetensors}"
mkdir -p "$work/corpus" "$work/artifacts"

bin="$work/fuzz_safetensors"
srcs=("$root/tests/fuzz/fuzz_safetensors.cpp" "$root/lib/io/safetensors_format.cpp")
if [[ ! -x "$bin" ]] || [[ -n "$(find "${srcs[@]}" "$root"/lib/io/safetensors_format.hpp -newer "$bin" 2>/dev/null)" ]]; then
  echo "building $bin" >&2
  clang++ -std=c++20 -g -O1 -fno-omit-frame-pointer \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -I"$root/lib" "${srcs[@]}" -lfmt -o "$bin"
fi

# Seeds: the small fixture files, whole and as bare headers, and index files.
if [[ -z "$(ls -A "$work/corpus")" ]]; then
  i=0
  for f in "$root"/tests/data/safetensors/*.safetensors "$root"/tests/data/safetensors/*/*.safetensors; do
    [[ $(stat -c %s "$f") -gt 8000 ]] && continue
    cp "$f" "$work/corpus/file_$i"
    n=$(python3 -c "import struct,sys; print(struct.unpack('<Q', open(sys.argv[1],'rb').read(8))[0])" "$f")
    tail -c +9 "$f" | head -c "$n" > "$work/corpus/header_$i"
    i=$((i + 1))
  done
  cp "$root"/tests/data/safetensors/sharded/model.safetensors.index.json "$work/corpus/index"
  printf '5GB' > "$work/corpus/size"
fi

dict="$work/safetensors.dict"
cat > "$dict" <<'DICT'
"{"
"}"
"["
"]"
"\":\""
"\\u"
"\\ud83d\\ude00"
"null"
"true"
"-0"
"1e3"
"18446744073709551615"
"18446744073709551616"
"9223372036854775808"
"\"__metadata__\""
"\"format\""
"\"pt\""
"\"dtype\""
"\"shape\""
"\"data_offsets\""
"\"F32\""
"\"F16\""
"\"BF16\""
"\"I64\""
"\"BOOL\""
"\"F4\""
"\"F6_E2M3\""
"\"F8_E4M3\""
"\"weight_map\""
"\"metadata\""
"\"total_size\""
"\"../x\""
"\xef\xbb\xbf"
"\xc3\xa9"
DICT

exec "$bin" "$work/corpus" -dict="$dict" -max_total_time="$seconds" -max_len=4096 -timeout=10 \
  -rss_limit_mb=2048 -artifact_prefix="$work/artifacts/" -print_final_stats=1
