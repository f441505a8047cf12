# ruff: noqa: B023  (each timed function runs inside the iteration that defines it)
"""The fused kernel at the host's split count s against s' = ceil(T / ceil(T / s)), T = K / 128.

The kernel gives each split ceil(T / s) steps, so some counts leave the last splits empty; s' is
the fewest splits with the same K ranges. Both must give the same bits (checked per row, with a
bias); the times are taken as in scripts/fused_split_sweep_rotating.py, two repetitions
interleaved, M = 1, 8, 16, 64.

    python scripts/fused_empty_splits_ab.py 4096x4096,3072x3072 OUT.json
"""
import json
import sys

import torch
from nvfp4_kernels import cuda_backend

sys.path.insert(0, "scripts")
from decode_paths_by_shape import layer_operands, rotating_graph_us  # noqa: E402
from fused_dev import timer  # noqa: E402

flush = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
g = torch.tensor([0.0123], dtype=torch.float32, device="cuda")
rows = []
for n, k, p0, s0, ps, ss in layer_operands(sys.argv[1]):
    copies = len(ps)
    for m in (1, 8, 16, 64):
        a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
        bias = torch.randn(n, dtype=torch.bfloat16, device="cuda")
        outs = [torch.empty(m, n, dtype=torch.bfloat16, device="cuda") for _ in range(copies)]
        host = cuda_backend.fused_splits(n, k, m)
        t = k // 128
        canon = -(-t // -(-t // host))
        res = {}
        for _ in range(2):
            for sp in (host, canon):
                rot = rotating_graph_us([lambda i=i: cuda_backend.fused_mma(a, ps[i], ss[i], g, bias, outs[i],
                                                                            splits=sp) for i in range(copies)])
                fl = timer(lambda: cuda_backend.fused_mma(a, p0, s0, g, bias, outs[0], splits=sp), flush, reps=21)
                res.setdefault(sp, []).append((rot, fl))
        o1 = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        o2 = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        cuda_backend.fused_mma(a, p0, s0, g, bias, o1, splits=host)
        cuda_backend.fused_mma(a, p0, s0, g, bias, o2, splits=canon)
        same = torch.equal(o1.view(torch.int16), o2.view(torch.int16))
        row = {"n": n, "k": k, "m": m, "steps": t, "host": host, "canonical": canon, "same_bits": same,
               "times": {str(s): v for s, v in res.items()}}
        rows.append(row)
        def best(s: int, j: int) -> float:
            return min(x[j] for x in res[s])

        print(f"{n:>6}x{k:<6} M={m:3d} T={t:3d} s={host:2d} -> {canon:2d}  rot {best(host, 0):6.2f} -> "
              f"{best(canon, 0):6.2f}  flushed {best(host, 1):6.2f} -> {best(canon, 1):6.2f}  same bits {same}",
              flush=True)
json.dump(rows, open(sys.argv[2], "w"), indent=1)
