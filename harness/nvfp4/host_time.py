"""Host time per call: what an eager call of the operator costs the CPU, beside its kernels.

The kernel rows of the benchmark time kernels only, so a dispatcher that costs more host time
than its kernels run would never show there; yet an eager decode loop pays it every step,
because the GPU waits for Python. For each case this measures, in one run:

* ``eager_host_us``: 200 calls back to back, host clock around the loop, divided by 200: what
  one call costs the CPU (nothing waits for the GPU inside the loop);
* ``eager_wall_us``: CUDA events around the same loop: the GPU time per call in that loop,
  which equals the kernel time only when the host keeps ahead;
* the same two with a recorder listening (``recording_*``), as inside a pytest run;
* ``graph_replay_us``: the call captured once in a CUDA graph and replayed back to back;
* ``kernel_us``: a single replay with the L2 flushed first (the kernel rows' method);
* ``floor_us``: the host-time floor of the call on this machine, timed the same way: a loop
  that allocates the call's output (``new_empty``, as the call does) and launches an empty
  kernel through the same launch call as many times as the call launches kernels
  (``launches``, counted by the profiler). The empty kernels leave the GPU idle between
  launches, so the floor bounds calls whose loop is host-bound (``eager_wall_us`` about
  ``eager_host_us``: their GPU idles too): no implementation of such a call that allocates its
  output and launches its kernels one by one can take less host time, and ``eager_host_us -
  floor_us`` is what the dispatcher itself costs. A call whose kernels keep the GPU busy can
  measure below it, because launches onto a busy GPU cost the host less (M = 1 on 17408 x 5120
  in the second and third H200 runs of 2026-12-03: 10.3 and 11.6 us against floors of 14.8 and
  15.8; benchmarks/NOTES.md, host time by shape).

The floor is why host times differ so much between machines: one launch measured 2.5 us on one
H200 host and 5-6 us on another (scripts/launch_floor.cu), in C, without Python.

A graph replay bypasses Python entirely, so ``graph_replay_us`` is the floor an eager loop could
reach; ``eager_host_us`` above it means the call is host-bound. The captured graph's output is
compared bit for bit with an eager call before anything is timed.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from nvfp4_harness.nvfp4.bench_metrics import median

#: calls per timed loop, and loops per case (the median is kept: one loop's host time moves by a
#: few microseconds with the garbage collector and the VM's scheduling)
CALLS = 200
LOOPS = 15
#: host time per call the dispatcher must stay under (issue: decode and prefill on 17408 x 5120)
HOST_TARGET_US = 10.0
RECORDING_TARGET_US = 20.0
#: ONNX Runtime 1.31.1's op in the same back-to-back loop on an H200 (M = 1, 17408 x 5120)
ORT_EAGER_US = {(1, 17408, 5120): 55.0}


@dataclass(frozen=True)
class HostCase:
    """One eager call to time: ``path`` is the path the dispatcher must take for it."""

    name: str
    path: str
    m: int
    n: int
    k: int
    #: the GPU generation the path's kernel needs (``(9, 0)``: fused_wgmma), or None; the case is
    #: left out on other GPUs, where the dispatcher takes another path for it
    needs_capability: tuple[int, int] | None = None


#: the default policy's choices (decode on the large layers takes the fused tensor-core path,
#: decode on 4096 x 4096, 2^24 weights, the GEMV, M = 64 and 256 fused_wgmma on Hopper, M = 512
#: vec8 + cuBLAS): the host cost of the calls a model actually makes
CASES: tuple[HostCase, ...] = (
    HostCase("decode M=1, 17408 x 5120", "fused_mma", 1, 17408, 5120),
    HostCase("decode M=1, 4096 x 4096", "gemv", 1, 4096, 4096),
    HostCase("decode M=8, 17408 x 5120", "fused_mma", 8, 17408, 5120),
    HostCase("M=64, 17408 x 5120", "fused_wgmma", 64, 17408, 5120, needs_capability=(9, 0)),
    HostCase("M=256, 17408 x 5120", "fused_wgmma", 256, 17408, 5120, needs_capability=(9, 0)),
    HostCase("prefill M=512, 17408 x 5120", "prefill_vec8", 512, 17408, 5120),
)


def per_call(total_s: float, calls: int) -> float:
    """Microseconds per call of a loop that took ``total_s`` seconds for ``calls`` calls."""
    if calls <= 0:
        raise ValueError(f"calls must be positive, got {calls}")
    return 1e6 * total_s / calls


def verdict(row: dict[str, Any]) -> str:
    """Whether the eager host time (and the recording one) meet the targets."""
    ok = row["eager_host_us"] <= HOST_TARGET_US and row["recording_host_us"] <= RECORDING_TARGET_US
    return "met" if ok else "missed"


def time_loop(torch: Any, fn: Callable[[], Any], calls: int = CALLS) -> tuple[float, float]:
    """(host us per call, GPU wall us per call) of ``calls`` back-to-back calls, one sync after."""
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    host = per_call(time.perf_counter() - t0, calls)
    torch.cuda.synchronize()
    return host, 1000.0 * start.elapsed_time(end) / calls


def kernel_launches(fn: Callable[[], Any]) -> int:
    """How many kernels one call of ``fn`` launches (the torch profiler's CUDA kernel events;
    memory copies and sets are not launches)."""
    from nvfp4_harness.engine.observe import launched_kernels

    _, names = launched_kernels(fn)
    return sum(1 for name in names if not name.startswith(("Memcpy", "Memset")))


def floor_call(torch: Any, like: Any, m: int, n: int, launches: int) -> Callable[[], Any]:
    """One call of the host-time floor (see the module doc): allocate [m, n] like ``like`` and
    launch the library's empty kernel ``launches`` times on the current stream, through the
    eager fast path's own launch call."""
    from nvfp4_kernels import cuda_backend

    if launches < 1:
        raise ValueError(f"a floor needs at least one launch, got {launches}")
    launch = cuda_backend.launch_call()
    stream_of = cuda_backend.raw_stream_getter()
    words = (ctypes.c_uint64 * cuda_backend.ARG_WORDS)()
    address = ctypes.addressof(words)
    index = like.get_device()
    kernel = cuda_backend.EMPTY_KERNEL

    def floor() -> Any:
        out = like.new_empty(m, n)
        stream = stream_of(index)
        for _ in range(launches):
            err = launch(kernel, words, address, 0, out.data_ptr(), 0, 0, stream, 0)
            if err:
                raise RuntimeError(f"the empty kernel's launch failed with CUDA error {err}")
        return out

    return floor


def capture(torch: Any, fn: Callable[[], Any]) -> tuple[Any, Any]:
    """(graph, its output tensor) of ``fn`` captured once, after warm-up on a side stream."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph, out


def measure(torch: Any, runner: Any, cases: Sequence[HostCase] = CASES, calls: int = CALLS,
            loops: int = LOOPS) -> list[dict[str, Any]]:
    """Time every case (see the module doc); ``runner`` gives operands and the flushed timer."""
    import nvfp4_kernels
    from nvfp4_harness.engine.recorder import Recorder, recording

    rows = []
    capability = tuple(torch.cuda.get_device_capability())
    for case in cases:
        if case.needs_capability is not None and capability != case.needs_capability:
            continue  # its kernel is not built for this GPU: the dispatcher takes another path
        ops = runner.operands(case.n, case.k)
        a = torch.randn(case.m, case.k, dtype=runner.dtype, device="cuda")

        def call(a: Any = a, ops: Any = ops) -> Any:
            return nvfp4_kernels.nvfp4_matmul(a, ops.packed, ops.scales, ops.g, ops.block_size)

        with recording("host-time probe") as rec:  # the path is checked once, outside the timed loops
            eager = call()
        taken = rec.events[-1].event.path
        if taken != case.path:
            raise AssertionError(f"{case.name}: the dispatcher took {taken}, expected {case.path}")
        graph, out = capture(torch, call)
        graph.replay()
        torch.cuda.synchronize()
        if not torch.equal(out.view(torch.int16), eager.view(torch.int16)):
            raise AssertionError(f"{case.name}: the graph replay's output differs from an eager call's")
        eager_runs = [time_loop(torch, call, calls) for _ in range(loops)]
        recorder = Recorder(keep_events=False, models=[nvfp4_kernels.MODEL]).start()
        try:
            recording_runs = [time_loop(torch, call, calls) for _ in range(loops)]
        finally:
            recorder.stop()
        replay_runs = [time_loop(torch, graph.replay, calls)[1] for _ in range(loops)]
        kernel = median(runner.time_us(graph.replay))
        launches = kernel_launches(call)
        floor = floor_call(torch, a, case.m, case.n, launches)
        floor_runs = [time_loop(torch, floor, calls)[0] for _ in range(loops)]
        row = {
            "case": case.name, "path": taken, "M": case.m, "N": case.n, "K": case.k, "calls": calls,
            "loops": loops,
            "eager_host_us": round(median([h for h, _ in eager_runs]), 2),
            "eager_host_range_us": [round(min(h for h, _ in eager_runs), 2), round(max(h for h, _ in eager_runs), 2)],
            "eager_wall_us": round(median([w for _, w in eager_runs]), 2),
            "recording_host_us": round(median([h for h, _ in recording_runs]), 2),
            "recording_wall_us": round(median([w for _, w in recording_runs]), 2),
            "graph_replay_us": round(median(replay_runs), 2),
            "kernel_us": round(kernel, 2),
            "launches": launches,
            "floor_us": round(median(floor_runs), 2),
            "ort_eager_us": ORT_EAGER_US.get((case.m, case.n, case.k)),
        }
        row["verdict"] = verdict(row)
        rows.append(row)
    return rows

