"""Warp-specialized mimic of fused_mma's M = 1 K loop (benchmarks/NOTES.md, thirty-second session).

Question: at M = 1 the kernel without its decode streams the weights near a read-only kernel's
rate, and stand-in decode work of about 150 dependent ALU instructions a step costs its mimic
3-6 us (ninth session). Is that work exposed because each block issues its next copies only
after the barrier of the step it computes (mimic_kernel, like fused_mma)? A producer warp that
copies through a deeper ring of mbarrier-guarded stages as soon as a stage is free
(ws_mimic_kernel in scripts/l2_floor_probe.cu) would hide it, if so.

Same run: the bench's copy of the row bytes and a read-only kernel over them, mimic_kernel (three
cp.async stages, 8 blocks of 128 threads an SM) and ws_mimic_kernel in several ring depths,
blocks an SM, consumer warps and unit takes, each with 0, 15 and 30 rounds of stand-in work a
step, on both large shapes' tile and step counts. Before timing, ws_mimic_kernel with four
consumer warps must give mimic_kernel's partials word for word (same bytes in the same order).

    nvcc -O3 -arch=sm_90 -shared -Xcompiler -fPIC -o kernels/_build/probe/libl2probe.so scripts/l2_floor_probe.cu
    python scripts/ws_mimic_probe.py --lib kernels/_build/probe/libl2probe.so --out FILE
"""
from __future__ import annotations

import argparse
import ctypes

import torch
from l2_floor_probe import (
    MIMIC_EIGHT_PER_SM,
    load_probe_library,
    mimic_reference_rows,
    print_share_of_copy,
    timed,
    write_rows,
)

SHAPES = (("17408x5120", 272, 40, 7), ("5120x17408", 80, 136, 13))
# (consumer warps, ring stages, blocks an SM (0: a block per unit, 8 an SM, as mimic_kernel), dynamic unit takes,
# bulk copies by one lane (else a warp's cp.async))
WS_CONFIGS = ((4, 3, 0, 0, 0), (4, 3, 0, 0, 1), (4, 4, 0, 0, 0),
              (4, 8, 4, 1, 1), (4, 12, 3, 1, 1), (8, 12, 2, 1, 1), (4, 8, 4, 0, 1),
              (4, 8, 4, 1, 0), (4, 6, 6, 1, 0), (4, 12, 3, 1, 0), (8, 8, 4, 1, 0), (8, 12, 2, 1, 0), (4, 8, 4, 0, 0),
              (4, 4, 8, 0, 0), (4, 3, 8, 0, 0))
WORKS = (0, 15, 30)
# --profile: (work, config or None for mimic_kernel), launched in this order, static takes only
PROFILED = ((0, None), (0, (4, 3, 8, 0, 0)), (30, None), (30, (4, 3, 8, 0, 0)), (0, (4, 8, 4, 0, 1)))


def config_name(cfg: tuple) -> str:
    consumers, ring, per_sm, dynamic, bulk = cfg
    blocks = f"b{per_sm}" if per_sm else "grid"
    return f"ws_{'bulk' if bulk else 'warp'}_c{consumers}_r{ring}_{blocks}_{'dyn' if dynamic else 'static'}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lib", required=True, help="the probe library built from scripts/l2_floor_probe.cu")
    ap.add_argument("--out", required=True, help="JSON file for the rows")
    ap.add_argument("--profile", action="store_true",
                    help="launch only PROFILED's subjects once each on 17408 x 5120, for ncu (nothing is timed)")
    args = ap.parse_args()
    lib = load_probe_library(args.lib)
    lib.probe_ws_mimic.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 9 + [ctypes.c_void_p, ctypes.c_uint,
                                                                                  ctypes.c_void_p, ctypes.c_void_p,
                                                                                  ctypes.c_int]
    lib.probe_ws_mimic_occupancy.argtypes = [ctypes.c_int] * 4
    stream = torch.cuda.current_stream().cuda_stream
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
    torch.manual_seed(0)
    act = torch.randint(0, 256, (64 * 1024,), dtype=torch.uint8, device="cuda")
    out_grid = torch.zeros(1 << 20, dtype=torch.int32, device="cuda")
    out_ws = torch.zeros(1 << 20, dtype=torch.int32, device="cuda")
    counter = torch.zeros(1, dtype=torch.int32, device="cuda")
    taken = [0]  # values the counter has given so far (every launch takes units + blocks of them)
    eight_per_sm = MIMIC_EIGHT_PER_SM
    ws_eight_per_sm = eight_per_sm - 512  # ws_mimic_kernel's barriers and headers are static shared memory

    def flush_write() -> None:
        flush.zero_()

    if args.profile:
        tiles, steps, splits = SHAPES[0][1:]
        wt = torch.randint(0, 256, (tiles * steps * 4096,), dtype=torch.uint8, device="cuda")
        st = torch.randint(0, 256, (tiles * steps * 512,), dtype=torch.uint8, device="cuda")
        for work, cfg in PROFILED:
            flush_write()
            if cfg is None:
                err = lib.probe_mimic(wt.data_ptr(), st.data_ptr(), act.data_ptr(), tiles, steps, splits, work, 3, 0,
                                      out_grid.data_ptr(), stream, eight_per_sm)
            else:
                consumers, ring, per_sm, dynamic, bulk = cfg
                err = lib.probe_ws_mimic(wt.data_ptr(), st.data_ptr(), act.data_ptr(), tiles, steps, splits, work,
                                         consumers, ring, per_sm * sms, dynamic, bulk, counter.data_ptr(), 0,
                                         out_ws.data_ptr(), stream, 0)
            assert err == 0, err
            torch.cuda.synchronize()
            print(f"profiled work {work}: {'mimic_kernel S3 grid' if cfg is None else config_name(cfg)}", flush=True)
        return 0
    rows = mimic_reference_rows(lib, flush_write, 48)
    failures = 0
    for shape, tiles, steps, splits in SHAPES:
        wt = torch.randint(0, 256, (tiles * steps * 4096,), dtype=torch.uint8, device="cuda")
        st = torch.randint(0, 256, (tiles * steps * 512,), dtype=torch.uint8, device="cuda")
        units = tiles * splits

        def grid(work: int, out=out_grid, wt=wt, st=st, tiles=tiles, steps=steps, splits=splits) -> None:
            err = lib.probe_mimic(wt.data_ptr(), st.data_ptr(), act.data_ptr(), tiles, steps, splits, work, 3, 0,
                                  out.data_ptr(), stream, eight_per_sm)
            assert err == 0, err

        def ws(work: int, cfg: tuple, out=out_ws, wt=wt, st=st, tiles=tiles, steps=steps, splits=splits,
               units=units) -> None:
            consumers, ring, per_sm, dynamic, bulk = cfg
            blocks = per_sm * sms if per_sm else units
            err = lib.probe_ws_mimic(wt.data_ptr(), st.data_ptr(), act.data_ptr(), tiles, steps, splits, work,
                                     consumers, ring, blocks, dynamic, bulk, counter.data_ptr(), taken[0] % 2**32,
                                     out.data_ptr(), stream, 0 if per_sm else ws_eight_per_sm)
            assert err == 0, err
            if dynamic:
                taken[0] += units + blocks

        # the handshake check: four consumer warps read what mimic_kernel's threads read
        for cfg in [c for c in WS_CONFIGS if c[0] == 4]:
            out_grid.zero_()
            out_ws.zero_()
            grid(15)
            ws(15, cfg)
            torch.cuda.synchronize()
            same = torch.equal(out_grid[: units * 128], out_ws[: units * 128])
            print(f"check {shape} {config_name(cfg)}: partials {'equal' if same else 'DIFFER'}", flush=True)
            rows.append({"subject": f"check_{shape}_{config_name(cfg)}",
                         "partials_equal_to_mimic_kernel": same})
            failures += not same
        for work in WORKS:
            us = timed(lambda work=work: grid(work), flush_write)
            rows.append({"subject": f"mimic_{shape}_S3_grid_work{work}", "median_us": round(us, 2),
                         "bytes": wt.numel() + st.numel(), "blocks_per_sm": 8})
            print(f"{rows[-1]['subject']:48s} {us:8.2f} us", flush=True)
            for cfg in WS_CONFIGS:
                consumers, ring, per_sm, dynamic, bulk = cfg
                occ = lib.probe_ws_mimic_occupancy(consumers, ring, bulk, 0 if per_sm else ws_eight_per_sm)
                if occ < max(per_sm, 1) or (not per_sm and occ != 8):
                    why = f"{occ} blocks an SM fit, {per_sm or 8} asked"
                    rows.append({"subject": f"{shape}_{config_name(cfg)}_work{work}", "skipped": why})
                    print(f"skip {config_name(cfg)}: {why}", flush=True)
                    continue
                us = timed(lambda work=work, cfg=cfg: ws(work, cfg), flush_write)
                name = f"{shape}_{config_name(cfg)}_work{work}"
                rows.append({"subject": name, "median_us": round(us, 2), "bytes": wt.numel() + st.numel(),
                             "blocks_per_sm": per_sm or occ, "block_per_unit": not per_sm,
                             "consumer_warps": consumers, "ring": ring,
                             "dynamic": bool(dynamic), "producer": "one lane, cp.async.bulk" if bulk
                             else "a warp, 16-byte cp.async"})
                print(f"{name:48s} {us:8.2f} us", flush=True)
        del wt, st
    print_share_of_copy(rows, 48)
    write_rows(args.out, rows)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
