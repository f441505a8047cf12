# ruff: noqa: B023  (each timed lambda runs inside the iteration that defines it)
"""Development check of the fused tensor-core kernel on a GPU: correctness first, then a split
and M sweep beside the GEMV, vec8 + cuBLAS, cuBLAS bf16 alone and a copy of the weight bytes.

Not the benchmark (``python -m nvfp4_harness bench`` is): this is the quick loop used while
tuning the kernel and its split heuristic. Writes JSON to ``--out``; prints a table last.

    python scripts/fused_dev.py --out /tmp/fused-dev [--quick]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
from nvfp4_harness.nvfp4.shapes import matmul_error_bound, oracle_dequantize
from nvfp4_kernels import cuda_backend, dispatch, reference, tiling
from nvfp4_kernels.model import Policy

DEV = "cuda"


def make(n: int, k: int, seed: int, scale_lo: int = 0x30, scale_hi: int = 0x40):
    rng = np.random.default_rng(seed)
    packed = rng.integers(0, 256, (n, k // 2), dtype=np.uint8)
    scales = rng.integers(scale_lo, scale_hi, (n, k // 16), dtype=np.uint8)
    return packed, scales


def to_dev(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x)).to(DEV)


def correctness(report: dict) -> list[str]:
    failures = []
    cases = []
    for dtype in (torch.bfloat16, torch.float16):
        for (n, k) in ((64, 128), (70, 384), (200, 1024), (1000, 2048), (129, 4096)):
            for m in (1, 3, 8, 9, 16, 17, 32, 33, 64, 65, 100, 256):
                for bias in (False, True):
                    cases.append((dtype, n, k, m, bias))
    g = np.float32(0.0123)
    for i, (dtype, n, k, m, bias) in enumerate(cases):
        packed, scales = make(n, k, i)
        name = "bfloat16" if dtype == torch.bfloat16 else "float16"
        rng = np.random.default_rng(1000 + i)
        a32 = rng.uniform(-2, 2, (m, k)).astype(np.float32)
        a = torch.from_numpy(a32).to(dtype).to(DEV)
        b = torch.from_numpy(rng.uniform(-1, 1, n).astype(np.float32)).to(dtype).to(DEV) if bias else None
        g_dev = torch.tensor([g], dtype=torch.float32, device=DEV)
        w = oracle_dequantize(packed, scales, g, 16, name)
        a_host = a.float().cpu().numpy().astype(w.dtype)
        bias_host = None if b is None else b.float().cpu().numpy().astype(w.dtype)
        y64, bound = matmul_error_bound(a_host, w, bias_host, name, roundings=1)
        max_splits = k // 128
        for splits in sorted({1, min(2, max_splits), min(3, max_splits), max_splits,
                              cuda_backend.fused_splits(n, k, m)}):
            out = torch.empty((m, n), dtype=dtype, device=DEV)
            cuda_backend.fused_mma(a, to_dev(packed), to_dev(scales), g_dev, b, out, splits=splits)
            got = out.float().cpu().numpy().astype(np.float64)
            err = np.abs(got - y64)
            bad = ~(err <= bound)
            if bad.any():
                idx = np.argwhere(bad)[0]
                failures.append(f"{name} n={n} k={k} m={m} bias={bias} splits={splits}: {int(bad.sum())} bad, "
                                f"first {tuple(idx)} got {got[tuple(idx)]} want {y64[tuple(idx)]}")
    report["bound_cases"] = len(cases)
    # identity readout: Y = W^T bit for bit (non-zero, non-NaN elements), splits 1 and more
    for name, dtype in (("bfloat16", torch.bfloat16), ("float16", torch.float16)):
        for (n, k, g, lo, hi) in ((96, 256, 0.0123, 0x00, 0x7F), (64, 512, 2.0**110, 0x70, 0x7F),
                                  (130, 384, 1e-30, 0x00, 0x7F)):
            if name == "float16" and g > 1.0:
                continue  # fp16 weights overflow to inf, and 0 * inf poisons the identity readout
            packed, scales = make(n, k, 7, lo, hi)
            want = reference.dequantize(packed, scales, np.float32(g), 16, name)  # [n, k]
            eye = torch.eye(k, dtype=dtype, device=DEV)
            g_dev = torch.tensor([g], dtype=torch.float32, device=DEV)
            for splits in (1, 2):
                got = torch.empty((k, n), dtype=dtype, device=DEV)
                for m0 in range(0, k, 256):
                    a = eye[m0:m0 + 256].contiguous()
                    out = torch.empty((a.shape[0], n), dtype=dtype, device=DEV)
                    cuda_backend.fused_mma(a, to_dev(packed), to_dev(scales), g_dev, None, out, splits=splits)
                    got[m0:m0 + a.shape[0]] = out
                got_bits = got.view(torch.int16).cpu().numpy().view(np.uint16).T
                want_bits = want.view(np.uint16)
                mask = ((want_bits & 0x7FFF) != 0) & ((want_bits & 0x7FFF) <= 0x7F80 if name == "bfloat16"
                                                      else (want_bits & 0x7FFF) <= 0x7C00)
                nan = ~mask & ((want_bits & 0x7FFF) != 0)
                diff = (got_bits != want_bits) & mask
                nan_ok = np.all((got_bits[nan] & 0x7FFF) > (0x7F80 if name == "bfloat16" else 0x7C00))
                zero_ok = np.all((got_bits[(want_bits & 0x7FFF) == 0] & 0x7FFF) == 0)
                if diff.any() or not nan_ok or not zero_ok:
                    failures.append(f"identity {name} n={n} k={k} g={g} splits={splits}: {int(diff.sum())} "
                                    f"differ, nan_ok={nan_ok}, zero_ok={zero_ok}")
    # the dispatcher end to end, CPU algorithm vs GPU within the bound (and paths announced)
    report["occupancy"] = {str(m): int(cuda_backend.load_library().nvfp4_fused_occupancy(m)) for m in (1, 16, 32, 64)}
    for m, (rows, act) in ((1, (64, 8)), (16, (64, 16)), (32, (128, 32)), (64, (128, 64))):
        if report["occupancy"][str(m)] != tiling.FUSED_OCCUPANCY_H200[(rows, act)]:
            failures.append(f"occupancy of M={m}: device {report['occupancy'][str(m)]}, table "
                            f"{tiling.FUSED_OCCUPANCY_H200[(rows, act)]}")
    return failures


def timer(fn, flush: torch.Tensor, reps: int = 15) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0)
    return statistics.median(times)


def sweep(report: dict, quick: bool, ms: tuple[int, ...] | None = None) -> list[str]:
    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device=DEV)
    lines = []
    rows = []
    shapes = ((17408, 5120), (5120, 17408))
    ms = ms or ((1, 8, 16, 64, 256) if quick else (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256))
    for n, k in shapes:
        packed, scales = make(n, k, 1)
        p, s = to_dev(packed), to_dev(scales)
        g_dev = torch.tensor([0.0123], dtype=torch.float32, device=DEV)
        w_bf16 = torch.randn(n, k, dtype=torch.bfloat16, device=DEV)
        weight_bytes = p.numel() + s.numel()
        src = torch.empty(weight_bytes, dtype=torch.uint8, device=DEV)
        dst = torch.empty_like(src)
        copy_us = timer(lambda: dst.copy_(src), flush)
        for m in ms:
            a = torch.randn(m, k, dtype=torch.bfloat16, device=DEV)
            out = torch.empty((m, n), dtype=torch.bfloat16, device=DEV)
            row = {"n": n, "k": k, "m": m, "copy_us": copy_us}
            auto = cuda_backend.fused_splits(n, k, m)
            row["fused_auto_splits"] = auto
            split_times = {}
            for splits in sorted({1, 2, 3, 4, 6, 8, 12, 16, auto}):
                if splits > k // 128:
                    continue
                split_times[splits] = timer(
                    lambda: cuda_backend.fused_mma(a, p, s, g_dev, None, out, splits=splits), flush)
            row["fused_by_splits"] = split_times
            row["fused_us"] = split_times[auto]
            row["fused_best_splits"] = min(split_times, key=split_times.get)
            if m <= 8:
                row["gemv_us"] = timer(lambda: cuda_backend.gemv(a, p, s, g_dev, None, out), flush)
            scratch = torch.empty((n, k), dtype=torch.bfloat16, device=DEV)

            def vec8():
                cuda_backend.dequantize("prefill_vec8", p, s, g_dev, 16, scratch)
                with dispatch._fp32_reduction():
                    torch.matmul(a, scratch.t())

            row["vec8_cublas_us"] = timer(vec8, flush)
            with dispatch._fp32_reduction():
                row["cublas_bf16_us"] = timer(lambda: torch.matmul(a, w_bf16.t()), flush)
            rows.append(row)
            best = row["fused_by_splits"][row["fused_best_splits"]]
            lines.append(f"{n:>6}x{k:<6} M={m:<4} fused {row['fused_us']:7.1f} (s={auto}; best {best:7.1f} "
                         f"s={row['fused_best_splits']}) gemv {row.get('gemv_us', float('nan')):7.1f} "
                         f"vec8+cublas {row['vec8_cublas_us']:7.1f} cublas {row['cublas_bf16_us']:7.1f} "
                         f"copy {copy_us:6.1f} | fused/copy {copy_us / row['fused_us']:.2f} "
                         f"fused/cublas {row['fused_us'] / row['cublas_bf16_us']:.2f}")
            print(lines[-1], flush=True)
    report["sweep"] = rows
    return lines


def build_variants(spec: str, workdir: Path) -> dict[str, ctypes.CDLL]:
    """Build fused_mma.cu once per ``name:flags`` entry (``;``-separated) into its own library."""
    from concurrent.futures import ThreadPoolExecutor

    from nvfp4_kernels import build

    workdir.mkdir(parents=True, exist_ok=True)
    nvcc = build.find_nvcc()
    src = build.CUDA_SOURCE_DIR / "fused_mma.cu"
    entries = [e.split(":", 1) for e in spec.split(";") if e.strip()]

    def one(entry):
        name, flags = entry
        out = workdir / f"fused_{name}.so"
        # the library's own targets ($NVFP4_CUDA_ARCHS, sm_90 by default), so that a variant is
        # timed as the build it would replace
        cmd = [nvcc, *build.BASE_FLAGS, *build.gencode_flags(build.resolve_archs()), "-shared", "-cudart", "static",
               *flags.split(), "-o", str(out), str(src)]
        subprocess.run(cmd, check=True, capture_output=True)
        return name, out

    libs = {}
    with ThreadPoolExecutor(8) as pool:
        for name, path in pool.map(one, entries):
            lib = ctypes.CDLL(str(path))
            lib.nvfp4_launch_fused.restype = ctypes.c_int
            # a, packed, scales, g, bias, out, workspace, counters; m, n, k, out_bf16, splits, stream
            lib.nvfp4_launch_fused.argtypes = [ctypes.c_void_p] * 8 + [
                ctypes.c_int32, ctypes.c_int64, ctypes.c_int64, ctypes.c_int32, ctypes.c_int32, ctypes.c_void_p]
            lib.nvfp4_fused_occupancy.restype = ctypes.c_int
            lib.nvfp4_fused_tile.restype = ctypes.c_int
            libs[name] = lib
    return libs


def variants(report: dict, spec: str, quick: bool, ms: tuple[int, ...] | None = None,
             shapes: tuple[tuple[int, int], ...] = ((17408, 5120), (5120, 17408))) -> list[str]:
    """Time every variant library at every M over a range of split counts; check that all of them
    return the base variant's bits for equal split counts (same accumulation order)."""
    libs = build_variants(spec, Path("/tmp/fused-variants"))
    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device=DEV)
    lines, rows, failures = [], [], []
    stream = torch.cuda.current_stream().cuda_stream
    ms = ms or ((1, 8, 16, 64, 256) if quick else (1, 8, 16, 32, 64, 128, 256))
    for n, k in shapes:
        packed, scales = make(n, k, 1)
        p, s = to_dev(packed), to_dev(scales)
        g_dev = torch.tensor([0.0123], dtype=torch.float32, device=DEV)
        workspace = torch.empty(16 * 256 * n, dtype=torch.float32, device=DEV)
        for m in ms:
            a = torch.randn(m, k, dtype=torch.bfloat16, device=DEV)
            ref_bits: dict[int, torch.Tensor] = {}
            for name, lib in libs.items():
                out = torch.empty((m, n), dtype=torch.bfloat16, device=DEV)
                occupancy = lib.nvfp4_fused_occupancy(m)

                def launch(splits, lib=lib, out=out):
                    err = lib.nvfp4_launch_fused(a.data_ptr(), p.data_ptr(), s.data_ptr(), g_dev.data_ptr(), None,
                                                 out.data_ptr(), workspace.data_ptr(), None, m, n, k, 1, splits,
                                                 stream)
                    if err:
                        raise RuntimeError(f"variant {name}: CUDA error {err}")

                times = {}
                for splits in (1, 2, 3, 4, 6, 8, 12, 16):
                    if splits > k // 128:
                        continue
                    times[splits] = timer(lambda: launch(splits), flush, reps=10)
                    launch(splits)
                    torch.cuda.synchronize()
                    if splits in ref_bits:
                        if not torch.equal(ref_bits[splits], out.view(torch.int16)):
                            failures.append(f"variant {name} n={n} k={k} m={m} splits={splits}: bits differ from "
                                            f"the first variant")
                    else:
                        ref_bits[splits] = out.view(torch.int16).clone()
                best = min(times, key=times.get)
                rows.append({"variant": name, "n": n, "k": k, "m": m, "occupancy": occupancy, "times": times,
                             "best_splits": best, "best_us": times[best]})
                lines.append(f"{name:>10} {n:>6}x{k:<6} M={m:<4} occ {occupancy} best {times[best]:7.1f} us "
                             f"(s={best}) s1 {times[1]:7.1f}")
                print(lines[-1], flush=True)
    report["variants"] = rows
    report["variant_failures"] = failures
    for f in failures[:10]:
        print("  FAIL", f)
    return lines


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--skip-correctness", action="store_true")
    parser.add_argument("--skip-sweep", action="store_true")
    parser.add_argument("--variants", default="", help="name:nvcc flags;name:flags;... (fused_mma.cu builds)")
    parser.add_argument("--variant-shapes", default="17408x5120,5120x17408",
                        help="comma-separated NxK shapes the variants are timed on")
    parser.add_argument("--ms", default="", help="comma-separated M values for the sweep and the variants "
                                                 "(default: their own lists)")
    args = parser.parse_args()
    ms = tuple(int(v) for v in args.ms.split(",") if v.strip()) or None
    shapes = tuple(tuple(int(d) for d in s.split("x")) for s in args.variant_shapes.split(",") if s.strip())
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict = {"device": torch.cuda.get_device_name(), "policy": repr(Policy())}
    t0 = time.time()
    failures = [] if args.skip_correctness else correctness(report)
    report["failures"] = failures
    report["correctness_s"] = time.time() - t0
    print(f"correctness: {len(failures)} failures in {report['correctness_s']:.1f} s", flush=True)
    for f in failures[:20]:
        print("  FAIL", f, flush=True)
    lines = [] if args.skip_sweep else sweep(report, args.quick, ms)
    (args.out / "fused-dev.json").write_text(json.dumps(report, indent=1))
    if args.variants:
        lines += variants(report, args.variants, args.quick, ms, shapes)
        (args.out / "fused-dev.json").write_text(json.dumps(report, indent=1))
        failures += report["variant_failures"]
    print("\n".join(lines[-30:]))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
