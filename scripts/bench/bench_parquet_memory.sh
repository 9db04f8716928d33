#!/usr/bin/env bash
# Peak memory reading a ~1 GB Parquet file: trlx against pyarrow, same file,
# same run, the two sides alternating over REPEATS, median and spread.
#   scripts/bench/bench_parquet_memory.sh [REPEATS=3] [MB=1000] [ROWS_PER_GROUP=10000]
# Four readings of the file (peak RSS of a fresh process each):
#   trlx load      load_dataset: every row kept as JSON, what a trainer gets
#   pyarrow table  pyarrow.parquet.read_table: the whole file as Arrow columns
#   trlx stream    trlx's Parquet reader with each row dropped once produced:
#                  what the reader itself holds (one row group's column)
#   pyarrow iter   ParquetFile.iter_batches over row groups: pyarrow streaming
# Ratios: trlx load / pyarrow table and trlx stream / pyarrow iter. Peaks
# include each process's baseline (the Python interpreter with pyarrow
# imported; the trlx driver), printed beside them.
# The file: rows {prompt, completion} of random lower-case words (Snappy
# barely compresses them, so file size ~ text size), ROWS_PER_GROUP rows per
# row group (~10 MB, as datasets and the hub write them).
# Needs: python3 with pyarrow and numpy; builds target parquet_memory_bench (or set BENCH to a built one).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
REPEATS=${1:-3}
MB=${2:-1000}
GROUP=${3:-10000}
if [ -z "${BENCH:-}" ]; then  # BENCH: an already built driver
  cmake --build "$BUILD_DIR" --target parquet_memory_bench -j2 >/dev/null
  BENCH="$BUILD_DIR/tests/unit/data/parquet_memory_bench"
fi

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
FILE="$WORK/data.parquet"
python3 - "$FILE" "$MB" "$GROUP" <<'PY'
import sys
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

path, mb, group = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(0)
letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz     ", dtype=np.uint8)

def texts(n, length):
    raw = letters[rng.integers(0, len(letters), size=n * length)].tobytes()
    return [raw[i * length:(i + 1) * length].decode() for i in range(n)]

row_bytes = 300 + 700
rows = mb * 1_000_000 // row_bytes
with pq.ParquetWriter(path, pa.schema([("prompt", pa.string()), ("completion", pa.string())])) as w:
    for start in range(0, rows, group):
        n = min(group, rows - start)
        w.write_table(pa.table({"prompt": texts(n, 300), "completion": texts(n, 700)}))
PY
FILE_MB=$(python3 -c "import os,sys; print(round(os.path.getsize(sys.argv[1]) / 1e6))" "$FILE")
ROW_GROUPS=$(python3 -c "import pyarrow.parquet as pq,sys; print(pq.ParquetFile(sys.argv[1]).num_row_groups)" "$FILE")
cat "$FILE" >/dev/null  # warm the page cache for every side

pyarrow_side() {  # mode: table | iter; prints "mode rows before_mb peak_mb secs"
  python3 - "$1" "$FILE" <<'PY'
import resource, sys, time
import pyarrow.parquet as pq
mode, path = sys.argv[1], sys.argv[2]
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t0 = time.perf_counter()
if mode == "table":
    rows = pq.read_table(path).num_rows
else:
    rows = 0
    for batch in pq.ParquetFile(path).iter_batches(batch_size=10_000):
        rows += batch.num_rows
print(mode, rows, round(before, 1), round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
      round(time.perf_counter() - t0, 2))
PY
}

RESULTS="$WORK/results"
: >"$RESULTS"
for ((i = 0; i < REPEATS; i++)); do
  # Alternate which side goes first.
  if ((i % 2 == 0)); then
    order=(trlx_load py_table trlx_stream py_iter)
  else
    order=(py_table trlx_load py_iter trlx_stream)
  fi
  for side in "${order[@]}"; do
    case $side in
      trlx_load) echo "trlx_$("$BENCH" load "$FILE")" >>"$RESULTS" ;;
      trlx_stream) echo "trlx_$("$BENCH" stream "$FILE")" >>"$RESULTS" ;;
      py_table) echo "pyarrow_$(pyarrow_side table)" >>"$RESULTS" ;;
      py_iter) echo "pyarrow_$(pyarrow_side iter)" >>"$RESULTS" ;;
    esac
  done
done

python3 - "$RESULTS" "$FILE_MB" "$ROW_GROUPS" "$REPEATS" "$(cut -d' ' -f1-3 /proc/loadavg)" "$(nproc)" <<'PY'
import statistics, sys
path, file_mb, groups, repeats, load, cpus = sys.argv[1:]
by = {}
for line in open(path):
    side, rows, before, peak, secs = line.split()
    by.setdefault(side, []).append((int(rows), float(before), float(peak), float(secs)))
rows = {s: {r[0] for r in v} for s, v in by.items()}
assert len(set().union(*rows.values())) == 1, f"sides read different row counts: {rows}"
print(f"Parquet file: {file_mb} MB, {groups} row groups, {next(iter(rows['trlx_load']))} rows; "
      f"{repeats} repeats, sides alternating; load average {load} on {cpus} CPUs")
def med(side, k):
    return statistics.median(r[k] for r in by[side])
def spread(side, k):
    v = [r[k] for r in by[side]]
    return max(v) - min(v)
names = {"trlx_load": "trlx load (rows as JSON)", "pyarrow_table": "pyarrow read_table",
         "trlx_stream": "trlx stream (reader only)", "pyarrow_iter": "pyarrow iter_batches"}
print(f"{'':28} {'peak RSS MB':>12} {'spread':>8} {'baseline MB':>12} {'seconds':>8}")
for s in ["trlx_load", "pyarrow_table", "trlx_stream", "pyarrow_iter"]:
    print(f"{names[s]:28} {med(s, 2):12.0f} {spread(s, 2):8.0f} {med(s, 1):12.0f} {med(s, 3):8.2f}")
print(f"ratio peak RSS trlx load / pyarrow read_table:      {med('trlx_load', 2) / med('pyarrow_table', 2):.2f}")
print(f"ratio peak RSS trlx stream / pyarrow iter_batches:  {med('trlx_stream', 2) / med('pyarrow_iter', 2):.2f}")
print(f"ratio above baseline, stream / iter_batches:        "
      f"{(med('trlx_stream', 2) - med('trlx_stream', 1)) / (med('pyarrow_iter', 2) - med('pyarrow_iter', 1)):.2f}")
PY
