"""A/B timing of the GEMV main-loop variants (and the vec8 dequant) on a CUDA GPU.

For each variant of ``nvfp4_gemv_set_variant`` (0: register prefetch one step ahead; 1 and 2:
cp.async weight staging 4 and 5 steps deep) it checks the output against variant 0 and a
float64 reference, then times M = 1 and M = 8 beside a same-run device copy of the bytes the
GEMV must move (CUDA events, a 256 MB L2 flush before every repetition, median of --reps).
``--profile-once`` instead runs each kernel once, for ``ncu``.

    python scripts/gemv_variants.py --out $OUT
    ncu --clock-control none -k regex:nvfp4 python scripts/gemv_variants.py --profile-once
"""

# ruff: noqa: B023  (every lambda is timed inside the iteration that defines it)
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernels import cuda_backend  # noqa: E402

SHAPES = ((17408, 5120), (5120, 17408), (4096, 4096))


def operands(n: int, k: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    packed = torch.from_numpy(rng.integers(0, 256, (n, k // 2), dtype=np.uint8)).cuda()
    scales = torch.from_numpy(rng.integers(0x28, 0x48, (n, k // 16), dtype=np.uint8)).cuda()
    g = torch.tensor([0.0123], dtype=torch.float32, device="cuda")
    return packed, scales, g


def timed(fn, reps: int, flush: torch.Tensor) -> float:
    for _ in range(5):
        fn()
    times = []
    for _ in range(reps):
        flush.fill_(1)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--reps", type=int, default=60)
    parser.add_argument("--profile-once", action="store_true")
    args = parser.parse_args()
    rows = []
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    for n, k in SHAPES:
        packed, scales, g = operands(n, k)
        w = torch.empty(n, k, dtype=torch.bfloat16, device="cuda")
        cuda_backend.dequantize("prefill_vec8", packed, scales, g, 16, w)
        if args.profile_once:
            for variant in (0, 1, 2):
                cuda_backend.set_gemv_variant(variant)
                a = torch.randn(1, k, dtype=torch.bfloat16, device="cuda")
                cuda_backend.gemv(a, packed, scales, g, None, torch.empty(1, n, dtype=torch.bfloat16, device="cuda"))
            torch.cuda.synchronize()
            continue
        dequant_bytes = n * k * (0.5 + 1 / 16 + 2)
        src = torch.empty(int(dequant_bytes) // 2, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        copy_dq = timed(lambda: dst.copy_(src), args.reps, flush)
        vec8 = timed(lambda: cuda_backend.dequantize("prefill_vec8", packed, scales, g, 16, w), args.reps, flush)
        rows.append({"kernel": "dequant_vec8", "n": n, "k": k, "us": vec8, "copy_us": copy_dq,
                     "fraction_of_copy": copy_dq / vec8})
        for m in (1, 8):
            a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
            ref = (a.double() @ w.double().t()).cpu().numpy()
            nbytes = n * k * 0.5625 + m * k * 2 + m * n * 2
            src = torch.empty(int(nbytes) // 2, dtype=torch.uint8, device="cuda")
            dst = torch.empty_like(src)
            copy_us = timed(lambda: dst.copy_(src), args.reps, flush)
            for variant in (0, 1, 2):
                cuda_backend.set_gemv_variant(variant)
                out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
                cuda_backend.gemv(a, packed, scales, g, None, out)
                err = float(np.max(np.abs(out.double().cpu().numpy() - ref) / (np.abs(ref) + 1e-3)))
                us = timed(lambda: cuda_backend.gemv(a, packed, scales, g, None, out), args.reps, flush)
                rows.append({"kernel": f"gemv_v{variant}", "m": m, "n": n, "k": k, "us": us, "copy_us": copy_us,
                             "fraction_of_copy": copy_us / us, "max_rel_err": err,
                             "finite": bool(torch.isfinite(out).all())})
    cuda_backend.set_gemv_variant(0)
    if args.profile_once:
        return 0
    (args.out / "gemv_variants.json").write_text(json.dumps(rows, indent=1))
    print(f"{'kernel':<13}{'m':>3}{'n':>7}{'k':>7}{'us':>9}{'copy us':>9}{'frac':>7}{'rel err':>10}")
    for r in rows:
        print(f"{r['kernel']:<13}{r.get('m', ''):>3}{r['n']:>7}{r['k']:>7}{r['us']:>9.1f}{r['copy_us']:>9.1f}"
              f"{r['fraction_of_copy']:>7.2f}{r.get('max_rel_err', 0.0):>10.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
