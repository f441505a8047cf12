# ruff: noqa: B023  (each timed lambda runs inside the iteration that defines it)
"""Development check of the warp-specialized wgmma kernel (scripts/ws_dev/fused_ws.cu) on an H200:
build it, compare its outputs with the library's mma.sync fused kernel at the same split count
(SHA-256; with --ss, whose natural K order gives other bits, with a second launch of itself) and
with float64 (the path's bound), read every weight of a small layer back through the kernel (A =
rows of the identity), then time it beside the mma.sync kernel, cuBLAS bf16 on pre-dequantized
weights and the same-run copy of the row's bytes (L2 flushed, CUDA events, median of 21), and
from M = 128 beside prefill (vec8 dequantization + cuBLAS, the dispatcher's path there). Not the
benchmark; the loop that decides whether the design is worth merging (benchmarks/NOTES.md,
twelfth and thirteenth sessions; data in benchmarks/experiments/fused-ws-dev-2026-12-04.json and
fused-ws-m256-2026-12-04.json). With --ss, calls of more than 128 rows take one 256-row tile, and
each of their rows must also get the bits that a call of at most 128 rows gives it.

    python scripts/ws_dev/ws_dev.py --out DIR --prebuild [--ss] [--variants "NAME:-DFLAG ...;..."]
        (on the CPU machine: nvcc builds under kernels/_build/ws, which a device call carries)
    python scripts/ws_dev/ws_dev.py --out DIR [--ss] [--main libws_NAME.so] [--variants ...] [--ms 64,256]
    python scripts/ws_dev/ws_dev.py --out DIR [--ss] --trace N,K,M,NT,SPLITS   (the -DWS_TRACE build)

scripts/ws_dev/run_device.sh runs the usual sequence in one device call.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
from nvfp4_harness.nvfp4.bench_metrics import copy_ceiling_half, kernel_bytes
from nvfp4_harness.nvfp4.shapes import matmul_error_bound, oracle_dequantize
from nvfp4_kernels import cuda_backend, layout

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from l2_floor_probe import timed  # noqa: E402  (the probes' flushed timing)

DEV = "cuda"
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


PREBUILT_ROOT = ROOT / "kernels" / "_build" / "ws"
#: flags of every build of this run (--ss adds -DWS_SS: A from shared memory, natural K order)
BASE_FLAGS: list[str] = []


def prebuilt_dir() -> Path:
    """Where --prebuild puts this run's builds (one folder per base flag set)."""
    return PREBUILT_ROOT / ("ss" if "-DWS_SS" in BASE_FLAGS else "rs")


def build(out_dir: Path, flags: tuple[str, ...] = (), name: str = "libws.so") -> ctypes.CDLL:
    """Build fused_ws.cu with extra flags; a library of the same name under prebuilt_dir() (built on
    the CPU machine with --prebuild and carried) is used as it is."""
    lib = Path("/tmp") / f"{out_dir.name}-{name}"  # not under $OUT: only the reports come back
    if (prebuilt_dir() / name).exists():
        lib = prebuilt_dir() / name
        print(f"prebuilt {lib.name}")
        return load(lib)
    cmd = ["nvcc", "-O3", "-std=c++17", "-lineinfo", "-Xcompiler", "-fPIC", "-ftz=false", "-prec-div=true",
           "-prec-sqrt=true", "-fmad=true", "-gencode=arch=compute_90a,code=sm_90a", "-shared", "-cudart", "static",
           f"-I{ROOT / 'kernels' / 'cuda'}", f"-I{HERE}", "-Xptxas", "-v",
           str(HERE / "fused_ws.cu"), "-o", str(lib), *BASE_FLAGS, *flags]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    (out_dir / f"{name}.ptxas.txt").write_text(res.stdout + res.stderr)
    if res.returncode:
        print(res.stderr[-4000:])
        raise SystemExit("nvcc failed")
    return load(lib)


def load(lib: Path) -> ctypes.CDLL:
    cdll = ctypes.CDLL(str(lib))
    vp, i32 = ctypes.c_void_p, ctypes.c_int32
    cdll.nvfp4ws_launch_tiled.restype = ctypes.c_int
    cdll.nvfp4ws_launch_tiled.argtypes = [vp, vp, vp, vp, vp, vp, vp, i32, i32, i32, i32, i32, i32, vp]
    cdll.nvfp4ws_has_tile.restype = ctypes.c_int
    cdll.nvfp4ws_has_tile.argtypes = [i32, i32]
    return cdll


def ptr(t: torch.Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


#: the tile widths (weight rows a block) the builds may have; Ws.has_tile says which one has
TILE_WIDTHS = (72, 128, 136, 160)


class Ws:
    def __init__(self, lib: ctypes.CDLL):
        self.lib = lib
        self.ws = torch.empty(1, dtype=torch.float32, device=DEV)

    def has_tile(self, nt: int, m: int) -> bool:
        """Whether this build instantiates nt-row blocks for an m-row call."""
        return bool(self.lib.nvfp4ws_has_tile(nt, m))

    def __call__(self, a, p, s, g, bias, out, splits: int, nt: int) -> None:
        """p, s: the tile-contiguous pair (nvfp4_kernels.layout.tile_weights)."""
        m, k = a.shape
        n = out.shape[1]
        need = splits * m * n if splits > 1 else 1
        if self.ws.numel() < need:
            self.ws = torch.empty(need, dtype=torch.float32, device=DEV)
        err = self.lib.nvfp4ws_launch_tiled(ptr(a), ptr(p), ptr(s), ptr(g), ptr(bias), ptr(out), ptr(self.ws), m, n, k,
                                      int(a.dtype == torch.bfloat16), splits, nt,
                                      torch.cuda.current_stream().cuda_stream)
        if err:
            raise RuntimeError(f"nvfp4ws_launch: cuda error {err} (m={m} n={n} k={k} splits={splits} nt={nt})")


def make(n: int, k: int, seed: int, lo: int = 0x30, hi: int = 0x40):
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 256, (n, k // 2), dtype=np.uint8), rng.integers(lo, hi, (n, k // 16), dtype=np.uint8))


def to_dev(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x)).to(DEV)


def correctness(ws: Ws, report: dict, quick: bool, natural: bool = False) -> list[str]:
    """Every case against float64 (the path's bound) and, for the mma.sync order (natural=False),
    bit for bit against the library's mma.sync kernel at the same split count; in natural K order
    (the -DWS_SS build) against a second launch of itself instead (the same bits run to run)."""
    failures, rows = [], []
    cases = []
    for dtype in (torch.bfloat16, torch.float16):
        for (n, k) in ((64, 128), (70, 384), (200, 1024), (1000, 2048), (413, 4096)):
            for m in (1, 8, 17, 33, 64, 100, 128, 200, 256):
                cases.append((dtype, n, k, m, m % 2 == 1, (0x30, 0x40)))
    for (n, k) in ((300, 1024), (136, 2048)):
        for m in (5, 64):
            cases.append((torch.bfloat16, n, k, m, True, (0, 256)))  # every scale byte: zero, NaN, tiny, huge
            cases.append((torch.float16, n, k, m, False, (0, 256)))
    for gval in (0.0123, 2.0 ** 110, 2.0 ** -100):
        cases.append((torch.bfloat16, 257, 1024, 40, True, (0x30, 0x40), gval))
    for i, case in enumerate(cases):
        dtype, n, k, m, with_bias, (lo, hi) = case[:6]
        gval = case[6] if len(case) > 6 else 0.0123
        packed, scales = make(n, k, i, lo, hi)
        name = "bfloat16" if dtype == torch.bfloat16 else "float16"
        rng = np.random.default_rng(1000 + i)
        a = torch.from_numpy(rng.uniform(-2, 2, (m, k)).astype(np.float32)).to(dtype).to(DEV)
        bias = torch.from_numpy(rng.uniform(-1, 1, n).astype(np.float32)).to(dtype).to(DEV) if with_bias else None
        g = torch.tensor([gval], dtype=torch.float32, device=DEV)
        p, s = to_dev(packed), to_dev(scales)
        pt, st = layout.tile_weights(p, s)
        w = oracle_dequantize(packed, scales, np.float32(gval), 16, name)
        a_host = a.float().cpu().numpy().astype(w.dtype)
        b_host = None if bias is None else bias.float().cpu().numpy().astype(w.dtype)
        y64, bound = matmul_error_bound(a_host, w, b_host, name, roundings=1)
        steps = k // 128
        for splits in sorted({1, min(3, steps), steps}):
            ref = torch.empty((m, n), dtype=dtype, device=DEV)
            cuda_backend.fused_mma(a, p, s, g, bias, ref, splits=splits)
            for nt in (nt for nt in TILE_WIDTHS if ws.has_tile(nt, m)):
                out = torch.full((m, n), 7, dtype=dtype, device=DEV)
                ws(a, pt, st, g, bias, out, splits, nt)
                if natural:
                    ref = torch.full((m, n), 9, dtype=dtype, device=DEV)
                    ws(a, pt, st, g, bias, ref, splits, nt)
                torch.cuda.synchronize()
                same = bool(torch.equal(out.view(torch.int16), ref.view(torch.int16)))
                if natural and m > 128:
                    # a call of more than 128 rows takes 256-row tiles (two 64-row slices a consumer
                    # warpgroup): each row must get the bits that a call of at most 128 rows gives it
                    parts = torch.full((m, n), 5, dtype=dtype, device=DEV)
                    for r0, r1 in ((0, 128), (128, m)):
                        if ws.has_tile(nt, r1 - r0):
                            ws(a[r0:r1], pt, st, g, bias, parts[r0:r1], splits, nt)
                        else:
                            parts[r0:r1] = out[r0:r1]  # no such tile in this build: nothing to compare
                    torch.cuda.synchronize()
                    same &= bool(torch.equal(out.view(torch.int16), parts.view(torch.int16)))
                got = out.float().cpu().numpy().astype(np.float64)
                finite = np.isfinite(y64)
                err = np.abs(got - y64)
                bad = finite & ~(err <= bound)
                nan_ok = bool(np.array_equal(np.isnan(got), np.isnan(y64)))
                rows.append({"dtype": name, "n": n, "k": k, "m": m, "bias": with_bias, "scales": [lo, hi],
                             "g": gval, "splits": splits, "nt": nt, "same_bits_as_mma_sync": same,
                             "out_of_bound": int(bad.sum()), "nan_pattern_ok": nan_ok})
                if not same or bad.any() or not nan_ok:
                    diff = int((out.view(torch.int16) != ref.view(torch.int16)).sum())
                    failures.append(f"{name} n={n} k={k} m={m} bias={with_bias} scales={lo}-{hi} g={gval} "
                                    f"splits={splits} nt={nt}: same={same} ({diff} differ) "
                                    f"out_of_bound={int(bad.sum())} nan_ok={nan_ok}")
    report["correctness"] = rows
    return failures + readout(ws, report)


def identity_readout(prepare, launches, row_counts: tuple[int, ...], device: str = DEV) -> tuple[list[dict], list[str]]:
    """Y = A @ W^T with A = rows of the identity (row i of R picks K = (1024 / R) i + off): every
    output is one decoded weight times 1.0 plus products with zero, so it must be the weight's T bits
    (a -0.0 weight may come out +0.0: -0.0 + +0.0 = +0.0). 1024 / R offsets read every weight of a
    200 x 1024 weight whose scale bytes take every non-NaN value, at 1 and 8 splits, for each R in
    row_counts. The kernel comes in as two callables: prepare(packed, scales) puts the weight in its
    layout on the device, launches(a, weight, g, splits) launches it once or more on A and yields
    (tag, output) for each launch. Returns the per-dtype-and-R rows and the failures."""
    failures, rows = [], []
    n, k = 200, 1024
    rng = np.random.default_rng(77)
    packed = rng.integers(0, 256, (n, k // 2), dtype=np.uint8)
    scales = rng.integers(0, 255, (n, k // 16), dtype=np.uint8)
    scales[scales == 0x7F] = 0x7E  # no NaN scales: a NaN weight would spread to its whole row
    gval = 0.0123
    g = torch.tensor([gval], dtype=torch.float32, device=device)
    weight = prepare(packed, scales)
    for dtype in (torch.bfloat16, torch.float16):
        name = "bfloat16" if dtype == torch.bfloat16 else "float16"
        w = oracle_dequantize(packed, scales, np.float32(gval), 16, name)  # [N, K] values of T
        w_bits = torch.from_numpy(np.ascontiguousarray(w).view(np.int16))
        w_bits = torch.where(w_bits == -32768, torch.zeros_like(w_bits), w_bits)  # -0.0 -> +0.0
        for rows_a in row_counts:
            per = k // rows_a
            bad = launched = 0
            for off in range(per):
                a = torch.zeros((rows_a, k), dtype=dtype, device=device)
                a[torch.arange(rows_a), per * torch.arange(rows_a) + off] = 1.0
                want = w_bits[:, off::per].t().contiguous()  # [rows_a, N]
                for splits in (1, 8):
                    for tag, out in launches(a, weight, g, splits):
                        launched += 1
                        got = out.cpu().view(torch.int16)
                        got = torch.where(got == -32768, torch.zeros_like(got), got)
                        diff = int((got != want).sum())
                        bad += diff
                        if diff:
                            failures.append(f"readout {name} rows={rows_a} off={off} splits={splits} {tag}: "
                                            f"{diff} weights differ")
            rows.append({"dtype": name, "n": n, "k": k, "rows": rows_a, "launches": launched, "differing": bad})
    return rows, failures


def readout(ws: Ws, report: dict) -> list[str]:
    """identity_readout of every tile width this build has, at 64 rows and 256 (the 256-row tiles
    of the WS_SS build)."""

    def launches(a, weight, g, splits):
        rows_a = a.shape[0]
        for nt in (nt for nt in TILE_WIDTHS if ws.has_tile(nt, rows_a)):
            out = torch.full((rows_a, 200), 7, dtype=a.dtype, device=DEV)
            ws(a, *weight, g, None, out, splits, nt)
            yield f"nt={nt}", out

    rows, failures = identity_readout(lambda p, s: layout.tile_weights(to_dev(p), to_dev(s)), launches, (64, 256))
    report["readout"] = rows
    return failures[:20]


def prefill_call(p, s, g, a, out, w_scratch):
    """The dispatcher's path above M = 128 as one timed call: vec8 dequantization into w_scratch,
    then cuBLAS."""

    def run() -> None:
        cuda_backend.dequantize("prefill_vec8", p, s, g, 16, w_scratch)
        torch.matmul(a, w_scratch.t(), out=out)

    return run


def timer(fn, flush: torch.Tensor) -> float:
    """Median of 21 L2-flushed CUDA-event timings after warm-up: the probes' and the bench's method
    (scripts/l2_floor_probe.timed)."""
    return timed(fn, flush.zero_, reps=21)


def reference_times(a: torch.Tensor, w_bf16: torch.Tensor, flush: torch.Tensor) -> tuple[float, float, int]:
    """The same-run references of a fused matmul of a [m, k] with an [n, k] weight: the device copy
    of its bytes (the bench's ceiling: the half-size rounded up to 4 KiB, copied), cuBLAS bf16 on
    w_bf16, and the bytes copied."""
    (m, k), n = a.shape, w_bf16.shape[0]
    half = copy_ceiling_half(kernel_bytes("fused_mma", m, n, k, 16))
    src = torch.empty(half, dtype=torch.uint8, device=a.device)
    dst = torch.empty_like(src)
    copy_us = timer(lambda: dst.copy_(src), flush)
    cublas_us = timer(lambda: torch.matmul(a, w_bf16.t()), flush)
    return copy_us, cublas_us, 2 * half


def speed(ws: Ws, report: dict, quick: bool, ms: tuple[int, ...] = ()) -> list[str]:
    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device=DEV)
    lines, rows = [], []
    shapes = ((17408, 5120), (5120, 17408))
    ms = ms or ((1, 16, 64) if quick else (1, 16, 32, 64, 128, 256))
    for n, k in shapes:
        packed, scales = make(n, k, 1)
        p, s = to_dev(packed), to_dev(scales)
        pt, st = layout.tile_weights(p, s)
        g = torch.tensor([0.0123], dtype=torch.float32, device=DEV)
        w_bf16 = torch.randn(n, k, dtype=torch.bfloat16, device=DEV)
        w_scratch = None  # prefill's dequantized weight, made once a shape
        for m in ms:
            a = torch.randn(m, k, dtype=torch.bfloat16, device=DEV)
            out = torch.empty((m, n), dtype=torch.bfloat16, device=DEV)
            copy_us, cublas_us, copied = reference_times(a, w_bf16, flush)
            auto = cuda_backend.fused_splits(n, k, m)
            mma_us = timer(lambda: cuda_backend.fused_mma(a, p, s, g, None, out, splits=auto), flush)
            tiled_arg = (pt, st, layout.scale_byte_range(s))
            mma_tiled_us = timer(lambda: cuda_backend.fused_mma(a, p, s, g, None, out, splits=auto, tiled=tiled_arg),
                                 flush)
            prefill_us = None
            if m >= 128:  # the path the dispatcher takes above M = 128
                if w_scratch is None:
                    w_scratch = torch.empty((n, k), dtype=torch.bfloat16, device=DEV)
                prefill_us = timer(prefill_call(p, s, g, a, out, w_scratch), flush)
            ws_times = {}
            for nt in (nt for nt in TILE_WIDTHS if ws.has_tile(nt, m)):
                tiles = -(-n // nt)
                for splits in (1, 2, 3, 4, 5, 6, 8):
                    if splits > k // 128 or tiles * splits > 2 * 132 or tiles * splits < 100:
                        continue
                    ws_times[f"{nt}x{splits}"] = timer(lambda: ws(a, pt, st, g, None, out, splits, nt), flush)
            best = min(ws_times, key=ws_times.get)
            row = {"n": n, "k": k, "m": m, "copy_us": copy_us, "copied_bytes": copied, "cublas_bf16_us": cublas_us,
                   "mma_sync_us": mma_us, "mma_sync_tiled_us": mma_tiled_us, "mma_sync_splits": auto,
                   "prefill_vec8_us": prefill_us, "ws_us": ws_times, "ws_best": best}
            rows.append(row)
            ws_us = ws_times[best]
            lines.append(f"{n}x{k} M={m:3d}: copy {copy_us:6.2f}  cuBLAS {cublas_us:6.2f}  mma.sync {mma_us:6.2f} "
                         f"/ tiled {mma_tiled_us:6.2f} (s={auto})  ws best {best} {ws_us:6.2f} us = "
                         f"{copy_us / ws_us:5.1%} of copy, {ws_us / cublas_us:4.2f}x cuBLAS, "
                         f"{mma_tiled_us / ws_us:4.2f}x faster than mma.sync tiled"
                         + (f", prefill {prefill_us:6.2f} ({prefill_us / ws_us:4.2f}x)" if prefill_us else ""))
    report["speed"] = rows
    return lines


def variants(spec: str, out: Path, report: dict, plain: Ws, ms: tuple[int, ...] = ()) -> list[str]:
    """Builds of fused_ws.cu with extra -D flags ("name:-DA -DB;name2:..."), timed at M = 1 and 64
    (or the --ms values) on the large shapes at one tile choice each (the first of the shape's
    choices that the plain build has; tile-contiguous weights), beside the plain build."""
    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device=DEV)
    builds = {"plain": plain}
    for entry in spec.split(";"):
        name, _, flags = entry.partition(":")
        builds[name] = Ws(build(out, tuple(flags.split()), f"libws_{name}.so"))
    rows, lines = [], []
    for (n, k, choices) in ((17408, 5120, ((136, 1),)), (5120, 17408, ((160, 4), (128, 3)))):
        packed, scales = make(n, k, 1)
        pt, st = layout.tile_weights(to_dev(packed), to_dev(scales))
        g = torch.tensor([0.0123], dtype=torch.float32, device=DEV)
        for m in ms or (1, 64):
            nt, splits = next(((nt, sp) for nt, sp in choices if plain.has_tile(nt, m)), choices[-1])
            a = torch.randn(m, k, dtype=torch.bfloat16, device=DEV)
            o = torch.empty((m, n), dtype=torch.bfloat16, device=DEV)
            times = {}  # None: a build without this tile width
            for name, ws in builds.items():
                has = ws.has_tile(nt, m)
                times[name] = timer(lambda: ws(a, pt, st, g, None, o, splits, nt), flush) if has else None
            rows.append({"n": n, "k": k, "m": m, "nt": nt, "splits": splits, "us": times})
            shown = "  ".join(f"{name}={us:.2f}" if us is not None else f"{name}=-" for name, us in times.items())
            lines.append(f"variants {n}x{k} M={m} {nt}x{splits}: {shown}")
    report["variants"] = rows
    return lines


def prebuild(out: Path, spec: str) -> None:
    """Build here (nvcc runs on the CPU machine) what a device call would build, in parallel."""
    import concurrent.futures

    prebuilt_dir().mkdir(parents=True, exist_ok=True)
    jobs = [((), "libws.so")]
    for entry in filter(None, spec.split(";")):
        name, _, flags = entry.partition(":")
        jobs.append((tuple(flags.split()), f"libws_{name}.so"))
    for _, name in jobs:
        (prebuilt_dir() / name).unlink(missing_ok=True)

    def one(job: tuple[tuple[str, ...], str]) -> None:
        flags, name = job
        build(out, flags, name)
        Path(f"/tmp/{out.name}-{name}").replace(prebuilt_dir() / name)

    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(one, jobs))
    print("prebuilt:", ", ".join(name for _, name in jobs))


def trace(out: Path, spec: str) -> list[str]:
    """One launch of the WS_TRACE build (spec = N,K,M,NT,SPLITS) after warm-up with the L2 flushed;
    the per-step clock64 stamps of block 0, relative to the consumer's first step."""
    lib = build(out, ("-DWS_TRACE",), "libws_TRACE.so")
    lib.nvfp4ws_trace.restype = ctypes.c_int
    lib.nvfp4ws_trace.argtypes = [ctypes.c_void_p]
    ws = Ws(lib)
    n, k, m, nt, splits = (int(x) for x in spec.split(","))
    packed, scales = make(n, k, 1)
    pt, st = layout.tile_weights(to_dev(packed), to_dev(scales))
    g = torch.tensor([0.0123], dtype=torch.float32, device=DEV)
    a = torch.randn(m, k, dtype=torch.bfloat16, device=DEV)
    o = torch.empty((m, n), dtype=torch.bfloat16, device=DEV)
    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device=DEV)
    for _ in range(3):
        ws(a, pt, st, g, None, o, splits, nt)
    flush.zero_()
    ws(a, pt, st, g, None, o, splits, nt)
    torch.cuda.synchronize()
    buf = np.zeros((256, 16), dtype=np.int64)
    assert lib.nvfp4ws_trace(buf.ctypes.data) == 0
    steps = (k // 128 + splits - 1) // splits
    t0 = buf[0, 4]
    rel = (buf[:steps] - t0).tolist()
    names = ["p0_raw", "p0_decempty", "p0_done", "-", "c_start", "c_decfull", "c_mma_issued", "c_end", "c_act_in",
             "-", "pL_raw", "pL_decempty", "pL_done"]
    (out / "trace.json").write_text(json.dumps({"spec": spec, "columns": names, "cycles": rel}, indent=0))
    lines = ["trace " + spec + " (cycles from the consumer's step 0): " + " ".join(n for n in names if n != "-")]
    for s_ in list(range(min(steps, 8))) + list(range(max(8, steps - 3), steps)):
        row = buf[s_] - t0
        lines.append(f"  s={s_:2d} " + " ".join(f"{int(row[i]):7d}" for i, n_ in enumerate(names) if n_ != "-"))
    return lines


def profile_once(ws: Ws, spec: str) -> None:
    """One launch (after two warm-ups) for ncu: spec = N,K,M,NT,SPLITS."""
    n, k, m, nt, splits = (int(x) for x in spec.split(","))
    packed, scales = make(n, k, 1)
    p, s = to_dev(packed), to_dev(scales)
    g = torch.tensor([0.0123], dtype=torch.float32, device=DEV)
    a = torch.randn(m, k, dtype=torch.bfloat16, device=DEV)
    o = torch.empty((m, n), dtype=torch.bfloat16, device=DEV)
    pt, st = layout.tile_weights(p, s)
    for _ in range(3):
        ws(a, pt, st, g, None, o, splits, nt)
    torch.cuda.synchronize()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--main", default="libws.so", help="the prebuilt library the checks and times run on")
    parser.add_argument("--ss", action="store_true", help="the -DWS_SS build: A from shared memory, natural K order")
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--ms", default="", help="comma-separated M values to time (default: 1,16,32,64,128,256)")
    parser.add_argument("--variants", default="", help='"name:-DFLAG ...;name2:..." builds to time')
    parser.add_argument("--profile-once", default="", help="N,K,M,NT,SPLITS: three launches for ncu, nothing else")
    parser.add_argument("--prebuild", default=None, const="", nargs="?",
                        help="build the plain library and the --variants builds under kernels/_build/ws, then stop")
    parser.add_argument("--trace", default="", help="N,K,M,NT,SPLITS: per-step clock stamps of block 0")
    parser.add_argument("--sanitize", action="store_true", help="two small launches only (under compute-sanitizer)")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.ss:
        BASE_FLAGS.append("-DWS_SS")
    if args.prebuild is not None:
        prebuild(out, args.variants)
        return 0
    ws = Ws(build(out, name=args.main))
    if args.profile_once:
        profile_once(ws, args.profile_once)
        return 0
    if args.trace:
        for line in trace(out, args.trace):
            print(line)
        return 0
    if args.sanitize:
        for (n, k, m, splits) in ((200, 1024, 17, 1), (136, 2048, 64, 3), (200, 1024, 200, 2)):
            packed, scales = make(n, k, 5)
            a = torch.randn(m, k, dtype=torch.bfloat16, device=DEV)
            o = torch.empty((m, n), dtype=torch.bfloat16, device=DEV)
            g = torch.tensor([0.0123], dtype=torch.float32, device=DEV)
            pt, st = layout.tile_weights(to_dev(packed), to_dev(scales))
            for nt in (nt for nt in TILE_WIDTHS if ws.has_tile(nt, m)):
                ws(a, pt, st, g, None, o, splits, nt)
        torch.cuda.synchronize()
        print("sanitize launches done")
        return 0
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda}
    failures = correctness(ws, report, args.quick, natural=args.ss)
    print(f"correctness: {len(report['correctness'])} rows, {len(failures)} failures")
    for f in failures[:30]:
        print("  FAIL", f)
    ms = tuple(int(x) for x in args.ms.split(",")) if args.ms else ()
    lines = [] if args.skip_speed else speed(ws, report, args.quick, ms)
    if args.variants:
        lines += variants(args.variants, out, report, ws, ms)
    (out / "ws_dev.json").write_text(json.dumps(report, indent=1))
    for line in lines:
        print(line)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
