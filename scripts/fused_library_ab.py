# ruff: noqa: B023  (each timed function runs inside the iteration that defines it)
"""A/B of two builds of the kernel library on the fused path (or, with --kernel gemv, the decode
GEMV), in one process: the same inputs,
the split count and split-K sum the dispatcher would choose, each build's call timed with the L2
flushed (CUDA events, median of 21) and in CUDA-graph replay (20 calls per graph: the kernels' own
time), interleaved row by row so that both builds see the same clocks. Each build gets the split
count the host would choose for it (its own occupancy), so builds with other tile resources are
timed as they would run. Where both builds split K alike their outputs must be the same bits
(SHA-256 of each output, compared here); another split count legitimately changes the sum's order.

    python scripts/fused_library_ab.py --a kernels/_build/libnvfp4_OLD.so --b kernels/_build/libnvfp4_NEW.so \
        [--ms 1,8,16,64] [--shapes 17408x5120,5120x17408] [--b-tiled [--a-tiled placed|bytes]] [--out FILE]

Used to decide whether a kernel change ships (benchmarks/NOTES.md); the benchmark proper is
``python -m nvfp4_harness bench``.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import sys

import torch
from nvfp4_kernels import cuda_backend, layout
from nvfp4_kernels.tiling import fused_split_count

sys.path.insert(0, "scripts")
from fused_dev import make, timer, to_dev  # noqa: E402
from fused_reduction_ab import graph_time_us  # noqa: E402

SHAPES = ((17408, 5120), (5120, 17408), (4096, 4096))
MS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def _load(path: str) -> ctypes.CDLL:
    """A library with the four entry points this A/B calls typed from this tree's table
    (cuda_backend._SIGNATURES), without load_library's check of every export, so that builds whose
    other exports differ can be compared; these four must have this tree's signatures (the GEMV
    launcher gained ``counters`` at f5a06ba: older builds cannot run --kernel gemv here)."""
    lib = ctypes.CDLL(path)
    for name in ("nvfp4_launch_fused", "nvfp4_fused_occupancy", "nvfp4_launch_gemv", "nvfp4_gemv_splits",
                 "nvfp4_launch_fused_tiled"):
        if name == "nvfp4_launch_fused_tiled" and not hasattr(lib, name):
            continue  # builds before the tile-contiguous layout
        restype, argtypes = cuda_backend._SIGNATURES[name]
        getattr(lib, name).restype, getattr(lib, name).argtypes = restype, argtypes
    return lib


def _per_build(pair: str | None) -> dict[str, str]:
    """'A,B' -> {"a": A, "b": B} (a per-build option); {} when not given."""
    return dict(zip(("a", "b"), pair.split(","), strict=True)) if pair else {}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", required=True, help="the baseline library (.so)")
    parser.add_argument("--b", required=True, help="the candidate library (.so)")
    parser.add_argument("--ms", default=",".join(map(str, MS)))
    parser.add_argument("--shapes", default=",".join(f"{n}x{k}" for n, k in SHAPES))
    parser.add_argument("--dtypes", default="bfloat16,float16")
    parser.add_argument("--out", default=None)
    parser.add_argument("--kernel", choices=("fused", "gemv"), default="fused",
                        help="the launcher compared: the fused kernel (M <= 256) or the decode GEMV (M <= 8)")
    parser.add_argument("--gemv-reductions", default=None, metavar="A,B",
                        help="with --kernel gemv: how each build sums K splits, 'finalize' or 'last_block' "
                             "(default: cuda_backend.gemv_reduction for both)")
    parser.add_argument("--fused-reductions", default=None, metavar="A,B",
                        help="--kernel fused: how each build sums K splits, 'finalize' or 'last_block' "
                             "(default: cuda_backend.fused_reduction for both)")
    parser.add_argument("--b-tiled", action="store_true",
                        help="--kernel fused: give --b the weights in the tile-contiguous layout "
                             "(nvfp4_kernels.layout) through nvfp4_launch_fused_tiled (same bits expected)")
    parser.add_argument("--a-tiled", choices=("placed", "bytes"), default=None,
                        help="--kernel fused: give --a the tile-contiguous weights too: 'placed' as this "
                             "tree's layout makes them, 'bytes' with the codes' sign bits where the contract "
                             "has them (the layout of builds before the signs were placed, 2026-12-02)")
    parser.add_argument("--tiled-scale-bytes", choices=("range", "zero"), default="range",
                        help="the scale-byte range every tiled launch passes (nvfp4_launch_fused_tiled's last "
                             "argument): the weight's (layout.scale_byte_range, as layout.register does) or 0 "
                             "(per-step range test). Builds before the argument existed (2026-12-02, seventh "
                             "session) take 14 arguments and ignore the extra one")
    parser.add_argument("--same-splits", action="store_true",
                        help="give both builds the split count the host chooses for --a (same bits expected)")
    args = parser.parse_args()
    gemv_reductions = _per_build(args.gemv_reductions)
    fused_reductions = _per_build(args.fused_reductions)
    libs = {"a": _load(args.a), "b": _load(args.b)}
    stream = torch.cuda.current_stream().cuda_stream
    counters = {name: cuda_backend.splitk_counters(0, stream, 1 << 16) for name in libs}
    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
    g = torch.tensor([0.0123], dtype=torch.float32, device="cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for shape in args.shapes.split(","):
        n, k = (int(v) for v in shape.split("x"))
        packed, scales = make(n, k, 1)
        p, s = to_dev(packed), to_dev(scales)
        weights = {"a": (p, s), "b": (p, s)}
        scale_bytes = layout.scale_byte_range(s) if args.tiled_scale_bytes == "range" else 0
        if args.b_tiled:
            weights["b"] = layout.tile_weights(p, s)
        if args.a_tiled:
            pt, st = layout.tile_weights(p, s)
            weights["a"] = (pt if args.a_tiled == "placed" else layout.unplace_signs(pt).contiguous(), st)
        for dtype in args.dtypes.split(","):
            tdt = getattr(torch, dtype)
            for m in (int(v) for v in args.ms.split(",")):
                a = torch.randn(m, k, dtype=torch.float32, device="cuda").to(tdt)
                if args.kernel == "gemv":
                    split_of = {name: int(lib.nvfp4_gemv_splits(n, k)) for name, lib in libs.items()}
                else:
                    split_of = {name: fused_split_count(n, k, m, sms, int(lib.nvfp4_fused_occupancy(m)))
                                for name, lib in libs.items()}
                if args.same_splits:
                    split_of["b"] = split_of["a"]
                workspace = cuda_backend.gemv_workspace(0, stream, max(split_of.values()) * m * n).data_ptr()
                row = {"n": n, "k": k, "m": m, "dtype": dtype, "scale_bytes": scale_bytes,
                       **{f"{name}_splits": v for name, v in split_of.items()}}
                outputs: dict[str, torch.Tensor] = {}
                for name, lib in libs.items():
                    splits = split_of[name]
                    if args.kernel == "gemv":
                        default = cuda_backend.gemv_reduction(splits)
                        reduction = gemv_reductions.get(name, default) if splits > 1 else "none"
                    else:
                        default = cuda_backend.fused_reduction(splits, m)
                        reduction = fused_reductions.get(name, default) if splits > 1 else "none"
                    row[f"{name}_reduction"] = reduction
                    # NaN first: a build that writes no output must not inherit the other build's bits from a
                    # reused allocation (a probe that stores nothing once looked "same bits" so)
                    out = torch.full((m, n), float("nan"), dtype=tdt, device="cuda")
                    count = counters[name].data_ptr() if reduction == "last_block" else None

                    pw, sw = weights[name]
                    tiled = (name == "b" and args.b_tiled) or (name == "a" and args.a_tiled is not None)
                    launch_fused = lib.nvfp4_launch_fused_tiled if tiled else lib.nvfp4_launch_fused

                    extra = (scale_bytes,) if tiled else ()

                    def run(lib=lib, out=out, count=count, splits=splits, pw=pw, sw=sw, launch_fused=launch_fused,
                            extra=extra):
                        stream_now = torch.cuda.current_stream().cuda_stream
                        if args.kernel == "gemv":
                            err = lib.nvfp4_launch_gemv(a.data_ptr(), p.data_ptr(), s.data_ptr(), g.data_ptr(), None,
                                                        out.data_ptr(), workspace if splits > 1 else None, count,
                                                        m, n, k, int(dtype == "bfloat16"), splits, stream_now)
                        else:
                            err = launch_fused(a.data_ptr(), pw.data_ptr(), sw.data_ptr(), g.data_ptr(), None,
                                               out.data_ptr(), workspace if splits > 1 else None, count, m, n, k,
                                               int(dtype == "bfloat16"), splits, stream_now, *extra)
                        assert err == 0, err

                    run()
                    torch.cuda.synchronize()
                    row[f"{name}_sha256"] = hashlib.sha256(out.view(torch.int16).cpu().numpy().tobytes()).hexdigest()
                    outputs[name] = out.float()
                    if dtype == "bfloat16":  # time the bench's type; fp16 is for the bits
                        row[f"{name}_flushed_us"] = round(timer(run, flush, reps=21), 2)
                        row[f"{name}_graph_us"] = round(graph_time_us(run), 2)
                comparable = split_of["a"] == split_of["b"]
                row["same_bits"] = row["a_sha256"] == row["b_sha256"] if comparable else None
                # how far apart differing outputs are, relative to the output's largest magnitude (a
                # changed summation order moves the last bits; a wrong operand moves everything)
                scale = outputs["a"].abs().max().clamp_min(1e-30)
                row["max_rel_diff"] = float(((outputs["a"] - outputs["b"]).abs().max() / scale).item())
                row["differing"] = int((outputs["a"] != outputs["b"]).sum().item())
                rows.append(row)
                timing = ""
                if "a_flushed_us" in row:
                    timing = (f"flushed {row['a_flushed_us']:7.2f} -> {row['b_flushed_us']:7.2f} "
                              f"({row['a_flushed_us'] / row['b_flushed_us']:.3f}x)  graph {row['a_graph_us']:7.2f} -> "
                              f"{row['b_graph_us']:7.2f} ({row['a_graph_us'] / row['b_graph_us']:.3f}x)")
                bits = {True: "", False: f"  BITS DIFFER ({row['differing']} of {m * n}, max rel diff "
                                          f"{row['max_rel_diff']:.2e})",
                        None: "  (splits differ)"}[row["same_bits"]]
                print(f"{n}x{k} {dtype:8s} M={m:3d} splits={split_of['a']:2d}/{split_of['b']:2d} {timing}{bits}",
                      flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"a": args.a, "b": args.b, "rows": rows}, fh, indent=1)
    return 0 if all(r["same_bits"] is not False for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
