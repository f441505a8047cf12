"""The whole-wave model of a split plan's load balance (benchmarks/NOTES.md, twenty-seventh
session): how evenly equal K splits of 128-row tiles fill a GPU's block slots, and how many bytes
of fp32 partials each plan writes. No device needed.

A grid of ``tiles * splits`` blocks runs in waves of ``sms * blocks_per_sm`` slots; a wave lasts
one block's K walk of ``ceil(steps / splits)`` steps. The efficiency is the ideal time (every
slot busy for ``tiles * steps / slots`` steps) over the modelled one (waves x steps a block). It
ranks plans only roughly: a block alone in a last wave runs faster than the model says (the
twenty-third session measured 4 splits ahead of 3 on 17408 x 5120, where it says the opposite).

    python scripts/wave_model.py [--m 64] [--sms 132]
"""

from __future__ import annotations

import argparse

from nvfp4_kernels.reference import FUSED_STEP_K as STEP_K
from nvfp4_kernels.tiling import WGMMA_TILE_ROWS as TILE_ROWS
from nvfp4_kernels.tiling import nonempty_ranges as nonempty_splits


def efficiency(n: int, k: int, splits: int, sms: int, blocks_per_sm: int) -> float:
    """Ideal over modelled time of ``splits`` equal K splits of an [n, k] weight's 128-row tiles."""
    if min(n, k, splits, sms, blocks_per_sm) < 1 or k % STEP_K:
        raise ValueError(f"need positive n, k (a multiple of {STEP_K}), splits, sms and blocks_per_sm")
    tiles, steps = -(-n // TILE_ROWS), k // STEP_K
    per = -(-steps // nonempty_splits(steps, splits))
    slots = sms * blocks_per_sm
    waves = -(-tiles * nonempty_splits(steps, splits) // slots)
    return tiles * steps / slots / (waves * per)


def partial_megabytes(n: int, m: int, splits: int) -> float:
    """The fp32 partials a split plan writes (and its finalize reads back), in MB (10^6 bytes)."""
    return 0.0 if splits == 1 else splits * m * n * 4 / 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--m", type=int, default=64, help="activation rows (for the partials' size)")
    parser.add_argument("--sms", type=int, default=132)
    args = parser.parse_args()
    for n, k in ((17408, 5120), (5120, 17408)):
        steps = k // STEP_K
        print(f"{n} x {k}, M = {args.m}:")
        for s in sorted({nonempty_splits(steps, s) for s in range(1, 13)}):
            effs = " ".join(f"{b} an SM {efficiency(n, k, s, args.sms, b):.2f}" for b in (2, 3))
            print(f"  {s:2d} splits: {effs}, partials {partial_megabytes(n, args.m, s):.0f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
