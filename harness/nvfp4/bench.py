"""``python -m nvfp4_harness bench``: time the NVFP4 kernels beside the copy ceiling on a CUDA GPU.

Why it is built this way:

* Every row is timed with CUDA events around the kernel region only. Before each repetition a
  256 MB buffer is written, which evicts the L2 (50 MB on an H200), so every repetition reads its
  operands from HBM as a layer of a real model does. The median of many repetitions is the
  figure; p10 and p90 show the spread.
* Every row gets a device-to-device copy of the same byte count, timed in the same run right
  after it: the ceiling is measured, not taken from a datasheet, and a ratio inside one run does
  not drift with clocks and drivers between runs.
* Every kernel's output is checked once before it is timed (bitwise for dequantization, against
  a float64 reference with a tolerance for matmuls), so a wrong but fast kernel cannot report a
  time. A row that fails its check is listed under ``failures`` and the command exits 1.
* Bytes are the minimum a kernel must move (each input read once, each output written once);
  see :func:`kernel_bytes`.

The pure parts (byte counts, statistics, the crossover, the replay arithmetic, the naive LUT
dequant) live in :mod:`nvfp4_harness.nvfp4.bench_metrics`, need no GPU and are tested on the CPU
(``suites/test_bench_unit.py``). The GPU runner imports torch and
:mod:`nvfp4_kernels.cuda_backend` only when it runs.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gc
import json
import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nvfp4_harness.nvfp4.bench_metrics import (  # noqa: F401 - the runner's public names
    ANCHORS,
    BLOCK_SIZE,
    CHECK_ROWS,
    DEFAULT_BUDGET_S,
    DEFAULT_LAYERS,
    DEFAULT_OUT,
    DEFAULT_REPS,
    DEFAULT_WARMUP,
    DTYPE,
    DTYPES,
    FLUSH_BYTES,
    FUSED_KERNEL_MAX_M,
    GEMV_KERNEL_MAX_M,
    GEMV_SECTION_M,
    GLOBAL_SCALE,
    KERNELS,
    LARGE_SHAPES,
    LM_HEAD,
    MATMUL_TOLERANCE,
    ORT_DEQUANT_SHARE,
    PATHS_M,
    PATHS_SHAPES,
    QUICK_PATHS_M,
    QUICK_REPS,
    QUICK_SHAPES,
    QUICK_SWEEP_M,
    REPLAY_TOKENS,
    REPO_ROOT,
    SCALE_BYTE_RANGE,
    SECTIONS,
    SEED_M,
    SEED_SHAPES,
    SHAPES,
    SWEEP_M,
    SWEEP_SHAPE,
    WGMMA_KERNEL_MAX_M,
    anchor_for,
    copy_bytes,
    copy_ceiling_half,
    crossover,
    dequant_bytes,
    distinct_shapes,
    dtype_size,
    find_row,
    fraction_of_copy,
    gemm_bytes,
    gemv_bytes,
    host_bound,
    kernel_bytes,
    kernel_flops,
    load_layers,
    make_row,
    median,
    new_results_path,
    path_choice,
    percentile,
    prefill_bytes,
    replay_summary,
    results_path,
    scale_bytes,
    slugify,
    speedup_vs_scalar,
    summarize,
    tb_per_s,
)


class VerificationError(AssertionError):
    """A kernel's output did not match its reference: the row is not timed."""


class BudgetExceeded(RuntimeError):
    """The run is past its time budget: the remaining rows are skipped."""


# --- the naive dequant users write instead --------------------------------------------------------


def naive_lut_dequant(packed: Any, scales: Any, g: Any, lut: Any, block_size: int, dtype: Any) -> Any:
    """The dequantization a user writes in plain torch: unpack nibbles, index a 16-entry E2M1
    table, multiply by the per-block scale (E4M3 times g) repeated over its block, cast.

    It follows the contract's multiply order, e2m1 * (e4m3 * g), so its bits equal the kernels'
    for every non-NaN scale; it is the torch.compile baseline and, run eagerly in row chunks,
    the full-tensor golden the GPU kernels are compared with.
    """
    import torch

    n, k = packed.shape[0], packed.shape[1] * 2
    codes = torch.stack((packed & 0x0F, packed >> 4), dim=-1).reshape(n, k)
    values = lut[codes.long()]
    block_scale = scales.view(torch.float8_e4m3fn).float() * g
    per_element = block_scale.repeat_interleave(block_size, dim=1)[:, :k]
    return (values * per_element).to(dtype)


# --- the GPU runner -------------------------------------------------------------------------------


@dataclass
class Operands:
    """Random NVFP4 weights of one shape on the GPU and their verified dequantization ``w``."""

    n: int
    k: int
    block_size: int
    packed: Any
    scales: Any
    g: Any
    w: Any


#: how many more times a row whose queued loop the host fell behind is timed (Runner._time_kernel)
HOST_BOUND_RETIMES = 2


class Runner:
    """Verifies, times and records rows; keeps the same-run copy time of every byte count."""

    def __init__(self, torch: Any, backend: Any | None, reps: int, warmup: int, budget_s: float,
                 started: float, device: str = "cuda", compile_backend: str = "inductor",
                 flush_bytes: int = FLUSH_BYTES) -> None:
        self.torch = torch
        self.backend = backend
        self.reps, self.warmup, self.budget_s, self.started = reps, warmup, budget_s, started
        #: "cpu" only for the CPU dry run of the tests (host clock, reference backend)
        self.device = device
        self.compile_backend = compile_backend
        self.flush = torch.empty(flush_bytes, dtype=torch.uint8, device=device)
        self.lut = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                                 -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0],
                                dtype=torch.float32, device=device)
        self.dtype = getattr(torch, DTYPE)
        self.rows: list[dict[str, Any]] = []
        #: host time per eager call (section "host", see nvfp4_harness.nvfp4.host_time)
        self.host_rows: list[dict[str, Any]] = []
        self.failures: list[dict[str, Any]] = []
        self.copy_cache: dict[int, float] = {}
        self.compile_modes: dict[str, str] = {}
        self.aborted: str | None = None
        #: (host enqueue us, GPU span us) of the last timing loop on the GPU (time_us)
        self.last_queue: tuple[float, float] | None = None
        self._operands: dict[tuple[int, int, int], Operands] = {}
        self._seed = 1234

    # timing ---------------------------------------------------------------------------------

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def sync(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def time_us(self, fn: Callable[[], Any]) -> list[float]:
        """Per-repetition kernel times in microseconds: flush the L2, event, fn, event.

        Nothing synchronizes inside the loop: the host queues every repetition and the 256 MB
        flush gives it time to stay ahead of the GPU, so launch latency stays out of the region.
        Whether it did is kept in :attr:`last_queue` (the host's enqueueing time and the GPU's span
        over the loop, in us; None on the CPU dry run) for :meth:`measure` to record.

        Python's garbage collector is off during the loop (as ``timeit`` does): a collection pass
        can stall the host for milliseconds in a process as large as this one, and a host stalled
        between a repetition's start event and its launch puts that stall into the repetition's
        time. (It was not what stalled the H100 hosts of 2026-12-05, which stall at random
        moments: :meth:`measure` times such a loop again.)
        """
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return self._time_us(fn)
        finally:
            if was_enabled:
                gc.enable()

    def _time_us(self, fn: Callable[[], Any]) -> list[float]:
        """:meth:`time_us` with the collector already off."""
        torch = self.torch
        self.last_queue = None
        for _ in range(self.warmup):
            fn()
        self.sync()
        if self.device != "cuda":  # the CPU dry run: host clock
            times = []
            for _ in range(self.reps):
                self.flush.zero_()
                t0 = time.perf_counter()
                fn()
                times.append(1e6 * (time.perf_counter() - t0))
            return times
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        queued = time.perf_counter()
        for start, end in zip(starts, ends, strict=True):
            self.flush.zero_()
            start.record()
            fn()
            end.record()
        enqueue_us = 1e6 * (time.perf_counter() - queued)
        torch.cuda.synchronize()
        self.last_queue = (enqueue_us, 1000.0 * starts[0].elapsed_time(ends[-1]))
        return [1000.0 * s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)]

    def copy_us(self, nbytes: int, like: dict[str, Any]) -> float:
        """The same-run time of ``dst.copy_(src)`` moving ``nbytes``, recorded as a copy row: the
        half-size rounded up to the copy's fast granule (:func:`copy_ceiling_half`; the row's
        ``copied_bytes`` says what it moved)."""
        if nbytes // 2 in self.copy_cache:
            return self.copy_cache[nbytes // 2]
        half = copy_ceiling_half(nbytes)
        torch = self.torch
        src = torch.randint(0, 256, (half,), dtype=torch.uint8, device=self.device)
        dst = torch.empty_like(src)
        dst.copy_(src)
        if not torch.equal(dst, src):
            raise VerificationError("the device copy did not reproduce its source")
        stats = summarize(self.time_us(lambda: dst.copy_(src)))
        self.copy_cache[nbytes // 2] = stats["median_us"]
        self.rows.append(make_row("copy", like["section"], like["M"], like["N"], like["K"],
                                  like["block_size"], like["dtype"], stats, stats["median_us"], self.reps,
                                  copy_of=like["kernel"], copied_bytes=2 * half))
        return stats["median_us"]

    def measure(self, kernel: str, section: str, m: int | None, n: int, k: int,
                verify: Callable[[], str], fn: Callable[[], Any], **extra: Any) -> dict[str, Any] | None:
        """Check ``kernel`` once (``verify`` raises on a wrong output), then time it and its copy."""
        where = {"kernel": kernel, "section": section, "M": m, "N": n, "K": k, "block_size": BLOCK_SIZE,
                 "dtype": DTYPE}
        try:
            if self.aborted:
                raise BudgetExceeded(f"not run: {self.aborted}")
            if self.elapsed() > self.budget_s:
                raise BudgetExceeded(f"skipped: past the {self.budget_s:.0f} s time budget")
            checked = verify()
            stats, queue, retimed = self._time_kernel(fn)
            copy_us = self.copy_us(kernel_bytes(kernel, m, n, k, BLOCK_SIZE, DTYPE), where)
        except Exception as exc:  # recorded, the run goes on
            self.fail(where, exc)
            return None
        if queue is not None:
            extra = {**extra, "enqueue_us": round(queue[0], 1), "gpu_span_us": round(queue[1], 1),
                     "host_bound": host_bound(*queue), "retimed": retimed}
        row = make_row(kernel, section, m, n, k, BLOCK_SIZE, DTYPE, stats, copy_us, self.reps,
                       verified=checked, **extra)
        self.rows.append(row)
        if row.get("host_bound"):
            print(f"[{self.elapsed():6.1f}s] {section:8} {kernel:22} M={str(m):>5} {n}x{k}: HOST-BOUND: the host "
                  f"queued the repetitions in {queue[0]:.0f} us of the GPU's {queue[1]:.0f}, so the GPU waited "
                  f"on it and the times include host work", file=sys.stderr, flush=True)
        print(f"[{self.elapsed():6.1f}s] {section:8} {kernel:22} M={str(m):>5} {n}x{k}: "
              f"{row['median_us']:9.2f} us  {tb_per_s(row['bytes'], row['median_us']):5.2f} TB/s  "
              f"{100 * fraction_of_copy(row):5.1f}% of copy", file=sys.stderr, flush=True)
        return row

    def _time_kernel(self, fn: Callable[[], Any]) -> tuple[dict[str, float], tuple[float, float] | None, int]:
        """:meth:`time_us` of ``fn`` summarized, with the loop's queue figures and how many times it
        was timed again: a loop the host fell behind (bench_metrics.host_bound) timed host work, not
        the kernel, so it is timed again, up to :data:`HOST_BOUND_RETIMES` more times, and the row
        keeps the first loop that stayed ahead (or the last one, still flagged). The H100 runs of
        2026-12-05 had hosts that stalled for 0.1-1 ms at random moments, flagging 3-7 rows of 400."""
        retimed = 0
        while True:
            stats = summarize(self.time_us(fn))
            queue = self.last_queue  # before copy_us times the copy
            if queue is None or not host_bound(*queue) or retimed == HOST_BOUND_RETIMES:
                return stats, queue, retimed
            retimed += 1

    def fail(self, where: dict[str, Any], exc: BaseException) -> None:
        kind = ("wrong output" if isinstance(exc, VerificationError)
                else "skipped" if isinstance(exc, BudgetExceeded) else "error")
        message = f"{type(exc).__name__}: {exc}"
        self.failures.append({**where, "kind": kind, "message": message[:2000]})
        print(f"[{self.elapsed():6.1f}s] {where['section']:8} {where['kernel']:22} M={where['M']} "
              f"{where['N']}x{where['K']}: {kind.upper()}: {message[:300]}", file=sys.stderr, flush=True)
        if kind == "error" and not self.context_usable():
            self.aborted = f"an earlier error left the CUDA context unusable ({message[:200]})"

    def context_usable(self) -> bool:
        """False after a sticky CUDA error (e.g. an illegal address): then nothing else can run.
        A launch that was merely refused (bad configuration, validation) leaves it usable."""
        try:
            self.sync()
            return bool(self.torch.ones(1, device=self.device).add_(1).item() == 2.0)
        except Exception:
            return False

    # operands and references ------------------------------------------------------------------

    def operands(self, n: int, k: int) -> Operands:
        """Random weights of one shape, dequantized by the naive torch code in row chunks and that
        result checked bit for bit against the CPU reference on three row slices."""
        key = (n, k, BLOCK_SIZE)
        if key in self._operands:
            return self._operands[key]
        while len(self._operands) >= 2:  # the lm_head alone holds about 2.5 GB
            self._operands.pop(next(iter(self._operands)))
        torch = self.torch
        self._seed += 1
        gen = torch.Generator(device=self.device)
        gen.manual_seed(self._seed)
        packed = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, device=self.device, generator=gen)
        scales = torch.randint(SCALE_BYTE_RANGE[0], SCALE_BYTE_RANGE[1] + 1, (n, -(-k // BLOCK_SIZE)),
                               dtype=torch.uint8, device=self.device, generator=gen)
        g = torch.tensor([GLOBAL_SCALE], dtype=torch.float32, device=self.device)
        w = torch.empty((n, k), dtype=self.dtype, device=self.device)
        chunk = max(1, (1 << 24) // k)
        for r0 in range(0, n, chunk):
            w[r0:r0 + chunk] = naive_lut_dequant(packed[r0:r0 + chunk], scales[r0:r0 + chunk], g, self.lut,
                                                 BLOCK_SIZE, self.dtype)
        ops = Operands(n, k, BLOCK_SIZE, packed, scales, g, w)
        self.check_slices(ops, w, "naive torch dequant (the golden)")
        self._operands[key] = ops
        return ops

    def check_slices(self, ops: Operands, out: Any, what: str) -> None:
        """First, middle and last rows of ``out`` against nvfp4_kernels.reference, bit for bit."""
        from nvfp4_harness.nvfp4.verify import compare_bitwise
        from nvfp4_kernels import reference

        rows = max(1, min(ops.n, (1 << 18) // ops.k))
        g = float(ops.g.item())
        for r0 in sorted({0, max(0, ops.n // 2 - rows // 2), max(0, ops.n - rows)}):
            sl = slice(r0, r0 + rows)
            expected = reference.dequantize(ops.packed[sl].cpu().numpy(), ops.scales[sl].cpu().numpy(),
                                            g, ops.block_size, DTYPE)
            diff = compare_bitwise(expected, out[sl])
            if not diff:
                raise VerificationError(f"{what}, rows {r0}..{r0 + rows - 1} vs nvfp4_kernels.reference: {diff}")

    def check_dequant(self, ops: Operands, out: Any, what: str) -> str:
        """Every element of ``out`` bit for bit against the verified golden."""
        torch = self.torch
        equal = out.view(torch.int16) == ops.w.view(torch.int16)
        if not bool(equal.all()):
            bad = int((~equal).sum())
            first = tuple(int(i) for i in torch.nonzero(~equal)[0])
            raise VerificationError(f"{what}: {bad} of {out.numel()} elements differ bitwise from the "
                                    f"golden, first at {list(first)}")
        return "bitwise vs naive torch dequant (itself bitwise vs nvfp4_kernels.reference on 3 row slices)"

    def check_matmul(self, a: Any, ops: Operands, out: Any, what: str) -> str:
        """No unwritten (NaN-poisoned) element anywhere; the first rows against float64."""
        torch = self.torch
        if bool(torch.isnan(out).any()) or bool(torch.isinf(out).any()):
            raise VerificationError(f"{what}: NaN/inf in the output (unwritten or overflowed elements)")
        rows = min(CHECK_ROWS, a.shape[0])
        a64 = a[:rows].double()
        ref = torch.empty((rows, ops.n), dtype=torch.float64, device=self.device)
        chunk = max(1, (1 << 25) // ops.k)
        for r0 in range(0, ops.n, chunk):
            ref[:, r0:r0 + chunk] = a64 @ ops.w[r0:r0 + chunk].double().t()
        err = float(torch.linalg.vector_norm(out[:rows].double() - ref) / torch.linalg.vector_norm(ref))
        if not err <= MATMUL_TOLERANCE:
            raise VerificationError(f"{what}: relative error {err:.3g} vs float64 exceeds {MATMUL_TOLERANCE}")
        return f"rel. error {err:.2e} vs float64 on {rows} rows; no NaN/inf in the output"

    # sections ---------------------------------------------------------------------------------

    def _poisoned(self, shape: tuple[int, ...], bits: int) -> Any:
        out = self.torch.empty(shape, dtype=self.dtype, device=self.device)
        out.view(self.torch.int16).fill_(bits)  # a NaN pattern no kernel writes for these inputs
        return out

    def dequant_rows(self, n: int, k: int, section: str = "dequant",
                     kernels: Sequence[str] = ("dequant_scalar", "dequant_vec8")) -> None:
        ops = self.operands(n, k)
        for kernel in kernels:
            path = "prefill_scalar" if kernel == "dequant_scalar" else "prefill_vec8"
            out = self._poisoned((n, k), 0x7FC1 if kernel == "dequant_scalar" else 0x7FC2)

            def run(path: str = path, out: Any = out) -> None:
                self.backend.dequantize(path, ops.packed, ops.scales, ops.g, ops.block_size, out)

            def verify(run: Callable[[], None] = run, out: Any = out, kernel: str = kernel) -> str:
                self._need_backend()
                run()
                return self.check_dequant(ops, out, kernel)

            self.measure(kernel, section, None, n, k, verify, run)
            del out

    def compile_row(self, n: int, k: int) -> None:
        torch = self.torch
        where = {"kernel": "torch_compile_dequant", "section": "compile", "M": None, "N": n, "K": k,
                 "block_size": BLOCK_SIZE, "dtype": DTYPE}
        try:
            if self.aborted or self.elapsed() > self.budget_s:
                raise BudgetExceeded(self.aborted or f"skipped: past the {self.budget_s:.0f} s time budget")
            ops = self.operands(n, k)
        except Exception as exc:
            self.fail(where, exc)
            return
        args = (ops.packed, ops.scales, ops.g, self.lut, BLOCK_SIZE, self.dtype)
        mode, fn = f"torch.compile ({self.compile_backend}, dynamic=False)", None
        t0 = time.monotonic()
        try:
            import torch._dynamo

            torch._dynamo.reset()
            compiled = torch.compile(naive_lut_dequant, dynamic=False, backend=self.compile_backend)
            compiled(*args)
            self.sync()
            fn = compiled
        except Exception as exc:  # what users get when compile fails: eager
            mode = f"eager (torch.compile failed: {type(exc).__name__}: {str(exc)[:300]})"
            fn = naive_lut_dequant
        compile_s = time.monotonic() - t0
        holder: dict[str, Any] = {}

        def run() -> None:
            holder["out"] = fn(*args)

        timed, extra = run, {}
        if self.device == "cuda":
            timed, extra, mode = self._replayed_baseline(run, mode)
        self.compile_modes[f"{n}x{k}"] = mode

        def verify() -> str:
            timed()
            return self.check_dequant(ops, holder["out"], "torch.compile naive dequant")

        self.measure("torch_compile_dequant", "compile", None, n, k, verify, timed, impl=mode,
                     compile_s=round(compile_s, 2), **extra)

    def _replayed_baseline(self, run: Callable[[], None], mode: str) -> tuple[Callable[[], Any], dict[str, Any], str]:
        """The compiled baseline's kernels alone: ``run`` captured once in a CUDA graph, timed by replay.

        Called eagerly, the compiled function's guards and Python wrapper cost more host time than
        its kernels take on the small shapes, so the GPU waited on the host inside the timed region
        (the e5e90f0 H200 run timed 4096 x 4096 at 75 us and 6144 x 2048 at 49.9 against 13.1 on
        2048 x 6144, the same element count). vec8 is timed as a kernel, so its baseline must be too.
        The eager loop is still timed and kept in the row (``eager_median_us``, ``eager_host_bound``),
        so what a user calling it eagerly gets is not lost. If capture fails the row is the eager
        loop and ``impl`` says why."""
        stats = summarize(self.time_us(run))
        eager = {"eager_median_us": round(stats["median_us"], 4)}
        if self.last_queue is not None:
            eager["eager_host_bound"] = host_bound(*self.last_queue)
        torch = self.torch
        try:
            graph = torch.cuda.CUDAGraph()
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                run()  # warm on a side stream, as capture wants
            torch.cuda.current_stream().wait_stream(side)
            with torch.cuda.graph(graph):
                run()
            self.sync()
        except Exception as exc:  # the eager loop stands, and says why
            return run, eager, f"{mode}, eager (CUDA graph capture failed: {type(exc).__name__}: {str(exc)[:200]})"
        return graph.replay, eager, f"{mode}, replayed from a CUDA graph"

    def gemv_rows(self, n: int, k: int, ms: Sequence[int], section: str, a_all: Any | None = None) -> None:
        ops = self.operands(n, k)
        a_all = a_all if a_all is not None else self.torch.randn(max(ms), k, dtype=self.dtype, device=self.device)
        for m in ms:
            a = a_all[:m]
            self._fused_kernel_row("gemv", section, ops, a, 0x7FC3,
                                   lambda out, a=a: self.backend.prepare_gemv(a, ops.packed, ops.scales, ops.g, None,
                                                                              out))
            self.cublas_row(ops, a, section)

    def _fused_kernel_row(self, kernel: str, section: str, ops: Operands, a: Any, poison: int,
                          prepare: Callable[[Any], Callable[[], None]], **extra: Any) -> None:
        """One row of a kernel that reads the packed weights and writes Y = A W^T: ``prepare(out)``
        checks the call once and returns its launch (the backend's ``prepare_*``) into an output
        poisoned with ``poison`` (so a row it never writes fails the check), verified against the
        float64 bound once, then timed; ``extra`` goes into the row.

        The timed repetitions are the launch alone, not the checks: time_us queues them and needs
        the host ahead of the GPU, and a slower host fell behind with the checks in every call
        (benchmarks/NOTES.md, twenty-fourth session)."""
        m = a.shape[0]
        out = self._poisoned((m, ops.n), poison)
        prepared: list[Callable[[], None]] = []

        def run() -> None:
            prepared[0]()

        def verify() -> str:
            self._need_backend()
            prepared.append(prepare(out))
            run()
            return self.check_matmul(a, ops, out, f"{kernel} M={m}")

        self.measure(kernel, section, m, ops.n, ops.k, verify, run, **extra)

    def fused_row(self, ops: Operands, a: Any, section: str, tiled: tuple[Any, ...] | None = None) -> None:
        """The fused tensor-core path at M = a.shape[0], with the split count the dispatcher uses.
        With ``tiled`` (nvfp4_kernels.layout.tiled_weight of the operands, what ``layout.register``
        gives the dispatcher: the tiled copy and its scale-byte range, made once before the rows as
        a runtime would at load time) it reads the tile-contiguous copy: kernel
        ``fused_mma_tiled``, the same split count and bits."""
        m = a.shape[0]
        kernel = "fused_mma" if tiled is None else "fused_mma_tiled"
        splits = self.backend.fused_splits(ops.n, ops.k, m) if self.backend is not None else None
        # the dispatcher's split count, handed in so that the row records the count it timed
        self._fused_kernel_row(
            kernel, section, ops, a, 0x7FC7 if tiled is None else 0x7FC8,
            lambda out: self.backend.prepare_fused_mma(a, ops.packed, ops.scales, ops.g, None, out, splits=splits,
                                                       tiled=tiled), splits=splits)

    def wgmma_row(self, ops: Operands, a: Any, section: str, tiled: tuple[Any, ...] | None = None) -> None:
        """The fused_wgmma path at M = a.shape[0] (a Hopper GPU only), as the dispatcher launches
        it (fused_mma's K order, nvfp4_kernels.tiling.wgmma_call_plan's plan). With ``tiled``
        (nvfp4_kernels.layout.tiled_weight of the operands, what ``layout.register`` gives the
        dispatcher for both fused paths, made once before the rows) it reads that copy: kernel
        ``fused_wgmma_tiled``, the same plan and bits."""
        from nvfp4_kernels.tiling import wgmma_call_plan

        kernel = "fused_wgmma" if tiled is None else "fused_wgmma_tiled"
        m = a.shape[0]
        plan = self.backend.fused_wgmma_plan(ops.n, ops.k, m, self.torch.cuda.current_device()) \
            if self.device == "cuda" else wgmma_call_plan(ops.n, ops.k, m)  # a dry run: the H200's plan
        # the dispatcher's plan, handed in so that the row records the plan it timed
        self._fused_kernel_row(
            kernel, section, ops, a, 0x7FC9 if tiled is None else 0x7FCA,
            lambda out: self.backend.prepare_fused_wgmma(a, ops.packed, ops.scales, ops.g, None, out, plan=plan,
                                                         tiled=tiled),
            plan=list(plan))

    def _wgmma_runs_here(self) -> bool:
        """fused_wgmma's kernel is built for sm_90a only (its arch_sm90 guard); a dry run on the
        CPU runs its CPU algorithm instead."""
        if self.device != "cuda":
            return True
        return tuple(self.torch.cuda.get_device_capability(self.device)) == (9, 0)

    def path_rows(self, n: int, k: int, ms: Sequence[int], section: str = "paths") -> None:
        """Every path that can run each M (GEMV, fused_mma on row-major and on tile-contiguous
        weights, fused_wgmma on a Hopper GPU on the same two, prefill)
        beside cuBLAS on bf16 weights."""
        from nvfp4_kernels import layout

        ops = self.operands(n, k)
        tiled = layout.tiled_weight(ops.packed, ops.scales) if k % layout.STEP_K == 0 else None
        wgmma_here = k % 128 == 0 and self._wgmma_runs_here()
        a_all = self.torch.randn(max(ms), k, dtype=self.dtype, device=self.device)
        for m in ms:
            if m <= GEMV_KERNEL_MAX_M:
                self.gemv_rows(n, k, [m], section, a_all)  # its cuBLAS row comes with it
            else:
                self.cublas_row(ops, a_all[:m], section)
            if m <= FUSED_KERNEL_MAX_M:
                self.fused_row(ops, a_all[:m], section)
                if tiled is not None:
                    self.fused_row(ops, a_all[:m], section, tiled)
            if m <= WGMMA_KERNEL_MAX_M and wgmma_here:
                self.wgmma_row(ops, a_all[:m], section)
                if tiled is not None:
                    self.wgmma_row(ops, a_all[:m], section, tiled)
            self.prefill_row(ops, a_all[:m], section)

    def cublas_row(self, ops: Operands, a: Any, section: str) -> None:
        torch, m = self.torch, a.shape[0]
        out = self._poisoned((m, ops.n), 0x7FC4)
        w_t = ops.w.t()

        def run() -> None:
            torch.mm(a, w_t, out=out)

        def verify() -> str:
            run()
            return self.check_matmul(a, ops, out, f"cuBLAS M={m}")

        self.measure("cublas_bf16", section, m, ops.n, ops.k, verify, run)

    def prefill_row(self, ops: Operands, a: Any, section: str) -> None:
        torch, m = self.torch, a.shape[0]
        out = self._poisoned((m, ops.n), 0x7FC5)
        scratch = torch.empty((ops.n, ops.k), dtype=self.dtype, device=self.device)

        def run() -> None:
            self.backend.dequantize("prefill_vec8", ops.packed, ops.scales, ops.g, ops.block_size, scratch)
            torch.mm(a, scratch.t(), out=out)

        def verify() -> str:
            self._need_backend()
            scratch.view(torch.int16).fill_(0x7FC6)
            run()
            self.check_dequant(ops, scratch, "prefill scratch")
            return "scratch bitwise vs golden; " + self.check_matmul(a, ops, out, f"prefill M={m}")

        self.measure("prefill", section, m, ops.n, ops.k, verify, run)

    def guarded(self, section: str, n: int, k: int, fn: Callable[[], Any]) -> None:
        """Run one shape's rows; an error outside a row (e.g. making its operands) is recorded
        against the whole group and the run goes on."""
        try:
            fn()
        except Exception as exc:
            self.fail({"kernel": "*", "section": section, "M": None, "N": n, "K": k,
                       "block_size": BLOCK_SIZE, "dtype": DTYPE}, exc)

    def _need_backend(self) -> None:
        if self.backend is None:
            raise RuntimeError("the CUDA backend is unavailable (see provenance.backend)")

    def matmul_rows(self, n: int, k: int, ms: Sequence[int], section: str, gemv_ms: Sequence[int] = ()) -> None:
        """GEMV (for M in gemv_ms), cuBLAS bf16 and prefill at each M; activations are random."""
        ops = self.operands(n, k)
        a_all = self.torch.randn(max(ms), k, dtype=self.dtype, device=self.device)
        for m in ms:
            if m in gemv_ms:
                self.gemv_rows(n, k, [m], section, a_all)
            else:
                self.cublas_row(ops, a_all[:m], section)
            self.prefill_row(ops, a_all[:m], section)


# --- provenance ---------------------------------------------------------------------------------


def _run(cmd: list[str]) -> str | None:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=20, cwd=REPO_ROOT)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else None


def driver_version() -> str:
    """The NVIDIA kernel driver version (nvidia-smi, else /proc/driver/nvidia/version)."""
    found = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    if found:
        return found.splitlines()[0].strip()
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        return "unknown"
    match = re.search(r"Kernel Module\s+(?:for \S+\s+)?([0-9][0-9.]+)", text)
    return match.group(1) if match else "unknown"


def cublas_version() -> str:
    """cublasLtGetVersion() of the cuBLASLt library torch loaded (read after a first matmul)."""
    import ctypes

    candidates = []
    try:
        with open("/proc/self/maps", encoding="utf-8") as fh:
            candidates += sorted({line.split()[-1] for line in fh if "libcublasLt.so" in line})
    except OSError:
        pass
    candidates += ["libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so.11", "libcublasLt.so"]
    for name in candidates:
        try:
            lib = ctypes.CDLL(name)
            lib.cublasLtGetVersion.restype = ctypes.c_size_t
            raw = int(lib.cublasLtGetVersion())
        except (OSError, AttributeError):
            continue
        return f"{raw // 10000}.{raw // 100 % 100}.{raw % 100} (cublasLtGetVersion {raw})"
    return "unavailable (libcublasLt not found)"


def git_commit(explicit: str | None) -> str:
    """The commit measured: --git-commit, $BENCH_GIT_COMMIT, git, or .git/HEAD; '-dirty' if so."""
    if explicit:
        return explicit
    if os.environ.get("BENCH_GIT_COMMIT"):
        return os.environ["BENCH_GIT_COMMIT"]
    head = _run(["git", "rev-parse", "HEAD"])
    if head:
        dirty = _run(["git", "status", "--porcelain", "--untracked-files=no"])
        return head + ("-dirty" if dirty else "")
    try:
        ref = (REPO_ROOT / ".git" / "HEAD").read_text().strip()
        if ref.startswith("ref: "):
            return (REPO_ROOT / ".git" / ref[5:]).read_text().strip()
        return ref
    except OSError:
        return "unknown"


def provenance(torch: Any, argv: Sequence[str], args: argparse.Namespace, backend_note: str,
               date: str, started: str | None = None) -> dict[str, Any]:
    """Where and how the numbers were taken (no hostname). ``started`` (UTC, to the second) orders
    two runs of one day: ``date`` names the file, and a day's second run is the newer one."""
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    l2 = getattr(props, "L2_cache_size", None)
    return {
        "gpu": torch.cuda.get_device_name(),
        "compute_capability": f"{props.major}.{props.minor}",
        "sm_count": props.multi_processor_count,
        "memory_gib": round(props.total_memory / 2**30, 1),
        "l2_mib": round(l2 / 2**20, 1) if l2 else None,
        "driver": driver_version(),
        "cuda": str(torch.version.cuda),
        "torch": torch.__version__,
        "cublas": cublas_version(),
        "python": platform.python_version(),
        "date": date,
        "started": started,
        "command": " ".join(["python -m nvfp4_harness bench", *argv]).strip(),
        "git_commit": git_commit(args.git_commit),
        "backend": backend_note,
        "reps": args.reps, "warmup": args.warmup, "flush_bytes": FLUSH_BYTES,
        "quick": bool(args.quick), "sections": list(args.sections), "dtype": DTYPE, "block_size": BLOCK_SIZE,
    }


# --- the command --------------------------------------------------------------------------------


def _sections(text: str) -> tuple[str, ...]:
    names = tuple(s.strip() for s in text.split(",") if s.strip())
    unknown = [s for s in names if s not in SECTIONS]
    if not names or unknown:
        raise argparse.ArgumentTypeError(f"unknown section(s) {unknown or [text]}; choose from "
                                         f"{', '.join(SECTIONS)} (comma-separated)")
    return names


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m nvfp4_harness bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="directory for <gpu>-<date>.json")
    parser.add_argument("--reps", type=int, default=None,
                        help=f"timed repetitions per row (default {DEFAULT_REPS}, {QUICK_REPS} with --quick)")
    parser.add_argument("--warmup", type=int, default=DEFAULT_WARMUP, help="untimed calls before timing")
    parser.add_argument("--quick", action="store_true", help="fewer shapes, M values and repetitions")
    parser.add_argument("--only", type=_sections, default=SECTIONS, dest="sections", metavar="SECTION[,...]",
                        help=f"run only these sections: {', '.join(SECTIONS)}")
    parser.add_argument("--layers", default=str(DEFAULT_LAYERS), help="model-layer list for the replay")
    parser.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S,
                        help="skip the remaining rows once this many seconds have passed")
    parser.add_argument("--git-commit", default=None, help="commit measured (default: ask git)")
    args = parser.parse_args(list(argv))
    args.reps = args.reps if args.reps is not None else (QUICK_REPS if args.quick else DEFAULT_REPS)
    if args.reps < 1 or args.warmup < 0:
        parser.error("--reps must be >= 1 and --warmup >= 0")
    return args


def _load_backend() -> tuple[Any | None, str]:
    t0 = time.monotonic()
    try:
        from nvfp4_kernels import cuda_backend

        ok, why = cuda_backend.available()
    except Exception as exc:  # a missing or broken backend still lets copy/cuBLAS/compile run
        return None, f"unavailable: {type(exc).__name__}: {exc}"
    took = time.monotonic() - t0
    return (cuda_backend, f"available (library loaded in {took:.1f} s)") if ok else (None, f"unavailable: {why}")


def write_results(results: dict[str, Any], out_dir: str | os.PathLike[str], path: Path | None = None) -> Path:
    """Write the results JSON (also after each section, so a cut-off run leaves its rows) to
    ``path``, by default the day's :func:`results_path` in ``out_dir``."""
    path = path or results_path(out_dir, results["provenance"]["gpu"], results["provenance"]["date"])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


@dataclass(frozen=True)
class Plan:
    """What one run measures: shapes, M values and the replay's token count."""

    shapes: tuple[tuple[int, int], ...]
    gemv_m: tuple[int, ...]
    seed_m: int
    sweep_shape: tuple[int, int]
    sweep_m: tuple[int, ...]
    paths_shapes: tuple[tuple[int, int], ...]
    paths_m: tuple[int, ...]
    replay_tokens: int
    compile_shapes: tuple[tuple[int, int], ...]
    sections: tuple[str, ...]
    layers: str


def plan_for(args: argparse.Namespace) -> Plan:
    """The full plan, or the --quick one (two shapes, fewer M values, one compile)."""
    shapes = QUICK_SHAPES if args.quick else SHAPES
    return Plan(shapes=shapes, gemv_m=GEMV_SECTION_M, seed_m=SEED_M, sweep_shape=SWEEP_SHAPE,
                sweep_m=QUICK_SWEEP_M if args.quick else SWEEP_M, paths_shapes=PATHS_SHAPES,
                paths_m=QUICK_PATHS_M if args.quick else PATHS_M, replay_tokens=REPLAY_TOKENS,
                compile_shapes=shapes[:1] if args.quick else shapes, sections=tuple(args.sections),
                layers=args.layers)


def run_sections(runner: Runner, plan: Plan, save: Callable[[], None]) -> None:
    """Run the chosen sections in order, saving the results after each shape and section."""
    for n, k in plan.shapes:
        if "dequant" in plan.sections:
            runner.guarded("dequant", n, k, lambda n=n, k=k: runner.dequant_rows(n, k))
        if "gemv" in plan.sections:
            runner.guarded("gemv", n, k, lambda n=n, k=k: runner.gemv_rows(n, k, plan.gemv_m, "gemv"))
        if "prefill" in plan.sections:
            runner.guarded("prefill", n, k, lambda n=n, k=k: runner.matmul_rows(n, k, [plan.seed_m], "prefill"))
        save()
    if "host" in plan.sections and runner.device == "cuda":  # eager CUDA calls and graphs: no CPU dry run
        from nvfp4_harness.nvfp4 import host_time

        runner.guarded("host", 0, 0, lambda: runner.host_rows.extend(host_time.measure(runner.torch, runner)))
        save()
    if "paths" in plan.sections:
        for n, k in plan.paths_shapes:
            runner.guarded("paths", n, k, lambda n=n, k=k: runner.path_rows(n, k, plan.paths_m))
            save()
    if "sweep" in plan.sections:
        gemv_ms = [m for m in plan.sweep_m if m <= GEMV_KERNEL_MAX_M]
        runner.guarded("sweep", *plan.sweep_shape,
                       lambda: runner.matmul_rows(*plan.sweep_shape, plan.sweep_m, "sweep", gemv_ms=gemv_ms))
        save()
    if "replay" in plan.sections:
        for shape in distinct_shapes(load_layers(plan.layers)["layers"]):
            n, k = shape["N"], shape["K"]
            runner.guarded("replay", n, k, lambda n=n, k=k: (
                runner.dequant_rows(n, k, "replay", kernels=("dequant_vec8",)),
                runner.matmul_rows(n, k, [plan.replay_tokens], "replay")))
        save()
    if "compile" in plan.sections:
        for n, k in plan.compile_shapes:
            runner.guarded("compile", n, k, lambda n=n, k=k: runner.compile_row(n, k))
        save()


def execute(runner: Runner, plan: Plan, prov: dict[str, Any], out_dir: str | os.PathLike[str]
            ) -> tuple[dict[str, Any], Path]:
    """Run the plan and write the results JSON (after every shape too); return both."""
    from nvfp4_kernels import Policy

    results: dict[str, Any] = {"provenance": prov, "rows": runner.rows, "failures": runner.failures,
                               "host": runner.host_rows}
    # chosen once: every save of this run rewrites its own file, never an earlier run's
    target = new_results_path(out_dir, prov["gpu"], prov["date"], prov.get("git_commit"))
    saved: list[Path] = []

    def save(final: bool = False) -> None:
        results["complete"] = final
        results["provenance"]["wall_s"] = round(runner.elapsed(), 1)
        results["provenance"]["torch_compile"] = dict(runner.compile_modes)
        if "sweep" in plan.sections:
            results["crossover"] = crossover(runner.rows, *plan.sweep_shape,
                                             Policy().gemv_max_m_for(*plan.sweep_shape))
        if "paths" in plan.sections:
            # the GEMV's range on these shapes (0 on layers above the policy's gemv_max_weights)
            gemv_max_m = max(Policy().gemv_max_m_for(n, k) for n, k in plan.paths_shapes)
            results["path_choice"] = path_choice(runner.rows, plan.paths_shapes, gemv_max_m, Policy().fused_max_m,
                                                 Policy().wgmma_max_m, Policy().wgmma_min_m)
        if "replay" in plan.sections:
            results["replay"] = replay_summary(load_layers(plan.layers), runner.rows, plan.replay_tokens)
        saved[:] = [write_results(results, out_dir, target)]

    run_sections(runner, plan, save)
    save(final=True)
    return results, saved[0]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; exit 0 when every row verified, 1 if any failed, 2 without a GPU."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    try:
        import torch
    except ImportError as exc:
        print(f"python -m nvfp4_harness bench needs a CUDA GPU and torch: {exc}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("python -m nvfp4_harness bench needs a CUDA GPU (torch.cuda.is_available() is False); "
              "on a CPU machine run the CPU benchmarks: pytest suites/test_bench_cpu.py", file=sys.stderr)
        return 2
    started = time.monotonic()
    now = _dt.datetime.now(_dt.timezone.utc)
    date, started_at = now.date().isoformat(), now.isoformat(timespec="seconds")
    backend, backend_note = _load_backend()
    print(f"CUDA backend: {backend_note}", file=sys.stderr, flush=True)
    runner = Runner(torch, backend, args.reps, args.warmup, args.budget_s, started)
    torch.mm(runner.lut[:4].view(2, 2), runner.lut[4:8].view(2, 2))  # load cuBLAS for the version query
    prov = provenance(torch, argv, args, backend_note, date, started_at)
    results, path = execute(runner, plan_for(args), prov, args.out)
    from nvfp4_harness.nvfp4.bench_report import console_summary

    print(console_summary(results))
    print(f"\nwrote {path} in {runner.elapsed():.0f} s; then: python -m nvfp4_harness bench-report {path}")
    return 1 if runner.failures else 0


if __name__ == "__main__":
    sys.exit(main())
