# ruff: noqa: B023  (each timed lambda runs inside the iteration that defines it)
"""Weight-stream probe (benchmarks/NOTES.md, twenty-ninth session): fused_wgmma's 64-row tile streams
its weights at about 1.55-1.7x the copy of the same bytes even with nothing decoded, multiplied or
stored, at any depth of its ring. scripts/ring_stream_probe.cu reads the same tile-contiguous bytes
over the same grids (a block of 256 threads per 128-row tile and K split) by four loading schemes,
the library's scheme inside the tile's activation handshake (mode 4; mode 5 with a producer warp),
with one scale copy a thread (mode 6) and over a grid of two blocks an SM with equal runs of (tile,
step) units (mode 7), on a step-major layout (mode 8) and by register prefetch in the chunked
read's pattern (mode 9; all four thirtieth session), beside a grid-stride read of the bytes (the
read floor), the same read in one contiguous chunk a block (separate sequential streams, as the
ring's blocks read) and the bench's copy of them (the ceiling), each timed as the bench times a
call: the L2 flushed by a 256 MB write before each run, CUDA events, median of 21.

    nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -shared -Xcompiler -fPIC \\
        -o kernels/_build/probe/libringprobe.so scripts/ring_stream_probe.cu       # here
    python scripts/ring_stream_probe.py --lib kernels/_build/probe/libringprobe.so --out FILE  # GPU
        [--quick: the library's split only]

Occupancy "two": each block asks for 90 KB of shared memory, so two blocks fit an SM, as the
library's 64-row tile runs; "free": the mode's own need, so the registers and threads decide.
"""

from __future__ import annotations

import argparse
import ctypes
import json
from datetime import datetime, timezone
from typing import Any

import torch
from l2_floor_probe import timed  # the bench's way of timing a call (this folder)

MODES = {
    0: "library ring (cp.async 16+16+4+4 a thread)",
    1: "ring without scale copies",
    2: "register prefetch (ld.global)",
    3: "bulk copies a step (thread 0), mbarriers",
    4: "library ring inside the 64-row tile's activation handshake",
    5: "mode 4 with a producer warp for the activations",
    6: "library ring with one 4-byte scale copy a thread (a warp's 128 scale bytes contiguous)",
    7: "library ring over a balanced grid (two blocks an SM, equal runs of tile-major units)",
    8: "library ring on a step-major layout (the blocks read neighbouring pieces at each step)",
    9: "register prefetch of the same bytes in the chunked read's pattern (a block instruction a piece)",
}
#: (n, k) -> the K splits timed; 17408 x 5120 has 136 tiles of 40 steps, 5120 x 17408 40 of 136
SHAPES = {(17408, 5120): (1, 2, 3, 4, 5), (5120, 17408): (3, 6, 7, 9)}
LIBRARY_SPLITS = {(17408, 5120): 3, (5120, 17408): 6}
RINGS = (2, 4, 8)
TWO_BLOCKS_SMEM = 90 * 1024
CODE_BYTES, SCALE_BYTES = 4096, 512
ACT_STEP_BYTES = 64 * 128 * 2  # a step of 64 activation rows (mode 4)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true", help="only the library's split, two blocks an SM, rings 4 and 8")
    args = ap.parse_args()
    lib = ctypes.CDLL(args.lib)
    vp, i32 = ctypes.c_void_p, ctypes.c_int
    lib.ring_probe_launch.argtypes = [i32, i32, vp, vp, vp, i32, i32, i32, i32, vp, vp]
    lib.ring_probe_min_smem.argtypes = [i32, i32]
    lib.ring_probe_read_floor.argtypes = [vp, ctypes.c_longlong, i32, vp, vp]
    lib.ring_probe_read_chunks.argtypes = [vp, ctypes.c_longlong, i32, vp, vp]
    from nvfp4_harness.nvfp4.bench_metrics import copy_ceiling_half

    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(0)
    sms = props.multi_processor_count
    stream = torch.cuda.current_stream().cuda_stream
    flush_buf = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    sink = torch.zeros(1 << 20, dtype=torch.int32, device=dev)

    def flush() -> None:
        flush_buf.zero_()

    def check(err: int, what: str) -> None:
        if err:
            raise RuntimeError(f"{what}: error {err}")

    rows: list[dict[str, Any]] = []
    for (n, k), split_counts in SHAPES.items():
        tiles, total_steps = n // 128, k // 128
        codes = torch.randint(0, 256, (2 * tiles * total_steps * CODE_BYTES,), dtype=torch.uint8, device=dev)
        scales = torch.randint(0, 256, (2 * tiles * total_steps * SCALE_BYTES,), dtype=torch.uint8, device=dev)
        act = torch.randint(0, 256, (total_steps * ACT_STEP_BYTES,), dtype=torch.uint8, device=dev)  # mode 4
        nbytes = codes.numel() + scales.numel()
        half = copy_ceiling_half(nbytes)
        src = torch.empty(half, dtype=torch.uint8, device=dev).random_(0, 255)
        dst = torch.empty_like(src)
        copy_us = timed(lambda: dst.copy_(src), flush)
        both = torch.cat([codes, scales])
        floor_us = timed(
            lambda: check(
                lib.ring_probe_read_floor(both.data_ptr(), both.numel(), 8 * sms, sink.data_ptr(), stream), "floor"
            ),
            flush,
        )
        # the same loads as the floor, each block reading only its own contiguous chunk (two and
        # eight blocks an SM): separate sequential streams, as the ring's blocks read
        chunks_us = {
            blocks_per_sm: timed(
                lambda b=blocks_per_sm: check(
                    lib.ring_probe_read_chunks(both.data_ptr(), both.numel(), b * sms, sink.data_ptr(), stream),
                    "chunks",
                ),
                flush,
            )
            for blocks_per_sm in (2, 8)
        }
        base = {
            "n": n,
            "k": k,
            "bytes": nbytes,
            "copy_us": copy_us,
            "copied_bytes": 2 * half,
            "read_floor_us": floor_us,
            "chunked_read_us": {str(b): us for b, us in chunks_us.items()},
        }
        print(
            f"{n}x{k}: {nbytes / 1e6:.1f} MB, copy {copy_us:.2f} us, read floor {floor_us:.2f} us "
            f"({copy_us / floor_us:.0%} of copy); chunked read, 2 / 8 blocks an SM: {chunks_us[2]:.2f} / "
            f"{chunks_us[8]:.2f} us"
        )
        for splits in (LIBRARY_SPLITS[(n, k)],) if args.quick else split_counts:
            for mode in MODES:
                if mode == 7 and splits != LIBRARY_SPLITS[(n, k)]:
                    continue  # one balanced grid a shape, filed under the library's split
                per_split = -(-total_steps // splits)
                blocks = tiles * -(-total_steps // per_split)
                if mode == 7:  # units a block, for 2 x SMs blocks
                    per_split = -(-(tiles * total_steps) // (2 * sms))
                    blocks = -(-(tiles * total_steps) // per_split)
                for ring in (4, 8) if args.quick else RINGS:
                    for occupancy in ("two",) if args.quick else ("two", "free"):
                        if occupancy == "free" and splits != LIBRARY_SPLITS[(n, k)]:
                            continue
                        need = lib.ring_probe_min_smem(mode, ring)
                        smem = max(need, TWO_BLOCKS_SMEM) if occupancy == "two" else need

                        def launch(mode=mode, ring=ring, smem=smem) -> None:
                            check(
                                lib.ring_probe_launch(
                                    mode,
                                    ring,
                                    codes.data_ptr(),
                                    scales.data_ptr(),
                                    act.data_ptr(),
                                    total_steps,
                                    tiles,
                                    per_split,
                                    smem,
                                    sink.data_ptr(),
                                    stream,
                                ),
                                f"mode {mode} ring {ring}",
                            )

                        us = timed(launch, flush)
                        rows.append(
                            dict(
                                base,
                                splits=splits,
                                per_split=per_split,
                                blocks=blocks,
                                mode=mode,
                                scheme=MODES[mode],
                                ring=ring,
                                occupancy=occupancy,
                                smem=smem,
                                us=us,
                                x_copy=us / copy_us,
                            )
                        )
                        print(
                            f"  splits {splits} ({blocks} blocks) mode {mode} ring {ring} {occupancy}: "
                            f"{us:7.2f} us = {us / copy_us:.2f}x copy"
                        )
    prov = {
        "gpu": props.name,
        "multiprocessors": sms,
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": "python scripts/ring_stream_probe.py --lib kernels/_build/probe/libringprobe.so --out FILE",
    }
    with open(args.out, "w") as fh:
        json.dump({"provenance": prov, "modes": MODES, "rows": rows}, fh, indent=1)
    print("\nsummary (library's split, two blocks an SM): us / x copy")
    for (n, k), splits in LIBRARY_SPLITS.items():
        for mode in MODES:
            cells = [
                r
                for r in rows
                if (r["n"], r["k"], r["splits"], r["mode"], r["occupancy"]) == (n, k, splits, mode, "two")
            ]
            print(
                f"{n}x{k} mode {mode}: " + "  ".join(f"ring {r['ring']} {r['us']:.1f}/{r['x_copy']:.2f}" for r in cells)
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
