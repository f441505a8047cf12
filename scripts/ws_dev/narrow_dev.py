"""Device measurement: the fused_wgmma kernel with narrow activation tiles (its NACT template
argument: 16, 32 or 64 activation rows a block instead of 256, wgmma m64nNk16) and more than one
block per SM (MIN_BLOCKS), on fragment-ordered weights, at the small M of issue #10's targets.

Why: at M <= 64 the library's 256-row tile runs four times the tensor work it needs and holds one
block per SM, so only 8 KB of weights are in flight per SM. A narrow tile needs a quarter or less
of the accumulators, which leaves room for two or three blocks per SM. The question this script
answers is how close that gets to the copy of the weights' bytes and to half of cuBLAS bf16 at
M = 64, beside fused_mma on tile-contiguous weights (the dispatcher's path there today), in one
run with the L2 flushed (medians of 21). It also checks every narrow launch's bits against the
library kernel at the same plan (the per-element sums do not depend on the MMA's N).

    python scripts/ws_dev/ra_dev.py --out DIR --prebuild     # here: kernels/_build/ws/ra/libra.so
    python scripts/ws_dev/narrow_dev.py --out DIR            # on the H200
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SMS = 132
#: (NACT, MIN_BLOCKS) the dev library builds (fused_ra.cu, nvfp4ra_launch_narrow)
VARIANTS = ((64, 1), (64, 2), (32, 2), (16, 2), (16, 3))


def norm_splits(steps: int, s: int) -> int:
    per = -(-steps // max(1, min(s, steps)))
    return -(-steps // per)


def plans_for(n: int, k: int, slots: int) -> list[tuple[int, int]]:
    """Uniform splits whose block count stays within three waves of ``slots``, and the library's
    rule for ``slots`` block slots (tiling.wgmma_plan)."""
    from nvfp4_kernels.tiling import wgmma_plan

    tiles, steps = -(-n // 128), k // 128
    out = {(0, norm_splits(steps, s)) for s in range(1, 9) if tiles * norm_splits(steps, s) <= 3 * slots}
    out.add(wgmma_plan(n, k, slots))
    out.add(wgmma_plan(n, k, SMS))
    return sorted(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--ms", default="1,16,32,64")
    args = parser.parse_args()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    import torch
    from nvfp4_kernels import cuda_backend, layout
    from nvfp4_kernels.tiling import fused_split_count, wgmma_plan

    sys.path.insert(0, str(HERE))
    import ra_dev
    import ws_dev

    dev = "cuda"
    vp, i32 = ctypes.c_void_p, ctypes.c_int32
    lib = ra_dev.library(out_dir)
    lib.nvfp4ra_launch_narrow.restype = ctypes.c_int
    lib.nvfp4ra_launch_narrow.argtypes = [vp, vp, vp, vp, vp, vp, vp, i32, i32, i32, i32, i32, i32, i32, i32, vp]
    work = {"buf": torch.empty(1, dtype=torch.float32, device=dev)}

    def narrow(a, pf, sf, g, o, plan, nact, minb) -> None:
        m, k = a.shape
        n = o.shape[1]
        need = plan[1] * m * n
        if work["buf"].numel() < need:
            work["buf"] = torch.empty(need, dtype=torch.float32, device=dev)
        err = lib.nvfp4ra_launch_narrow(a.data_ptr(), pf.data_ptr(), sf.data_ptr(), g.data_ptr(), None, o.data_ptr(),
                                        work["buf"].data_ptr(), m, n, k, int(a.dtype == torch.bfloat16), plan[0],
                                        plan[1], nact, minb, torch.cuda.current_stream().cuda_stream)
        if err:
            raise RuntimeError(f"nvfp4ra_launch_narrow: error {err} (m={m} n={n} k={k} plan={plan} {nact}x{minb})")

    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device=dev)
    report: dict = {"variants": [list(v) for v in VARIANTS], "rows": [], "bits": []}
    lines, failures = [], []
    g = torch.tensor([0.0123], dtype=torch.float32, device=dev)
    # bits: every variant against the library kernel at the same plan, over tails and both types
    for dtype in (torch.bfloat16, torch.float16):
        for n, k in ((200, 1024), (1000, 2048), (132 * 128 + 70, 256)):
            packed, scales = ws_dev.make(n, k, n + k)
            p, s = ws_dev.to_dev(packed), ws_dev.to_dev(scales)
            pf, sf = layout.wgmma_weights(p, s)
            for m in (1, 5, 16, 17, 33, 64):
                a = torch.randn(m, k, device=dev).to(dtype)
                plan = wgmma_plan(n, k, SMS)
                want = torch.empty(m, n, dtype=dtype, device=dev)
                cuda_backend.fused_wgmma(a, p, s, g, None, want, plan=plan, fragment_ordered=(pf, sf))
                for nact, minb in VARIANTS:
                    if m > nact:
                        continue
                    got = torch.full((m, n), float("nan"), dtype=dtype, device=dev)
                    narrow(a, pf, sf, g, got, plan, nact, minb)
                    same = bool(torch.equal(got.view(torch.int16), want.view(torch.int16)))
                    report["bits"].append({"dtype": str(dtype), "n": n, "k": k, "m": m, "variant": [nact, minb],
                                           "same_bits": same})
                    if not same:
                        failures.append(f"bits differ: {dtype} {n}x{k} M={m} {nact}x{minb}")
    torch.cuda.synchronize()
    def time_row(n, k, m, p, s, pt, st, pf, sf, w_bf16) -> str:
        """Every timing of one shape and M; the row goes into the report, its summary line back."""
        a = torch.randn(m, k, dtype=torch.bfloat16, device=dev)
        o = torch.empty((m, n), dtype=torch.bfloat16, device=dev)
        copy_us, cublas_us, copied = ws_dev.reference_times(a, w_bf16, flush)
        splits = fused_split_count(n, k, m)
        tiled = (pt, st, layout.scale_byte_range(s))
        mma_tiled_us = ws_dev.timer(lambda: cuda_backend.fused_mma(a, p, s, g, None, o, splits=splits, tiled=tiled),
                                    flush)
        wg256_us = ws_dev.timer(lambda: cuda_backend.fused_wgmma(a, p, s, g, None, o, fragment_ordered=(pf, sf)),
                                flush)
        times = {}
        for nact, minb in VARIANTS:
            if m > nact:
                continue
            for plan in plans_for(n, k, SMS * minb):
                times[f"{nact}x{minb} plan {plan[0]},{plan[1]}"] = ws_dev.timer(
                    lambda nact=nact, minb=minb, plan=plan: narrow(a, pf, sf, g, o, plan, nact, minb), flush)
        best = min(times, key=times.get)
        report["rows"].append({"n": n, "k": k, "m": m, "copy_us": copy_us, "copied_bytes": copied,
                               "cublas_bf16_us": cublas_us, "fused_mma_tiled_us": mma_tiled_us,
                               "fused_mma_splits": splits, "fused_wgmma_tiled_256_us": wg256_us,
                               "narrow_us": times, "best": best})
        b = times[best]
        return (f"{n}x{k} M={m:3d}: copy {copy_us:6.2f} cuBLAS {cublas_us:6.2f} mma tiled {mma_tiled_us:6.2f} "
                f"wg256 {wg256_us:6.2f} | best {best}: {b:6.2f} us = {copy_us / b:5.1%} of copy, "
                f"{b / cublas_us:4.2f}x cuBLAS")

    for n, k in ((17408, 5120), (5120, 17408)):
        packed, scales = ws_dev.make(n, k, 1)
        p, s = ws_dev.to_dev(packed), ws_dev.to_dev(scales)
        pt, st = layout.tile_weights(p, s)
        pf, sf = layout.wgmma_weights(p, s)
        w_bf16 = torch.randn(n, k, dtype=torch.bfloat16, device=dev)
        for m in (int(x) for x in args.ms.split(",")):
            lines.append(time_row(n, k, m, p, s, pt, st, pf, sf, w_bf16))
    report["failures"] = failures
    (out_dir / "narrow-dev.json").write_text(json.dumps(report, indent=1))
    print("\n".join(failures[:20]) or "bits: every narrow launch equals the library kernel")
    print("\n".join(lines))
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
