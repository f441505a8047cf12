"""Kernel times from the profiler (CUPTI), L2 warm and cold, for any callable.

The method of ``../shared/DESIGN.md`` section 5, in one process for every contender:

* **Profiler kernel durations**, not host clocks or CUDA events around a call: ONNX Runtime
  launches on its own stream, from C++, with host work between its kernels; only the device's
  own record of each kernel's start and end separates its kernels from that overhead, and does
  so the same way for this project's kernels and for a device copy.
* **Warm** = repetitions back to back (a synchronization between them, which keeps the L2
  contents); **cold** = a 256 MB write before each repetition, which evicts the 50-60 MB L2.
* **Which kernels belong to which repetition**: before each repetition (and again after its
  flush) a one-element marker kernel is launched; the device timeline is split at the markers,
  so every kernel between two markers is that repetition's, whoever launched it. The marker's
  name is learned by profiling it alone once (:meth:`ProfiledTimer.calibrate`).
* Each kernel is sorted into a **kind** through the declared models' own patterns (a GEMV,
  ONNX Runtime's tensor-core GEMV (``gemv_mma``), vec8 or scalar dequant of whichever operator
  launched it), everything else being cuBLAS
  (``gemm``), a memory operation or ``other``.
* **A repetition's total is the time the device spent on its kernels**: the union of their
  [start, end) intervals, so a kernel that overlaps another counts once. This matters for
  programmatic dependent launches (this project's split-K finalize kernel after its split kernel,
  fused_wgmma's kernel after its activation permutation): the dependent kernel starts while its
  primary still runs and waits on the device for it, so its profiler duration contains that wait,
  and a plain sum of durations counted the overlap twice (at M = 64 on 17408 x 5120 the sum was
  65.7 us where CUDA events around the call measured 51.0). Each kernel's share in ``by_kind`` is
  the part of its interval that no earlier-starting kernel covers, so the kinds add up to the
  total. Kernels that run one
  after the other (ONNX Runtime's, or a dequant and its GEMM) are unaffected: the union is the sum.

The pure parts (:func:`split_calls`, :func:`kind_of`, :func:`summarize_call_groups`) need no
GPU and are tested on the CPU.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from nvfp4_harness.model import DispatchModel
from nvfp4_harness.nvfp4.bench_metrics import FLUSH_BYTES, summarize

#: path name (in either model) -> the kind of kernel its pattern matches
PATH_KINDS = {"gemv": "gemv", "gemv_mma": "gemv_mma", "prefill_vec8": "dequant_vec8",
              "prefill_scalar": "dequant_scalar", "native_fp4": "native", "native_sm120": "native"}
_BIAS = re.compile(r"AddBiasKernel")
_MEMORY = re.compile(r"Memcpy|Memset|memcpy|memset")
_GEMM = re.compile(r"gemm|Gemm|nvjet|cutlass|xmma|splitK|reduce|gemv|dot_kernel|cublas")


@dataclass(frozen=True)
class DeviceEvent:
    """One kernel or memory operation on the device timeline (microseconds)."""

    name: str
    start_us: float
    duration_us: float


class TimingError(RuntimeError):
    """The device timeline does not have the structure the markers should give it."""


def kind_of(name: str, models: Sequence[DispatchModel]) -> str:
    """The kind of one launched kernel: a path kernel of one of ``models``, else bias, memory,
    cuBLAS (``gemm``) or ``other``."""
    for model in models:
        for spec in model.paths:
            if spec.kernels and spec.matches(name):
                return PATH_KINDS.get(spec.name, spec.name)
    if _BIAS.search(name):
        return "bias"
    if _MEMORY.search(name):
        return "memory"
    if _GEMM.search(name):
        return "gemm"
    return "other"


def split_calls(events: Sequence[DeviceEvent], marker: str, calls: int) -> list[list[DeviceEvent]]:
    """The device events of each call, from a timeline where every call was preceded by
    ``marker, [flush], marker``: per call, the events after its second marker up to the next
    marker (or the end)."""
    ordered = sorted(events, key=lambda e: e.start_us)
    marks = [i for i, e in enumerate(ordered) if e.name == marker]
    if len(marks) != 2 * calls:
        raise TimingError(f"expected {2 * calls} marker kernels ({marker!r}) for {calls} calls, found {len(marks)}; "
                          "another stream may have launched concurrently")
    groups = []
    for j in range(calls):
        start = marks[2 * j + 1] + 1
        end = marks[2 * j + 2] if 2 * j + 2 < len(marks) else len(ordered)
        groups.append(list(ordered[start:end]))
    return groups


def exclusive_busy_us(events: Sequence[DeviceEvent]) -> list[tuple[DeviceEvent, float]]:
    """Each event with the part of its [start, end) interval that no earlier-starting event of
    ``events`` covers (microseconds), in start order; the parts sum to the union of the
    intervals, the time the device spent on any of them."""
    out: list[tuple[DeviceEvent, float]] = []
    covered_to = float("-inf")  # the union of the earlier intervals ends here (they start earlier)
    for e in sorted(events, key=lambda e: e.start_us):
        end = e.start_us + e.duration_us
        out.append((e, max(0.0, end - max(e.start_us, covered_to))))
        covered_to = max(covered_to, end)
    return out


def summarize_call_groups(groups: Sequence[Sequence[DeviceEvent]], models: Sequence[DispatchModel]
                          ) -> dict[str, Any]:
    """Per-repetition busy time (the union of its kernels' intervals) and its split by kind
    (each kernel's part that no earlier-starting kernel covers), summarized (median, p10, p90,
    min): the ``total`` and ``by_kind`` of a contender in one mode; ``kernels`` are the first
    call's, in start order."""
    if not groups or any(not g for g in groups):
        raise TimingError("a repetition launched no kernel on the device (nothing to time)")
    shares = [exclusive_busy_us(g) for g in groups]
    totals = [sum(part for _, part in share) for share in shares]
    kinds: dict[str, list[float]] = {}
    for share in shares:
        per: dict[str, float] = {}
        for e, part in share:
            kind = kind_of(e.name, models)
            per[kind] = per.get(kind, 0.0) + part
        for kind in per:
            kinds.setdefault(kind, [])
        for kind in kinds:
            kinds[kind].append(per.get(kind, 0.0))
    return {"total": _rounded(summarize(totals)),
            "by_kind": {kind: round(summarize(v)["median_us"], 3) for kind, v in sorted(kinds.items())},
            "kernels": [e.name for e, _ in shares[0]], "reps": len(groups)}


def _rounded(stats: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 3) for k, v in stats.items()}


@dataclass
class Contender:
    """One thing to time: a label, a callable launching its kernels, and the models whose
    patterns name its kernels."""

    label: str
    fn: Callable[[], Any]
    models: Sequence[DispatchModel] = ()


class ProfiledTimer:
    """Times contenders with the profiler, warm and cold, splitting the timeline at markers."""

    def __init__(self, torch: Any, reps: int = 30, warmup: int = 2, flush_bytes: int = FLUSH_BYTES) -> None:
        self.torch = torch
        self.reps, self.warmup = reps, warmup
        self._marker = torch.zeros(1, dtype=torch.int64, device="cuda")
        self._flush = torch.empty(flush_bytes, dtype=torch.uint8, device="cuda")
        self.marker_name: str | None = None
        self.flush_bytes = flush_bytes

    def mark(self) -> None:
        self._marker.bitwise_not_()

    def flush(self) -> None:
        self._flush.zero_()

    def device_events(self, prof: Any) -> list[DeviceEvent]:
        """The device events (kernels, memory operations) of a finished profile."""
        out = []
        for e in prof.events():
            if e.device_type.name != "CUDA":
                continue
            out.append(DeviceEvent(e.name, float(e.time_range.start), float(e.time_range.end - e.time_range.start)))
        return out

    def profile(self, body: Callable[[], None]) -> list[DeviceEvent]:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            body()
            self.torch.cuda.synchronize()
        return self.device_events(prof)

    def calibrate(self) -> dict[str, list[str]]:
        """Learn the marker kernel's name (and show the flush's): profile each alone."""
        self.mark()  # first launch (module loading) outside the profile
        self.flush()
        self.torch.cuda.synchronize()
        marks = self.profile(self.mark)
        if len(marks) != 1:
            raise TimingError(f"the marker launched {len(marks)} device operations ({[e.name for e in marks]}); "
                              "expected exactly one kernel")
        self.marker_name = marks[0].name
        flush = self.profile(self.flush)
        if any(e.name == self.marker_name for e in flush):
            raise TimingError("the flush launches the marker's kernel; the timeline could not be split")
        return {"marker": [self.marker_name], "flush": [e.name for e in flush]}

    def time(self, contenders: Sequence[Contender], modes: Sequence[str] = ("warm", "cold")) -> dict[str, Any]:
        """``{label: {mode: summary}}`` for every contender and mode (see :func:`summarize_call_groups`)."""
        if self.marker_name is None:
            self.calibrate()
        torch = self.torch
        for c in contenders:
            for _ in range(self.warmup):
                c.fn()
        torch.cuda.synchronize()
        plan = [(c, mode) for mode in modes for c in contenders]

        def body() -> None:
            for c, mode in plan:
                for _ in range(self.reps):
                    self.mark()
                    if mode == "cold":
                        self.flush()
                    self.mark()
                    c.fn()
                    torch.cuda.synchronize()

        groups = split_calls(self.profile(body), str(self.marker_name), len(plan) * self.reps)
        out: dict[str, Any] = {}
        for i, (c, mode) in enumerate(plan):
            mine = groups[i * self.reps:(i + 1) * self.reps]
            out.setdefault(c.label, {})[mode] = summarize_call_groups(mine, c.models)
        return out
