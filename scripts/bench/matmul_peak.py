"""This machine's fp32 matrix-multiply peak in GFLOP/s at a given thread count,
the denominator of the benchmarks' model FLOPs utilisation.

    python3 scripts/bench/matmul_peak.py THREADS

Square products of a few sizes through the same BLAS LibTorch uses; prints
the best rate seen (a peak, not a mean: the load of a shared machine only
ever lowers it).
"""
import sys
import time

import torch

torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
best = 0.0
for n in (1024, 2048, 3072):
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b  # warm-up
    reps = max(2, int(4e10 / (2 * n ** 3)))
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(reps):
            a @ b
        best = max(best, 2 * n ** 3 * reps / (time.perf_counter() - t) / 1e9)
print(f"{best:.1f}")
