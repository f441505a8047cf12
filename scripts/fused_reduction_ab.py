# ruff: noqa: B023  (each timed function runs inside the iteration that defines it)
"""A/B of the fused kernel's two split-K sums on a GPU: the tile's last split block summing the
partials inside the launch, against the finalize kernel launched after it. Both give the same
bits (checked here too). Per shape, M and the host's split count: one call with the L2 flushed
before it (CUDA events, median of 21), and the per-call time of 20 calls captured in a CUDA graph
and replayed (warm L2, no launch gaps: the kernels' own time).

    python scripts/fused_reduction_ab.py [--library libnvfp4_<hash>.so] [--out FILE]

It calls the library's entry itself with explicit buffers, so the graph captures the last-block
sum too (the dispatcher sums with the finalize kernel inside a capture), and ``--library`` times
another build of the kernels (one variant per process). The dispatcher's choice
(nvfp4_kernels.cuda_backend.fused_reduction) comes from this table (benchmarks/NOTES.md).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import torch
from nvfp4_harness.nvfp4 import host_time
from nvfp4_kernels import cuda_backend

sys.path.insert(0, "scripts")
from fused_dev import make, timer, to_dev  # noqa: E402

SHAPES = ((17408, 5120), (5120, 17408), (4096, 4096), (2048, 6144))
MS = (1, 2, 4, 8, 16, 64)
REDUCTIONS = ("finalize", "last_block")


def graph_time_us(run, calls: int = 20, reps: int = 15) -> float:
    """Per-call time of ``calls`` calls captured in one CUDA graph and replayed ``reps`` times."""

    def calls_in_a_row() -> None:
        for _ in range(calls):
            run()

    return replayed_us(calls_in_a_row, calls, reps)


def replayed_us(fn, calls: int, reps: int = 15) -> float:
    """``fn`` (which makes ``calls`` calls) captured once in a CUDA graph after a warm-up, then
    replayed ``reps`` times: the median time per call (CUDA events around each replay)."""
    graph, _ = host_time.capture(torch, fn)  # warm-up on a side stream, then capture
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000 / calls)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None)
    parser.add_argument("--library", default=None, help="a built kernel library to time (default: the package's)")
    parser.add_argument("--ms", default=",".join(map(str, MS)), help="comma-separated M values (default %(default)s)")
    parser.add_argument("--shapes", default=",".join(f"{n}x{k}" for n, k in SHAPES),
                        help="comma-separated NxK shapes (default %(default)s)")
    args = parser.parse_args()
    lib = cuda_backend.load_library(args.library)
    stream = torch.cuda.current_stream().cuda_stream
    counters = cuda_backend.splitk_counters(0, stream, 1 << 16)
    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
    g = torch.tensor([0.0123], dtype=torch.float32, device="cuda")
    rows = []
    ms = [int(m) for m in args.ms.split(",")]
    shapes = [tuple(int(v) for v in shape.split("x")) for shape in args.shapes.split(",")]
    for n, k in shapes:
        packed, scales = make(n, k, 1)
        p, s = to_dev(packed), to_dev(scales)
        for m in ms:
            a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
            splits = cuda_backend.fused_splits(n, k, m)
            if splits < 2:
                continue
            row = {"n": n, "k": k, "m": m, "splits": splits, "default": cuda_backend.fused_reduction(splits, m)}
            outs = {}
            for reduction in REDUCTIONS:
                out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")

                workspace = cuda_backend.gemv_workspace(0, stream, splits * m * n).data_ptr()
                count = counters.data_ptr() if reduction == "last_block" else None

                def run(out=out, workspace=workspace, count=count):
                    # the library entry itself, with explicit buffers (so a CUDA graph captures
                    # the last-block sum too; the dispatcher sums with finalize inside a capture)
                    err = lib.nvfp4_launch_fused(a.data_ptr(), p.data_ptr(), s.data_ptr(), g.data_ptr(), None,
                                                 out.data_ptr(), workspace, count, m, n, k, 1, splits,
                                                 torch.cuda.current_stream().cuda_stream)
                    assert err == 0, err

                row[f"{reduction}_flushed_us"] = round(timer(run, flush, reps=21), 2)
                row[f"{reduction}_graph_us"] = round(graph_time_us(run), 2)
                run()
                outs[reduction] = out
            row["same_bits"] = torch.equal(outs["finalize"].view(torch.int16), outs["last_block"].view(torch.int16))
            rows.append(row)
            print(f"{n}x{k} M={m:3d} splits={splits:2d} default {row['default']:10s} "
                  + "  ".join(f"{r}: flushed {row[r + '_flushed_us']:7.2f} graph {row[r + '_graph_us']:7.2f}"
                              for r in REDUCTIONS) + ("" if row["same_bits"] else "  BITS DIFFER"), flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0 if all(r["same_bits"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
