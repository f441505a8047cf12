# ruff: noqa: B023  (each timed lambda runs inside the iteration that defines it)
"""Development check of the register-A wgmma kernel on its dev re-layout (scripts/ws_dev/fused_ra.cu,
the library's fused_wgmma kernel with the re-layout loader) on an H200: its
weight re-layout, correctness (the same bits run to run, against float64, and whether its bits
equal the -DWS_SS build of fused_ws.cu at the same split count, which sums the same k16 groups),
the identity readout at 256 rows, then times beside the -DWS_SS build, prefill (vec8 + cuBLAS),
cuBLAS bf16 and the same-run copy (L2 flushed, CUDA events, median of 21). Not the benchmark
(benchmarks/NOTES.md, thirteenth session).

    python scripts/ws_dev/ra_dev.py --out DIR --prebuild      (on the CPU machine: nvcc builds
        kernels/_build/ws/ra/libra.so, which a device call carries; the -DWS_SS build comes from
        ws_dev.py --prebuild --ss)
    python scripts/ws_dev/ra_dev.py --out DIR [--ms 128,256] [--libs libra.so] [--smoke]
        (the checks run on the first library; every one is timed)
"""

from __future__ import annotations

import argparse
import ctypes
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PREBUILT = ROOT / "kernels" / "_build" / "ws" / "ra" / "libra.so"

#: K offset in a 128-value step of code i of word q of lane t (fused_ra.cu's layout)
_E = np.array([0, 1, 8, 9])


def ra_offsets() -> np.ndarray:
    """[4 lanes, 4 words, 8 codes] -> K offset in the step."""
    t = np.arange(4)[:, None, None]
    q = np.arange(4)[None, :, None]
    i = np.arange(8)[None, None, :]
    return 16 * (2 * q + i // 4) + 2 * t + _E[i % 4]


def ra_layout(packed: np.ndarray) -> np.ndarray:
    """packed [N, K/2] (the contract's layout) -> fused_ra.cu's weight layout, flat uint8: 64-row
    tiles, per tile and step 64 rows x 64 bytes, lane t's 16 bytes of a row are words q = 0..3 whose
    code i is K = ra_offsets()[t, q, i] of the step, the signs placed as in the tile-contiguous
    layout (code i < 4 at bit 8 i + 7, code 4 + i at bit 8 i + 3)."""
    n, half = packed.shape
    k = 2 * half
    steps = k // 128
    rows = 64 * (-(-n // 64))
    codes = np.zeros((rows, k), dtype=np.uint32)
    codes[:n, 0::2] = packed & 0xF
    codes[:n, 1::2] = packed >> 4
    g = codes.reshape(rows, steps, 128)[:, :, ra_offsets()]  # [rows, steps, 4, 4, 8]
    mag, sign = g & 7, g >> 3
    word = np.zeros(g.shape[:-1], dtype=np.uint32)
    for i in range(8):
        word |= mag[..., i] << (4 * i)
    for i in range(4):
        word |= sign[..., i] << (8 * i + 7)
        word |= sign[..., 4 + i] << (8 * i + 3)
    by_row = word.reshape(rows, steps, 16).astype("<u4").view(np.uint8).reshape(rows // 64, 64, steps, 64)
    return np.ascontiguousarray(by_row.transpose(0, 2, 1, 3)).reshape(-1)


def library(out: Path) -> ctypes.CDLL:
    """The dev library: the prebuilt one a device call carries, or built now into ``out``."""
    return ctypes.CDLL(str(PREBUILT if PREBUILT.exists() else build(out)))


def build(out: Path, flags: tuple[str, ...] = (), target: Path = PREBUILT) -> Path:
    PREBUILT.parent.mkdir(parents=True, exist_ok=True)
    cmd = ["nvcc", "-O3", "-std=c++17", "-lineinfo", "-Xcompiler", "-fPIC", "-ftz=false", "-prec-div=true",
           "-prec-sqrt=true", "-fmad=true", "-gencode=arch=compute_90a,code=sm_90a", "-shared", "-cudart", "static",
           f"-I{ROOT / 'kernels' / 'cuda'}", f"-I{HERE}", "-Xptxas", "-v", str(HERE / "fused_ra.cu"),
           "-o", str(target), *flags]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    (out / f"{target.stem}.ptxas.txt").write_text(res.stdout + res.stderr)
    if res.returncode:
        raise SystemExit(res.stderr[-4000:])
    return target


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--prebuild", action="store_true")
    parser.add_argument("--ms", default="128,192,256")
    parser.add_argument("--libs", default="libra.so", help="libraries under kernels/_build/ws/ra to time")
    parser.add_argument("--smoke", action="store_true", help="one launch of each library, nothing else")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.prebuild:
        print("built", build(out))
        return 0
    import torch
    from nvfp4_harness.nvfp4.shapes import matmul_error_bound, oracle_dequantize
    from nvfp4_kernels import layout

    sys.path.insert(0, str(HERE))
    import ws_dev

    dev = "cuda"
    vp, i32 = ctypes.c_void_p, ctypes.c_int32
    libs = {}
    for name in args.libs.split(","):
        path = PREBUILT.parent / name
        cdll = ctypes.CDLL(str(path if path.exists() else build(out, target=path)))
        cdll.nvfp4ra_launch.restype = ctypes.c_int
        cdll.nvfp4ra_launch.argtypes = [vp, vp, vp, vp, vp, vp, vp, i32, i32, i32, i32, i32, vp]
        libs[name] = cdll
    current = {"lib": next(iter(libs.values()))}
    ws_dev.BASE_FLAGS.append("-DWS_SS")
    ss = ws_dev.Ws(ws_dev.build(out))
    work = {"buf": torch.empty(1, dtype=torch.float32, device=dev)}

    def ra(a, pr, st, g, bias, o, splits: int) -> None:
        m, k = a.shape
        n = o.shape[1]
        need = splits * m * n if splits > 1 else 1
        if work["buf"].numel() < need:
            work["buf"] = torch.empty(need, dtype=torch.float32, device=dev)
        err = current["lib"].nvfp4ra_launch(a.data_ptr(), pr.data_ptr(), st.data_ptr(), g.data_ptr(),
                                 None if bias is None else bias.data_ptr(), o.data_ptr(), work["buf"].data_ptr(),
                                 m, n, k, int(a.dtype == torch.bfloat16), splits,
                                 torch.cuda.current_stream().cuda_stream)
        if err:
            raise RuntimeError(f"nvfp4ra_launch: cuda error {err} (m={m} n={n} k={k} splits={splits})")

    def weights(packed: np.ndarray, scales: np.ndarray):
        p, s = ws_dev.to_dev(packed), ws_dev.to_dev(scales)
        pt, st = layout.tile_weights(p, s)
        return p, s, pt, st, ws_dev.to_dev(ra_layout(packed))

    if args.smoke:  # one launch of each library at 256 rows (a hang shows here, under a short timeout)
        packed, scales = ws_dev.make(200, 1024, 3)
        _, _, _, st, pr = weights(packed, scales)
        a = torch.randn(256, 1024, dtype=torch.bfloat16, device=dev)
        o = torch.empty((256, 200), dtype=torch.bfloat16, device=dev)
        g = torch.tensor([0.0123], dtype=torch.float32, device=dev)
        for cdll in libs.values():
            current["lib"] = cdll
            ra(a, pr, st, g, None, o, 2)
            torch.cuda.synchronize()
        print("smoke launches done")
        return 0
    report: dict = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    # correctness
    failures, rows = [], []
    cases = []
    for dtype in (torch.bfloat16, torch.float16):
        for (n, k) in ((64, 128), (70, 384), (200, 1024), (1000, 2048), (413, 4096)):
            for m in (1, 17, 100, 200, 256, 300):
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
        rng = np.random.default_rng(2000 + idx)
        a = torch.from_numpy(rng.uniform(-2, 2, (m, k)).astype(np.float32)).to(dtype).to(dev)
        bias = torch.from_numpy(rng.uniform(-1, 1, n).astype(np.float32)).to(dtype).to(dev) if with_bias else None
        g = torch.tensor([gval], dtype=torch.float32, device=dev)
        _, _, pt, st, pr = weights(packed, scales)
        w = oracle_dequantize(packed, scales, np.float32(gval), 16, name)
        y64, bound = matmul_error_bound(a.float().cpu().numpy().astype(w.dtype), w,
                                        None if bias is None else bias.float().cpu().numpy().astype(w.dtype),
                                        name, roundings=1)
        steps = k // 128
        for splits in sorted({1, min(3, steps), steps}):
            o1 = torch.full((m, n), 7, dtype=dtype, device=dev)
            o2 = torch.full((m, n), 9, dtype=dtype, device=dev)
            ra(a, pr, st, g, bias, o1, splits)
            ra(a, pr, st, g, bias, o2, splits)
            ref = torch.full((m, n), 5, dtype=dtype, device=dev)
            ss(a, pt, st, g, bias, ref, splits, 128 if ss.has_tile(128, m) else 136)
            torch.cuda.synchronize()
            same = bool(torch.equal(o1.view(torch.int16), o2.view(torch.int16)))
            as_ss = bool(torch.equal(o1.view(torch.int16), ref.view(torch.int16)))
            got = o1.float().cpu().numpy().astype(np.float64)
            bad = np.isfinite(y64) & ~(np.abs(got - y64) <= bound)
            nan_ok = bool(np.array_equal(np.isnan(got), np.isnan(y64)))
            rows.append({"dtype": name, "n": n, "k": k, "m": m, "splits": splits, "same_bits_run_to_run": same,
                         "same_bits_as_ss_build": as_ss, "out_of_bound": int(bad.sum()), "nan_pattern_ok": nan_ok})
            if not same or bad.any() or not nan_ok:
                failures.append(f"{name} n={n} k={k} m={m} splits={splits} scales={lo}-{hi} g={gval}: "
                                f"same={same} out_of_bound={int(bad.sum())} nan_ok={nan_ok}")
    report["correctness"] = rows
    # identity readout at 256 rows (ws_dev.identity_readout: row i picks K = 4 i + off)
    def ra_launches(a, weight, g, splits):
        o = torch.full((a.shape[0], 200), 7, dtype=a.dtype, device=dev)
        ra(a, *weight, g, None, o, splits)
        yield "ra", o

    def ra_weight(packed, scales):
        _, _, _, st, pr = weights(packed, scales)
        return pr, st

    readout, readout_failures = ws_dev.identity_readout(ra_weight, ra_launches, (256,))
    failures += readout_failures
    report["readout"] = readout
    print(f"correctness: {len(rows)} rows, {len(failures)} failures; same bits as the SS build on "
          f"{sum(r['same_bits_as_ss_build'] for r in rows)} rows")
    for f in failures[:20]:
        print("  FAIL", f)
    # speed
    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device=dev)
    lines, speed = [], []
    for n, k in ((17408, 5120), (5120, 17408)):
        packed, scales = ws_dev.make(n, k, 1)
        p, s, pt, st, pr = weights(packed, scales)
        g = torch.tensor([0.0123], dtype=torch.float32, device=dev)
        w_bf16 = torch.randn(n, k, dtype=torch.bfloat16, device=dev)
        w_scratch = torch.empty((n, k), dtype=torch.bfloat16, device=dev)
        for m in (int(x) for x in args.ms.split(",")):
            a = torch.randn(m, k, dtype=torch.bfloat16, device=dev)
            o = torch.empty((m, n), dtype=torch.bfloat16, device=dev)
            copy_us, cublas_us, _ = ws_dev.reference_times(a, w_bf16, flush)
            prefill_us = ws_dev.timer(ws_dev.prefill_call(p, s, g, a, o, w_scratch), flush)
            ss_times = {f"{nt}x{sp}": ws_dev.timer(lambda: ss(a, pt, st, g, None, o, sp, nt), flush)
                        for nt, sp in ((136, 1), (128, 3)) if ss.has_tile(nt, m)}
            ra_times = {}
            for name, cdll in libs.items():
                current["lib"] = cdll
                for sp in (1, 2, 3, 4):
                    if -(-n // 128) * sp <= 3 * 132:
                        tag = "" if name == "libra.so" else name.removeprefix("libra_").removesuffix(".so")
                        key = f"{tag}{sp}"
                        ra_times[key] = ws_dev.timer(lambda: ra(a, pr, st, g, None, o, sp), flush)
            best = min(ra_times, key=ra_times.get)
            ss_best = min(ss_times, key=ss_times.get)
            speed.append({"n": n, "k": k, "m": m, "copy_us": copy_us, "cublas_bf16_us": cublas_us,
                          "prefill_vec8_us": prefill_us, "ss_us": ss_times, "ra_us": ra_times, "ra_best_splits": best})
            r_us = ra_times[best]
            lines.append(f"{n}x{k} M={m:3d}: cuBLAS {cublas_us:6.2f} prefill {prefill_us:6.2f} ss {ss_best} "
                         f"{ss_times[ss_best]:6.2f} ra " + " ".join(f"s{key}={v:6.2f}" for key, v in ra_times.items())
                         + f" -> {r_us / cublas_us:4.2f}x cuBLAS, {ss_times[ss_best] / r_us:4.2f}x faster than ss")
    report["speed"] = speed
    (out / "ra_dev.json").write_text(json.dumps(report, indent=1))
    for line in lines:
        print(line)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
