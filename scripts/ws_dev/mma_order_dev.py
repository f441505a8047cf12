# ruff: noqa: B023  (each timed lambda runs inside the iteration that defines it)
"""Device measurement: the fused_wgmma kernel (in fused_mma's K order) with template arguments the
library does not launch (dev entries in fused_ra.cu: more blocks an SM, narrower activation tiles,
staged weights), on fused_mma's weights, against the library's launches, at the M of issue #10's
targets.

Why this order (benchmarks/NOTES.md, fifteenth and sixteenth sessions): in the natural K order a lane's 32
codes of a row and step lie in all eight scale blocks, so every lane builds eight decode tables a
row and step where fused_mma's lanes build two, and the SASS of the table path has 129 PRMTs a step
against 85 in this order. fused_mma's order gives each lane 32 consecutive codes (two blocks); the
wgmma's B operand then needs the activations permuted to match, which a small kernel does before
the main one (its programmatic dependent). Expected: fewer decode instructions per weight, the
same bits as fused_mma at the same K ranges (every element takes the same k16 sums in the same
order), and one registered copy of the weight (fused_mma's tile-contiguous one) for both paths.

What it checks, then times (L2 flushed, medians of 21, references in the same run):
- the permutation kernel against :func:`mma_k_order` applied by torch, byte for byte, with the
  zero rows it pads the last activation tile with (so no TMA box reaches past the copy: the
  natural-order kernel's partly out-of-bounds boxes measured slow at small M);
- every variant's bits against fused_mma's library launch at the same K ranges (whole tiles at one
  split, the rest at the plan's), over N and M tails, both types, bias, and the exact decode's
  overflow path (g = 2^110);
- copy, cuBLAS bf16, fused_mma tiled (the dispatcher's split), the library's fused_wgmma launch on
  the same tiled copy, the permutation alone, and each variant over its plans. (Until the
  nineteenth session the row beside them was the natural-order kernel on its fragment-ordered
  copy, ``fused_wgmma_fragment_ordered_us`` in the committed 2026-12-05 run.)

    python scripts/ws_dev/ra_dev.py --out DIR --prebuild     # here: kernels/_build/ws/ra/libra.so
    python scripts/ws_dev/mma_order_dev.py --out DIR         # on the H200
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SMS = 132
#: (tiled, NACT, MIN_BLOCKS, STAGES, STAGED, RING) the dev library builds (fused_ra.cu,
#: nvfp4ra_launch_mma_order): the 192- and 128-row tiles do less tensor work than 256 rows where M
#: leaves a tile part empty; STAGED copies the weights into the stages (STAGES - 1 steps in flight
#: instead of the register prefetch's one); RING gives each thread a ring of its own weight bytes,
#: RING steps ahead, with no thread waiting for another (nineteenth session); 64x3 with two stages
#: and a ring of 4 runs three 64-row blocks an SM (twenty-seventh session); deeper rings for the
#: 64-row tile: 6 steps at two blocks an SM (1.5x the weight bytes in flight on an SM) and 8 at
#: one (twenty-eighth session); the 64-row tile's ring of 4 with four and five activation stages
#: (twenty-ninth session), and the 128-row tile's library configuration (four stages, ring of 4)
VARIANTS = ((True, 256, 1, 3, False, 0), (False, 256, 1, 3, False, 0), (True, 192, 1, 3, False, 0),
            (True, 128, 1, 3, False, 0), (True, 64, 2, 3, False, 0), (True, 32, 2, 3, False, 0),
            (True, 16, 3, 3, False, 0), (True, 256, 1, 3, True, 0), (True, 128, 1, 5, True, 0),
            (True, 64, 2, 4, True, 0), (True, 64, 1, 8, True, 0), (True, 16, 3, 5, True, 0),
            (True, 64, 1, 3, False, 4), (False, 64, 1, 3, False, 4), (True, 64, 2, 3, False, 4),
            (True, 128, 1, 3, False, 4), (True, 256, 1, 3, False, 2), (False, 64, 2, 3, False, 4),
            (False, 128, 1, 3, False, 4), (False, 256, 1, 3, False, 2), (True, 192, 1, 3, False, 4),
            (False, 192, 1, 3, False, 4), (True, 64, 3, 2, False, 4), (True, 64, 2, 3, False, 6),
            (False, 64, 2, 3, False, 6), (True, 64, 1, 3, False, 8), (False, 64, 1, 3, False, 8),
            (True, 64, 1, 4, False, 4), (True, 64, 1, 5, False, 4), (False, 64, 1, 4, False, 4),
            (True, 128, 1, 4, False, 4), (False, 128, 1, 4, False, 4))


def variant_name(variant: tuple) -> str:
    """How the rows name a variant, e.g. "tiled 64x2 ring 4" (--variants matches these). An
    unstaged variant's activation stages are named only past three ("tiled 64x1 stages 4 ring 4"),
    so that the names of the earlier sessions' files stand."""
    tiled, nact, min_blocks, stages, staged, ring = variant
    depth = f" staged {stages}" if staged else f" stages {stages}" if stages > 3 else ""
    return f"{'tiled' if tiled else 'row-major'} {nact}x{min_blocks}{depth}{f' ring {ring}' if ring else ''}"


def norm_splits(steps: int, s: int) -> int:
    """The split count whose equal ranges of ceil(steps / s) steps are all non-empty."""
    from nvfp4_kernels.tiling import nonempty_ranges

    return nonempty_ranges(steps, max(1, min(s, steps)))


def plans_for(n: int, k: int, slots: int, m: int) -> list[tuple[int, int]]:
    """Uniform splits whose block count stays within three waves of ``slots``, the library's
    rule for ``slots`` block slots and for one block an SM (tiling.wgmma_plan), and fused_mma's
    split count for M = ``m`` at no whole tiles (the plan with fused_mma's bits)."""
    from nvfp4_kernels.tiling import fused_split_count, wgmma_plan

    tiles, steps = -(-n // 128), k // 128
    out = {(0, norm_splits(steps, s)) for s in range(1, 9) if tiles * norm_splits(steps, s) <= 3 * slots}
    out.add(wgmma_plan(n, k, slots))
    out.add(wgmma_plan(n, k, SMS))
    out.add((0, norm_splits(steps, fused_split_count(n, k, m))))
    return sorted(out)


def mma_k_order() -> np.ndarray:
    """[128] -> natural K offset in a step of the value at each position of the permuted step:
    position 16 j + c (k16 MMA j, its column c) holds K = 32 (c % 8 // 2) + 4 j + 2 (c // 8) + c % 2,
    the value that fused_mma.cu's MMA j pairs with column c (lane t = c % 8 // 2 holds the step's
    codes 32 t .. 32 t + 31, four an MMA)."""
    j, c = np.divmod(np.arange(128), 16)
    return 32 * (c % 8 // 2) + 4 * j + 2 * (c // 8) + c % 2


def permute_act(a, order: np.ndarray | None = None):
    """The activations [m, k] (numpy or torch) in the permuted order, step by step."""
    order = mma_k_order() if order is None else order
    m, k = a.shape
    idx = (np.arange(k // 128)[:, None] * 128 + order[None, :]).reshape(-1)
    if isinstance(a, np.ndarray):
        return np.ascontiguousarray(a[:, idx])
    import torch

    return a[:, torch.as_tensor(idx, device=a.device)].contiguous()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--ms", default="1,16,64,128,192,256")
    parser.add_argument("--quick", action="store_true", help="fewer bit cases and only the library's plan")
    parser.add_argument("--variants", default="",
                        help="comma-separated variant names (variant_name, e.g. 'tiled 64x2 ring 4') to check "
                             "and time; all of VARIANTS by default")
    parser.add_argument("--bits-ms", default="",
                        help="comma-separated M of the bit checks (default 1,5,16,17,33,64,129,200,256; "
                             "1,5,17,64 with --quick)")
    args = parser.parse_args()
    wanted = [x.strip() for x in args.variants.split(",") if x.strip()]
    unknown = sorted(set(wanted) - {variant_name(v) for v in VARIANTS})
    if unknown:
        parser.error(f"unknown variants {unknown}; known: {[variant_name(v) for v in VARIANTS]}")
    variants = tuple(v for v in VARIANTS if not wanted or variant_name(v) in wanted)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    import torch
    from nvfp4_kernels import cuda_backend, layout
    from nvfp4_kernels.tiling import fused_split_count, wgmma_plan

    sys.path.insert(0, str(HERE))
    import ra_dev
    import ws_dev

    dev = "cuda"
    lib = ra_dev.library(out_dir)
    work = {"buf": torch.empty(1, dtype=torch.float32, device=dev),
            "act": torch.empty(8, dtype=torch.uint8, device=dev)}

    def stream() -> int:
        return torch.cuda.current_stream().cuda_stream

    def launch(a, pw, sw, g, bias, o, plan, variant) -> None:
        m, k = a.shape
        need = plan[1] * m * o.shape[1]
        if work["buf"].numel() < need:
            work["buf"] = torch.empty(need, dtype=torch.float32, device=dev)
        act_bytes = 2 * k * lib.nvfp4ra_permuted_rows(m, variant[1])  # padded to whole activation tiles
        if work["act"].numel() < act_bytes:
            work["act"] = torch.empty(act_bytes, dtype=torch.uint8, device=dev)
        ra_dev.launch_mma_order(lib, a, work["act"], pw, sw, g, bias, o, work["buf"], plan, variant, stream())

    def expected(a, p, s, g, bias, plan):
        """fused_mma's library launch at the plan's K ranges: the first 128 * whole_tiles rows at one
        split, the rest at the plan's splits."""
        m = a.shape[0]
        n = p.shape[0]
        cut = min(n, 128 * plan[0])
        parts = []
        for r0, r1, splits in ((0, cut, 1), (cut, n, plan[1])):
            if r1 > r0:
                o = torch.empty((m, r1 - r0), dtype=a.dtype, device=dev)
                cuda_backend.fused_mma(a, p[r0:r1], s[r0:r1], g, None if bias is None else bias[r0:r1], o,
                                       splits=splits)
                parts.append(o)
        return torch.cat(parts, dim=1)

    report: dict = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                    "variants": [list(v) for v in variants], "permutation": [], "bits": [], "rows": []}
    failures: list[str] = []
    # the permutation kernel against its definition, with the zero rows it pads a tile with
    for m, rows_out, k in ((1, 1, 128), (1, 16, 256), (3, 64, 1024), (256, 256, 5120), (17, 32, 17408)):
        a = torch.randn(m, k, device=dev).to(torch.bfloat16)
        got = torch.full((rows_out, k), float("nan"), dtype=torch.bfloat16, device=dev)
        err = lib.nvfp4ra_permute_act(a.data_ptr(), got.data_ptr(), m, rows_out, k, stream())
        want = torch.cat([permute_act(a), torch.zeros(rows_out - m, k, dtype=a.dtype, device=dev)])
        same = not err and bool(torch.equal(got.view(torch.int16), want.view(torch.int16)))
        report["permutation"].append({"m": m, "rows_out": rows_out, "k": k, "error": err, "same": same})
        if not same:
            failures.append(f"permutation differs from mma_k_order: m={m} rows_out={rows_out} k={k} (error {err})")
    # bits against fused_mma at the same K ranges
    g_normal = torch.tensor([0.0123], dtype=torch.float32, device=dev)
    # s = byte x 2^113 with bytes 1.0 .. 3.75: s 2^14 overflows for half the blocks (the exact
    # decode's slow form) while every weight and sum stays finite in bf16
    g_over = torch.tensor([2.0 ** 113], dtype=torch.float32, device=dev)
    # (n, k, scale bytes, g, dtypes): the table's range; every byte but the two NaNs (zero,
    # subnormal and negative scales, blocks outside the table's range); the overflow form
    cases = [(200, 1024, "table", g_normal, (torch.bfloat16, torch.float16)),
             (1000, 2048, "table", g_normal, (torch.bfloat16, torch.float16)),
             (132 * 128 + 70, 256, "table", g_normal, (torch.bfloat16, torch.float16)),
             (300, 1024, "all", g_normal, (torch.bfloat16, torch.float16)),
             (257, 1024, "overflow", g_over, (torch.bfloat16,))]
    ms = (1, 5, 17, 64) if args.quick else (1, 5, 16, 17, 33, 64, 129, 200, 256)
    if args.bits_ms:
        ms = tuple(int(x) for x in args.bits_ms.split(","))
    for n, k, kind, g, dtypes in cases:
        packed, scales = ws_dev.make(n, k, n + k, *{"table": (0x30, 0x40), "all": (0, 256),
                                                    "overflow": (0x38, 0x48)}[kind])
        scales[(scales & 0x7F) == 0x7F] -= 1  # no NaN scale: its NaN's bits are not what is compared
        p, s = ws_dev.to_dev(packed), ws_dev.to_dev(scales)
        pt, st = layout.tile_weights(p, s)
        for dtype in dtypes:
            tiles, steps = -(-n // 128), k // 128
            plans = {wgmma_plan(n, k, SMS), (tiles, 1)}
            if not args.quick:
                plans |= {(0, norm_splits(steps, x)) for x in (2, 3)}
            for m in ms:
                a = torch.randn(m, k, device=dev).to(dtype)
                bias = torch.randn(n, device=dev).to(dtype) if m % 2 else None
                for plan in sorted(plans):
                    want = expected(a, p, s, g, bias, plan)
                    for variant in variants:
                        if m > variant[1]:
                            continue
                        got = torch.full((m, n), float("nan"), dtype=dtype, device=dev)
                        launch(a, pt if variant[0] else p, st if variant[0] else s, g, bias, got, plan, variant)
                        same = bool(torch.equal(got.view(torch.int16), want.view(torch.int16)))
                        report["bits"].append({"dtype": str(dtype), "n": n, "k": k, "m": m, "plan": list(plan),
                                               "bias": bias is not None, "scales": kind, "g": float(g.item()),
                                               "variant": list(variant), "same_bits": same})
                        if not same:
                            failures.append(f"bits differ from fused_mma: {dtype} {n}x{k} M={m} plan={plan} "
                                            f"{variant} g={g.item():g}")
    torch.cuda.synchronize()

    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device=dev)
    lines = []
    for n, k in ((17408, 5120), (5120, 17408)):
        packed, scales = ws_dev.make(n, k, 1)
        p, s = ws_dev.to_dev(packed), ws_dev.to_dev(scales)
        pt, st = layout.tile_weights(p, s)
        w_bf16 = torch.randn(n, k, dtype=torch.bfloat16, device=dev)
        for m in (int(x) for x in args.ms.split(",")):
            a = torch.randn(m, k, dtype=torch.bfloat16, device=dev)
            o = torch.empty((m, n), dtype=torch.bfloat16, device=dev)
            copy_us, cublas_us, copied = ws_dev.reference_times(a, w_bf16, flush)
            splits = fused_split_count(n, k, m)
            tiled = (pt, st, layout.scale_byte_range(s))
            mma_us = ws_dev.timer(lambda: cuda_backend.fused_mma(a, p, s, g_normal, None, o, splits=splits,
                                                                 tiled=tiled), flush)
            mma_row_major_us = ws_dev.timer(lambda: cuda_backend.fused_mma(a, p, s, g_normal, None, o,
                                                                           splits=splits), flush)
            library_us = ws_dev.timer(lambda: cuda_backend.fused_wgmma(a, p, s, g_normal, None, o, tiled=tiled),
                                      flush)
            library_row_major_us = ws_dev.timer(lambda: cuda_backend.fused_wgmma(a, p, s, g_normal, None, o), flush)
            permuted = torch.empty((256, k), dtype=a.dtype, device=dev)
            permute_us = ws_dev.timer(lambda: lib.nvfp4ra_permute_act(a.data_ptr(), permuted.data_ptr(), m, m, k,
                                                                      stream()), flush)
            times = {}
            for variant in variants:
                if m > variant[1]:
                    continue
                pw, sw = (pt, st) if variant[0] else (p, s)
                name = variant_name(variant)
                plans = ([wgmma_plan(n, k, SMS * variant[2])] if args.quick
                         else plans_for(n, k, SMS * variant[2], m))
                for plan in plans:
                    times[f"{name} plan {plan[0]},{plan[1]}"] = ws_dev.timer(
                        lambda pw=pw, sw=sw, plan=plan, variant=variant: launch(a, pw, sw, g_normal, None, o, plan,
                                                                               variant), flush)
            best = min(times, key=times.get)
            report["rows"].append({"n": n, "k": k, "m": m, "copy_us": copy_us, "copied_bytes": copied,
                                   "cublas_bf16_us": cublas_us, "fused_mma_tiled_us": mma_us,
                                   "fused_mma_row_major_us": mma_row_major_us,
                                   "fused_mma_splits": splits, "fused_wgmma_library_us": library_us,
                                   "fused_wgmma_library_row_major_us": library_row_major_us,
                                   "permute_us": permute_us, "mma_order_us": times, "best": best})
            b = times[best]
            lines.append(f"{n}x{k} M={m:3d}: copy {copy_us:6.2f} cuBLAS {cublas_us:6.2f} mma {mma_us:6.2f} "
                         f"(row-major {mma_row_major_us:6.2f}, {splits} splits) "
                         f"wgmma library {library_us:6.2f} (row-major {library_row_major_us:6.2f}) "
                         f"permute {permute_us:5.2f} | best {best}: {b:6.2f} us = "
                         f"{copy_us / b:5.1%} of copy, {b / cublas_us:4.2f}x cuBLAS")
            for variant in variants:  # each variant's fastest plan
                mine = {key: us for key, us in times.items() if key.startswith(variant_name(variant) + " plan ")}
                if mine:
                    fastest = min(mine, key=mine.get)
                    lines.append(f"    {fastest}: {mine[fastest]:6.2f} us")
    report["failures"] = failures
    (out_dir / "mma-order-dev.json").write_text(json.dumps(report, indent=1))
    print("\n".join(failures[:20]) or
          f"bits: all {len(report['bits'])} launches equal fused_mma's; the permutation equals its definition")
    print("\n".join(lines))
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
