# ruff: noqa: B023  (each timed function runs inside the iteration that defines it)
"""The fused kernel of this tree at every K split count of a shape and M, L2 flushed, beside the
count the host chooses (nvfp4_kernels.tiling.fused_split_count at the device's occupancy), on
row-major and on tile-contiguous weights: for checking the split model after a change of the
kernel's resources (benchmarks/NOTES.md). With ``--graph`` each call is also timed in CUDA-graph
replay (20 calls per graph: the kernels' own time, no launch gaps), in ``<layout>_graph_us``.

    python scripts/fused_split_sweep.py 17408x5120,5120x17408 9,16 OUT.json [--graph]
"""

from __future__ import annotations

import sys

import torch
from nvfp4_kernels import cuda_backend, layout
from nvfp4_kernels.tiling import MAX_SPLITS, MIN_STEPS_PER_SPLIT, fused_split_count

sys.path.insert(0, "scripts")
from fused_dev import make, timer, to_dev  # noqa: E402
from fused_reduction_ab import graph_time_us  # noqa: E402
from l2_floor_probe import write_rows  # noqa: E402


def main() -> int:
    shapes = [tuple(int(v) for v in s.split("x")) for s in sys.argv[1].split(",")]
    ms = [int(v) for v in sys.argv[2].split(",")]
    graph = "--graph" in sys.argv[4:]
    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
    g = torch.tensor([0.0123], dtype=torch.float32, device="cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    lib = cuda_backend.load_library()
    rows = []
    for n, k in shapes:
        packed, scales = make(n, k, 1)
        p, s = to_dev(packed), to_dev(scales)
        tiled = layout.tiled_weight(p, s)  # what layout.register keeps: the copy and its scale-byte range
        steps = k // 128
        for m in ms:
            host = fused_split_count(n, k, m, sms, int(lib.nvfp4_fused_occupancy(m)))
            a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
            out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
            counts = [c for c in range(1, min(MAX_SPLITS, steps) + 1) if -(-steps // c) >= MIN_STEPS_PER_SPLIT]
            line = []
            for c in counts:
                row = {"n": n, "k": k, "m": m, "splits": c, "host": c == host}
                for name, how in (("row_major", None), ("tiled", tiled)):
                    def run(how=how, c=c):
                        cuda_backend.fused_mma(a, p, s, g, None, out, splits=c, tiled=how)
                    run()
                    row[f"{name}_us"] = round(timer(run, flush, reps=21), 2)
                    if graph:
                        row[f"{name}_graph_us"] = round(graph_time_us(run), 2)
                rows.append(row)
                line.append(f"{c}{'*' if c == host else ''}:{row['row_major_us']:.1f}/{row['tiled_us']:.1f}")
            print(f"{n}x{k} M={m}: " + " ".join(line), flush=True)
    write_rows(sys.argv[3], rows)  # with the GPU, driver, torch, CUDA, date and command
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
