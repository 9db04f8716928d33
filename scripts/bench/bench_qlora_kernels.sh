#!/usr/bin/env bash
# trlx's CPU kernels under QLoRA training, each against its reference in the
# same run, on one Qwen2.5-0.5B MLP weight (4864 x 896) and one batch of its
# activations (1024 tokens x 4864), 2 threads:
#  - nf4 dequantization to bf16 and fp32: trlx's one pass against
#    bitsandbytes' CPU dequantize_4bit (and trlx's tensor-operation path,
#    what GPUs run)
#  - nf4 quantization (load time): trlx against bitsandbytes' quantize_4bit
#  - LoRA dropout, p 0.05, forward and backward: trlx against torch::dropout
# Median milliseconds over REPEATS (default 20) per side, sides alternated
# over ROUNDS (default 3); the ratio is reference / trlx (above 1: trlx is
# faster). Needs python3 with torch and bitsandbytes (dev time).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
REPEATS=${REPEATS:-20}
ROUNDS=${ROUNDS:-3}
export OMP_NUM_THREADS=${THREADS:-2}
cmake --build "$BUILD_DIR" --target qlora_kernels_bench -j2 >/dev/null
BENCH="$BUILD_DIR/tests/unit/model/qlora_kernels_bench"
ROWS=4864 COLS=896
bnb() {  # bnb dequant|quantize DTYPE -> median ms
  python3 - "$1" "$2" "$REPEATS" "$ROWS" "$COLS" "$OMP_NUM_THREADS" <<'PY' 2>/dev/null
import sys, time, statistics
import torch
import bitsandbytes.functional as F
mode, dt, reps, rows, cols, threads = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
torch.set_num_threads(threads)
torch.manual_seed(0)
w = (torch.randn(rows, cols) * 0.02).to(torch.bfloat16 if dt == "bfloat16" else torch.float32)
q, state = F.quantize_4bit(w, blocksize=64, quant_type="nf4")
f = (lambda: F.dequantize_4bit(q, state)) if mode == "dequant" else (lambda: F.quantize_4bit(w, blocksize=64, quant_type="nf4"))
f()
ms = []
for _ in range(reps):
    t = time.perf_counter(); f(); ms.append((time.perf_counter() - t) * 1e3)
print(statistics.median(ms))
PY
}
field() { echo "$1" | awk -v k="$2" '{for(i=1;i<NF;i++) if($i==k) print $(i+1)}'; }
: >"${TMPDIR:-/tmp}/qlora_kernels.$$"
R="${TMPDIR:-/tmp}/qlora_kernels.$$"
trap 'rm -f "$R"' EXIT
for round in $(seq 1 "$ROUNDS"); do
  for dt in bfloat16 float32; do
    if ((round % 2)); then
      t=$("$BENCH" dequant $ROWS $COLS $dt "$REPEATS"); b=$(bnb dequant $dt)
    else
      b=$(bnb dequant $dt); t=$("$BENCH" dequant $ROWS $COLS $dt "$REPEATS")
    fi
    echo "dequant_$dt $(field "$t" cpu_pass) $b $(field "$t" tensor_ops)" >>"$R"
  done
  if ((round % 2)); then
    t=$("$BENCH" quantize $ROWS $COLS bfloat16 "$REPEATS"); b=$(bnb quantize bfloat16)
  else
    b=$(bnb quantize bfloat16); t=$("$BENCH" quantize $ROWS $COLS bfloat16 "$REPEATS")
  fi
  echo "quantize_bfloat16 $(field "$t" trlx) $b" >>"$R"
  for dt in bfloat16 float32; do
    t=$("$BENCH" dropout 1024 $ROWS $dt 0.05 "$REPEATS")
    echo "dropout_$dt $(field "$t" trlx) $(field "$t" torch)" >>"$R"
  done
done
echo "2 threads, $ROUNDS rounds of $REPEATS repeats, load $(cut -d' ' -f1 /proc/loadavg)"
python3 - "$R" <<'PY'
import statistics as st, sys
rows = {}
for line in open(sys.argv[1]):
    k, *v = line.split()
    rows.setdefault(k, []).append(list(map(float, v)))
names = {"dequant": "nf4 dequantize 4864x896 to", "quantize": "nf4 quantize 4864x896", "dropout": "dropout fwd+bwd 1024x4864"}
for k, rs in rows.items():
    kind, dt = k.split("_", 1)
    ref = "bitsandbytes" if kind != "dropout" else "torch::dropout"
    t, r = st.median(x[0] for x in rs), st.median(x[1] for x in rs)
    ratios = [x[1] / x[0] for x in rs]
    extra = f"; trlx tensor-op path {st.median(x[2] for x in rs):.2f} ms" if kind == "dequant" else ""
    label = f"{names[kind]} {dt}" if kind == "dequant" else f"{names[kind]} ({dt})"
    print(f"{label}: trlx {t:.2f} ms, {ref} {r:.2f} ms: {st.median(ratios):.1f}x (min {min(ratios):.1f}, "
          f"max {max(ratios):.1f}){extra}")
PY
