# ruff: noqa: B023  (each timed function runs inside the iteration that defines it)
"""A/B of the fused kernel's two split-K reductions on a GPU, at every split count: the cluster
reduction inside one launch against partials in a workspace plus the finalize kernel, with the
L2 flushed before each repetition (CUDA events, medians). Also checks that both give the same
bits at each count.

    python scripts/fused_reduction_ab.py [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
from nvfp4_kernels import cuda_backend

sys.path.insert(0, "scripts")
from fused_dev import make, timer, to_dev  # noqa: E402

SHAPES = ((17408, 5120), (5120, 17408), (4096, 4096))
MS = (1, 16, 64)
SPLITS = (1, 2, 3, 4, 6, 7, 8, 12, 14, 16)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
    g = torch.tensor([0.0123], dtype=torch.float32, device="cuda")
    rows = []
    stream = cuda_backend.current_stream(0)
    for n, k in SHAPES:
        packed, scales = make(n, k, 1)
        p, s = to_dev(packed), to_dev(scales)
        for m in MS:
            a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
            chosen = cuda_backend.fused_splits(n, k, m)
            for splits in SPLITS:
                if splits > k // 128:
                    continue
                outs, times = {}, {}
                for reduction in (("cluster", "finalize") if splits > 1 else ("auto",)):
                    out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")

                    def run(out=out, reduction=reduction, splits=splits):
                        # the launcher itself (fused_mma's validation would add host time inside the timing)
                        cuda_backend.launch_fused(a, p, s, g.data_ptr(), None, out, m, n, k, 1, splits, stream,
                                                  cluster=reduction == "cluster")

                    run()
                    outs[reduction] = out
                    times[reduction] = timer(run, flush)
                same = len(outs) == 1 or torch.equal(outs["cluster"].view(torch.int16),
                                                     outs["finalize"].view(torch.int16))
                rows.append({"n": n, "k": k, "m": m, "splits": splits, "chosen": splits == chosen,
                             "same_bits": same, **{f"{r}_us": round(t, 2) for r, t in times.items()}})
                print(f"{n}x{k} M={m:3d} splits={splits:2d}{' *' if splits == chosen else '  '} "
                      + "  ".join(f"{r} {t:7.2f}" for r, t in times.items()) + ("" if same else "  BITS DIFFER"),
                      flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0 if all(r["same_bits"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
