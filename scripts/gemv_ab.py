"""A/B timing of the decode GEMV: the shipped kernel (kernels/cuda/gemv.cu) against a candidate,
by default the table-decode experiment kept as a patch on the shipped source
(benchmarks/experiments/gemv_table_decode.patch, applied to a temporary copy with `patch`), and
its register-capped build, on 17408x5120 and 5120x17408, M = 1 and 8, bf16.

CUDA events around each launch, a 256 MB L2 flush before every rep, median of 50; the copy
ceiling is a same-run device-to-device copy of the GEMV's weight + scale bytes (0.5625 B per
weight), timed the same way. Correctness: each variant's output against a float64 product of
the contract's dequantized weights (built with torch fp32 ops, then rounded to bf16).

    python3 scripts/gemv_ab.py [--old-src kernels/cuda/gemv.cu] [--new-src FILE.cu | FILE.patch]
"""

# ruff: noqa: B023  (each closure is timed inside the iteration that defines it)
from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
FLAGS = ["-O3", "-std=c++17", "-Xcompiler", "-fPIC", "-ftz=false", "-prec-div=true",
         "-prec-sqrt=true", "-fmad=true", "-arch=sm_90", "-shared", "-cudart", "static"]
I32, I64, P = ctypes.c_int32, ctypes.c_int64, ctypes.c_void_p


def build(src: Path, out: Path, defines: list[str]) -> ctypes.CDLL:
    cmd = ["nvcc", *FLAGS, *defines, "-I", str(ROOT / "kernels" / "cuda"), "-Xptxas", "-v", "-o", str(out), str(src)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"build failed: {' '.join(cmd)}\n{r.stderr}")
    regs = [ln.strip() for ln in r.stderr.splitlines() if "gemv_kernel" in ln or "Used" in ln or "spill" in ln]
    print(f"built {out.name}: " + " | ".join(x for x in regs if "Used" in x or "spill" in x)[:400])
    lib = ctypes.CDLL(str(out))
    lib.nvfp4_launch_gemv.restype = ctypes.c_int
    lib.nvfp4_launch_gemv.argtypes = [P, P, P, P, P, P, P, I32, I64, I64, I32, I32, P]
    lib.nvfp4_gemv_splits.restype = ctypes.c_int
    lib.nvfp4_gemv_splits.argtypes = [I64, I64]
    return lib


def dequant_ref(packed: torch.Tensor, scales: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    e2m1 = torch.tensor([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6],
                        dtype=torch.float32, device=packed.device)
    codes = torch.stack([packed & 0xF, packed >> 4], dim=-1).reshape(packed.shape[0], -1).long()
    s = scales.view(torch.float8_e4m3fn).float() * g  # fp32 multiply
    w = e2m1[codes] * s.repeat_interleave(16, dim=1)
    return w.to(torch.bfloat16)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--old-src", default=str(ROOT / "kernels/cuda/gemv.cu"), help="the baseline source")
    ap.add_argument("--new-src", default=str(ROOT / "benchmarks/experiments/gemv_table_decode.patch"),
                    help="the candidate: a .cu source, or a .patch against kernels/cuda/gemv.cu")
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    new_src = Path(args.new_src)
    if new_src.suffix == ".patch":
        patched = tmp / "gemv_candidate.cu"
        shutil.copy(ROOT / "kernels/cuda/gemv.cu", patched)
        if subprocess.run(["patch", "-s", str(patched), str(new_src)]).returncode:
            sys.exit(f"could not apply {new_src} to kernels/cuda/gemv.cu (is `patch` installed?)")
        new_src = patched
    variants = {
        "old": build(Path(args.old_src), tmp / "old.so", []),
        "new": build(new_src, tmp / "new.so", []),
        "new_minb3": build(new_src, tmp / "new3.so", ["-DNVFP4_GEMV_MIN_BLOCKS=3"]),
    }
    dev = torch.device("cuda")
    torch.manual_seed(0)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    stream = torch.cuda.current_stream().cuda_stream
    rows = []
    for n, k in [(17408, 5120), (5120, 17408)]:
        packed = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, device=dev)
        scales = torch.randint(0x28, 0x58, (n, k // 16), dtype=torch.uint8, device=dev)
        g = torch.tensor([1 / 2688], dtype=torch.float32, device=dev)
        w = dequant_ref(packed, scales, g)
        wbytes = packed.numel() + scales.numel()
        src = torch.empty(wbytes, dtype=torch.uint8, device=dev).random_(0, 255)
        dst = torch.empty_like(src)
        for m in (1, 8):
            a = (torch.randn(m, k, device=dev) * 0.5).to(torch.bfloat16)
            ref = a.double() @ w.double().T
            times: dict[str, float] = {}
            errs: dict[str, float] = {}
            for name, lib in variants.items():
                splits = lib.nvfp4_gemv_splits(n, k)
                ws = torch.empty(max(1, splits * m * n), dtype=torch.float32, device=dev)
                out = torch.empty(m, n, dtype=torch.bfloat16, device=dev)

                def call() -> None:
                    err = lib.nvfp4_launch_gemv(a.data_ptr(), packed.data_ptr(), scales.data_ptr(),
                                                g.data_ptr(), None, out.data_ptr(), ws.data_ptr(),
                                                m, n, k, 1, splits, stream)
                    assert err == 0, err

                out.fill_(float("nan"))
                call()
                torch.cuda.synchronize()
                errs[name] = float((out.double() - ref).norm() / ref.norm())
                times[name] = bench(call, flush, args.reps)
            times["copy"] = bench(lambda: dst.copy_(src), flush, args.reps)
            rows.append((n, k, m, times, errs, wbytes))
    lines = ["", f"GEMV A/B (bf16, median of {args.reps}, L2 flushed; us). ceiling = same-run copy of the "
             "weight+scale bytes at its read+write rate",
             f"{'N x K':>12} {'M':>2} {'old':>8} {'new':>8} {'minb3':>8} {'copy':>8} {'ceil':>7} "
             f"{'new/ceil':>8} {'speedup':>7}  rel.err old/new/minb3"]
    for n, k, m, t, e, _wbytes in rows:
        ceil = t["copy"] / 2  # the copy moves 2 * wbytes; the GEMV must move wbytes
        lines.append(f"{n:>6}x{k:<5} {m:>2} {t['old']:8.2f} {t['new']:8.2f} {t['new_minb3']:8.2f} "
                     f"{t['copy']:8.2f} {ceil:7.2f} {ceil / t['new']:8.2f} {t['old'] / t['new']:7.2f}  "
                     f"{e['old']:.1e}/{e['new']:.1e}/{e['new_minb3']:.1e}")
    text = "\n".join(lines)
    out_dir = os.environ.get("OUT")
    if out_dir:
        Path(out_dir, "gemv_ab.txt").write_text(text + "\n")
    print(text)


def bench(fn, flush: torch.Tensor, reps: int) -> float:
    for _ in range(3):
        fn()
    start = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    end = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        flush.zero_()
        start[i].record()
        fn()
        end[i].record()
    torch.cuda.synchronize()
    ts = sorted(s.elapsed_time(e) * 1000 for s, e in zip(start, end, strict=True))
    return ts[len(ts) // 2]


if __name__ == "__main__":
    main()
