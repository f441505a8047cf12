# ruff: noqa: B023  (each timed lambda runs inside the iteration that defines it)
"""Device measurement: which part holds the fused_wgmma kernel at each M. The same launches with
parts of the kernel compiled out (fused_wgmma.cu's NVFP4_WGMMA_ABLATE: the decode, the MMAs, the
weight loads after the first step, the activation stream after the first stages; scripts/ws_dev/
ra_dev.py's ABLATIONS), beside the full kernel,
fused_mma (the dispatcher's path at M <= 64) and the same-run references.

Why (benchmarks/NOTES.md, nineteenth session): at M = 64 the 64-row tile takes about 1.7 us a K
step where its decode issues in about 0.2 and its MMAs in about 0.3; staging the weights deeper
(the sixteenth session's variants) did not close that. An ablated kernel's time is the time of
what is left: if leaving out one part brings the launch near the copy, that part holds it; if
none does, the parts wait on each other (latency), and the stall profile of
`scripts/gpu_session.sh stalls` says where. Outputs of ablated kernels are meaningless and are
not checked; the full kernel's bits are the GPU suites' business.

    python scripts/ws_dev/ra_dev.py --out DIR --prebuild --ablations    # here (nvcc), then carry
                                                                         # kernels/_build
    python scripts/ws_dev/ablate_dev.py --out DIR [--ms 1,16,64,128,256] # on the H200

Rows: per shape and M, the copy and cuBLAS bf16 references, fused_mma on the registered copy at
the dispatcher's split, the library's fused_wgmma launch (the narrowest activation tile, one
block an SM, the library's plan) with each ablation, and at M <= 64 the dev variant with two
64-row blocks an SM and the 64-row tile with a ring of 4 (the library's before the twenty-ninth
session: three activation stages) and of 6 steps at two blocks an SM (with each ablation, and
unablated when the dev library libra.so is there).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SMS = 132
#: the dev entries' variants timed beside the library's launch at M <= 64 (fused_ra.cu builds them
#: in every ablation build): tile-contiguous weights, 64 activation rows, two blocks an SM; and one
#: block an SM with each thread's ring of 4 steps of weights (the nineteenth session's RING; two
#: blocks fit an SM), and two blocks an SM with a ring of 6 (twenty-eighth session: is the ring's
#: weight stream short of bytes in flight?). RING_OF_4 keeps three activation stages: the library's
#: 64-row tile before the twenty-ninth session (it has four since, library_stages), so the
#: ablation rows stay comparable with the earlier sessions' files.
TWO_BLOCKS = (True, 64, 2, 3, False, 0)
RING_OF_4 = (True, 64, 1, 3, False, 4)
RING_OF_6 = (True, 64, 2, 3, False, 6)
#: the rows they give: label, variant, and whether it runs the whole-tile plan for two blocks an SM
#: (else the library's plan at that M)
DEV_ROWS = (("64x2", TWO_BLOCKS, True), ("64x1 ring 4", RING_OF_4, False), ("64x2 ring 6", RING_OF_6, False))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--ms", default="1,16,64,128,256")
    parser.add_argument("--ablations", default=None,
                        help="comma-separated NVFP4_WGMMA_ABLATE values of ra_dev.ABLATIONS to time (default: all; "
                             "a device call can carry only some of the builds)")
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
    vp, i32, i64 = ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64
    libs: dict[str, ctypes.CDLL] = {}
    chosen = list(ra_dev.ABLATIONS) if args.ablations is None else [int(x) for x in args.ablations.split(",")]
    unknown = [n for n in chosen if n not in ra_dev.ABLATIONS]
    if unknown:
        parser.error(f"--ablations {unknown}: not in ra_dev.ABLATIONS {sorted(ra_dev.ABLATIONS)}")
    missing = [n for n in chosen if not ra_dev.ablation_library(n).exists()]
    if missing:
        raise SystemExit(f"ablation builds {missing} are missing: run `python scripts/ws_dev/ra_dev.py --out DIR "
                         "--prebuild --ablations` on the CPU machine and carry kernels/_build")
    for n in chosen:
        libs[ra_dev.ABLATIONS[n]] = ctypes.CDLL(str(ra_dev.ablation_library(n)))
    if ra_dev.PREBUILT.exists():
        libs["full (dev build)"] = ctypes.CDLL(str(ra_dev.PREBUILT))
    for lib in libs.values():
        lib.nvfp4_launch_fused_wgmma_mma_order.restype = ctypes.c_int
        lib.nvfp4_launch_fused_wgmma_mma_order.argtypes = [vp] * 8 + [i32, i64, i64, i32, i32, i32, i32, vp]
        lib.nvfp4_fused_wgmma_act_rows.restype = ctypes.c_int64
        lib.nvfp4_fused_wgmma_act_rows.argtypes = [i32]
        ra_dev.bind(lib)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    work = {"buf": torch.empty(1, dtype=torch.float32, device=dev), "act": torch.empty(16, dtype=torch.uint8,
                                                                                        device=dev)}

    def ensure(floats: int, act_bytes: int) -> None:
        if work["buf"].numel() < floats:
            work["buf"] = torch.empty(floats, dtype=torch.float32, device=dev)
        if work["act"].numel() < act_bytes:
            work["act"] = torch.empty(act_bytes, dtype=torch.uint8, device=dev)

    def stream() -> int:
        return torch.cuda.current_stream().cuda_stream

    def library_launch(lib, a, pt, st, g, o, plan) -> None:
        (m, k), n = a.shape, o.shape[1]
        ensure(cuda_backend.fused_wgmma_workspace_floats(m, n, plan), 2 * k * lib.nvfp4_fused_wgmma_act_rows(m))
        err = lib.nvfp4_launch_fused_wgmma_mma_order(a.data_ptr(), work["act"].data_ptr(), pt.data_ptr(),
                                                     st.data_ptr(), g.data_ptr(), None, o.data_ptr(),
                                                     work["buf"].data_ptr(), m, n, k, 1, plan[0], plan[1], 1,
                                                     stream())
        if err:
            raise RuntimeError(f"nvfp4_launch_fused_wgmma_mma_order: error {err} (m={m} n={n} k={k} plan={plan})")

    def dev_launch(lib, a, pt, st, g, o, plan, variant) -> None:
        (m, k), n = a.shape, o.shape[1]
        ensure(plan[1] * m * n, 2 * k * lib.nvfp4ra_permuted_rows(m, variant[1]))
        ra_dev.launch_mma_order(lib, a, work["act"], pt, st, g, None, o, work["buf"], plan, variant, stream())

    report: dict = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                    "ablations": {str(n): ra_dev.ABLATIONS[n] for n in chosen}, "rows": []}
    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device=dev)
    g = torch.tensor([0.0123], dtype=torch.float32, device=dev)
    lines = []
    for n, k in ((17408, 5120), (5120, 17408)):
        packed, scales = ws_dev.make(n, k, 1)
        p, s = ws_dev.to_dev(packed), ws_dev.to_dev(scales)
        tiled = layout.tiled_weight(p, s)
        pt, st = tiled.packed, tiled.scales
        w_bf16 = torch.randn(n, k, dtype=torch.bfloat16, device=dev)
        plan_two = wgmma_plan(n, k, 2 * sms)  # the whole-tile rule for two blocks an SM
        for m in (int(x) for x in args.ms.split(",")):
            plan = cuda_backend.fused_wgmma_plan(n, k, m, 0)  # the library's plan at this M
            a = torch.randn(m, k, dtype=torch.bfloat16, device=dev)
            o = torch.empty((m, n), dtype=torch.bfloat16, device=dev)
            copy_us, cublas_us, copied = ws_dev.reference_times(a, w_bf16, flush)
            splits = fused_split_count(n, k, m)
            times = {"fused_mma": ws_dev.timer(lambda: cuda_backend.fused_mma(a, p, s, g, None, o, splits=splits,
                                                                              tiled=tiled), flush),
                     "fused_wgmma full": ws_dev.timer(lambda: cuda_backend.fused_wgmma(a, p, s, g, None, o,
                                                                                      plan=plan, tiled=tiled), flush)}
            for what, lib in libs.items():
                times[f"fused_wgmma {what}"] = ws_dev.timer(lambda: library_launch(lib, a, pt, st, g, o, plan), flush)
                for label, variant, whole_tile_plan in DEV_ROWS if m <= TWO_BLOCKS[1] else ():
                    times[f"{label} {what}"] = ws_dev.timer(
                        lambda: dev_launch(lib, a, pt, st, g, o, plan_two if whole_tile_plan else plan, variant), flush)
            report["rows"].append({"n": n, "k": k, "m": m, "copy_us": copy_us, "copied_bytes": copied,
                                   "cublas_bf16_us": cublas_us, "fused_mma_splits": splits, "plan": list(plan),
                                   "plan_two_blocks": list(plan_two), "us": times})
            lines.append(f"{n}x{k} M={m:3d}: copy {copy_us:6.2f} cuBLAS {cublas_us:6.2f} | " +
                         " | ".join(f"{name} {us:6.2f}" for name, us in times.items()))
    (out_dir / "ablate-dev.json").write_text(json.dumps(report, indent=1))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
