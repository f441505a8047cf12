"""Where an eager call's host time goes: cProfile over a loop of calls (GPU machine).

    python scripts/host_profile.py [M] [N] [K]      # default 1 17408 5120

Prints the functions with the largest own time per call; used to find what the dispatcher
still does per call that could be done once (see nvfp4_kernels.fast).
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import time

import numpy as np
import torch

import nvfp4_kernels

CALLS = 2000


def main() -> None:
    m, n, k = (int(x) for x in (sys.argv[1:4] or (1, 17408, 5120)))
    rng = np.random.default_rng(0)
    packed = torch.from_numpy(rng.integers(0, 256, (n, k // 2), dtype=np.uint8)).cuda()
    scales = torch.from_numpy(rng.integers(0x28, 0x48, (n, k // 16), dtype=np.uint8)).cuda()
    g = torch.tensor([0.0123], dtype=torch.float32, device="cuda")
    a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    for _ in range(20):
        nvfp4_kernels.nvfp4_matmul(a, packed, scales, g)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(CALLS):
        nvfp4_kernels.nvfp4_matmul(a, packed, scales, g)
    host = (time.perf_counter() - t0) / CALLS * 1e6
    torch.cuda.synchronize()
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(CALLS):
        nvfp4_kernels.nvfp4_matmul(a, packed, scales, g)
    profile.disable()
    torch.cuda.synchronize()
    print(f"M={m} N={n} K={k}: {host:.2f} us host per call without the profiler")
    stats = pstats.Stats(profile)
    stats.sort_stats("tottime").print_stats(18)


if __name__ == "__main__":
    main()
