"""GPU development check for the CUDA kernels: build, bit checks against the CPU reference, timings.

Run on a CUDA machine from the repository root:  python scripts/cuda_dev_check.py [--out DIR]
Timing method: CUDA events around each launch, the L2 flushed (a 512 MiB write) before every
repetition, median of --reps; each kernel is shown beside a device copy (dst.copy_(src)) of the
same byte count measured in the same run (the copy ceiling). Bytes are the minimum each kernel
must move: dequant 0.5 + 1/block_size + 2 bytes per element; GEMV 0.5625 bytes per weight plus
activations and output. Prints a short table last and writes JSON details to --out.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nvfp4_kernels import build, cuda_backend, reference  # noqa: E402
from nvfp4_kernels.nvfp4 import E2M1_TABLE  # noqa: E402

DEV = torch.device("cuda")


def random_weights(n: int, k: int, bs: int, rng: np.random.Generator, special: bool):
    packed = rng.integers(0, 256, size=(n, k // 2), dtype=np.uint8)
    nsc = -(-k // bs)
    if special:
        scales = rng.integers(0, 256, size=(n, nsc), dtype=np.uint8)
        flat = scales.reshape(-1)
        picks = [0x00, 0x80, 0x01, 0x81, 0x07, 0x7F, 0xFF, 0x7E, 0xFE]
        flat[: min(flat.size, len(picks))] = picks[: min(flat.size, len(picks))]
    else:
        scales = rng.integers(0x20, 0x58, size=(n, nsc), dtype=np.uint8)
    return packed, scales


def to_dev(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x)).to(DEV)


def bits(t: torch.Tensor) -> np.ndarray:
    return t.view(torch.int16).cpu().numpy().view(np.uint16)


def check_dequant(results: list, n: int, k: int, bs: int, dtype: str, g: float, special: bool, seed: int) -> None:
    rng = np.random.default_rng(seed)
    packed, scales = random_weights(n, k, bs, rng, special)
    want = reference.dequantize_scalar(packed, scales, np.float32(g), bs, dtype).view(np.uint16)
    gd = torch.tensor([g], dtype=torch.float32, device=DEV)
    tdt = getattr(torch, dtype)
    paths = ["prefill_scalar"] + (["prefill_vec8"] if reference.vec8_supported(k, bs) else [])
    for path in paths:
        out = torch.full((n, k), -1, dtype=torch.int16, device=DEV).view(tdt)  # poisoned
        cuda_backend.dequantize(path, to_dev(packed), to_dev(scales), gd, bs, out)
        torch.cuda.synchronize()
        got = bits(out)
        bad = int((got != want).sum())
        results.append({"check": "dequant", "path": path, "n": n, "k": k, "bs": bs, "dtype": dtype,
                        "g": g, "special": special, "mismatches": bad})


def check_gemv(results: list, m: int, n: int, k: int, dtype: str, with_bias: bool, seed: int) -> None:
    rng = np.random.default_rng(seed)
    packed, scales = random_weights(n, k, 16, rng, special=False)
    g = 0.0123
    tdt = getattr(torch, dtype)
    a = torch.randn(m, k, device=DEV).to(tdt)
    bias = torch.randn(n, device=DEV).to(tdt) if with_bias else None
    gd = torch.tensor([g], dtype=torch.float32, device=DEV)
    pd, sd = to_dev(packed), to_dev(scales)
    w = torch.empty(n, k, dtype=tdt, device=DEV)
    cuda_backend.dequantize("prefill_vec8", pd, sd, gd, 16, w)
    out = torch.full((m, n), float("nan"), dtype=tdt, device=DEV)
    cuda_backend.gemv(a, pd, sd, gd, bias, out)
    torch.cuda.synchronize()
    ref = a.double() @ w.double().t()
    if bias is not None:
        ref = ref + bias.double()
    mag = a.double().abs() @ w.double().abs().t()
    err = (out.double() - ref).abs()
    ulp = 2.0 ** -8 if dtype == "bfloat16" else 2.0 ** -11
    allowed = ulp * ref.abs() + 1e-5 * mag + 1e-30
    rel = float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))
    results.append({"check": "gemv", "m": m, "n": n, "k": k, "dtype": dtype, "bias": with_bias,
                    "violations": int((err > allowed).sum()) + int(torch.isnan(out).sum()),
                    "rel_l2": rel})


def probe_check(results: list) -> None:
    table = cuda_backend.fp4x2_to_halfraw2_table()
    expect = np.empty((256, 2), dtype=np.uint16)
    f16 = E2M1_TABLE.astype(np.float16).view(np.uint16)
    for b in range(256):
        expect[b] = (f16[b & 0xF], f16[b >> 4])
    results.append({"check": "fp4_probe", "mismatches": int((table != expect).sum())})


class Timer:
    def __init__(self, reps: int) -> None:
        self.reps = reps
        self.flush = torch.empty(512 << 20, dtype=torch.uint8, device=DEV)

    def __call__(self, fn) -> float:
        for _ in range(3):
            fn()
        times = []
        for _ in range(self.reps):
            self.flush.fill_(1)
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop) * 1e3)
        return statistics.median(times)

    def copy_us(self, nbytes: int) -> float:
        half = int(nbytes // 2)
        src = torch.ones(half, dtype=torch.uint8, device=DEV)
        dst = torch.empty_like(src)
        return self(lambda: dst.copy_(src))


def time_dequant(rows: list, timer: Timer, n: int, k: int, bs: int = 16) -> None:
    rng = np.random.default_rng(1)
    packed, scales = random_weights(n, k, bs, rng, special=False)
    pd, sd = to_dev(packed), to_dev(scales)
    gd = torch.tensor([0.01], dtype=torch.float32, device=DEV)
    out = torch.empty(n, k, dtype=torch.bfloat16, device=DEV)
    nbytes = n * k * (0.5 + 1.0 / bs + 2.0)
    copy = timer.copy_us(nbytes)
    lib = cuda_backend.load_library()
    stream = torch.cuda.current_stream().cuda_stream

    def vec8(u):
        return lambda: lib.nvfp4_launch_dequant_vec8(pd.data_ptr(), sd.data_ptr(), gd.data_ptr(),
                                                     out.data_ptr(), n, k, bs, 1, u, stream)

    scalar = lambda: lib.nvfp4_launch_dequant_scalar(pd.data_ptr(), sd.data_ptr(), gd.data_ptr(),
                                                     out.data_ptr(), n, k, bs, 1, stream)
    res = {"N": n, "K": k, "bs": bs, "bytes": nbytes, "copy_us": copy}
    res["scalar_us"] = timer(scalar)
    for u in (0, 1, 2, 4):
        res[f"vec8_u{u}_us"] = timer(vec8(u))
    rows.append(res)


def time_gemv(rows: list, timer: Timer, m: int, n: int, k: int) -> None:
    rng = np.random.default_rng(2)
    packed, scales = random_weights(n, k, 16, rng, special=False)
    pd, sd = to_dev(packed), to_dev(scales)
    gd = torch.tensor([0.01], dtype=torch.float32, device=DEV)
    a = torch.randn(m, k, device=DEV).to(torch.bfloat16)
    out = torch.empty(m, n, dtype=torch.bfloat16, device=DEV)
    w = torch.randn(n, k, device=DEV).to(torch.bfloat16)
    nbytes = n * k * 0.5625 + m * k * 2 + m * n * 2
    copy = timer.copy_us(nbytes)
    lib = cuda_backend.load_library()
    splits = int(lib.nvfp4_gemv_splits(n, k))
    ws = torch.empty(max(1, splits * m * n), dtype=torch.float32, device=DEV)
    stream = torch.cuda.current_stream().cuda_stream
    gemv_us = timer(lambda: lib.nvfp4_launch_gemv(a.data_ptr(), pd.data_ptr(), sd.data_ptr(), gd.data_ptr(),
                                                  None, out.data_ptr(), ws.data_ptr(), None, m, n, k, 1, splits,
                                                  stream))
    cublas_us = timer(lambda: torch.matmul(a, w.t()))
    rows.append({"M": m, "N": n, "K": k, "bytes": nbytes, "copy_us": copy, "gemv_us": gemv_us,
                 "splits": splits,
                 "cublas_bf16_us": cublas_us})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="cuda_dev_check_out")
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--quick", action="store_true", help="bit checks only")
    args = parser.parse_args()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    lib_path = build.build_library()
    print(f"built {lib_path} in {time.time() - t0:.1f}s; available={cuda_backend.available()}", flush=True)

    checks: list = []
    probe_check(checks)
    seed = 0
    for dtype in ("bfloat16", "float16"):
        for bs in (1, 2, 5, 6, 7, 12, 16, 32, 64):
            for k in (2, 8, 12, 24, 70, 120, 1004, 1020, 4096):
                for special, g in ((True, 1.0), (False, 3e-3), (True, 1e-38)):
                    seed += 1
                    check_dequant(checks, 5, k, bs, dtype, g, special, seed)
        check_dequant(checks, 70000, 64, 16, dtype, 0.5, True, 7)
        check_dequant(checks, 512, 5120, 16, dtype, 0.01, True, 8)
        check_dequant(checks, 3, 64, 4, dtype, 3e38, True, 9)  # s overflows to inf
        for m in (1, 2, 3, 5, 8):
            for n, k in ((64, 256), (100, 96), (4096, 4096), (5120, 17408), (17408, 5120)):
                check_gemv(checks, m, n, k, dtype, with_bias=(m % 2 == 1), seed=m * 1000 + n)
    bad = [c for c in checks if c.get("mismatches", 0) or c.get("violations", 0)]
    print(f"bit/tolerance checks: {len(checks)} run, {len(bad)} failing", flush=True)
    for c in bad[:30]:
        print("  FAIL", c)
    (out_dir / "checks.json").write_text(json.dumps(checks, indent=1))

    deq_rows: list = []
    gemv_rows: list = []
    if not args.quick:
        timer = Timer(args.reps)
        for n, k in ((4096, 4096), (6144, 2048), (2048, 6144), (17408, 5120), (5120, 17408)):
            time_dequant(deq_rows, timer, n, k)
        for n, k in ((17408, 5120), (5120, 17408), (4096, 4096)):
            for m in (1, 8):
                time_gemv(gemv_rows, timer, m, n, k)
        props = torch.cuda.get_device_properties(0)
        (out_dir / "timings.json").write_text(json.dumps(
            {"gpu": props.name, "torch": torch.__version__, "cuda": torch.version.cuda,
             "dequant": deq_rows, "gemv": gemv_rows}, indent=1))
        print("\ndequant bf16 bs16 (us, median; frac = copy_us / kernel_us)")
        print(f"{'N x K':>13} {'copy':>7} {'scalar':>7} {'vec8':>7} {'u1':>7} {'u2':>7} {'u4':>7} "
              f"{'vec8/copy':>9} {'x scalar':>8}")
        for r in deq_rows:
            print(f"{r['N']:>6}x{r['K']:<6} {r['copy_us']:7.1f} {r['scalar_us']:7.1f} {r['vec8_u0_us']:7.1f} "
                  f"{r['vec8_u1_us']:7.1f} {r['vec8_u2_us']:7.1f} {r['vec8_u4_us']:7.1f} "
                  f"{r['copy_us'] / r['vec8_u0_us']:9.2f} {r['scalar_us'] / r['vec8_u0_us']:8.2f}")
        print("\nGEMV bf16 (us, median)")
        print(f"{'M':>2} {'N x K':>13} {'copy':>7} {'gemv':>7} {'frac':>5} {'splits':>6} {'cublas':>7}")
        for r in gemv_rows:
            print(f"{r['M']:>2} {r['N']:>6}x{r['K']:<6} {r['copy_us']:7.1f} {r['gemv_us']:7.1f} "
                  f"{r['copy_us'] / r['gemv_us']:5.2f} {r['splits']:>6} {r['cublas_bf16_us']:7.1f}")
    print(f"\nchecks failing: {len(bad)} of {len(checks)}; total {time.time() - t0:.0f}s")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
