"""Why the bench's same-run copy alternates between two speeds (benchmarks/NOTES.md, ninth
session): time dst.copy_(src) of one size at chosen distances between src and dst inside one
allocation, and as the bench allocates them (two tensors from the caching allocator), with the
bench's flush and timing (zero 256 MB, events, median of 21).

    python scripts/copy_ceiling_probe.py --out FILE
"""
from __future__ import annotations

import argparse
import sys

import torch

sys.path.insert(0, "scripts")
from l2_floor_probe import timed, write_rows  # noqa: E402  (the bench's flush and timing)

MIB = 2**20


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    flush = torch.empty(256 * MIB, dtype=torch.uint8, device="cuda")
    rows = []
    # the bench's two half-sizes of M = 1 and M = 2 on 17408 x 5120 (50180096 and 50225152 row bytes)
    for half in (25090048, 25112576, 25135104, 25157632):
        src = torch.randint(0, 256, (half,), dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        us = timed(lambda src=src, dst=dst: dst.copy_(src), flush.zero_)
        dist = dst.data_ptr() - src.data_ptr()
        rows.append({"how": "bench allocation", "half_bytes": half, "dst_minus_src": dist,
                     "src_mod_4096": src.data_ptr() % 4096, "median_us": round(us, 2)})
        print(f"bench alloc  half={half} (mod 4096 = {half % 4096:4d}) dst-src={dist} "
              f"(mod 2 MiB = {dist % (2 * MIB)}) {us:7.2f} us", flush=True)
        del src, dst
    half = 25090048
    span = (half + 2 * MIB - 1) // (2 * MIB) * (2 * MIB)
    buf = torch.randint(0, 256, (2 * span + 4 * MIB,), dtype=torch.uint8, device="cuda")
    print(f"buffer base mod 2 MiB = {buf.data_ptr() % (2 * MIB)}")
    for off in (0, 256, 512, 1024, 2048, 3072, 4096, 8192, 65536, MIB, 2 * MIB):
        for src_off in (0, 2048):
            src = buf[src_off:src_off + half]
            dst = buf[span + off + src_off: span + off + src_off + half]
            us = timed(lambda src=src, dst=dst: dst.copy_(src), flush.zero_)
            rows.append({"how": "one buffer", "half_bytes": half, "dst_minus_src": span + off, "src_offset": src_off,
                         "median_us": round(us, 2)})
            print(f"one buffer   half={half} src at +{src_off:4d} dst-src = span + {off:7d} {us:7.2f} us", flush=True)
    write_rows(args.out, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
