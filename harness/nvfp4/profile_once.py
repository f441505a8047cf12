"""Run each CUDA kernel once on the benchmark's headline shapes, for ``ncu`` to profile.

    ncu --clock-control none -k regex:nvfp4 --section SpeedOfLight python -m nvfp4_harness.nvfp4.profile_once
    ncu ... python -m nvfp4_harness.nvfp4.profile_once --small-m     (scripts/gpu_session.sh stalls)

The profile committed in fixtures/gpu/ncu-kernels.txt is what BENCHMARKS.md cites for the
limiter of each kernel (DRAM throughput against SM throughput, occupancy, stall reasons).
``--small-m`` runs only the launches issue #10's unmet targets are about (M = 1, 16 and 64 on
both large shapes, on the registered copy: fused_mma, the dispatcher's path there, and
fused_wgmma's 64-row tile at M = 64), for the per-reason stall profile of the ``stalls`` phase.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from nvfp4_kernels import cuda_backend, layout

#: (kernel, M, N, K): the shapes the performance targets are stated on; fused_mma_tiled is the
#: fused kernel on tile-contiguous weights and fused_wgmma_tiled the Hopper kernel (in fused_mma's
#: K order, after its activation permutation, as the dispatcher launches it) on the same copy
#: (nvfp4_kernels.layout), the launches after the row-major ones in the profile; the fused_wgmma
#: runs need a Hopper GPU and are left out elsewhere
RUNS = (("prefill_vec8", 0, 17408, 5120), ("prefill_scalar", 0, 4096, 4096),
        ("gemv", 1, 17408, 5120), ("gemv", 8, 17408, 5120), ("gemv", 1, 5120, 17408),
        ("fused_mma", 1, 17408, 5120), ("fused_mma", 16, 17408, 5120), ("fused_mma", 64, 17408, 5120),
        ("fused_mma", 256, 17408, 5120), ("fused_mma_tiled", 1, 17408, 5120), ("fused_mma_tiled", 16, 17408, 5120),
        ("fused_wgmma", 256, 17408, 5120), ("fused_wgmma_tiled", 256, 17408, 5120),
        ("fused_wgmma_tiled", 256, 5120, 17408))
#: the launches of issue #10's unmet targets (M = 1 and 16: a fraction of the copy; M = 64: half of
#: cuBLAS bf16), on both large shapes and the registered copy: fused_mma as the dispatcher runs it,
#: and fused_wgmma at M = 64 (its 64-row activation tile) beside it
SMALL_M_RUNS = tuple((kernel, m, n, k) for n, k in ((17408, 5120), (5120, 17408))
                     for kernel, m in (("fused_mma_tiled", 1), ("fused_mma_tiled", 16), ("fused_mma_tiled", 64),
                                       ("fused_wgmma_tiled", 64)))
MATMULS = ("gemv", "fused_mma", "fused_mma_tiled", "fused_wgmma", "fused_wgmma_tiled")


def runs(argv: list[str] | None = None) -> tuple[tuple[str, int, int, int], ...]:
    """The (kernel, M, N, K) launches the command line asks for: every headline run, or with
    ``--small-m`` those of :data:`SMALL_M_RUNS`."""
    parser = argparse.ArgumentParser(prog="python -m nvfp4_harness.nvfp4.profile_once",
                                     description="Run each CUDA kernel once, for ncu to profile.")
    parser.add_argument("--small-m", action="store_true",
                        help="only the launches of issue #10's M = 1, 16 and 64 targets (both large shapes)")
    return SMALL_M_RUNS if parser.parse_args(argv).small_m else RUNS


def main(argv: list[str] | None = None) -> None:
    rng = np.random.default_rng(0)
    g = torch.tensor([0.0123], dtype=torch.float32, device="cuda")
    hopper = torch.cuda.get_device_capability() == (9, 0)
    for kernel, m, n, k in runs(argv):
        if kernel.startswith("fused_wgmma") and not hopper:
            continue
        packed = torch.from_numpy(rng.integers(0, 256, (n, k // 2), dtype=np.uint8)).cuda()
        scales = torch.from_numpy(rng.integers(0x28, 0x48, (n, k // 16), dtype=np.uint8)).cuda()
        if kernel in MATMULS:
            a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
            out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
            if kernel == "gemv":
                cuda_backend.gemv(a, packed, scales, g, None, out)
            elif kernel.startswith("fused_wgmma"):
                tiled = layout.tiled_weight(packed, scales) if kernel == "fused_wgmma_tiled" else None
                cuda_backend.fused_wgmma(a, packed, scales, g, None, out, tiled=tiled)
            else:
                tiled = layout.tiled_weight(packed, scales) if kernel == "fused_mma_tiled" else None
                cuda_backend.fused_mma(a, packed, scales, g, None, out, tiled=tiled)
        else:
            out = torch.empty(n, k, dtype=torch.bfloat16, device="cuda")
            cuda_backend.dequantize(kernel, packed, scales, g, 16, out)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
