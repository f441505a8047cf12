# ruff: noqa: B023  (each timed function runs inside the iteration that defines it)
"""A/B of fused_wgmma's launch with and without the packed weights' streaming L2 window
(kernels/cuda/streamed_launch.cuh), in one process, rounds interleaved.

The library (this tree's build, whose launch asks for the window) against the dev library of
scripts/ws_dev (``ra_dev.py --prebuild``) built from the sources before the window: the same kernel
at the same plan, the library's (``cuda_backend.fused_wgmma_plan``), for the library's activation
tile and ring (the ``VARIANTS`` of mma_order_dev.py named below). Each round times every row once
per build, L2 flushed, median of 21 (``ws_dev.timer``), alternating which build goes first, so
that both see the same clocks; the outputs of both builds must be the same bits.

    python scripts/wgmma_window_ab.py --out DIR [--ms 33,64,128] [--rounds 5]

Writes DIR/wgmma-window-ab.json and prints a table of the median ratio (library / twin) per row.
With --mma-ms, it also times fused_mma (whose launch has had the window since the eighth session)
at those M on both layouts for the same rounds, to show whether its round-to-round spread is as
wide as the registered 64-row tile's was with a window.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "ws_dev"))

#: the library's variant for an activation tile (NACT -> mma_order_dev variant name, without the layout)
LIBRARY_VARIANT = {64: "64x1 stages 4 ring 4", 128: "128x1 stages 4 ring 4"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--ms", default="33,48,64,96,128")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--mma-ms", default="", help="M of the fused_mma spread rows (none by default)")
    args = parser.parse_args()
    import mma_order_dev
    import ra_dev
    import torch
    import ws_dev
    from nvfp4_kernels import cuda_backend, layout
    from nvfp4_kernels.tiling import fused_split_count

    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    dev = "cuda"
    lib = ra_dev.library(out_dir)
    by_name = {mma_order_dev.variant_name(v): v for v in mma_order_dev.VARIANTS}
    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device=dev)
    g = torch.tensor([0.0123], dtype=torch.float32, device=dev)
    stream = torch.cuda.current_stream().cuda_stream
    rows = []
    for n, k in ((17408, 5120), (5120, 17408)):
        packed, scales = ws_dev.make(n, k, 1)
        p, s = ws_dev.to_dev(packed), ws_dev.to_dev(scales)
        pt, st = layout.tile_weights(p, s)
        tiled = (pt, st, layout.scale_byte_range(s))
        for m in (int(x) for x in args.ms.split(",")):
            nact = 64 if m <= 64 else 128
            plan = cuda_backend.fused_wgmma_plan(n, k, m, torch.cuda.current_device())
            a = torch.randn(m, k, dtype=torch.bfloat16, device=dev)
            act = torch.empty(2 * k * lib.nvfp4ra_permuted_rows(m, nact), dtype=torch.uint8, device=dev)
            work = torch.empty(max(1, plan[1] * m * n), dtype=torch.float32, device=dev)
            for layout_name in ("tiled", "row-major"):
                variant = by_name[f"{layout_name} {LIBRARY_VARIANT[nact]}"]
                pw, sw = (pt, st) if layout_name == "tiled" else (p, s)
                o_lib = torch.empty((m, n), dtype=torch.bfloat16, device=dev)
                o_twin = torch.empty_like(o_lib)

                def run_lib(o=o_lib, layout_name=layout_name):
                    cuda_backend.fused_wgmma(a, p, s, g, None, o, tiled=tiled if layout_name == "tiled" else None)

                def run_twin(o=o_twin, pw=pw, sw=sw, variant=variant):
                    ra_dev.launch_mma_order(lib, a, act, pw, sw, g, None, o, work, plan, variant, stream)

                run_lib()
                run_twin()
                torch.cuda.synchronize()
                same = bool(torch.equal(o_lib.view(torch.int16), o_twin.view(torch.int16)))
                lib_us, twin_us = [], []
                for r in range(args.rounds):
                    order = ((lib_us, run_lib), (twin_us, run_twin))
                    for times, fn in (order if r % 2 == 0 else order[::-1]):
                        times.append(ws_dev.timer(fn, flush))
                ratio = statistics.median(x / y for x, y in zip(lib_us, twin_us, strict=True))
                rows.append({"n": n, "k": k, "m": m, "layout": layout_name, "plan": list(plan),
                             "variant": mma_order_dev.variant_name(variant), "same_bits": same,
                             "library_us": lib_us, "twin_us": twin_us, "median_ratio": ratio})
                print(f"{n}x{k} M={m:3d} {layout_name:9s} plan {plan}: library {statistics.median(lib_us):6.2f} "
                      f"twin {statistics.median(twin_us):6.2f} us, library/twin {ratio:5.3f} "
                      f"(rounds {min(lib_us):.2f}-{max(lib_us):.2f} / {min(twin_us):.2f}-{max(twin_us):.2f}) "
                      f"same bits {same}", flush=True)
        for m in (int(x) for x in args.mma_ms.split(",") if x.strip()):
            a = torch.randn(m, k, dtype=torch.bfloat16, device=dev)
            o = torch.empty((m, n), dtype=torch.bfloat16, device=dev)
            splits = fused_split_count(n, k, m)
            for layout_name in ("tiled", "row-major"):
                us = [ws_dev.timer(lambda layout_name=layout_name: cuda_backend.fused_mma(
                    a, p, s, g, None, o, splits=splits, tiled=tiled if layout_name == "tiled" else None), flush)
                      for _ in range(args.rounds)]
                rows.append({"n": n, "k": k, "m": m, "layout": layout_name, "path": "fused_mma", "splits": splits,
                             "us": us})
                print(f"{n}x{k} M={m:3d} {layout_name:9s} fused_mma, {splits} splits: {min(us):6.2f}-{max(us):6.2f} us "
                      f"over {args.rounds} rounds", flush=True)
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rounds": args.rounds,
              "rows": rows}
    (out_dir / "wgmma-window-ab.json").write_text(json.dumps(report, indent=1))
    return 0 if all(r.get("same_bits", True) for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
