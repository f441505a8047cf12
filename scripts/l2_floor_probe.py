"""Floor probe (benchmarks/NOTES.md, ninth session): what the bench's L2 flush costs a kernel that
reads 50 MB once, and so what "% of the same-run copy" a read-once kernel can reach at all.

Each subject is timed as the bench times it (flush, event, call, event; median of 21), after two
flushes: "write" (the bench's: zero a 256 MB buffer, leaving the L2 full of dirty lines), "clean"
(the same write, then a 256 MB read, so the L2 holds clean lines); the first run also timed
none ("warm", host-bound for the fused call, so not comparable). Subjects: the
bench's copy of 50 MB of row bytes (25 MB read, 25 MB written), a read-only kernel over the 50 MB
(16-byte loads; plain, streaming access-policy window, evict-first hint), and the fused_mma call at
M = 1 on 17408 x 5120 as the dispatcher makes it (tiled weights). First, after the bench's flush,
the mimic of fused_mma's M = 1 K loop (scripts/l2_floor_probe.cu) in several stage counts, with and
without stand-in decode work, a block per unit or one persistent wave.

    nvcc -O3 -arch=sm_90 -shared -Xcompiler -fPIC -o kernels/_build/probe/libl2probe.so scripts/l2_floor_probe.cu
    python scripts/l2_floor_probe.py --lib kernels/_build/probe/libl2probe.so --out FILE
"""
from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import statistics
import subprocess
import sys

import torch
from nvfp4_kernels import cuda_backend, layout

N, K = 17408, 5120


def timed(fn, flush_fn, reps=21):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for s, e in zip(starts, ends, strict=True):
        flush_fn()
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(1000.0 * s.elapsed_time(e) for s, e in zip(starts, ends, strict=True))


def load_probe_library(path: str) -> ctypes.CDLL:
    """The library built from scripts/l2_floor_probe.cu, with the argument types of the entry
    points its drivers share declared once (the read-only kernel and mimic_kernel's launches)."""
    lib = ctypes.CDLL(path)
    lib.probe_read.argtypes = [ctypes.c_void_p, ctypes.c_longlong, ctypes.c_void_p] + [ctypes.c_int] * 4 + [
        ctypes.c_void_p]
    lib.probe_mimic.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 6 + [ctypes.c_void_p] * 2 + [ctypes.c_int]
    lib.probe_mimic_dynamic.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 6 + [ctypes.c_void_p] * 3 + [
        ctypes.c_int]
    lib.probe_mimic_occupancy.argtypes = [ctypes.c_int, ctypes.c_int]
    return lib


MIMIC_ROW_BYTES = 17408 * 5120 // 2 + 17408 * 5120 // 16  # M = 1's row on 17408 x 5120: packed weights, scales
#: dynamic shared memory a mimic_kernel launch asks for so that 8 blocks fit an SM, as fused_mma's M = 1
MIMIC_EIGHT_PER_SM = 227 * 1024 // 8 - 1024


class MimicWalkProbe:
    """What the mimic walk drivers (mimic_walk_probe.py, fine_unit_walk_probe.py) set up alike: their
    command line (--lib, --out), the probe library, the stream and SM count, a 256 MB buffer whose
    write flushes the L2 (``flush_write``), the stand-in activation bytes (seed 0) and the dynamic
    walk's two-word counter, which every launch leaves at 0."""

    def __init__(self, description: str) -> None:
        ap = argparse.ArgumentParser(description=description)
        ap.add_argument("--lib", required=True, help="the probe library built from scripts/l2_floor_probe.cu")
        ap.add_argument("--out", required=True, help="JSON file for the rows")
        self.args = ap.parse_args()
        self.lib = load_probe_library(self.args.lib)
        self.stream = torch.cuda.current_stream().cuda_stream
        self.sms = torch.cuda.get_device_properties(0).multi_processor_count
        self._flush = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
        torch.manual_seed(0)
        self.act = torch.randint(0, 256, (64 * 1024,), dtype=torch.uint8, device="cuda")
        self.take = torch.zeros(2, dtype=torch.int32, device="cuda")

    def flush_write(self) -> None:
        self._flush.zero_()

    def resident(self, stages: int) -> int:
        """mimic_kernel's blocks an SM at ``stages`` stages and MIMIC_EIGHT_PER_SM bytes."""
        return self.lib.probe_mimic_occupancy(stages, MIMIC_EIGHT_PER_SM)

    def timed_row(self, rows: list[dict], subject: str, run, label_width: int, **fields) -> None:
        """Times ``run`` after an L2 flush (``timed``), appends {subject, median_us, **fields} to
        ``rows`` and prints the subject and its median."""
        us = timed(run, self.flush_write)
        rows.append({"subject": subject, "median_us": round(us, 2), **fields})
        print(f"{subject:{label_width}s} {us:8.2f} us", flush=True)


def mimic_reference_rows(lib, flush_fn, label_width: int) -> list[dict]:
    """The mimic probes' same-run references over MIMIC_ROW_BYTES: the bench's copy of them (half
    read, half written) and the probe library's read-only kernel over all of them, each timed
    after ``flush_fn`` as the bench times a call, printed as they come. ``lib``: load_probe_library's."""
    stream = torch.cuda.current_stream().cuda_stream
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    sink = torch.zeros(1 << 16, dtype=torch.int32, device="cuda")
    blob = torch.randint(0, 256, (MIMIC_ROW_BYTES,), dtype=torch.uint8, device="cuda")
    src = torch.randint(0, 256, (MIMIC_ROW_BYTES // 2,), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)

    def read() -> None:
        assert lib.probe_read(blob.data_ptr(), MIMIC_ROW_BYTES, sink.data_ptr(), sms * 8, 256, 0, 0, stream) == 0

    rows = [{"subject": "copy_of_row_bytes", "median_us": round(timed(lambda: dst.copy_(src), flush_fn), 2),
             "bytes": MIMIC_ROW_BYTES},
            {"subject": "read_plain", "median_us": round(timed(read, flush_fn), 2), "bytes": MIMIC_ROW_BYTES}]
    for r in rows:
        print(f"{r['subject']:{label_width}s} {r['median_us']:8.2f} us", flush=True)
    return rows


def print_share_of_copy(rows: list[dict], label_width: int) -> None:
    """Every timed row's median and its share of the same run's copy_of_row_bytes."""
    copy = next(r["median_us"] for r in rows if r["subject"] == "copy_of_row_bytes")
    print(f"\n{'subject':{label_width}s} {'us':>8s} {'% of copy':>9s}")
    for r in rows:
        if "median_us" in r:
            print(f"{r['subject']:{label_width}s} {r['median_us']:8.2f} {100 * copy / r['median_us']:8.1f}%")


def write_rows(path: str, rows: list[dict]) -> None:
    """The probe's rows with what produced them: GPU, driver, torch, CUDA, the UTC time and the
    command (the driver from nvidia-smi where there is one)."""
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, check=True).stdout.split("\n")[0].strip()
    except (OSError, subprocess.CalledProcessError):
        driver = "unknown (no nvidia-smi)"
    prov = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": "python " + " ".join(sys.argv), "gpu": torch.cuda.get_device_name(0), "driver": driver,
            "torch": torch.__version__, "cuda": torch.version.cuda}
    with open(path, "w") as fh:
        json.dump({"provenance": prov, "rows": rows}, fh, indent=1)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    lib = load_probe_library(args.lib)
    stream = torch.cuda.current_stream().cuda_stream
    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
    sink = torch.zeros(1 << 16, dtype=torch.int32, device="cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count

    def read(buf, blocks=sms * 8, threads=256, hint=0, window=0):
        err = lib.probe_read(buf.data_ptr(), buf.numel(), sink.data_ptr(), blocks, threads, hint, window, stream)
        assert err == 0, err

    flushes = {
        "write": lambda: flush.zero_(),
        "clean": lambda: (flush.zero_(), read(flush)),
    }
    torch.manual_seed(0)
    packed = torch.randint(0, 256, (N, K // 2), dtype=torch.uint8, device="cuda")
    scales = torch.randint(0x30, 0x40, (N, K // 16), dtype=torch.uint8, device="cuda")
    g = torch.tensor([0.0123], dtype=torch.float32, device="cuda")
    nbytes = packed.numel() + scales.numel()
    blob = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device="cuda")
    half = nbytes // 2
    src = torch.randint(0, 256, (half,), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    tiled = layout.tile_weights(packed, scales)
    scale_bytes = layout.scale_byte_range(scales)
    a = torch.randn(1, K, device="cuda").to(torch.bfloat16)
    out = torch.empty(1, N, dtype=torch.bfloat16, device="cuda")

    def fused():
        cuda_backend.fused_mma(a, packed, scales, g, None, out, tiled=(tiled[0], tiled[1], scale_bytes))

    subjects = {
        "copy_of_row_bytes": lambda: dst.copy_(src),
        "read_plain": lambda: read(blob),
        "read_window": lambda: read(blob, window=1),
        "read_evict_first_hint": lambda: read(blob, hint=1),
        "read_plain_16_per_sm_512t": lambda: read(blob, blocks=sms * 4, threads=512),
        "fused_mma_m1_tiled": fused,
    }
    rows = []
    # the mimic of fused_mma's M = 1 K loop (see the .cu): both large shapes' tile and step counts
    mimic_out = torch.zeros(1 << 20, dtype=torch.int32, device="cuda")
    act_bytes = torch.randint(0, 256, (64 * 1024,), dtype=torch.uint8, device="cuda")
    eight_per_sm = MIMIC_EIGHT_PER_SM
    for shape, tiles, steps, splits in (("17408x5120", 272, 40, 7), ("5120x17408", 80, 136, 13)):
        wt = torch.randint(0, 256, (tiles * steps * 4096,), dtype=torch.uint8, device="cuda")
        st = torch.randint(0, 256, (tiles * steps * 512,), dtype=torch.uint8, device="cuda")
        for stages, persist, work, sp in ((3, 0, 0, splits), (3, 1, 0, splits), (4, 1, 0, splits), (6, 1, 0, splits),
                                          (3, 0, 30, splits), (3, 1, 30, splits), (4, 1, 30, splits),
                                          (6, 1, 30, splits), (4, 1, 30, 2 * splits), (3, 0, 15, splits),
                                          (3, 1, 15, splits), (4, 1, 15, splits)):
            occ = lib.probe_mimic_occupancy(stages, eight_per_sm)
            grid = occ * sms if persist else 0

            def mimic(stages=stages, grid=grid, work=work, sp=sp, wt=wt, st=st, tiles=tiles, steps=steps):
                err = lib.probe_mimic(wt.data_ptr(), st.data_ptr(), act_bytes.data_ptr(), tiles, steps, sp, work,
                                      stages, grid, mimic_out.data_ptr(), stream, eight_per_sm)
                assert err == 0, err

            name = f"mimic_{shape}_S{stages}_{'persist' if persist else 'grid'}_work{work}_splits{sp}"
            us = timed(mimic, flushes["write"])
            rows.append({"flush": "write", "subject": name, "median_us": round(us, 2),
                         "bytes": wt.numel() + st.numel(), "blocks_per_sm": occ})
            print(f"write  {name:50s} {us:8.2f} us  ({occ} blocks/SM)", flush=True)
        del wt, st
    for fname, ffn in flushes.items():
        for sname, sfn in subjects.items():
            us = timed(sfn, ffn)
            rows.append({"flush": fname, "subject": sname, "median_us": round(us, 2), "bytes": nbytes})
            print(f"{fname:6s} {sname:28s} {us:8.2f} us", flush=True)
    copy = {r["flush"]: r["median_us"] for r in rows if r["subject"] == "copy_of_row_bytes"}
    print("\nflush  subject                                              us   % of same-flush copy")
    for r in rows:
        share = 100 * copy[r["flush"]] / r["median_us"]
        print(f"{r['flush']:6s} {r['subject']:50s} {r['median_us']:7.2f} {share:6.1f}%")
    write_rows(args.out, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
