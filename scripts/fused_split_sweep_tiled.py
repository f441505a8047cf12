# ruff: noqa: B023  (each timed function runs inside the iteration that defines it)
"""Split sweep of the fused kernel on tile-contiguous weights (the layout the bench's tiled rows and
a registered weight use): every K split count from 1 to --max-splits at each M, L2 flushed (CUDA
events, median of 15) and in CUDA-graph replay, beside the count the host picks
(nvfp4_kernels.tiling.fused_split_count). The split model was fitted on row-major sweeps
(benchmarks/experiments/fused-split-sweep-*.json); this checks it on the other layout.

    python scripts/fused_split_sweep_tiled.py --out FILE [--library libnvfp4_<hash>.so] [--ms 1,8,16]
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
from nvfp4_kernels import cuda_backend, layout
from nvfp4_kernels.tiling import fused_split_count

sys.path.insert(0, "scripts")
from fused_dev import make, timer, to_dev  # noqa: E402
from fused_library_ab import _load  # noqa: E402
from fused_reduction_ab import graph_time_us  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--library", default=None, help="a built kernel library (default: the package's)")
    parser.add_argument("--ms", default="1,8,16,32,64")
    parser.add_argument("--shapes", default="17408x5120,5120x17408")
    parser.add_argument("--max-splits", type=int, default=16)
    args = parser.parse_args()
    lib = _load(args.library) if args.library else cuda_backend.load_library()
    stream = torch.cuda.current_stream().cuda_stream
    counters = cuda_backend.splitk_counters(0, stream, 1 << 16)
    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
    g = torch.tensor([0.0123], dtype=torch.float32, device="cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for shape in args.shapes.split(","):
        n, k = (int(v) for v in shape.split("x"))
        packed, scales = make(n, k, 1)
        p, s = to_dev(packed), to_dev(scales)
        pt, st = layout.tile_weights(p, s)
        scale_bytes = layout.scale_byte_range(s)
        for m in (int(v) for v in args.ms.split(",")):
            a = torch.randn(m, k, dtype=torch.float32, device="cuda").to(torch.bfloat16)
            out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
            host = fused_split_count(n, k, m, sms, int(lib.nvfp4_fused_occupancy(m)))
            workspace = cuda_backend.gemv_workspace(0, stream, args.max_splits * m * n).data_ptr()
            for splits in range(1, min(args.max_splits, k // 128) + 1):
                reduction = cuda_backend.fused_reduction(splits, m)
                count = counters.data_ptr() if reduction == "last_block" else None

                def run(splits=splits, count=count):
                    err = lib.nvfp4_launch_fused_tiled(a.data_ptr(), pt.data_ptr(), st.data_ptr(), g.data_ptr(), None,
                                                       out.data_ptr(), workspace if splits > 1 else None, count, m, n,
                                                       k, 1, splits, torch.cuda.current_stream().cuda_stream,
                                                       scale_bytes)
                    assert err == 0, err

                run()
                torch.cuda.synchronize()
                row = {"n": n, "k": k, "m": m, "splits": splits, "host_splits": host, "reduction": reduction,
                       "flushed_us": round(timer(run, flush, reps=15), 2), "graph_us": round(graph_time_us(run), 2)}
                rows.append(row)
            mine = [r for r in rows if (r["n"], r["k"], r["m"]) == (n, k, m)]
            best = min(mine, key=lambda r: r["flushed_us"])
            at_host = next((r for r in mine if r["splits"] == host), best)
            ratio = at_host["flushed_us"] / best["flushed_us"]
            print(f"{n}x{k} M={m:3d} host {host:2d}: {at_host['flushed_us']:7.2f} us; best flushed "
                  f"{best['splits']:2d}: {best['flushed_us']:7.2f} us ({ratio:.3f}x); "
                  + " ".join(f"{r['splits']}:{r['flushed_us']:.1f}" for r in mine), flush=True)
    with open(args.out, "w") as fh:
        json.dump({"library": args.library, "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
