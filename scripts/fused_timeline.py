# ruff: noqa: B023  (each timed function runs inside the iteration that defines it)
"""Where a flushed fused_mma call's time goes, block by block: a timeline of every block of the
launch, from an instrumented build of kernels/cuda/fused_mma.cu.

The library's A/B and ablation runs (benchmarks/NOTES.md) say how much each piece of the kernel
costs in total; they cannot say *when*: in the cold start before the first bytes arrive, in the
steady K loop, in the split-K sum, or in a tail where few blocks are left. This probe builds the
kernel twice from this tree's source, as is and with thread 0 of every block recording, into a
device array:

- the SM it ran on, its K steps, %globaltimer (ns) at its start and end;
- clock64 at its start, when its first K step's data had arrived (after the first barrier), at
  the end of its K loop and at its end (after the split-K sum, for the last block of a tile);
- the cycles it spent in the K loop's waits (cp.async wait and barrier), first step excluded.

Both builds are timed as the bench times a call (L2 flushed, CUDA events, median of 21) so the
instrumentation's own cost is on record; then the instrumented call is run flushed five times and
its records read back. Tile-contiguous weights with their scale-byte range, the host's split
count and split-K sum, bf16, as the dispatcher runs M = 1 and 16 on the large shapes.

    python scripts/fused_timeline.py --build-only --build-dir kernels/_build/timeline   # here (nvcc)
    python scripts/fused_timeline.py --build-dir kernels/_build/timeline --out FILE \
        [--ms 1,16] [--shapes 17408x5120,5120x17408] [--reductions host,finalize]      # on the GPU

Without --build-dir it builds into a temporary folder first (two nvcc builds of fused_mma.cu,
a few minutes). Each row of FILE keeps its calls' summaries (see summarize) and the raw records of
its last call; the summary line printed per row ends with the weight-byte rate per microsecond.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from nvfp4_kernels import build, cuda_backend, layout
from nvfp4_kernels.tiling import fused_split_count

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fused_dev import make, timer, to_dev  # noqa: E402
from l2_floor_probe import write_rows  # noqa: E402

MAX_BLOCKS = 1 << 16
# one record per block: smid, steps, then eight u64 (see RECORD_FIELDS)
RECORD_FIELDS = ("gt_start", "gt_end", "c_start", "c_first", "c_loop_end", "c_end", "wait_cycles", "unused")
#: the device's TimelineRecord as numpy reads it
RECORD_DTYPE = np.dtype([("smid", "<u4"), ("steps", "<u4")] + [(f, "<u8") for f in RECORD_FIELDS])

TIMELINE_DEFS = r"""
struct TimelineRecord {
  unsigned smid, steps;
  unsigned long long gt_start, gt_end, c_start, c_first, c_loop_end, c_end, wait_cycles, unused;
};
__device__ TimelineRecord g_timeline[MAX_BLOCKS];
__device__ __forceinline__ unsigned long long timeline_globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ unsigned timeline_smid() {
  unsigned s;
  asm volatile("mov.u32 %0, %smid;" : "=r"(s));
  return s;
}
""".replace("MAX_BLOCKS", str(MAX_BLOCKS))

# the end of k_loop: its last statement, the loop's brace, the function's
LOOP_END = ("    compute_slot = compute_slot == smem + (kRing - 1) * TL::kStageBytes ? smem : compute_slot + "
            "TL::kStageBytes;\n  }\n}")

# (anchor, replacement) pairs applied to fused_mma.cu; each anchor must occur exactly once
EDITS = (
    ("// The K loop over a block's steps", TIMELINE_DEFS + "\n// The K loop over a block's steps"),
    ("""  for (int s = 0; s < steps; ++s) {
    cp_async_wait<kRing - 2>();
    __syncthreads();  // step s is in shared memory for every thread; step s-1's buffer is free
""", """  unsigned long long tl_wait = 0, tl_first = 0;
  for (int s = 0; s < steps; ++s) {
    const long long tl_c0 = clock64();
    cp_async_wait<kRing - 2>();
    __syncthreads();  // step s is in shared memory for every thread; step s-1's buffer is free
    const long long tl_c1 = clock64();
    if (s == 0) tl_first = tl_c1; else tl_wait += tl_c1 - tl_c0;
"""),
    (LOOP_END, LOOP_END[:-1] + """  if (threadIdx.x == 0) {
    TimelineRecord& r = g_timeline[blockIdx.x];
    r.steps = steps;
    r.c_first = tl_first;
    r.wait_cycles = tl_wait;
    r.c_loop_end = clock64();
  }
}"""),
    ("""  nvfp4::allow_dependent_launch();  // the finalize kernel, if one follows, may be scheduled now
""", """  nvfp4::allow_dependent_launch();  // the finalize kernel, if one follows, may be scheduled now
  if (threadIdx.x == 0) {
    g_timeline[blockIdx.x].gt_start = timeline_globaltimer();
    g_timeline[blockIdx.x].c_start = clock64();
    g_timeline[blockIdx.x].smid = timeline_smid();
  }
"""),
    ("""    last_block_reduce<T, MT, RT, WARPS>(partial, counters, bias, out, m, n, n_tiles, m_tiles, splits);
  }
}""", """    last_block_reduce<T, MT, RT, WARPS>(partial, counters, bias, out, m, n, n_tiles, m_tiles, splits);
  }
  if (threadIdx.x == 0) {
    g_timeline[blockIdx.x].c_end = clock64();
    g_timeline[blockIdx.x].gt_end = timeline_globaltimer();
  }
}"""),
    ("}  // extern \"C\"", """int nvfp4_timeline_read(void* dst, int blocks) {
  return static_cast<int>(cudaMemcpyFromSymbol(dst, g_timeline, sizeof(TimelineRecord) * blocks));
}
}  // extern \"C\""""),
)


def instrumented_source(src: str) -> str:
    """fused_mma.cu with the timeline records (EDITS); fails loudly when the kernel has moved on."""
    for anchor, replacement in EDITS:
        count = src.count(anchor)
        if count != 1:
            raise SystemExit(f"fused_timeline: anchor found {count} times in fused_mma.cu, expected once:\n{anchor}")
        src = src.replace(anchor, replacement)
    return src


def build_pair(workdir: Path) -> dict[str, Path]:
    """The plain and the instrumented library, built the same way (the library's flags and targets)
    into ``workdir``. Each is named by a hash of its source and the headers beside it, so a library
    already there is the build of this tree's kernel and is kept (build here, carry it to the
    device), and a changed kernel builds anew."""
    workdir.mkdir(parents=True, exist_ok=True)
    src = build.CUDA_SOURCE_DIR / "fused_mma.cu"
    inst = workdir / "fused_mma_timeline.cu"
    inst.write_text(instrumented_source(src.read_text()))
    headers = b"".join(p.read_bytes() for p in sorted(build.CUDA_SOURCE_DIR.glob("*.cuh")))
    paths = {}
    for name, source in (("plain", src), ("timeline", inst)):
        key = hashlib.sha256(source.read_bytes() + headers + " ".join(build.BASE_FLAGS).encode()).hexdigest()[:16]
        out = workdir / f"fused_{name}_{key}.so"
        if not out.exists():
            cmd = [build.find_nvcc(), *build.BASE_FLAGS, *build.gencode_flags(build.resolve_archs()), "-I",
                   str(build.CUDA_SOURCE_DIR), "-shared", "-cudart", "static", "-o", str(out), str(source)]
            subprocess.run(cmd, check=True, capture_output=True)
        paths[name] = out
    return paths


def load_pair(paths: dict[str, Path]) -> dict[str, ctypes.CDLL]:
    """The two libraries with the entry points this script calls typed from the package's table
    (cuda_backend._SIGNATURES), and the instrumented one's record reader."""
    libs = {}
    for name, path in paths.items():
        lib = ctypes.CDLL(str(path))
        for fn in ("nvfp4_launch_fused_tiled", "nvfp4_fused_occupancy", "nvfp4_fused_tiles", "nvfp4_fused_tile"):
            restype, argtypes = cuda_backend._SIGNATURES[fn]
            getattr(lib, fn).restype, getattr(lib, fn).argtypes = restype, argtypes
        libs[name] = lib
    libs["timeline"].nvfp4_timeline_read.restype = ctypes.c_int
    libs["timeline"].nvfp4_timeline_read.argtypes = [ctypes.c_void_p, ctypes.c_int]
    return libs


def read_records(lib: ctypes.CDLL, blocks: int) -> np.ndarray:
    """The first ``blocks`` records of the instrumented library's device array (its last launch)."""
    buf = np.zeros(blocks, dtype=RECORD_DTYPE)
    err = lib.nvfp4_timeline_read(buf.ctypes.data, blocks)
    if err:
        raise RuntimeError(f"nvfp4_timeline_read: CUDA error {err}")
    return buf


def records_from_lists(raw: dict[str, list[int]]) -> np.ndarray:
    """A row's ``last_call_records`` (one list per field, as the output file keeps them) back as
    records."""
    rec = np.zeros(len(raw["smid"]), dtype=RECORD_DTYPE)
    for field, values in raw.items():
        rec[field] = values
    return rec


def steps_done_per_us(rec: np.ndarray, ghz: float) -> list[int]:
    """K steps the launch's blocks finished in each microsecond of the call (globaltimer axis from
    the first block's start). A block's steps are placed evenly between its first data and the end
    of its K loop, on its own clock; times the DRAM bytes of a step, this is the rate the call
    consumed its weights at, microsecond by microsecond."""
    start_us = (rec["gt_start"].astype(np.int64) - int(rec["gt_start"].min())) / 1000.0
    first = start_us + (rec["c_first"] - rec["c_start"]).astype(np.float64) / ghz / 1000.0
    loop_end = start_us + (rec["c_loop_end"] - rec["c_start"]).astype(np.float64) / ghz / 1000.0
    steps = rec["steps"].astype(np.int64)
    done = np.concatenate([first[b] + np.arange(1, steps[b] + 1) * (loop_end[b] - first[b]) / steps[b]
                           for b in range(rec.size)])
    return np.bincount(np.floor(done).astype(np.int64)).tolist()


def summarize(rec: np.ndarray) -> dict:
    """One flushed call's records -> where its time went (us unless named otherwise). Records out of
    order (a block whose stamps do not run start <= first data <= loop end <= end, or with no steps)
    mean the instrumentation did not run as meant, and are refused."""
    ordered = ((rec["c_start"] <= rec["c_first"]) & (rec["c_first"] <= rec["c_loop_end"])
               & (rec["c_loop_end"] <= rec["c_end"]) & (rec["gt_start"] <= rec["gt_end"]) & (rec["steps"] > 0)
               & (rec["wait_cycles"] <= rec["c_loop_end"] - rec["c_first"]))
    if not ordered.all():
        bad = np.flatnonzero(~ordered)
        raise ValueError(f"{bad.size} of {rec.size} timeline records out of order (first: block {bad[0]}: "
                         f"{rec[bad[0]]}); the instrumented kernel did not record as fused_timeline.EDITS mean")
    gt0 = int(rec["gt_start"].min())
    start_us = (rec["gt_start"].astype(np.int64) - gt0) / 1000.0
    end_us = (rec["gt_end"].astype(np.int64) - gt0) / 1000.0
    cycles = (rec["c_end"] - rec["c_start"]).astype(np.float64)
    wall_ns = (rec["gt_end"] - rec["gt_start"]).astype(np.float64)
    # cycles per ns over the longer half of the blocks: the globaltimer's steps (its resolution is
    # recorded below) blur each block's wall time, and summing over many blocks averages that out
    long_blocks = wall_ns >= np.percentile(wall_ns, 50)
    ghz = float(cycles[long_blocks].sum() / max(wall_ns[long_blocks].sum(), 1.0))

    def us(c):
        return c.astype(np.float64) / ghz / 1000.0

    first = us(rec["c_first"] - rec["c_start"])
    loop = us(rec["c_loop_end"] - rec["c_first"])
    wait = us(rec["wait_cycles"])
    epilogue = us(rec["c_end"] - rec["c_loop_end"])
    total = us(rec["c_end"] - rec["c_start"])
    steps = rec["steps"].astype(np.float64)
    per_sm = np.bincount(rec["smid"].astype(np.int64))
    # each SM's last block end, grouped by how many blocks the SM ran: do SMs given more blocks end later?
    sm_last_end = np.zeros(per_sm.size)
    np.maximum.at(sm_last_end, rec["smid"].astype(np.int64), end_us)
    last_end_by_blocks = {str(c): round(float(np.median(sm_last_end[per_sm == c])), 3)
                          for c in np.unique(per_sm[per_sm > 0])}
    sorted_starts = np.unique(rec["gt_start"])
    resolution = int(np.diff(sorted_starts).min()) if sorted_starts.size > 1 else 0
    # blocks resident every half microsecond of the call, from the start and end stamps
    grid = np.arange(0.0, float(end_us.max()) + 1.0, 0.5)
    resident = [int(((start_us <= x) & (end_us > x)).sum()) for x in grid]

    def q(x):
        return {"p10": round(float(np.percentile(x, 10)), 3), "p50": round(float(np.percentile(x, 50)), 3),
                "p90": round(float(np.percentile(x, 90)), 3), "max": round(float(x.max()), 3)}

    return {
        "blocks": int(rec.size), "sms_used": int((per_sm > 0).sum()),
        "blocks_per_sm": {"min": int(per_sm[per_sm > 0].min()), "max": int(per_sm.max())},
        "globaltimer_resolution_ns": resolution, "sm_clock_ghz": round(ghz, 3),
        "span_us": round(float(end_us.max()), 3),
        "start_us": q(start_us), "end_us": q(end_us),
        "tail_after_p90_end_us": round(float(end_us.max() - np.percentile(end_us, 90)), 3),
        "sm_last_end_us_by_blocks": last_end_by_blocks,
        "block_total_us": q(total), "first_data_us": q(first), "loop_us": q(loop),
        "loop_wait_us": q(wait), "loop_wait_share": round(float(wait.sum() / max(loop.sum(), 1e-9)), 4),
        "per_step_us": q(loop / np.maximum(steps - 1, 1)), "epilogue_us": q(epilogue),
        "first_data_share_of_block": round(float(first.sum() / total.sum()), 4),
        "epilogue_share_of_block": round(float(epilogue.sum() / total.sum()), 4),
        "resident_blocks_every_0.5us": resident,
        "steps_done_every_1us": steps_done_per_us(rec, ghz),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="the JSON file the rows are written to (needed unless --build-only)")
    ap.add_argument("--ms", default="1,16")
    ap.add_argument("--shapes", default="17408x5120,5120x17408")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--reductions", default="host",
                    help="comma-separated split-K sums to run each row with: host (the dispatcher's choice), "
                         "finalize (the finalize kernel after the split kernel)")
    ap.add_argument("--build-dir", default=None,
                    help="where the two libraries are built or found (default: a temporary folder)")
    ap.add_argument("--build-only", action="store_true", help="build the two libraries into --build-dir and stop")
    args = ap.parse_args()
    if args.build_only:
        if not args.build_dir:
            ap.error("--build-only needs --build-dir")
        print(build_pair(Path(args.build_dir)))
        return 0
    if not args.out:
        ap.error("--out is needed to run (only --build-only goes without it)")
    stream = torch.cuda.current_stream().cuda_stream
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
    g = torch.tensor([0.0123], dtype=torch.float32, device="cuda")
    counters = cuda_backend.splitk_counters(0, stream, 1 << 16)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        libs = load_pair(build_pair(Path(args.build_dir or tmp)))
        for shape in args.shapes.split(","):
            n, k = (int(v) for v in shape.split("x"))
            packed, scales = make(n, k, 1)
            p, s = to_dev(packed), to_dev(scales)
            pt, st = layout.tile_weights(p, s)
            scale_bytes = layout.scale_byte_range(s)
            for m, asked in ((int(v), r) for v in args.ms.split(",") for r in args.reductions.split(",")):
                a = torch.randn(m, k, dtype=torch.float32, device="cuda").to(torch.bfloat16)
                occupancy = int(libs["plain"].nvfp4_fused_occupancy(m))
                splits = fused_split_count(n, k, m, sms, occupancy)
                host = cuda_backend.fused_reduction(splits, m) if splits > 1 else "none"
                if asked not in ("host", "finalize"):
                    ap.error(f"--reductions: unknown sum {asked!r} (host or finalize)")
                if asked == "finalize" and host != "last_block":
                    continue  # the host's choice is already the finalize kernel (or no split)
                reduction = host if asked == "host" else "finalize"
                workspace = cuda_backend.gemv_workspace(0, stream, splits * m * n).data_ptr()
                count = counters.data_ptr() if reduction == "last_block" else None
                outs = {}

                def run(lib, out):
                    err = lib.nvfp4_launch_fused_tiled(a.data_ptr(), pt.data_ptr(), st.data_ptr(), g.data_ptr(), None,
                                                       out.data_ptr(), workspace if splits > 1 else None, count, m,
                                                       n, k, 1, splits, torch.cuda.current_stream().cuda_stream,
                                                       scale_bytes)
                    assert err == 0, err

                # DRAM bytes of one block's K step: its weight rows' 64 code bytes and 8 scale bytes
                # (the activations come from L2)
                step_bytes = (int(libs["plain"].nvfp4_fused_tile(m)) >> 16) * (64 + 8)
                row = {"n": n, "k": k, "m": m, "splits": splits, "reduction": reduction, "occupancy": occupancy,
                       "dram_bytes_per_block_step": step_bytes}
                for name, lib in libs.items():
                    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
                    row[f"{name}_flushed_us"] = round(timer(lambda: run(lib, out), flush, reps=21), 2)
                    outs[name] = out
                torch.cuda.synchronize()
                plain_bits, timeline_bits = (outs[name].view(torch.int16) for name in ("plain", "timeline"))
                row["same_bits"] = bool(torch.equal(plain_bits, timeline_bits))
                blocks = int(libs["plain"].nvfp4_fused_tiles(m, n)) * splits
                calls = []
                for _ in range(args.runs):
                    flush.zero_()
                    run(libs["timeline"], outs["timeline"])
                    torch.cuda.synchronize()
                    rec = read_records(libs["timeline"], blocks)
                    try:
                        summary = summarize(rec)
                    except ValueError as err:  # kept as the row's finding; the other rows still run
                        row.setdefault("errors", []).append(str(err))
                        print(f"{n}x{k} M={m}: {err}", flush=True)
                        continue
                    calls.append(summary)
                row["calls"] = calls
                if calls:  # the last call's records themselves, for analyses the summary does not make
                    row["last_call_records"] = {f: rec[f].astype(np.int64).tolist() for f in rec.dtype.names
                                                if f != "unused"}
                rows.append(row)
                if not calls:
                    continue
                med = {key: statistics.median(c[key] for c in calls) for key in ("span_us", "tail_after_p90_end_us")}
                c0 = calls[len(calls) // 2]
                print(f"{n}x{k} M={m} splits {splits} ({reduction}) blocks {blocks}: plain {row['plain_flushed_us']} "
                      f"us, instrumented {row['timeline_flushed_us']} us, same bits {row['same_bits']}; "
                      f"span {med['span_us']} tail {med['tail_after_p90_end_us']} us; "
                      f"clock {c0['sm_clock_ghz']} GHz, gt res {c0['globaltimer_resolution_ns']} ns; block p50 "
                      f"{c0['block_total_us']['p50']} us = first data {c0['first_data_us']['p50']} + loop "
                      f"{c0['loop_us']['p50']} (wait share {c0['loop_wait_share']}) + epilogue "
                      f"{c0['epilogue_us']['p50']}; per step p50 {c0['per_step_us']['p50']} us; "
                      f"SM last end by its blocks {c0['sm_last_end_us_by_blocks']}", flush=True)
                rate = [f"{steps * step_bytes / 1e6:.1f}" for steps in c0["steps_done_every_1us"]]
                print(f"    consumed TB/s, microsecond by microsecond: {' '.join(rate)}", flush=True)
    write_rows(args.out, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
