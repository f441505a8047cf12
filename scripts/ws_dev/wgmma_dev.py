"""Device check of the library's fused_wgmma kernel (kernels/cuda/fused_wgmma.cu) before the
dispatcher takes it: its bits against the register-A dev kernel (scripts/ws_dev/fused_ra.cu, which
reads its own one-time re-layout) at the same split counts, the balanced plans' rows against the
uniform plans', the identity readout at 256 rows, and the speed of every plan on the bench's two
large shapes beside cuBLAS bf16, prefill and fused_mma in the same run (L2 flushed, medians).

    python scripts/ws_dev/ra_dev.py --out DIR --prebuild       # here: libra.so
    python scripts/ws_dev/wgmma_dev.py --out DIR [--smoke]     # on the H200
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SMS = 132


def plans_for(n: int, k: int) -> list[tuple[int, int]]:
    """(whole_tiles, splits) plans to time: uniform splits 1..4 and the balanced ones (whole waves
    of tiles in one block each, the left-over tiles split)."""
    tiles, steps = -(-n // 128), k // 128

    def norm(s: int) -> int:
        per = -(-steps // max(1, min(s, steps)))
        return -(-steps // per)

    out = {(0, norm(s)) for s in (1, 2, 3, 4) if tiles * norm(s) <= 3 * SMS}
    whole = (tiles // SMS) * SMS
    left = tiles - whole
    if whole and left:
        for s in (SMS // left, 20, 10, 5):
            out.add((whole, norm(s)))
    return sorted(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--smoke", action="store_true", help="one launch, nothing else")
    parser.add_argument("--ms", default="128,192,256")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    import torch
    from nvfp4_harness.nvfp4.shapes import matmul_error_bound, oracle_dequantize
    from nvfp4_kernels import Policy, cuda_backend, nvfp4_matmul
    from nvfp4_kernels.tiling import wgmma_plan

    sys.path.insert(0, str(HERE))
    import ra_dev
    import ws_dev

    dev = "cuda"
    lib = cuda_backend.load_library()
    vp, i32, i64 = ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64
    lib.nvfp4_launch_fused_wgmma.restype = ctypes.c_int
    lib.nvfp4_launch_fused_wgmma.argtypes = [vp, vp, vp, vp, vp, vp, vp, i32, i64, i64, i32, i32, i32, vp]
    work = {name: torch.empty(1, dtype=torch.float32, device=dev) for name in ("buf", "ra")}

    def wg(a, p, s, g, bias, o, whole: int, splits: int) -> None:
        m, k = a.shape
        n = o.shape[1]
        need = splits * m * max(1, n - 128 * whole)
        if work["buf"].numel() < need:
            work["buf"] = torch.empty(need, dtype=torch.float32, device=dev)
        err = lib.nvfp4_launch_fused_wgmma(a.data_ptr(), p.data_ptr(), s.data_ptr(), g.data_ptr(),
                                           None if bias is None else bias.data_ptr(), o.data_ptr(),
                                           work["buf"].data_ptr(), m, n, k, int(a.dtype == torch.bfloat16),
                                           whole, splits, torch.cuda.current_stream().cuda_stream)
        if err:
            raise RuntimeError(f"nvfp4_launch_fused_wgmma: cuda error {err} (m={m} n={n} k={k} {whole}/{splits})")

    if args.smoke:
        packed, scales = ws_dev.make(300, 1024, 3)
        a = torch.randn(256, 1024, dtype=torch.bfloat16, device=dev)
        o = torch.empty((256, 300), dtype=torch.bfloat16, device=dev)
        g = torch.tensor([0.0123], dtype=torch.float32, device=dev)
        wg(a, ws_dev.to_dev(packed), ws_dev.to_dev(scales), g, None, o, 1, 2)
        torch.cuda.synchronize()
        print("smoke launch done")
        return 0
    ra = ctypes.CDLL(str(ra_dev.PREBUILT))
    ra.nvfp4ra_launch.restype = ctypes.c_int
    ra.nvfp4ra_launch.argtypes = [vp, vp, vp, vp, vp, vp, vp, i32, i32, i32, i32, i32, vp]
    ra.nvfp4ra_launch_plan.restype = ctypes.c_int
    ra.nvfp4ra_launch_plan.argtypes = [vp, vp, vp, vp, vp, vp, vp, i32, i32, i32, i32, i32, i32, vp]
    from nvfp4_kernels import layout

    def ra_call(a, pr, st, g, bias, o, splits, whole=0):
        m, k = a.shape
        n = o.shape[1]
        need = max(1, splits * m * n)
        if work["ra"].numel() < need:
            work["ra"] = torch.empty(need, dtype=torch.float32, device=dev)
        err = ra.nvfp4ra_launch_plan(a.data_ptr(), pr.data_ptr(), st.data_ptr(), g.data_ptr(),
                                     None if bias is None else bias.data_ptr(), o.data_ptr(), work["ra"].data_ptr(),
                                     m, n, k, int(a.dtype == torch.bfloat16), whole, splits,
                                     torch.cuda.current_stream().cuda_stream)
        if err:
            raise RuntimeError(f"nvfp4ra_launch_plan: {err}")

    report: dict = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    failures, rows = [], []
    cases = []
    for dtype in (torch.bfloat16, torch.float16):
        for (n, k) in ((64, 128), (70, 384), (200, 1024), (1000, 2048), (413, 4096)):
            for m in (1, 17, 129, 200, 256):
                cases.append((dtype, n, k, m, m % 2 == 1, (0x30, 0x40), 0.0123))
    for (n, k) in ((300, 1024), (136, 2048)):
        for m in (5, 256):
            cases.append((torch.bfloat16, n, k, m, True, (0, 256), 0.0123))
            cases.append((torch.float16, n, k, m, False, (0, 256), 0.0123))
    for gval in (2.0 ** 110, 2.0 ** -100):
        cases.append((torch.bfloat16, 257, 1024, 200, True, (0x30, 0x40), gval))
    for idx, (dtype, n, k, m, with_bias, (lo, hi), gval) in enumerate(cases):
        packed, scales = ws_dev.make(n, k, idx, lo, hi)
        name = "bfloat16" if dtype == torch.bfloat16 else "float16"
        rng = np.random.default_rng(3000 + idx)
        a = torch.from_numpy(rng.uniform(-2, 2, (m, k)).astype(np.float32)).to(dtype).to(dev)
        bias = torch.from_numpy(rng.uniform(-1, 1, n).astype(np.float32)).to(dtype).to(dev) if with_bias else None
        g = torch.tensor([gval], dtype=torch.float32, device=dev)
        p, s = ws_dev.to_dev(packed), ws_dev.to_dev(scales)
        _, st = layout.tile_weights(p, s)
        pr = ws_dev.to_dev(ra_dev.ra_layout(packed))
        w = oracle_dequantize(packed, scales, np.float32(gval), 16, name)
        y64, bound = matmul_error_bound(a.float().cpu().numpy().astype(w.dtype), w,
                                        None if bias is None else bias.float().cpu().numpy().astype(w.dtype),
                                        name, roundings=1)
        steps, tiles = k // 128, -(-n // 128)
        uniform = {}
        for splits in sorted({1, min(3, steps), steps}):
            per = -(-steps // splits)
            splits = -(-steps // per)
            o1 = torch.full((m, n), 7, dtype=dtype, device=dev)
            o2 = torch.full((m, n), 9, dtype=dtype, device=dev)
            ref = torch.full((m, n), 5, dtype=dtype, device=dev)
            wg(a, p, s, g, bias, o1, 0, splits)
            wg(a, p, s, g, bias, o2, 0, splits)
            ra_call(a, pr, st, g, bias, ref, splits)
            torch.cuda.synchronize()
            uniform[splits] = o1
            same = bool(torch.equal(o1.view(torch.int16), o2.view(torch.int16)))
            as_ra = bool(torch.equal(o1.view(torch.int16), ref.view(torch.int16)))
            got = o1.float().cpu().numpy().astype(np.float64)
            bad = np.isfinite(y64) & ~(np.abs(got - y64) <= bound)
            nan_ok = bool(np.array_equal(np.isnan(got), np.isnan(y64)))
            rows.append({"dtype": name, "n": n, "k": k, "m": m, "whole": 0, "splits": splits,
                         "same_bits_run_to_run": same, "same_bits_as_ra_dev": as_ra,
                         "out_of_bound": int(bad.sum()), "nan_pattern_ok": nan_ok})
            if not (same and as_ra and nan_ok) or bad.any():
                failures.append(f"{name} n={n} k={k} m={m} splits={splits}: same={same} as_ra={as_ra} "
                                f"out_of_bound={int(bad.sum())} nan_ok={nan_ok}")
        # balanced plans: tiles below `whole` as the one-split plan, the rest as the uniform plan
        for whole in sorted({1, tiles - 1} - {0, tiles}) if tiles > 1 else ():
            for splits in uniform:
                if splits == 1:
                    continue
                o = torch.full((m, n), 3, dtype=dtype, device=dev)
                wg(a, p, s, g, bias, o, whole, splits)
                torch.cuda.synchronize()
                c = 128 * whole
                ok = bool(torch.equal(o[:, :c].view(torch.int16), uniform[1][:, :c].view(torch.int16))
                          and torch.equal(o[:, c:].view(torch.int16), uniform[splits][:, c:].view(torch.int16)))
                rows.append({"dtype": name, "n": n, "k": k, "m": m, "whole": whole, "splits": splits,
                             "rows_as_uniform_plans": ok})
                if not ok:
                    failures.append(f"{name} n={n} k={k} m={m} plan {whole}/{splits}: rows differ from the "
                                    f"uniform plans'")
    report["correctness"] = rows

    def launches(a, weight, g, splits):
        o = torch.full((a.shape[0], 200), 7, dtype=a.dtype, device=dev)
        per = -(-8 // splits)
        wg(a, *weight, g, None, o, 0, -(-8 // per))
        yield "wgmma", o
        o2 = torch.full((a.shape[0], 200), 7, dtype=a.dtype, device=dev)
        wg(a, *weight, g, None, o2, 1, -(-8 // per))
        yield "wgmma-balanced", o2

    readout, readout_failures = ws_dev.identity_readout(lambda pk, sc: (ws_dev.to_dev(pk), ws_dev.to_dev(sc)),
                                                        launches, (256, 128))
    failures += readout_failures
    report["readout"] = readout
    print(f"correctness: {len(rows)} rows, {len(failures)} failures; same bits as the register-A dev kernel on "
          f"{sum(r.get('same_bits_as_ra_dev', False) for r in rows)} of "
          f"{sum('same_bits_as_ra_dev' in r for r in rows)} uniform rows")
    for f in failures[:20]:
        print("  FAIL", f)
    # speed
    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device=dev)
    lines, speed = [], []
    for n, k in ((17408, 5120), (5120, 17408)):
        packed, scales = ws_dev.make(n, k, 1)
        p, s = ws_dev.to_dev(packed), ws_dev.to_dev(scales)
        _, st = layout.tile_weights(p, s)
        pr = ws_dev.to_dev(ra_dev.ra_layout(packed))
        g = torch.tensor([0.0123], dtype=torch.float32, device=dev)
        w_bf16 = torch.randn(n, k, dtype=torch.bfloat16, device=dev)
        w_scratch = torch.empty((n, k), dtype=torch.bfloat16, device=dev)
        for m in (int(x) for x in args.ms.split(",")):
            a = torch.randn(m, k, dtype=torch.bfloat16, device=dev)
            o = torch.empty((m, n), dtype=torch.bfloat16, device=dev)
            cublas_us = ws_dev.timer(lambda a=a, w=w_bf16: torch.matmul(a, w.t()), flush)
            prefill_us = ws_dev.timer(ws_dev.prefill_call(p, s, g, a, o, w_scratch), flush)
            forced = Policy(force_path="fused_mma", fused_max_m=256)
            fused_us = ws_dev.timer(lambda a=a, p=p, s=s, g=g, f=forced: nvfp4_matmul(a, p, s, g, 16, policy=f), flush)
            times = {f"{wh}/{sp}": ws_dev.timer(lambda a=a, p=p, s=s, g=g, o=o, wh=wh, sp=sp:
                                                wg(a, p, s, g, None, o, wh, sp), flush)
                     for wh, sp in plans_for(n, k)}
            best = min(times, key=times.get)
            whole, splits = wgmma_plan(n, k)
            relayout_us = ws_dev.timer(lambda a=a, g=g, o=o, pr=pr, st=st, sp=splits, wh=whole:
                                       ra_call(a, pr, st, g, None, o, sp, wh), flush)
            speed.append({"n": n, "k": k, "m": m, "cublas_bf16_us": cublas_us, "prefill_vec8_us": prefill_us,
                          "fused_mma_us": fused_us, "wgmma_us": times, "best_plan": best,
                          "relayout_library_plan_us": relayout_us})
            lines.append(f"{n}x{k} M={m:3d}: cuBLAS {cublas_us:6.2f} prefill {prefill_us:6.2f} fused_mma "
                         f"{fused_us:6.2f} | " + " ".join(f"{key}={v:6.2f}" for key, v in times.items())
                         + f" -> best {best} {times[best] / cublas_us:4.2f}x cuBLAS | re-layout at {whole}/{splits} "
                         f"{relayout_us:6.2f} = {relayout_us / cublas_us:4.2f}x")
    report["speed"] = speed
    (out / "wgmma_dev.json").write_text(json.dumps(report, indent=1))
    for line in lines:
        print(line)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
