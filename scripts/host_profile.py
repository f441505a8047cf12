"""Where an eager call's host time goes: cProfile over a loop of calls (GPU machine).

    python scripts/host_profile.py [M] [N] [K] [--alloc]     # default 1 17408 5120

Prints the functions with the largest own time per call; used to find what the dispatcher
still does per call that could be done once (see nvfp4_kernels.fast).
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import time

import numpy as np
import nvfp4_kernels
import torch

CALLS = 2000


def shape_from_argv() -> tuple[int, int, int]:
    """M, N, K from the first three numeric command-line arguments (default 1 17408 5120)."""
    m, n, k = (int(x) for x in ([s for s in sys.argv[1:] if s.isdigit()][:3] or (1, 17408, 5120)))
    return m, n, k


def decode_operands(m: int, n: int, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(a, packed, scales, g) on the GPU: random codes, scales near 1, bf16 activations."""
    rng = np.random.default_rng(0)
    packed = torch.from_numpy(rng.integers(0, 256, (n, k // 2), dtype=np.uint8)).cuda()
    scales = torch.from_numpy(rng.integers(0x28, 0x48, (n, k // 16), dtype=np.uint8)).cuda()
    g = torch.tensor([0.0123], dtype=torch.float32, device="cuda")
    a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    return a, packed, scales, g


def main() -> None:
    m, n, k = shape_from_argv()
    a, packed, scales, g = decode_operands(m, n, k)
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



def allocation_costs() -> None:
    """Microseconds per output allocation, by the ways torch offers (for the fast path's choice)."""
    a = torch.randn(1, 5120, dtype=torch.bfloat16, device="cuda")
    device = a.device
    variants = {
        "a.new_empty((1, 17408))": lambda: a.new_empty((1, 17408)),
        "torch.empty((1, 17408), dtype=, device=)": lambda: torch.empty((1, 17408), dtype=torch.bfloat16,
                                                                         device=device),
        "torch.empty_like(view) (same shape)": lambda: torch.empty_like(a),
    }
    for name, fn in variants.items():
        for _ in range(100):
            fn()
        t0 = time.perf_counter()
        for _ in range(CALLS):
            fn()
        print(f"{1e6 * (time.perf_counter() - t0) / CALLS:6.2f} us  {name}")


if __name__ == "__main__":
    main()
    if "--alloc" in sys.argv:
        allocation_costs()
