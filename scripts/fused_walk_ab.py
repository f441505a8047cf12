# ruff: noqa: B023  (each timed function runs inside the iteration that defines it)
"""fused_mma's M <= 8 tile-contiguous launch as a dynamic walk over finer units (dev variant
scripts/ws_dev/fused_walk.cu) beside the library's launch, in one process (benchmarks/NOTES.md,
thirty-sixth session).

Question: the H200's per-block timeline has the M = 1 call losing its time in a drain at the end
(the blocks of one SM, started together with the same work, ending 5-11 us apart). Does the real
kernel, walking finer (tile, split) units from a global counter with its ring kept full across
units, end sooner than the library's block per unit?

Same run, with the L2 flushed before each call (CUDA events, median of 21): a device copy of the
row's bytes (packed weights and scales), the library's call as the dispatcher makes it (the host's
split count and split-K sum), the library at each walk's split count with the finalize kernel's
sum (the walk's reference), and the walk at that count with every resident slot and with fewer.
Before timing, each walk's output must equal its reference's word for word, in two launches in a
row (its unit counter back at 0 after each), in bf16 and fp16.

    nvcc -O3 -std=c++17 -arch=sm_90 -shared -Xcompiler -fPIC -I kernels/cuda \\
         -o kernels/_build/walk/libfusedwalk.so scripts/ws_dev/fused_walk.cu
    python scripts/fused_walk_ab.py --lib kernels/_build/walk/libfusedwalk.so --out FILE
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import sys

import torch
from nvfp4_kernels import cuda_backend, layout
from nvfp4_kernels.tiling import fused_split_count

sys.path.insert(0, "scripts")
from fused_dev import make, timer, to_dev  # noqa: E402
from l2_floor_probe import write_rows  # noqa: E402  (the probes' rows with their provenance)

# (n, k): the walk's split counts (each divides k / 128 into units of 4 or more steps)
SPLITS = {(17408, 5120): (5, 8, 10), (5120, 17408): (8, 17, 34)}
BLOCKS_PER_SM = (0, 6)  # the default caps of resident blocks an SM (0: every resident slot)


def _load(path: str) -> ctypes.CDLL:
    """The dev library: the whole of fused_mma.cu (typed from this tree's signature table) and the walk."""
    lib = ctypes.CDLL(path)
    for name in ("nvfp4_launch_fused_tiled", "nvfp4_fused_occupancy", "nvfp4_fused_tiles"):
        restype, argtypes = cuda_backend._SIGNATURES[name]
        getattr(lib, name).restype, getattr(lib, name).argtypes = restype, argtypes
    p, i32, i64 = ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64
    lib.nvfp4_dev_launch_fused_walk.restype = ctypes.c_int
    lib.nvfp4_dev_launch_fused_walk.argtypes = [p, p, p, p, p, p, p, p, i32, i64, i64, i32, i32, p, i32, i32,
                                                ctypes.POINTER(i32)]
    return lib


def _sha(out: torch.Tensor) -> str:
    return hashlib.sha256(out.view(torch.int16).cpu().numpy().tobytes()).hexdigest()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lib", required=True, help="the dev library built from scripts/ws_dev/fused_walk.cu")
    parser.add_argument("--ms", default="1,8")
    parser.add_argument("--caps", default=",".join(map(str, BLOCKS_PER_SM)),
                        help="the walk's caps of resident blocks an SM, comma-separated (0: every resident slot)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    caps = tuple(int(v) for v in args.caps.split(","))
    if any(c < 0 for c in caps):
        parser.error(f"--caps takes counts >= 0, got {args.caps}")
    lib = _load(args.lib)
    stream = torch.cuda.current_stream().cuda_stream
    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
    g = torch.tensor([0.0123], dtype=torch.float32, device="cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    counters = cuda_backend.splitk_counters(0, stream, 1 << 16)
    take = torch.zeros(2, dtype=torch.int32, device="cuda")
    grid = ctypes.c_int32(0)
    rows: list[dict] = []
    failures = 0
    for (n, k), walk_splits in SPLITS.items():
        packed, scales = make(n, k, 1)
        p, s = to_dev(packed), to_dev(scales)
        pt, st = layout.tile_weights(p, s)
        scale_bytes = layout.scale_byte_range(s)
        row_bytes = torch.empty(pt.numel() + st.numel(), dtype=torch.uint8, device="cuda")
        row_copy = torch.empty_like(row_bytes)
        copy_us = timer(lambda: row_copy.copy_(row_bytes), flush, reps=21)
        rows.append({"subject": f"copy_{n}x{k}", "median_us": round(copy_us, 2), "bytes": row_bytes.numel()})
        print(f"{n}x{k} copy of the row's {row_bytes.numel()} bytes: {copy_us:.2f} us", flush=True)
        for m in (int(v) for v in args.ms.split(",")):
            host_splits = fused_split_count(n, k, m, sms, int(lib.nvfp4_fused_occupancy(m)))
            workspace = torch.empty(max((host_splits, *walk_splits)) * m * n, dtype=torch.float32, device="cuda")
            for dtype in ("bfloat16", "float16"):
                tdt = getattr(torch, dtype)
                a = torch.randn(m, k, dtype=torch.float32, device="cuda").to(tdt)
                bf16 = int(dtype == "bfloat16")

                def library(splits: int, last_block: bool, out: torch.Tensor) -> None:
                    err = lib.nvfp4_launch_fused_tiled(
                        a.data_ptr(), pt.data_ptr(), st.data_ptr(), g.data_ptr(), None, out.data_ptr(),
                        workspace.data_ptr() if splits > 1 else None,
                        counters.data_ptr() if last_block else None, m, n, k, bf16, splits,
                        torch.cuda.current_stream().cuda_stream, scale_bytes)
                    assert err == 0, f"library launch error {err}"

                def walk(splits: int, per_sm: int, out: torch.Tensor) -> None:
                    err = lib.nvfp4_dev_launch_fused_walk(
                        a.data_ptr(), pt.data_ptr(), st.data_ptr(), g.data_ptr(), None, out.data_ptr(),
                        workspace.data_ptr(), take.data_ptr(), m, n, k, bf16, splits,
                        torch.cuda.current_stream().cuda_stream, scale_bytes, per_sm, ctypes.byref(grid))
                    assert err == 0, f"walk launch error {err}"

                out = torch.full((m, n), float("nan"), dtype=tdt, device="cuda")
                last_block = cuda_backend.fused_reduction(host_splits, m) == "last_block"
                name = f"{n}x{k}_M{m}_{dtype}"
                if dtype == "bfloat16":
                    us = timer(lambda: library(host_splits, last_block, out), flush, reps=21)
                    rows.append({"subject": f"library_{name}", "splits": host_splits,
                                 "reduction": "last_block" if last_block else "finalize", "median_us": round(us, 2),
                                 "share_of_copy": round(copy_us / us, 4)})
                    print(f"{name} library   splits {host_splits:2d} "
                          f"{'last-block' if last_block else 'finalize'}: {us:7.2f} us "
                          f"({copy_us / us:6.1%} of copy)", flush=True)
                for splits in walk_splits:
                    reference = torch.full((m, n), float("nan"), dtype=tdt, device="cuda")
                    library(splits, False, reference)
                    torch.cuda.synchronize()
                    want = _sha(reference)
                    # the library at the walk's split count, timed once for every cap of the walk
                    ref_us = timer(lambda: library(splits, False, reference), flush, reps=21) if bf16 else None
                    for per_sm in caps:
                        same = True
                        for _ in range(2):  # the second launch must find the counter back at 0
                            out.fill_(float("nan"))
                            walk(splits, per_sm, out)
                            torch.cuda.synchronize()
                            same = same and _sha(out) == want and int(take.abs().sum()) == 0
                        failures += not same
                        row = {"subject": f"walk_{name}_splits{splits}_per_sm{per_sm}", "splits": splits,
                               "blocks_per_sm_cap": per_sm, "grid": grid.value, "same_bits_as_library": same}
                        if dtype == "bfloat16" and same:
                            us = timer(lambda: walk(splits, per_sm, out), flush, reps=21)
                            row.update({"median_us": round(us, 2), "library_same_splits_finalize_us": round(ref_us, 2),
                                        "share_of_copy": round(copy_us / us, 4)})
                            print(f"{name} walk splits {splits:2d} grid {grid.value:5d}: {us:7.2f} us "
                                  f"({copy_us / us:6.1%} of copy; library at these splits {ref_us:7.2f})", flush=True)
                        elif not same:
                            print(f"{name} walk splits {splits:2d} cap {per_sm}: BITS DIFFER from the library's",
                                  flush=True)
                        rows.append(row)
    write_rows(args.out, rows)
    print(f"{len(rows)} rows, {failures} bit mismatches -> {args.out}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
