# ruff: noqa: B023  (each timed function runs inside the iteration that defines it)
"""GEMV against fused_mma at decode M on the layer shapes of common models, in one process.

The policy's thresholds are measured on the issue's two large shapes (17408 x 5120 and
5120 x 17408), where the fused path beats the GEMV at every M <= 8. Smaller layers give each
fused block only a few K steps, so this times both decode paths, with the split counts the host
picks, on the shapes a 7B-14B model has (L2 flushed: CUDA events, median of 21; and CUDA-graph
replay, 20 calls per graph: the kernels' own time), beside a same-run device copy of the
weight bytes. It answers whether a per-shape GEMV threshold would pay; it changes nothing.

Graph replay of one layer's call keeps a small layer's weights in L2 (4096 x 4096 is 9.4 MB), which
a decode loop never does: its next call reads another layer's weights. So ``--rotate`` adds a
third time per path: one CUDA graph of calls on as many copies of the weights as take twice the
L2 cache, replayed; the time per call is that of back-to-back calls, each streaming its weights
from device memory, with no launch gaps (the decode loop of a CUDA-graph runtime). A copy of the
weight bytes is timed the same way; it reads and writes them, twice a decode kernel's traffic, so
it is a bandwidth reference, not the bench's copy of a row's bytes.

    python scripts/decode_paths_by_shape.py [--ms 1,4,8] [--rotate] [--shapes NxK,...] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
from nvfp4_kernels import cuda_backend

sys.path.insert(0, "scripts")
from fused_dev import make, timer, to_dev  # noqa: E402
from fused_reduction_ab import graph_time_us, replayed_us  # noqa: E402

#: (N, K): attention and MLP projections of 7B-14B models, the seed shapes and the issue's two
SHAPES = ((4096, 4096), (11008, 4096), (4096, 11008), (14336, 4096), (4096, 14336), (5120, 5120),
          (6144, 2048), (2048, 6144), (17408, 5120), (5120, 17408))


def rotating_graph_us(calls: list, reps: int = 15) -> float:
    """Per-call time of ``calls`` (each on its own weight copy) captured in one CUDA graph and
    replayed: back-to-back calls that each read their weights from device memory."""

    def all_calls() -> None:
        for call in calls:
            call()

    return replayed_us(all_calls, len(calls), reps)


def weight_copies(p: torch.Tensor, s: torch.Tensor) -> tuple[list, list]:
    """Copies of packed weights ``p`` and scales ``s`` that together take twice the L2 (4 to 64)."""
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    copies = max(4, min(64, -(-2 * l2 // (p.numel() + s.numel()))))
    return [p.clone() for _ in range(copies)], [s.clone() for _ in range(copies)]


def layer_operands(shape_list: str):
    """For each "NxK" of a comma-separated list: (n, k, packed, scales, packed copies, scale
    copies), random codes and scales (fused_dev.make, seed 1) on the GPU, the copies together
    twice the L2 (:func:`weight_copies`)."""
    for n, k in (tuple(int(v) for v in shape.split("x")) for shape in shape_list.split(",")):
        p, s = (to_dev(x) for x in make(n, k, 1))
        yield (n, k, p, s, *weight_copies(p, s))


def rotating_row(n: int, k: int, m: int, p: torch.Tensor, s: torch.Tensor, g: torch.Tensor) -> dict:
    """GEMV, fused and a copy, each over weight copies that together take twice the L2."""
    ps, ss = weight_copies(p, s)
    copies = len(ps)
    nbytes = p.numel() + s.numel()
    a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    outs = [torch.empty(m, n, dtype=torch.bfloat16, device="cuda") for _ in range(copies)]
    srcs = [torch.empty(nbytes, dtype=torch.uint8, device="cuda") for _ in range(copies)]
    dsts = [torch.empty(nbytes, dtype=torch.uint8, device="cuda") for _ in range(copies)]
    row = {"copies": copies}
    row["gemv_rotating_us"] = round(rotating_graph_us(
        [lambda i=i: cuda_backend.gemv(a, ps[i], ss[i], g, None, outs[i]) for i in range(copies)]), 2)
    row["fused_mma_rotating_us"] = round(rotating_graph_us(
        [lambda i=i: cuda_backend.fused_mma(a, ps[i], ss[i], g, None, outs[i]) for i in range(copies)]), 2)
    row["copy_rotating_us"] = round(rotating_graph_us(
        [lambda i=i: dsts[i].copy_(srcs[i]) for i in range(copies)]), 2)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ms", default="1,4,8")
    parser.add_argument("--out", default=None)
    parser.add_argument("--rotate", action="store_true", help="also time calls that rotate through weight copies "
                        "larger than the L2 (see above)")
    parser.add_argument("--shapes", default=",".join(f"{n}x{k}" for n, k in SHAPES))
    parser.add_argument("--skip-single", action="store_true", help="only the rotating times")
    args = parser.parse_args()
    shapes = [tuple(int(v) for v in shape.split("x")) for shape in args.shapes.split(",")]
    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
    g = torch.tensor([0.0123], dtype=torch.float32, device="cuda")
    rows = []
    for n, k in shapes:
        packed, scales = make(n, k, 1)
        p, s = to_dev(packed), to_dev(scales)
        src = torch.empty(p.numel() + s.numel(), dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        copy_us = timer(lambda: dst.copy_(src), flush, reps=21)
        for m in (int(v) for v in args.ms.split(",")):
            a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
            out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
            calls = {"gemv": lambda: cuda_backend.gemv(a, p, s, g, None, out),
                     "fused_mma": lambda: cuda_backend.fused_mma(a, p, s, g, None, out)}
            row = {"n": n, "k": k, "m": m, "copy_us": round(copy_us, 2),
                   "gemv_splits": cuda_backend.gemv_splits(n, k), "fused_splits": cuda_backend.fused_splits(n, k, m)}
            if not args.skip_single:
                for name, call in calls.items():
                    row[f"{name}_flushed_us"] = round(timer(call, flush, reps=21), 2)
                    row[f"{name}_graph_us"] = round(graph_time_us(call), 2)
                print(f"{n:>6}x{k:<6} M={m}  gemv {row['gemv_flushed_us']:6.2f} / {row['gemv_graph_us']:6.2f}  "
                      f"fused {row['fused_mma_flushed_us']:6.2f} / {row['fused_mma_graph_us']:6.2f} "
                      f"(s={row['fused_splits']})  copy {copy_us:6.2f}  fused/gemv graph "
                      f"{row['fused_mma_graph_us'] / row['gemv_graph_us']:.2f}", flush=True)
            if args.rotate:
                row.update(rotating_row(n, k, m, p, s, g))
                print(f"{n:>6}x{k:<6} M={m}  rotating x{row['copies']}: gemv {row['gemv_rotating_us']:6.2f} "
                      f"(s={row['gemv_splits']})  fused {row['fused_mma_rotating_us']:6.2f} (s={row['fused_splits']})  "
                      f"copy {row['copy_rotating_us']:6.2f}  fused/gemv "
                      f"{row['fused_mma_rotating_us'] / row['gemv_rotating_us']:.2f}", flush=True)
            rows.append(row)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "cuda": torch.version.cuda, "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
