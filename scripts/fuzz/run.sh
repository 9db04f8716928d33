#!/usr/bin/env bash
# Builds and runs trlx's libFuzzer targets (tests/fuzz/fuzz_<target>.cpp) under
# AddressSanitizer and UndefinedBehaviorSanitizer. Every target goes through
# this one script: build flags, seeding, running, corpus merging and figures.
#
#   scripts/fuzz/run.sh <target> [--runs N | --seconds S]   fuzz one target
#   scripts/fuzz/run.sh all [--runs N | --seconds S]        each target in turn, then a table
#   scripts/fuzz/run.sh build <target>|all                  build only
#   scripts/fuzz/run.sh repro <target> <file>...            run the target on inputs (a crash's)
#   scripts/fuzz/run.sh template-diff [dir]                 chat templates: trlx against jinja2
#   scripts/fuzz/run.sh list                                the targets and what they read
#
# Default: --seconds 60. Targets: config (trainer config YAML and accelerate
# config YAML), safetensors (header and shard index), tokenizer (tokenizer.json
# and encoding), template (chat templates), data (JSON / JSON Lines readers
# and shaping), columnar (Parquet, Arrow, .jsonl.gz/.zst readers),
# math_answer (the accuracy rewards' answer checker on model completions).
#
# Build: clang++ (CXX overrides) -std=c++20 -O1 -g -fsanitize=fuzzer,address,
# undefined -fno-sanitize-recover=undefined, straight from the sources (no
# CMake), into build-fuzz/<target>/; only what changed is recompiled (ccache
# is used when installed).
#
# Corpus: tests/fuzz/corpus/<target>/ is kept in the repository. libFuzzer runs
# with a scratch directory first (new inputs land there) and that corpus
# second; afterwards both are merged (-merge=1) back into the corpus, so it
# keeps the smallest set of inputs with the coverage of both. Inputs longer
# than the target's -max_len (4 to 16 KiB) are dropped, and the largest ones
# while the corpus holds over 1 MiB. When the corpus is empty, seeds are made
# from the test data (build-fuzz/<target>/seeds). Dictionaries:
# tests/fuzz/dict/<target>.dict.
#
# Figures, per target: executions, cov (libFuzzer's covered edges), ft
# (features), corpus files and bytes, crashes, wall seconds. A crash stops
# that target, leaves the reproducer in build-fuzz/<target>/artifacts/ and
# makes the script exit 1; re-run one with
#   scripts/fuzz/run.sh repro <target> build-fuzz/<target>/artifacts/crash-...
# (libFuzzer flags may follow the files: -minimize_crash=1 -runs=10000 shrinks
# it). The full libFuzzer output is in build-fuzz/<target>/fuzz.log.
#
# Environment: CXX (clang++), FUZZ_JOBS (parallel compiles, 2), FUZZ_NICE
# (niceness of compiles and runs, 15), FUZZ_CORPORA (another directory than
# tests/fuzz/corpus to hold the <target>/ corpora), TRLX_ARROW_INCLUDE_DIR /
# TRLX_ARROW_LIB_DIR (Arrow C++ for the columnar target; default: the pyarrow
# of python3), TRLX_SHARED_DIR (template seeds also take the shared
# fixtures' real chat templates).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="$root/build-fuzz"
targets=(config safetensors tokenizer template data columnar math_answer)
CXX="${CXX:-clang++}"
jobs="${FUZZ_JOBS:-2}"
niceness="${FUZZ_NICE:-15}"
corpora="${FUZZ_CORPORA:-$root/tests/fuzz/corpus}"
corpus_budget=1048576  # bytes per target

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//'
  exit "${1:-2}"
}
die() {
  echo "run.sh: $*" >&2
  exit 2
}
is_target() {
  local t
  for t in "${targets[@]}"; do [[ "$t" == "$1" ]] && return 0; done
  return 1
}

# --- the targets -------------------------------------------------------------
# define <name> sets: srcs (sources), cflags (defines, includes), libs (link
# arguments), kind (fuzzer | program), max_len (longest input, and the
# largest file the corpus keeps), timeout (s), rss_mb, malloc_mb, asan (ASAN_OPTIONS).
# Every target links lib/core (errors, logging through Debian's spdlog, strings).
define() {
  srcs=("$root/tests/fuzz/fuzz_$1.cpp" "$root"/lib/core/*.cpp)
  # shellcheck disable=SC2207
  cflags=($(pkg-config --cflags spdlog 2>/dev/null || echo -DSPDLOG_COMPILED_LIB -DSPDLOG_FMT_EXTERNAL)
          -DTRLX_VERSION=\"fuzz\" -DTRLX_SOURCE_DIR=\""$root"\")
  libs=(-lspdlog -lfmt -pthread)
  kind=fuzzer
  max_len=4096
  timeout=10
  rss_mb=2048
  asan=""
  malloc_mb=0  # -malloc_limit_mb; 0: the same as -rss_limit_mb
  case "$1" in
    config)
      local f
      srcs+=("$root"/lib/dist/env/*.cpp "$root"/lib/trainers/*_config.cpp)
      for f in "$root"/lib/config/*.cpp; do
        [[ "$f" == */hub_paths.cpp ]] || srcs+=("$f")  # downloads through libcurl: not fuzzed
      done
      srcs+=("$out/config/gen/accelerate_presets.cpp")
      libs=(-lyaml-cpp "${libs[@]}")
      ;;
    safetensors)
      srcs+=("$root/lib/io/safetensors_format.cpp")
      ;;
    tokenizer)
      srcs+=("$root"/lib/text/tokenizer/*.cpp)
      # shellcheck disable=SC2207
      cflags+=($(pkg-config --cflags oniguruma))
      # shellcheck disable=SC2207
      libs=($(pkg-config --libs oniguruma) "${libs[@]}")
      max_len=16384  # the hand-made tokenizer.json files of up to ~7 KB, mutated
      timeout=20
      rss_mb=4096
      ;;
    template)
      srcs+=("$root"/lib/text/template/*.cpp)
      max_len=8192
      ;;
    template-render)  # the renderer of template-diff: fuzz_template.cpp's main()
      srcs=("$root/tests/fuzz/fuzz_template.cpp" "$root"/lib/core/*.cpp "$root"/lib/text/template/*.cpp)
      cflags+=(-DTRLX_TEMPLATE_RENDER_MAIN)
      kind=program
      ;;
    data)
      # Built without Arrow: columnar.cpp is then the stub that refuses Parquet/Arrow.
      srcs+=("$root"/lib/text/data/*.cpp)
      ;;
    columnar)
      arrow_paths
      srcs+=("$root"/lib/text/data/*.cpp)
      cflags+=(-DTRLX_WITH_ARROW=1 -isystem "$arrow_inc")
      libs=("$arrow_libparquet" "$arrow_libarrow" "-Wl,-rpath,$arrow_lib" "${libs[@]}")
      max_len=16384
      # Arrow allocates what a file's headers ask for (e.g. a compressed IPC
      # buffer's uncompressed length) and turns a failed allocation into an
      # error Status (trlx: InputError). Under ASan a request over 1 GiB
      # fails (returns null) instead of aborting, as a release build's would
      # on a machine without that memory; trlx's own `new` then throws
      # std::bad_alloc, which is still a crash here.
      asan="allocator_may_return_null=1:max_allocation_size_mb=1024"
      ;;
    math_answer)
      srcs+=("$root"/lib/rewards/math_answer/*.cpp)
      ;;
    *) die "unknown target '$1' (targets: ${targets[*]})" ;;
  esac
}

# Arrow C++ from the pyarrow wheel, as cmake/FindPyArrow.cmake finds it.
arrow_paths() {
  arrow_inc="${TRLX_ARROW_INCLUDE_DIR:-}"
  arrow_lib="${TRLX_ARROW_LIB_DIR:-}"
  if [[ -z "$arrow_inc" || -z "$arrow_lib" ]]; then
    local found
    found="$(python3 -c 'import pyarrow as pa; print(pa.get_include()); print(pa.get_library_dirs()[0])' 2>/dev/null)" ||
      die "columnar: needs Arrow C++: pip install pyarrow, or set TRLX_ARROW_INCLUDE_DIR and TRLX_ARROW_LIB_DIR"
    arrow_inc="${arrow_inc:-$(sed -n 1p <<<"$found")}"
    arrow_lib="${arrow_lib:-$(sed -n 2p <<<"$found")}"
  fi
  # The wheel names its libraries lib<name>.so.<ABI> (no unversioned link).
  local name lib
  for name in arrow parquet; do
    lib="$arrow_lib/lib$name.so"
    [[ -f "$lib" ]] || lib="$(find "$arrow_lib" -maxdepth 1 -regex ".*/lib$name\.so\.[0-9]+" | sort | head -n 1 || true)"
    [[ -n "$lib" && -f "$lib" ]] || die "columnar: no lib$name.so in $arrow_lib"
    printf -v "arrow_lib$name" '%s' "$lib"
  done
}

# The bundled accelerate presets, as lib/CMakeLists.txt generates them.
gen_presets() {
  local gen="$out/config/gen/accelerate_presets.cpp" tmp f
  mkdir -p "$(dirname "$gen")"
  tmp="$(mktemp)"
  {
    printf '// Generated by scripts/fuzz/run.sh from accelerate_configs/*.yaml\n'
    printf '#include "config/accelerate.hpp"\nnamespace trlx::config {\n'
    printf 'const std::vector<std::pair<std::string, std::string>>& bundled_presets() {\n'
    printf '  static const std::vector<std::pair<std::string, std::string>> presets = {\n'
    for f in "$root"/accelerate_configs/*.yaml; do
      printf '    {"%s", R"trlxpreset(' "$(basename "$f" .yaml)"
      cat "$f"
      printf ')trlxpreset"},\n'
    done
    printf '  };\n  return presets;\n}\n}  // namespace trlx::config\n'
  } >"$tmp"
  if cmp -s "$tmp" "$gen"; then rm -f "$tmp"; else mv "$tmp" "$gen"; fi
}

# --- seeds (used when tests/fuzz/corpus/<target> is empty) -------------------
seed_config() {
  local dir="$1" f name i=0
  local schemas=(sft dpo kto reward cpo orpo grpo rloo ppo online_dpo)  # byte 0 = index
  for f in "$root"/configs/*.yaml; do
    name="$(basename "$f" .yaml)"
    for i in "${!schemas[@]}"; do
      [[ "${schemas[$i]}" == "$name" ]] && { printf "\\x$(printf %02x "$i")"; cat "$f"; } >"$dir/$name"
    done
  done
  for i in "${!schemas[@]}"; do printf "\\x$(printf %02x "$i")" >"$dir/defaults_${schemas[$i]}"; done
  for f in "$root"/accelerate_configs/*.yaml "$root"/tests/data/config/*.yaml; do
    { printf '\x0a'; cat "$f"; } >"$dir/accelerate_$(basename "$f" .yaml)"
  done
}

seed_safetensors() {
  local dir="$1" f i=0
  for f in "$root"/tests/data/safetensors/*.safetensors "$root"/tests/data/safetensors/*/*.safetensors; do
    [[ -f "$f" && $(stat -c %s "$f") -le 8000 ]] || continue
    cp "$f" "$dir/file_$i"
    python3 -c "import struct, sys; b = open(sys.argv[1], 'rb').read()
open(sys.argv[2], 'wb').write(b[8:8 + struct.unpack('<Q', b[:8])[0]])" "$f" "$dir/header_$i"
    i=$((i + 1))
  done
  cp "$root"/tests/data/safetensors/sharded/model.safetensors.index.json "$dir/index"
  printf '5GB' >"$dir/size"
}

seed_tokenizer() {
  local dir="$1" f
  for f in "$root"/tests/data/tokenizer/handmade/*/tokenizer.json; do
    [[ $(stat -c %s "$f") -le $max_len ]] && cp "$f" "$dir/$(basename "$(dirname "$f")").json"
  done
  TRLX_FUZZ_WRITE_SEED="$dir/all_components.json" "$bin" -runs=0 /dev/null >/dev/null 2>&1 || true
  printf 'Hello  world\n\t123 <s> \xff\xfe caf\xc3\xa9 e\xcc\x81' >"$dir/text1"
}

seed_template() {
  python3 - "$root" "$1" "${TRLX_SHARED_DIR:-}" <<'PY'
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
}

seed_data() {
  local dir="$1" f mode i=0
  # Byte 0: bit 0 JSON (else JSON Lines), bit 1 skip_bad_rows, bits 2-4 task, bit 6 split "test".
  for f in "$root"/tests/data/data/*.jsonl; do
    [[ $(stat -c %s "$f") -gt 4000 ]] && continue
    for mode in 00 01 04 08 0a 0c 10 41; do
      { printf "\\x$mode"; cat "$f"; } >"$dir/seed_${i}_$mode"
    done
    i=$((i + 1))
  done
  printf '\x01[{"prompt": "p", "chosen": "a b", "rejected": "a c"}]' >"$dir/seed_array"
  printf '\x41{"train": [{"text": "x"}], "test": [{"text": "y"}]}' >"$dir/seed_split"
}

seed_columnar() {
  # Byte 0: bits 0-2 file type (0 .parquet, 1 .arrow, 2 .jsonl.gz, 3 .jsonl.zst,
  # 4 .json.gz), bit 3 skip_bad_rows, bits 4-6 task (0 sft, 1 preference,
  # 2 unpaired preference, 3 reward, 4 prompt-only).
  local dir="$1" f
  for f in "$root"/tests/data/formats/*.parquet "$root"/tests/data/formats/*/*.parquet \
    "$root"/tests/data/formats/*/*.parquet; do
    [[ -f "$f" && $(stat -c %s "$f") -le 12000 ]] && { printf '\x00'; cat "$f"; } >"$dir/$(basename "$f").$RANDOM"
  done
  for f in "$root"/tests/data/formats/*/*.arrow "$root"/tests/data/formats/*/*/*.arrow; do
    [[ -f "$f" ]] && { printf '\x01'; cat "$f"; } >"$dir/$(basename "$f").$RANDOM"
  done
  for f in "$root"/tests/data/formats/*.jsonl.gz; do { printf '\x02'; cat "$f"; } >"$dir/$(basename "$f")"; done
  for f in "$root"/tests/data/formats/*.jsonl.zst; do { printf '\x03'; cat "$f"; } >"$dir/$(basename "$f")"; done
  python3 - "$dir" <<'PY'
import gzip, io, json, sys
import pyarrow as pa, pyarrow.ipc as ipc, pyarrow.parquet as pq
out = sys.argv[1]
def put(name, mode, data):
    with open(f"{out}/{name}", "wb") as f:
        f.write(bytes([mode]) + data)
def parquet(table, **kw):
    b = io.BytesIO(); pq.write_table(table, b, **kw); return b.getvalue()
def arrow(table, stream=True, **kw):
    b = io.BytesIO()
    w = (ipc.new_stream if stream else ipc.new_file)(b, table.schema, **kw)
    w.write_table(table, max_chunksize=2); w.close(); return b.getvalue()
msg = pa.struct([("role", pa.string()), ("content", pa.string())])
messages = pa.table({
    "messages": pa.array([[{"role": "user", "content": "hi é"}, {"role": "assistant", "content": None}],
                          [{"role": "user", "content": "2+2"}], None], pa.list_(msg)),
    "n": pa.array([1, None, -3], pa.int64()), "ok": pa.array([True, None, False]),
    "score": pa.array([0.5, float("nan"), None], pa.float32())})
pref = pa.table({"prompt": ["q1", "q2"], "chosen": ["good", "ok"], "rejected": ["bad", None],
                 "margin": pa.array([1.0, 2], pa.float64())})
kto = pa.table({"prompt": ["a", "b"], "completion": ["c", "d"], "label": [True, False]})
types = pa.table({
    "i8": pa.array([1, -1], pa.int8()), "u64": pa.array([2**64 - 1, 0], pa.uint64()),
    "h": pa.array([1.5, None], pa.float16()), "ls": pa.array(["x", "y"], pa.large_string()),
    "d": pa.array(["a", "b"]).dictionary_encode(), "fl": pa.array([[1, 2], [3, 4]], pa.list_(pa.int32(), 2)),
    "ll": pa.array([[["a"]], []], pa.large_list(pa.list_(pa.string()))), "null": pa.nulls(2),
    "st": pa.array([{"a": 1, "b": {"c": "d"}}, None], pa.struct([("a", pa.int16()), ("b", pa.struct([("c", pa.string())]))]))})
times = pa.table({"day": pa.array([0, -719468, None], pa.date32()), "ms": pa.array([0, -1, 86400000], pa.date64()),
                  "ts": pa.array([1709211900123456, None, -1], pa.timestamp("us")),
                  "utc": pa.array([1, 2, 3], pa.timestamp("ns", tz="UTC")),
                  "paris": pa.array([1, 2, 3], pa.timestamp("s", tz="Europe/Paris"))})
views = pa.table({"sv": pa.array(["short", "a string longer than twelve"], pa.string_view()),
                  "lv": pa.array([[1], [2, 3]], pa.list_view(pa.int8()))})
for i, (t, task) in enumerate([(messages, 0x00), (pref, 0x10), (kto, 0x20), (pref, 0x30), (messages, 0x40)]):
    put(f"py_parquet_{i}", task | 0, parquet(t, compression="none", row_group_size=2))
    put(f"py_arrow_stream_{i}", task | 1, arrow(t))
put("py_parquet_types", 0, parquet(types, compression="none"))
put("py_parquet_dict", 0, parquet(types, compression="none", use_dictionary=True, data_page_version="2.0"))
put("py_parquet_snappy", 0x10, parquet(pref, compression="snappy"))
put("py_parquet_zstd", 0x10, parquet(pref, compression="zstd"))
put("py_arrow_file", 1, arrow(types, stream=False))
put("py_arrow_types", 1, arrow(types))
put("py_arrow_views", 1, arrow(views))
put("py_parquet_times", 0, parquet(times.drop_columns(["paris"]), compression="none"))
put("py_arrow_times", 1, arrow(times))
put("py_arrow_lz4", 1 | 0x10, arrow(pref, options=ipc.IpcWriteOptions(compression="lz4")))
rows = "".join(json.dumps(r) + "\n" for r in pref.to_pylist()).encode()
put("py_jsonl_gz", 2 | 0x10, gzip.compress(rows))
put("py_jsonl_zst", 3 | 0x10, pa.compress(rows, codec="zstd", asbytes=True))
put("py_json_gz", 4 | 0x10, gzip.compress(json.dumps(pref.to_pylist()).encode()))
put("py_jsonl_gz_skip", 2 | 8, gzip.compress(b'{"text": "a"}\nnot json\n{"text": "b"}\n'))
PY
}

# Byte 0 of an input picks the gold solution (see fuzz_math_answer.cpp); a
# NUL byte instead splits it into solution and completion.
seed_math_answer() {
  python3 - "$1" <<'PY'
import os, sys
out = sys.argv[1]
completions = [
    r"The answer is $\boxed{42}$.",
    r"So the final answer is \boxed{\frac{3}{4}}.",
    r"Final Answer: The final answer is $\dfrac{7}{2}$. I hope it is correct.",
    r"We get $x = 5$, so \boxed{x = 5}",
    r"Therefore \boxed{1,234} apples.",
    r"The probability is \boxed{0.25}",
    r"\boxed{50\%}",
    r"So $\frac{1}{3}$ of the cake remains, i.e. \boxed{\frac{1}{3}}",
    r"answer: $-12$",
    r"The answer is \boxed{2 \frac{1}{2}}",
    r"\boxed{\frac{\frac{1}{2}}{3}}",
    r"\boxed{{{{7}}}}",
    r"\boxed{3, 4, 5}",
    r"The roots are $2$ and $3$",
    r"\boxed{12 \text{ cm}^2}",
    r"\boxed{45^\circ}",
    r"\fbox{9}",
    r"\boxed{\sqrt{2}}",
    r"\[ \boxed{\left( 1, 2 \right)} \]",
    r"$$\boxed{1.5 \times 10^{3}}$$",
    r"\boxed{",
    r"\boxed{\frac{1}{0}}",
    r"\boxed{}",
    r"$\frac12$ and then \boxed{ \dfrac 1 2 }",
    r"The final answer is 0.333333",
    r"Final answer: \(\boxed{-3.14}\)",
    r"The answer is \boxed{−3}",
    r"We have \boxed{٣} (Arabic-Indic three)",
    "Answer:\n\n" + r"$$\boxed{10000000000000000000000}$$",
    r"\boxed{0.1234567890123456789}",
    r"\boxed{1/2}",
    r"\boxed{\text{infinity}}",
    r"$ \$ 5 $",
]
solutions = [
    "#### 42", r"$\frac{3}{4}$", "The answer is 1,234.", "50%", r"$x = 5$", "0.25",
    r"\boxed{\frac{7}{2}}", "-12", "3/4", "#### 10000000000000000000000",
]
for i, c in enumerate(completions):
    with open(os.path.join(out, f"completion_{i:02d}"), "wb") as f:
        f.write(bytes([i + 1]) + c.encode())
for i, s in enumerate(solutions):
    c = completions[i % len(completions)]
    with open(os.path.join(out, f"pair_{i:02d}"), "wb") as f:
        f.write(s.encode() + b"\0" + c.encode())
PY
}

# Extra dictionary entries a target writes itself.
dict_extra() {
  case "$1" in
    config) TRLX_FUZZ_WRITE_DICT="$2" "$bin" -runs=0 /dev/null >/dev/null 2>&1 || true ;;
  esac
}

# --- building ----------------------------------------------------------------
# An object is out of date when it, or its dependency file, is missing or
# older than a file it was built from (-MMD lists them).
stale() {
  local obj="$1" dep="$1.d" newer
  [[ -f "$obj" && -f "$dep" ]] || return 0
  # shellcheck disable=SC2046
  newer="$(find $(sed -e 's/\\$//' -e '1s/^[^:]*://' "$dep") -newer "$obj" -print -quit 2>/dev/null)" || return 0
  [[ -n "$newer" ]]
}

# build <name>: sets bin, building it if needed.
build() {
  local name="$1" work="$out/$1"
  define "$name"
  [[ "$name" == config ]] && gen_presets
  command -v "$CXX" >/dev/null || die "$CXX not found (install clang, or set CXX to a clang++)"
  local launcher=()
  command -v ccache >/dev/null && launcher=(ccache)
  local common=(-std=c++20 -O1 -g -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  local csan=(-fsanitize=fuzzer-no-link,address,undefined) lsan=(-fsanitize=fuzzer,address,undefined)
  if [[ "$kind" == program ]]; then csan=(-fsanitize=address,undefined) lsan=(-fsanitize=address,undefined); fi
  local compile=("${launcher[@]}" "$CXX" "${common[@]}" "${csan[@]}" -I"$root/lib" "${cflags[@]}")
  bin="$work/fuzz_$name"
  [[ "$kind" == program ]] && bin="$work/$name"
  mkdir -p "$work/obj"
  # Other flags than last time: everything is rebuilt.
  if [[ "$(cat "$work/obj/flags" 2>/dev/null)" != "${compile[*]} | ${lsan[*]} ${libs[*]}" ]]; then
    rm -f "$work"/obj/*.o "$work"/obj/*.d
    printf '%s' "${compile[*]} | ${lsan[*]} ${libs[*]}" >"$work/obj/flags"
  fi
  local src obj objs=() failed="$work/obj/FAILED" n=0
  rm -f "$failed"
  for src in "${srcs[@]}"; do
    obj="$work/obj/$(realpath --relative-to="$root" "$src" | tr '/' '_').o"
    objs+=("$obj")
    stale "$obj" || continue
    [[ $n -eq 0 ]] && echo "building $bin" >&2
    n=$((n + 1))
    while [[ $(jobs -rp | wc -l) -ge $jobs ]]; do wait -n || true; done
    { nice -n "$niceness" "${compile[@]}" -MMD -MF "$obj.d" -c "$src" -o "$obj" || touch "$failed"; } &
  done
  wait
  [[ -f "$failed" ]] && die "$name: compilation failed"
  if [[ ! -x "$bin" || -n "$(find "${objs[@]}" -newer "$bin" -print -quit)" ]]; then
    nice -n "$niceness" "$CXX" "${common[@]}" "${lsan[@]}" "${objs[@]}" "${libs[@]}" -o "$bin" ||
      die "$name: link failed"
  fi
}

# --- running -----------------------------------------------------------------
count_files() { find "$1" -maxdepth 1 -type f | wc -l; }
count_bytes() { find "$1" -maxdepth 1 -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}'; }

header() {
  printf '%-12s %12s %7s %8s %7s %9s %8s %8s\n' target executions cov ft files bytes crashes seconds
}

# libfuzzer <flags and directories>: the target's binary with its limits, in
# its work directory; its temporary files (TMPDIR) go to <work>/tmp, emptied
# afterwards (a crashed or killed process leaves its own behind).
libfuzzer() {
  local rc=0
  rm -rf "$work/tmp"
  mkdir -p "$work/tmp"
  (cd "$work" && ASAN_OPTIONS="$asan${ASAN_OPTIONS:+:$ASAN_OPTIONS}" TMPDIR="$work/tmp" exec nice -n "$niceness" \
    "$bin" -max_len="$max_len" -timeout="$timeout" -rss_limit_mb="$rss_mb" -malloc_limit_mb="$malloc_mb" \
    -artifact_prefix="$work/artifacts/" "$@") || rc=$?
  rm -rf "$work/tmp"
  return "$rc"
}

# fuzz <target> <libFuzzer limit flag>: prints one row of figures; returns 1 on a crash.
fuzz() {
  local t="$1" limit="$2" work="$out/$1"
  build "$t"
  local corpus="$corpora/$t" scratch="$work/new" seeds="$work/seeds" merged="$work/merged"
  rm -rf "$scratch" "$merged"
  mkdir -p "$scratch" "$corpus" "$work/artifacts"
  local dirs=("$scratch" "$corpus")
  if [[ -z "$(ls -A "$corpus")" ]]; then
    rm -rf "$seeds"
    mkdir -p "$seeds"
    "seed_$t" "$seeds"
    dirs+=("$seeds")
  fi
  local dict="$work/fuzz.dict"
  cp "$root/tests/fuzz/dict/$t.dict" "$dict"
  dict_extra "$t" "$dict"

  echo "fuzzing $t ($limit); log: $work/fuzz.log" >&2
  local start end rc=0
  start=$(date +%s.%N)
  libfuzzer -dict="$dict" -print_final_stats=1 "$limit" "${dirs[@]}" >"$work/fuzz.log" 2>&1 || rc=$?
  end=$(date +%s.%N)

  local execs cov ft crashes=0 status
  execs=$(awk '/^stat::number_of_executed_units:/ {n = $2} END {print n}' "$work/fuzz.log")
  [[ -n "$execs" ]] || execs=$(awk '/^#[0-9]+/ {n = substr($1, 2)} END {print n}' "$work/fuzz.log")
  status=$(awk '/^#[0-9]+.* cov: / {line = $0} END {print line}' "$work/fuzz.log")
  cov=$(sed -nE 's/.* cov: ([0-9]+).*/\1/p' <<<"$status")
  ft=$(sed -nE 's/.* ft: ([0-9]+).*/\1/p' <<<"$status")
  if [[ $rc -ne 0 ]]; then
    crashes=1
    echo "$t: libFuzzer exited $rc; the end of $work/fuzz.log:" >&2
    tail -n 40 "$work/fuzz.log" >&2
  fi

  # Merge the new inputs into the repository corpus, smallest set first.
  find "${dirs[@]}" -maxdepth 1 -type f -size +"$max_len"c -delete
  mkdir -p "$merged"
  if libfuzzer -merge=1 "$merged" "${dirs[@]:1}" "$scratch" >"$work/merge.log" 2>&1 &&
    [[ -n "$(ls -A "$merged")" ]]; then
    find "$corpus" -maxdepth 1 -type f -delete
    cp "$merged"/* "$corpus/"
  else
    echo "$t: merge failed (see $work/merge.log); the corpus is unchanged" >&2
  fi
  rm -rf "$merged"
  # The repository keeps at most 1 MiB per target: the largest inputs go first.
  local total dropped=0 size f
  total=$(count_bytes "$corpus")
  if [[ $total -gt $corpus_budget ]]; then
    while read -r size f; do
      [[ $total -gt $corpus_budget ]] || break
      rm -f "$f"
      total=$((total - size))
      dropped=$((dropped + 1))
    done < <(find "$corpus" -maxdepth 1 -type f -printf '%s %p\n' | sort -rn)
  fi
  [[ $dropped -eq 0 ]] || echo "$t: dropped the $dropped largest corpus inputs to keep it under 1 MiB" >&2

  printf '%-12s %12s %7s %8s %7s %9s %8s %8.1f\n' "$t" "${execs:-?}" "${cov:-?}" "${ft:-?}" \
    "$(count_files "$corpus")" "$(count_bytes "$corpus")" "$crashes" "$(awk "BEGIN {print $end - $start}")"
  if [[ $crashes -ne 0 ]]; then
    echo "$t: reproducer: $(sed -n 's/.*Test unit written to //p' "$work/fuzz.log" | tail -n 1)" >&2
    return 1
  fi
}

template_diff() {
  local dir="${1:-$corpora/template}"
  build template-render
  exec python3 "$root/scripts/fixtures/template_fixtures.py" --diff "$dir" --render-bin "$bin"
}

# --- command line ------------------------------------------------------------
[[ $# -ge 1 ]] || usage 2
cmd="$1"
shift
case "$cmd" in
  -h | --help | help) usage 0 ;;
  list)
    printf '%s\n' "config       trainer config YAML (each trainer's schema) and accelerate config YAML" \
      "safetensors  safetensors headers and shard index files" \
      "tokenizer    tokenizer.json loading, and encoding/decoding text" \
      "template     chat templates: parsing and rendering" \
      "data         JSON / JSON Lines dataset readers and per-task shaping" \
      "columnar     Parquet, Arrow, .jsonl.gz/.zst/.json.gz dataset readers and shaping" \
      "math_answer  the accuracy rewards' answer checker: extraction, LaTeX, numbers, comparison"
    exit 0
    ;;
  template-diff) template_diff "$@" ;;
  repro)
    [[ $# -ge 2 ]] || usage 2
    is_target "$1" || die "unknown target '$1' (targets: ${targets[*]})"
    build "$1"
    shift
    ASAN_OPTIONS="$asan${ASAN_OPTIONS:+:$ASAN_OPTIONS}" exec "$bin" -rss_limit_mb="$rss_mb" \
      -malloc_limit_mb="$malloc_mb" -timeout="$timeout" "$@"
    ;;
  build)
    [[ $# -eq 1 ]] || usage 2
    if [[ "$1" == all ]]; then for t in "${targets[@]}"; do build "$t"; done; else build "$1"; fi
    exit 0
    ;;
esac

limit="-max_total_time=60"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --runs) [[ "${2:-}" =~ ^[0-9]+$ ]] || die "--runs takes a number"; limit="-runs=$2"; shift 2 ;;
    --seconds) [[ "${2:-}" =~ ^[0-9]+$ ]] || die "--seconds takes a number"; limit="-max_total_time=$2"; shift 2 ;;
    *) echo "run.sh: unknown argument '$1'" >&2; usage 2 ;;
  esac
done

if [[ "$cmd" == all ]]; then
  rows=()
  status=0
  for t in "${targets[@]}"; do
    row="$(fuzz "$t" "$limit")" || status=1
    rows+=("$row")
  done
  header
  printf '%s\n' "${rows[@]}"
  exit "$status"
fi
is_target "$cmd" || { echo "run.sh: unknown target '$cmd' (targets: ${targets[*]})" >&2; usage 2; }
header
fuzz "$cmd" "$limit"
