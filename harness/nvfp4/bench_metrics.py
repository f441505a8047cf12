"""The pure side of the benchmark: what it measures, the bytes and FLOPs each row must move,
statistics, the GEMV/prefill crossover and the model replay. No GPU, no torch: the runner
(:mod:`nvfp4_harness.nvfp4.bench`) and the report writer (:mod:`nvfp4_harness.nvfp4.bench_report`)
both build on it, and neither imports the other's module for it.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO_ROOT / "benchmarks" / "results"
DEFAULT_LAYERS = REPO_ROOT / "benchmarks" / "model_27b_layers.json"

#: fused_mma_tiled: the fused kernel on tile-contiguous weights (nvfp4_kernels.layout, registered once);
#: fused_wgmma: the Hopper warpgroup kernel (kernels/cuda/fused_wgmma.cu, in fused_mma's K order) on the
#: row-major weights; fused_wgmma_tiled: the same kernel on the tile-contiguous copy (registered once)
KERNELS = ("dequant_scalar", "dequant_vec8", "torch_compile_dequant", "gemv", "fused_mma", "fused_mma_tiled",
           "fused_wgmma", "fused_wgmma_tiled", "cublas_bf16", "prefill", "copy")
#: the matmul kernels that read the packed weights once (no bf16 copy of them)
FUSED_MATMULS = ("gemv", "fused_mma", "fused_mma_tiled", "fused_wgmma", "fused_wgmma_tiled")
DTYPES = ("bfloat16", "float16")
#: ``--only`` sections, in the order they run; ``compile`` runs last because its warm-up is the
#: slowest and least important part, so a time budget cuts it first.
SECTIONS = ("dequant", "gemv", "prefill", "host", "paths", "sweep", "replay", "compile")
DTYPE = "bfloat16"
BLOCK_SIZE = 16

SEED_SHAPES: tuple[tuple[int, int], ...] = ((4096, 4096), (6144, 2048), (2048, 6144))
LARGE_SHAPES: tuple[tuple[int, int], ...] = ((17408, 5120), (5120, 17408))
LM_HEAD: tuple[int, int] = (248320, 2048)
SHAPES: tuple[tuple[int, int], ...] = SEED_SHAPES + LARGE_SHAPES + (LM_HEAD,)
SEED_M = 1024
GEMV_SECTION_M = (1, 8)
SWEEP_SHAPE: tuple[int, int] = (17408, 5120)
#: every M the GEMV supports (so the crossover is exact inside its range), then powers of two
SWEEP_M: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
#: the largest M the GEMV kernel accepts (cuda_backend.gemv: 1 <= M <= 8)
GEMV_KERNEL_MAX_M = 8
#: the largest M the fused tensor-core kernel accepts (cuda_backend.fused_mma: 1 <= M <= 256)
FUSED_KERNEL_MAX_M = 256
#: the largest M the fused_wgmma kernel accepts (cuda_backend.fused_wgmma: 1 <= M <= 256)
WGMMA_KERNEL_MAX_M = 256
#: section "paths": every eligible path at each M on both large shapes (the policy's thresholds
#: are the crossovers found here); dense where the fused kernel's tiles change (8, 16, 32, 64), and
#: at 33 and 40, past fused_mma's 32-row tile, where fused_wgmma's 64-row tile may take over
PATHS_SHAPES: tuple[tuple[int, int], ...] = LARGE_SHAPES
PATHS_M: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 33, 40, 48, 64, 96, 128, 160, 192, 224, 256,
                            512, 1024, 2048, 4096, 8192)
QUICK_PATHS_M: tuple[int, ...] = (1, 8, 16, 64, 128, 256, 1024)
#: the matmul paths a "paths" row may time, by bench kernel name -> dispatch path name
PATH_KERNELS: dict[str, str] = {"gemv": "gemv", "fused_mma": "fused_mma", "fused_wgmma": "fused_wgmma",
                                "prefill": "prefill_vec8"}
REPLAY_TOKENS = 8192

QUICK_SHAPES: tuple[tuple[int, int], ...] = ((4096, 4096), (17408, 5120))
QUICK_SWEEP_M: tuple[int, ...] = (1, 2, 4, 8, 16, 64, 1024)
QUICK_REPS = 20

DEFAULT_REPS = 100
DEFAULT_WARMUP = 5
FLUSH_BYTES = 256 << 20
DEFAULT_BUDGET_S = 330.0
#: ||out - ref|| / ||ref|| against float64 for bf16 outputs (METHOD.md: bf16 lands 1e-3..1e-2)
MATMUL_TOLERANCE = 1e-2
#: rows of A checked against float64 for the large matmuls (the full output is NaN-checked)
CHECK_ROWS = 64

#: Random operands: E4M3 scale bytes 0x28..0x48 (0.25 .. 3.0, positive, no NaN, no subnormal)
#: times a global scale like a real checkpoint's amax / (448 * 6). Never zeros (METHOD.md).
SCALE_BYTE_RANGE = (0x28, 0x48)
GLOBAL_SCALE = 0.0123

#: Earlier measurements to compare with (docs/anchors.md), keyed (kernel, M, N, K);
#: M is None for dequantization. Values: (microseconds, what it is).
ANCHORS: dict[tuple[str, int | None, int, int], tuple[float, str]] = {
    ("dequant_vec8", None, 4096, 4096): (15.2, "ONNX Runtime 1.31.1 vec8"),
    ("dequant_vec8", None, 6144, 2048): (11.9, "ONNX Runtime 1.31.1 vec8"),
    ("dequant_vec8", None, 2048, 6144): (11.6, "ONNX Runtime 1.31.1 vec8"),
    ("dequant_scalar", None, 4096, 4096): (61.2, "ONNX Runtime 1.31.1 scalar (odd block size)"),
    ("gemv", 1, 4096, 4096): (5.9, "ONNX Runtime 1.31.1 GEMV"),
    ("gemv", 1, 17408, 5120): (29.4, "ONNX Runtime 1.31.1 GEMV"),
    ("prefill", 64, 17408, 5120): (128.5, "ONNX Runtime 1.31.1 dequant + cuBLAS (75.1 + 53.4)"),
    ("cublas_bf16", 64, 17408, 5120): (59.3, "torch cuBLAS bf16, earlier run"),
    ("cublas_bf16", 1024, 17408, 5120): (261.8, "torch cuBLAS bf16, earlier run"),
    ("torch_compile_dequant", None, 4096, 4096): (32.6, "torch.compile naive LUT, earlier run"),
}
#: ONNX Runtime's dequant share of prefill GPU time before its fix (docs/anchors.md).
ORT_DEQUANT_SHARE = 0.469


# --- bytes and FLOPs ----------------------------------------------------------------------------


def dtype_size(dtype: str) -> int:
    """Bytes per element of an output dtype ("bfloat16" or "float16")."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    return 2


def scale_bytes(n: int, k: int, block_size: int) -> int:
    """One E4M3 byte per block: N * ceil(K / block_size) (a partial last block has a scale too)."""
    if block_size <= 0:
        raise ValueError(f"block_size must be positive, got {block_size}")
    return n * -(-k // block_size)


def dequant_bytes(n: int, k: int, block_size: int, dtype: str = DTYPE) -> int:
    """Dequantization reads 0.5 B of packed codes and 1/block_size B of scale per element and
    writes one fp16/bf16 element: N*K/2 + N*ceil(K/bs) + 2*N*K."""
    return n * k // 2 + scale_bytes(n, k, block_size) + n * k * dtype_size(dtype)


def gemv_bytes(m: int, n: int, k: int, dtype: str = DTYPE) -> int:
    """The GEMV reads the packed weights once (0.5625 B per weight at block size 16), reads the
    activations [M, K] and writes the output [M, N]."""
    return n * k // 2 + scale_bytes(n, k, BLOCK_SIZE) + (m * k + m * n) * dtype_size(dtype)


def gemm_bytes(m: int, n: int, k: int, dtype: str = DTYPE) -> int:
    """cuBLAS on pre-dequantized weights: A [M, K] + W [N, K] read, Y [M, N] written."""
    return (m * k + n * k + m * n) * dtype_size(dtype)


def prefill_bytes(m: int, n: int, k: int, block_size: int, dtype: str = DTYPE) -> int:
    """Prefill is two steps, each at its own minimum: dequantize to scratch, then cuBLAS on it."""
    return dequant_bytes(n, k, block_size, dtype) + gemm_bytes(m, n, k, dtype)


def copy_bytes(nbytes: int) -> int:
    """A copy of nbytes // 2 bytes moves this many (read + written)."""
    return 2 * (nbytes // 2)

#: The copy ceiling's size granule. The device copy (``dst.copy_(src)``, the driver's memcpy) of a
#: size that is not a multiple of 4 KiB ran 15% slower on the H200: 19.1-19.5 us for 25,090,048 or
#: 25,135,104 bytes (2 KiB past a multiple) against 16.6-16.7 us for 25,112,576 or 25,157,632, at
#: every distance between source and destination (scripts/copy_ceiling_probe.py,
#: benchmarks/experiments/copy-ceiling-2026-12-03.json). A ceiling is the hardware's best, not the
#: copy's slow path for an odd size, so the bench copies its half-size rounded up to this granule:
#: at most 4095 bytes more on each side, which only makes the ceiling stricter.
COPY_GRANULE = 4096


def copy_ceiling_half(nbytes: int) -> int:
    """The bytes the same-run copy for a row of ``nbytes`` copies: ``nbytes // 2`` rounded up to
    :data:`COPY_GRANULE` (it reads them and writes them, so it moves twice this)."""
    if nbytes < 0:
        raise ValueError(f"nbytes must be >= 0, got {nbytes}")
    half = nbytes // 2
    return -(-half // COPY_GRANULE) * COPY_GRANULE


def kernel_bytes(kernel: str, m: int | None, n: int, k: int, block_size: int, dtype: str = DTYPE,
                 copy_of: str | None = None) -> int:
    """The minimum bytes a row's kernel moves; a ``copy`` row moves those of ``copy_of``."""
    if kernel == "copy":
        if copy_of is None or copy_of == "copy":
            raise ValueError("a copy row needs copy_of, the kernel whose bytes it copies")
        return copy_bytes(kernel_bytes(copy_of, m, n, k, block_size, dtype))
    if kernel in ("dequant_scalar", "dequant_vec8", "torch_compile_dequant"):
        return dequant_bytes(n, k, block_size, dtype)
    if m is None:
        raise ValueError(f"kernel {kernel!r} needs M")
    if kernel in FUSED_MATMULS:  # all read the packed weights once
        return gemv_bytes(m, n, k, dtype)
    if kernel == "cublas_bf16":
        return gemm_bytes(m, n, k, dtype)
    if kernel == "prefill":
        return prefill_bytes(m, n, k, block_size, dtype)
    raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")


def kernel_flops(kernel: str, m: int | None, n: int, k: int) -> int:
    """Multiply-adds counted as 2 FLOPs; 0 for kernels that do no matmul."""
    return 2 * m * n * k if kernel in FUSED_MATMULS + ("cublas_bf16", "prefill") and m else 0


# --- statistics ---------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between closest ranks."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"q must be in [0, 100], got {q}")
    ordered = sorted(float(v) for v in values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def median(values: Sequence[float]) -> float:
    """The median (the 50th percentile)."""
    return percentile(values, 50.0)


def summarize(times_us: Sequence[float]) -> dict[str, float]:
    """Median, p10, p90 and min of per-repetition times."""
    return {"median_us": median(times_us), "p10_us": percentile(times_us, 10),
            "p90_us": percentile(times_us, 90), "min_us": min(times_us)}


def tb_per_s(nbytes: int, us: float) -> float:
    """Achieved bandwidth in TB/s (10^12 bytes per second)."""
    return nbytes / us / 1e6


def fraction_of_copy(row: dict[str, Any]) -> float:
    """Achieved bandwidth over the same-run copy of the same bytes (= copy time / kernel time)."""
    return row["copy_us"] / row["median_us"]


# --- rows ---------------------------------------------------------------------------------------


#: the share of the GPU's span over a queued timing loop (first start event to last end event) at
#: or above which the host's enqueueing of that loop counts as having led the GPU: see host_bound
HOST_BOUND_SHARE = 0.9


def host_bound(enqueue_us: float, gpu_span_us: float) -> bool:
    """Whether a queued timing loop (bench.Runner.time_us: flush, event, call, event, repeated, one
    synchronize after) was led by the host rather than the GPU. The loop's times are kernel times
    only while the host stays ahead: then it finishes queueing well before the GPU finishes running
    (on the H200 about 0.3 of the span for a fused call after a 256 MB flush). When a call's host
    work outlasts the GPU's flush and kernel, the GPU waits inside the timed region and follows the
    host, and the host's enqueueing takes about the whole span: the first H100 bench of the
    twenty-third session had fused_wgmma rows at 2-5x their kernel time that way (benchmarks/NOTES.md)."""
    if enqueue_us < 0 or gpu_span_us <= 0:
        raise ValueError(f"need enqueue_us >= 0 and gpu_span_us > 0, got {enqueue_us} and {gpu_span_us}")
    return enqueue_us >= HOST_BOUND_SHARE * gpu_span_us


def make_row(kernel: str, section: str, m: int | None, n: int, k: int, block_size: int, dtype: str,
             stats: dict[str, float], copy_us: float, reps: int, **extra: Any) -> dict[str, Any]:
    """One result row; ``bytes`` and ``flops`` are computed here, never passed in."""
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    if section not in SECTIONS:
        raise ValueError(f"section must be one of {SECTIONS}, got {section!r}")
    row: dict[str, Any] = {
        "kernel": kernel, "section": section, "M": m, "N": n, "K": k, "block_size": block_size,
        "dtype": dtype, "median_us": round(stats["median_us"], 4),
        "bytes": kernel_bytes(kernel, m, n, k, block_size, dtype, extra.get("copy_of")),
        "copy_us": round(copy_us, 4),
        "p10_us": round(stats["p10_us"], 4), "p90_us": round(stats["p90_us"], 4),
        "min_us": round(stats["min_us"], 4), "reps": reps,
    }
    flops = kernel_flops(kernel, m, n, k)
    if flops:
        row["flops"] = flops
    row.update(extra)
    return row


def find_row(rows: Iterable[dict[str, Any]], kernel: str, n: int, k: int, m: Any = "any",
             section: str | None = None) -> dict[str, Any] | None:
    """The first row of ``kernel`` on N x K (and M, unless "any"), preferring ``section``."""
    matches = [r for r in rows if r["kernel"] == kernel and r["N"] == n and r["K"] == k
               and (m == "any" or r["M"] == m)]
    preferred = [r for r in matches if section is None or r.get("section") == section]
    return (preferred or matches or [None])[0]


def anchor_for(row: dict[str, Any]) -> tuple[float, str] | None:
    """The earlier measurement of the same kernel and shape (docs/anchors.md), if any."""
    return ANCHORS.get((row["kernel"], row["M"], row["N"], row["K"]))


def speedup_vs_scalar(row: dict[str, Any], rows: Sequence[dict[str, Any]]) -> float | None:
    """scalar time / this time for a dequantization row of the same shape and block size."""
    if row["kernel"] not in ("dequant_vec8", "torch_compile_dequant"):
        return None
    scalar = next((r for r in rows if r["kernel"] == "dequant_scalar" and r["N"] == row["N"]
                   and r["K"] == row["K"] and r["block_size"] == row["block_size"]), None)
    return scalar["median_us"] / row["median_us"] if scalar else None


# --- the crossover and the replay -------------------------------------------------------------


def crossover(rows: Sequence[dict[str, Any]], n: int, k: int, current_max_m: int,
              kernel_max_m: int = GEMV_KERNEL_MAX_M) -> dict[str, Any]:
    """Where prefill (dequant + cuBLAS) starts beating the GEMV on N x K.

    The recommended ``gemv_max_m`` is the largest measured M such that the GEMV is faster at
    that M and at every smaller measured M (0: never take the GEMV). When the GEMV wins at every
    M it supports, the recommendation is its kernel limit and the crossover lies above it.
    """
    gemv = {r["M"]: r["median_us"] for r in rows
            if r["kernel"] == "gemv" and (r["N"], r["K"]) == (n, k) and r.get("section") == "sweep"}
    prefill = {r["M"]: r["median_us"] for r in rows
               if r["kernel"] == "prefill" and (r["N"], r["K"]) == (n, k) and r.get("section") == "sweep"}
    both = sorted(set(gemv) & set(prefill))
    points = [{"M": m, "gemv_us": gemv[m], "prefill_us": prefill[m], "gemv_faster": gemv[m] < prefill[m]}
              for m in both]
    recommended, first_prefill = 0, None
    for point in points:
        if point["gemv_faster"] and first_prefill is None:
            recommended = point["M"]
        elif not point["gemv_faster"] and first_prefill is None:
            first_prefill = point["M"]
    recommended = min(recommended, kernel_max_m)
    if not points:
        summary = f"no GEMV/prefill pair measured on {n} x {k}"
    elif first_prefill is None:
        summary = (f"the GEMV is faster than prefill at every measured M up to {both[-1]} (its kernel "
                   f"takes M <= {kernel_max_m}): the crossover lies above M = {both[-1]}")
    elif recommended == 0:
        summary = f"prefill is already faster at M = {first_prefill}: the GEMV should not be taken"
    else:
        summary = (f"the GEMV is faster up to M = {recommended}, prefill from M = {first_prefill}: "
                   f"the crossover lies between them")
    return {"N": n, "K": k, "points": points, "gemv_max_m_recommended": recommended,
            "first_m_prefill_faster": first_prefill, "current_policy_gemv_max_m": current_max_m,
            "summary": summary}


def path_choice(rows: Sequence[dict[str, Any]], shapes: Sequence[tuple[int, int]], policy_gemv_max_m: int,
                policy_fused_max_m: int, policy_wgmma_max_m: int | None = None,
                policy_wgmma_min_m: int | None = None) -> dict[str, Any]:
    """The fastest matmul path at each M of section "paths", and the policy thresholds it implies.

    ``gemv_max_m`` is the largest measured M up to which the GEMV is strictly faster than every
    other path at every measured M, on every shape (the fused paths replace it wherever they are
    at least as fast). ``fused_max_m`` is the largest measured M up to which fused_mma is at least
    as fast as prefill at every measured M above ``gemv_max_m``, on every shape: its range where
    fused_wgmma does not exist. For a run that timed fused_wgmma, against a policy that gives its
    range, fused_mma's range on Hopper ends at the largest measured M up to which it is at least
    as fast as fused_wgmma and prefill too, so ``wgmma_min_m`` is one more than that, and
    ``wgmma_max_m`` the largest measured M up to which fused_wgmma is at least as fast as
    fused_mma and prefill above it. Each is capped by its kernel's limit; a CPU test checks the
    committed run against the defaults. (A run of a policy without ``wgmma_min_m``, which had
    fused_wgmma after fused_mma, is read as the policy of its day: ``fused_max_m`` then also
    had to beat fused_wgmma.)
    """
    table: dict[str, dict[int, dict[str, float]]] = {}
    for n, k in shapes:
        per_m: dict[int, dict[str, float]] = {}
        for r in rows:
            if r.get("section") == "paths" and (r["N"], r["K"]) == (n, k) and r["kernel"] in PATH_KERNELS:
                per_m.setdefault(r["M"], {})[r["kernel"]] = r["median_us"]
        table[f"{n}x{k}"] = dict(sorted(per_m.items()))
    ms = sorted({m for per_m in table.values() for m in per_m})

    def holds(m: int, test: Any) -> bool:
        return all(test(per_m[m]) for per_m in table.values() if m in per_m)

    def last_m(start: int, limit: int, test: Any) -> int:
        """The largest measured M above ``start`` up to which ``test`` holds at every measured M
        (``start`` where it fails at the first)."""
        last = start
        for m in (m for m in ms if m > start):
            if m > limit or not holds(m, test):
                break
            last = m
        return last

    inf = math.inf
    gemv_max = last_m(0, GEMV_KERNEL_MAX_M, lambda t: "gemv" in t and all(
        t["gemv"] < v for name, v in t.items() if name != "gemv"))
    timed_wgmma = any("fused_wgmma" in t for per_m in table.values() for t in per_m.values())
    with_wgmma = policy_wgmma_max_m is not None and timed_wgmma
    ahead = policy_wgmma_min_m is not None and with_wgmma  # fused_wgmma before fused_mma on Hopper

    def fused_best(t: dict[str, float]) -> bool:
        return "fused_mma" in t and t["fused_mma"] <= min(t.get("prefill", inf), t.get("fused_wgmma", inf))

    fused_hopper_max = last_m(gemv_max, FUSED_KERNEL_MAX_M, fused_best)
    if ahead:
        fused_max = last_m(gemv_max, FUSED_KERNEL_MAX_M, lambda t: "fused_mma" in t and t["fused_mma"] <= t.get(
            "prefill", inf))
        wgmma_max = last_m(fused_hopper_max, WGMMA_KERNEL_MAX_M, lambda t: "fused_wgmma" in t and t[
            "fused_wgmma"] <= min(t.get("prefill", inf), t.get("fused_mma", inf)))
    else:
        fused_max = fused_hopper_max
        wgmma_max = last_m(fused_max, WGMMA_KERNEL_MAX_M, lambda t: "fused_wgmma" in t and t[
            "fused_wgmma"] <= t.get("prefill", inf)) if with_wgmma else fused_max
    wgmma_min = fused_hopper_max + 1
    fastest = {shape: {m: min(t, key=t.get) for m, t in per_m.items() if t} for shape, per_m in table.items()}
    agree = (gemv_max, fused_max) == (policy_gemv_max_m, policy_fused_max_m) and (
        not with_wgmma or wgmma_max == policy_wgmma_max_m) and (not ahead or wgmma_min == policy_wgmma_min_m)
    if ahead:
        measured = (f"GEMV fastest up to M = {gemv_max}, fused_mma up to M = {fused_hopper_max}, fused_wgmma from "
                    f"M = {wgmma_min} up to M = {wgmma_max}, prefill above; fused_mma at least as fast as prefill "
                    f"up to M = {fused_max}")
        policy = (f"policy gemv_max_m = {policy_gemv_max_m}, fused_max_m = {policy_fused_max_m}, "
                  f"wgmma_min_m = {policy_wgmma_min_m}, wgmma_max_m = {policy_wgmma_max_m}")
    else:
        wgmma_text = f", fused_wgmma up to M = {wgmma_max}" if with_wgmma else ""
        measured = f"GEMV fastest up to M = {gemv_max}, fused_mma up to M = {fused_max}{wgmma_text}, prefill above"
        policy = (f"policy gemv_max_m = {policy_gemv_max_m}, fused_max_m = {policy_fused_max_m}"
                  + (f", wgmma_max_m = {policy_wgmma_max_m}" if with_wgmma else ""))
    summary = f"{measured}; {policy}{'' if agree else ' (DIFFERENT from the measurement)'}"
    out = {"shapes": [list(s) for s in shapes], "times_us": table, "fastest": fastest,
           "gemv_max_m_recommended": gemv_max, "fused_max_m_recommended": fused_max,
           "policy_gemv_max_m": policy_gemv_max_m, "policy_fused_max_m": policy_fused_max_m,
           "policy_matches": agree, "summary": summary}
    if with_wgmma:
        out.update({"wgmma_max_m_recommended": wgmma_max, "policy_wgmma_max_m": policy_wgmma_max_m})
    if ahead:
        out.update({"wgmma_min_m_recommended": wgmma_min, "policy_wgmma_min_m": policy_wgmma_min_m})
    return out


def load_layers(path: str | os.PathLike[str] = DEFAULT_LAYERS) -> dict[str, Any]:
    """Read and check the model-layer list (``{"layers": [{name, N, K, count}], ...}``)."""
    with open(path, encoding="utf-8") as fh:
        model = json.load(fh)
    layers = model.get("layers") if isinstance(model, dict) else None
    if not isinstance(layers, list) or not layers:
        raise ValueError(f"{path}: expected an object with a non-empty 'layers' list")
    for i, layer in enumerate(layers):
        for key in ("name", "N", "K", "count"):
            if key not in layer:
                raise ValueError(f"{path}: layers[{i}] lacks {key!r}")
        if not all(isinstance(layer[key], int) and layer[key] > 0 for key in ("N", "K", "count")):
            raise ValueError(f"{path}: layers[{i}] needs positive integer N, K and count")
    return model


def distinct_shapes(layers: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Group layers by (N, K): each distinct shape is timed once and weighted by its count."""
    shapes: dict[tuple[int, int], dict[str, Any]] = {}
    for layer in layers:
        entry = shapes.setdefault((layer["N"], layer["K"]), {"N": layer["N"], "K": layer["K"],
                                                             "count": 0, "names": []})
        entry["count"] += layer["count"]
        entry["names"].append(layer["name"])
    return list(shapes.values())


def replay_summary(model: dict[str, Any], rows: Sequence[dict[str, Any]], tokens: int) -> dict[str, Any]:
    """Model prefill time split into dequantization and GEMM, from the replay section's rows."""
    per_shape, missing = [], []
    totals = {"dequant_us": 0.0, "gemm_us": 0.0, "prefill_us": 0.0}
    for shape in distinct_shapes(model["layers"]):
        n, k, count = shape["N"], shape["K"], shape["count"]
        found = {kernel: find_row([r for r in rows if r.get("section") == "replay"], kernel, n, k, m)
                 for kernel, m in (("dequant_vec8", "any"), ("cublas_bf16", tokens), ("prefill", tokens))}
        if any(row is None for row in found.values()):
            missing.append(f"{n}x{k}")
            continue
        entry = {"N": n, "K": k, "count": count, "names": shape["names"],
                 "dequant_us": found["dequant_vec8"]["median_us"],
                 "gemm_us": found["cublas_bf16"]["median_us"], "prefill_us": found["prefill"]["median_us"]}
        per_shape.append(entry)
        for key in totals:
            totals[key] += count * entry[key]
    nodes = sum(layer["count"] for layer in model["layers"])
    weights = sum(layer["N"] * layer["K"] * layer["count"] for layer in model["layers"])
    busy = totals["dequant_us"] + totals["gemm_us"]
    return {"model": model.get("model", "unnamed"), "tokens": tokens, "nodes": nodes, "weights": weights,
            "per_shape": per_shape, "missing_shapes": missing,
            "dequant_total_us": round(totals["dequant_us"], 3), "gemm_total_us": round(totals["gemm_us"], 3),
            "prefill_total_us": round(totals["prefill_us"], 3),
            "dequant_share": (totals["dequant_us"] / busy) if busy and not missing else None,
            "ort_dequant_share": ORT_DEQUANT_SHARE,
            "method": "each distinct (N, K) is timed once (dequant vec8, cuBLAS bf16 and prefill at "
                      f"M = {tokens}) and multiplied by its node count"}


# --- naming -------------------------------------------------------------------------------------


def slugify(text: str) -> str:
    """'NVIDIA H200' -> 'nvidia-h200' (lower case, runs of other characters become one dash)."""
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return slug or "unknown-gpu"


def results_path(out_dir: str | os.PathLike[str], gpu: str, date: str) -> Path:
    """``<out>/<gpu slug>-<YYYY-MM-DD>.json``."""
    return Path(out_dir) / f"{slugify(gpu)}-{date}.json"


def new_results_path(out_dir: str | os.PathLike[str], gpu: str, date: str, commit: str | None = None) -> Path:
    """The results file of a run that starts now: :func:`results_path` if no earlier run wrote
    it, else ``<name>-<commit>.json`` (the repository's name for a day's second run), else the
    first free ``<name>-2.json``, ``<name>-3.json`` ..., so that a second run on the same day
    (``--only paths``, then ``--only host``, say) does not overwrite the first."""
    base = results_path(out_dir, gpu, date)

    def free(path: Path) -> bool:
        return not path.exists() and not path.with_suffix(".json.tmp").exists()

    candidates = [base] + ([base.with_name(f"{base.stem}-{commit}{base.suffix}")] if commit else [])
    for path in candidates:
        if free(path):
            return path
    n = 2
    while not free(path := base.with_name(f"{base.stem}-{n}{base.suffix}")):
        n += 1
    return path
