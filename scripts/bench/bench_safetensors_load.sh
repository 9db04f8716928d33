#!/usr/bin/env bash
# Load time of a ~100 MB safetensors checkpoint: trlx::io vs
# safetensors.torch.load_file, same file, same run, warm page cache, best of N.
#   scripts/bench/bench_safetensors_load.sh [reps=5] [MB=100]
# trlx is timed twice: "view" (open + every tensor as a zero-copy view of the
# mapping, what trlx does by default) and "copy" (every tensor copied into its
# own memory). load_file is timed as safetensors' torch API does it.
# Needs: python3 with torch and safetensors; builds target safetensors_bench in build-io.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build-io}
REPS=${1:-5}
MB=${2:-100}
[ -f "$BUILD/build.ninja" ] || cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" --target safetensors_bench -j2 >/dev/null
BENCH=$(find "$BUILD" -name safetensors_bench -type f -perm -u+x | head -1)

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# A model-like mix: many mid-sized bf16 matrices, some f32 vectors, one big embedding.
python3 - "$WORK/model.safetensors" "$MB" <<'PY'
import sys, torch
from safetensors.torch import save_file
mb = int(sys.argv[2])
g = torch.Generator().manual_seed(0)
t, total, i = {}, 0, 0
t["embed"] = torch.randn(8192, 1024, generator=g).to(torch.bfloat16)  # 16 MB
total += t["embed"].numel() * 2
while total < mb * 1_000_000:
    t[f"layers.{i}.w"] = torch.randn(1024, 1024, generator=g).to(torch.bfloat16)
    t[f"layers.{i}.norm"] = torch.randn(1024, generator=g)
    total += 1024 * 1024 * 2 + 1024 * 4
    i += 1
save_file(t, sys.argv[1], metadata={"format": "pt"})
PY
cat "$WORK/model.safetensors" > /dev/null  # warm the page cache for both sides

read -r n bytes t_view t_copy < <("$BENCH" "$WORK/model.safetensors" "$REPS")
read -r h_n h_secs h_clone < <(python3 - "$WORK/model.safetensors" "$REPS" <<'PY'
import sys, time
import torch
torch.set_num_threads(1)
from safetensors.torch import load_file
best = best_clone = 1e30
for _ in range(int(sys.argv[2])):
    t0 = time.perf_counter()
    d = load_file(sys.argv[1])
    best = min(best, time.perf_counter() - t0)
    del d
    t0 = time.perf_counter()
    d = {k: v.clone() for k, v in load_file(sys.argv[1]).items()}
    best_clone = min(best_clone, time.perf_counter() - t0)
    del d
print(len(load_file(sys.argv[1])), best, best_clone)
PY
)
python3 - "$n" "$bytes" "$t_view" "$t_copy" "$h_n" "$h_secs" "$h_clone" <<'PY'
import sys
n, b, tv, tc, hn, hs, hc = sys.argv[1:]
b, tv, tc, hs, hc = int(b), float(tv), float(tc), float(hs), float(hc)
print(f"checkpoint: {n} tensors, {b / 1e6:.1f} MB (load_file saw {hn})")
print(f"{'reader':40s} {'seconds':>9s} {'GB/s':>8s}")
for name, s in [("trlx view (zero-copy, default)", tv), ("safetensors.torch.load_file (mmap)", hs),
                ("trlx copy (get(copy=true))", tc), ("load_file + clone() of every tensor", hc)]:
    print(f"{name:40s} {s:9.4f} {b / s / 1e9:8.2f}")
print(f"ratio lazy   (load_file / trlx view): {hs / tv:.2f}x")
print(f"ratio copied (load_file+clone / trlx copy): {hc / tc:.2f}x")
PY
