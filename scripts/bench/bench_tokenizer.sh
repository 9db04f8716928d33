#!/usr/bin/env bash
# Tokenizer speed, trlx vs Hugging Face tokenizers, same corpus, same run:
#  1. encode: one thread, one encode() per document (HF: RAYON_NUM_THREADS=1,
#     TOKENIZERS_PARALLELISM=false), tokens per CPU second;
#  2. rows: the corpus as dataset rows on 1 and 2 threads (trlx: the helper
#     behind dataset_num_proc; HF: encode_batch with RAYON_NUM_THREADS=1, 2),
#     rows per second of wall time.
# Every timing is one pass in a fresh process (cold caches on both sides);
# the sides alternate over REPEATS (first trlx, then HF, then HF first, ...).
# Prints medians, the spread (min..max as % of the median) and the load
# average before and after each block.
#   scripts/bench/bench_tokenizer.sh [tokenizer dirs...]
# Default dirs: $TRLX_SHARED_DIR/fixtures/tokenizers/{llama2,llama3,qwen3}.
# REPEATS (default 5). Needs python3 with `tokenizers`; builds the target
# tokenizer_bench in BUILD_DIR (default build) under the shared build lock,
# or uses the binary TOKENIZER_BENCH names.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
SHARED=${TRLX_SHARED_DIR:-/work/shared}
REPEATS=${REPEATS:-5}
DIRS=("$@")
if [ ${#DIRS[@]} -eq 0 ]; then
  DIRS=("$SHARED/fixtures/tokenizers/llama2" "$SHARED/fixtures/tokenizers/llama3" "$SHARED/fixtures/tokenizers/qwen3")
fi
BENCH=${TOKENIZER_BENCH:-}
if [ -z "$BENCH" ]; then
  flock /tmp/trlx-build.lock ninja -C "$BUILD_DIR" -j2 tokenizer_bench >/dev/null
  BENCH=$(find "$BUILD_DIR" -name tokenizer_bench -type f -perm -u+x | head -1)
fi

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
CORPUS="$WORK/corpus.jsonl"
# A deterministic mixed corpus: English prose, code, numbers, CJK, emoji.
python3 - "$CORPUS" <<'PY'
import json, random, sys
rng = random.Random(7)
words = ("the of and to in is that for it as was with be by on not he I this are or his from at which but have an "
         "they you were her she there been one all we their can has more do if will would so what up out about who "
         "tokenizer model training gradient optimizer learning rate batch sequence attention transformer").split()
code = ["def f(x):\n    return x * 2\n", "for (int i = 0; i < n; ++i) { sum += a[i]; }\n",
        "if err != nil {\n\treturn err\n}\n", "SELECT id, name FROM users WHERE age > 30;\n"]
other = ["日本語のテキストを分割します。", "中文分词测试，包括标点。", "Привет, как дела?", "emoji 😀👍🏽 ok",
         "naïve café résumé", "3.14159 2024-11-29 1,000,000"]
docs = []
for i in range(4000):
    parts = []
    for _ in range(rng.randint(5, 40)):
        r = rng.random()
        if r < 0.85:
            w = rng.choice(words)
            parts.append(w.capitalize() if rng.random() < 0.1 else w)
        elif r < 0.9:
            parts.append(rng.choice(code))
        elif r < 0.95:
            parts.append(rng.choice(other))
        else:
            parts.append(str(rng.randint(0, 10**6)) + rng.choice([".", ",", "!", "?", "\n\n"]))
    docs.append(" ".join(parts))
with open(sys.argv[1], "w") as f:
    for d in docs:
        f.write(json.dumps(d) + "\n")
PY

cat >"$WORK/hf.py" <<'PY'
# HF side: one pass; prints the same fields as tokenizer_bench.
import json, sys, time
from tokenizers import Tokenizer
mode, path, corpus = sys.argv[1], sys.argv[2], sys.argv[3]
tok = Tokenizer.from_file(path + "/tokenizer.json")
docs = [json.loads(l) for l in open(corpus)]
c0, t0 = time.process_time(), time.perf_counter()
if mode == "encode":
    n = sum(len(tok.encode(d).ids) for d in docs)
else:
    n = sum(len(e.ids) for e in tok.encode_batch(docs))
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
print(n, cpu, wall) if mode == "encode" else print(len(docs), n, cpu, wall)
PY

load() { cut -d' ' -f1-3 /proc/loadavg; }
trlx_run() { "$BENCH" "$@"; }
hf_run() {
  local threads=$1
  shift
  RAYON_NUM_THREADS=$threads TOKENIZERS_PARALLELISM=$([ "$threads" = 1 ] && echo false || echo true) \
    python3 "$WORK/hf.py" "$@"
}

RESULTS="$WORK/results.tsv"
: >"$RESULTS"
for d in "${DIRS[@]}"; do
  name=$(basename "$d")
  echo "load before $name: $(load)" >&2
  for r in $(seq 1 "$REPEATS"); do
    # encode: tokens, cpu, wall
    if [ $((r % 2)) -eq 1 ]; then
      t=$(trlx_run encode "$d" "$CORPUS"); h=$(hf_run 1 encode "$d" "$CORPUS")
    else
      h=$(hf_run 1 encode "$d" "$CORPUS"); t=$(trlx_run encode "$d" "$CORPUS")
    fi
    echo -e "$name\tencode\ttrlx\t$t" >>"$RESULTS"
    echo -e "$name\tencode\thf\t$h" >>"$RESULTS"
    for th in 1 2; do
      if [ $((r % 2)) -eq 1 ]; then
        t=$(trlx_run rows "$d" "$CORPUS" "$th"); h=$(hf_run "$th" batch "$d" "$CORPUS")
      else
        h=$(hf_run "$th" batch "$d" "$CORPUS"); t=$(trlx_run rows "$d" "$CORPUS" "$th")
      fi
      echo -e "$name\trows$th\ttrlx\t$t" >>"$RESULTS"
      echo -e "$name\trows$th\thf\t$h" >>"$RESULTS"
    done
  done
  echo "load after $name: $(load)" >&2
done

python3 - "$RESULTS" "$REPEATS" <<'PY'
import statistics as st, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
data = {}
for name, what, side, fields in rows:
    data.setdefault((name, what, side), []).append([float(x) for x in fields.split()])
def summary(vals):
    m = st.median(vals)
    return m, 100 * (max(vals) - min(vals)) / m if m else 0.0
names = list(dict.fromkeys(r[0] for r in rows))
print(f"repeats: {sys.argv[2]} per side, alternating; medians, spread = (max-min)/median")
print(f"{'encode, 1 thread':<18}{'tokens':>9}{'trlx tok/cpu-s':>16}{'spread':>8}{'HF tok/cpu-s':>14}{'spread':>8}{'ratio':>7}")
for n in names:
    t, h = data[(n, "encode", "trlx")], data[(n, "encode", "hf")]
    note = "" if t[0][0] == h[0][0] else f"  (token counts differ: {t[0][0]:.0f} vs {h[0][0]:.0f})"
    tm, ts = summary([x[0] / x[1] for x in t])
    hm, hs = summary([x[0] / x[1] for x in h])
    print(f"{n:<18}{t[0][0]:>9.0f}{tm:>16.0f}{ts:>7.0f}%{hm:>14.0f}{hs:>7.0f}%{tm / hm:>6.2f}x{note}")
print(f"{'rows (wall)':<18}{'threads':>9}{'trlx rows/s':>16}{'spread':>8}{'HF batch rows/s':>16}{'spread':>8}{'ratio':>7}")
for n in names:
    for th in (1, 2):
        t, h = data[(n, f"rows{th}", "trlx")], data[(n, f"rows{th}", "hf")]
        note = "" if t[0][1] == h[0][1] else f"  (token counts differ: {t[0][1]:.0f} vs {h[0][1]:.0f})"
        tm, ts = summary([x[0] / x[3] for x in t])
        hm, hs = summary([x[0] / x[3] for x in h])
        print(f"{n:<18}{th:>9}{tm:>16.0f}{ts:>7.0f}%{hm:>16.0f}{hs:>7.0f}%{tm / hm:>6.2f}x{note}")
PY
