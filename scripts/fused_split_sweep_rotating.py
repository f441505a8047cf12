# ruff: noqa: B023  (each timed function runs inside the iteration that defines it)
"""The fused kernel at forced K split counts, timed the way a decode loop runs it, beside the GEMV.

Per shape and M: one CUDA graph of calls on as many copies of the weights as take twice the L2,
replayed (back-to-back calls, each streaming its weights from device memory: see
scripts/decode_paths_by_shape.py --rotate), and one call after an L2 flush (the bench's way).
The split counts are 1, 2, 3, 4, 5, 6, 8, 10, 12, 16 and the host's (fused_split_count).

    python scripts/fused_split_sweep_rotating.py 4096x4096,6144x2048 1,8 OUT.json
"""
import json
import sys

import torch
from nvfp4_kernels import cuda_backend

sys.path.insert(0, "scripts")
from decode_paths_by_shape import layer_operands, rotating_graph_us  # noqa: E402
from fused_dev import timer  # noqa: E402

ms = [int(v) for v in sys.argv[2].split(",")]
out_path = sys.argv[3]
flush = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
g = torch.tensor([0.0123], dtype=torch.float32, device="cuda")
rows = []
for n, k, p0, s0, ps, ss in layer_operands(sys.argv[1]):
    copies = len(ps)
    for m in ms:
        a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
        outs = [torch.empty(m, n, dtype=torch.bfloat16, device="cuda") for _ in range(copies)]
        host = cuda_backend.fused_splits(n, k, m)
        row = {"n": n, "k": k, "m": m, "host_splits": host, "copies": copies, "fused": {}}
        gem = rotating_graph_us([lambda i=i: cuda_backend.gemv(a, ps[i], ss[i], g, None, outs[i])
                                 for i in range(copies)])
        row["gemv_rotating_us"] = round(gem, 2)
        row["gemv_flushed_us"] = round(timer(lambda: cuda_backend.gemv(a, p0, s0, g, None, outs[0]), flush, reps=21),
                                       2)
        cands = sorted({1, 2, 3, 4, 5, 6, 8, 10, 12, 16, host} & set(range(1, k // 128 + 1)))
        for sp in cands:
            rot = rotating_graph_us([lambda i=i: cuda_backend.fused_mma(a, ps[i], ss[i], g, None, outs[i], splits=sp)
                                     for i in range(copies)])
            fl = timer(lambda: cuda_backend.fused_mma(a, p0, s0, g, None, outs[0], splits=sp), flush, reps=21)
            row["fused"][sp] = {"rotating_us": round(rot, 2), "flushed_us": round(fl, 2)}
        best_r = min(row["fused"], key=lambda s: row["fused"][s]["rotating_us"])
        best_f = min(row["fused"], key=lambda s: row["fused"][s]["flushed_us"])
        rows.append(row)
        f = row["fused"]
        print(f"{n:>6}x{k:<6} M={m}: gemv rot {gem:6.2f} fl {row['gemv_flushed_us']:6.2f} | host s={host:2d} rot "
              f"{f[host]['rotating_us']:6.2f} fl {f[host]['flushed_us']:6.2f} | best rot s={best_r} "
              f"{f[best_r]['rotating_us']:6.2f} | best fl s={best_f} {f[best_f]['flushed_us']:6.2f} | "
              + " ".join(f"{s}:{v['rotating_us']:.1f}/{v['flushed_us']:.1f}" for s, v in f.items()), flush=True)
json.dump(rows, open(out_path, "w"), indent=1)
