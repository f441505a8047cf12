"""The eager fast path for CUDA tensors: validate once per call signature, then only what can
change between two calls with that signature.

Why: a decode loop calls the operator with tensors of the same shapes, dtypes and devices over
and over, and every microsecond of Python per call is a microsecond the GPU waits (a GEMV at
M = 1 runs in about 30 us). Everything the full validation and the path selection derive from
the signature (N, K, M, the path, the event's problem, the kernel's split count) is computed
once by the full path's own functions and kept in a :class:`Plan`. A call then checks only
what the signature cannot hold (contiguity, the addresses the alignment guards and kernels
read, the global scale) and launches. Whatever does not fit (a misaligned view, a host global
scale the plan did not see, a CPU tensor, an empty problem) returns :data:`MISS`, and the full
path runs: it raises the same error as always or handles the case. The events carry exactly
what the full path's events carry.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np
from nvfp4_harness.model import DeviceCaps, bus
from nvfp4_kernels.model import Policy, Problem

#: returned when a call does not fit the fast path
MISS = object()
#: ``NVFP4_FAST_PATH=0`` sends every call down the full path (for A/B checks of this module)
ENABLED = os.environ.get("NVFP4_FAST_PATH", "1") != "0"
#: plans (and device copies of host global scales) kept per process; a model has a handful of
#: distinct layer shapes and one global scale per layer
PLAN_LIMIT = 1024
#: the largest finite fp32; host global scales at or beyond it take the full path
FLT_MAX = float(np.finfo(np.float32).max)


class Plan:
    """What the full path decided for one call signature."""

    __slots__ = ("problem", "caps", "policy", "selection", "path", "lead", "m", "n", "k", "block_size", "bf16",
                 "splits", "device_index", "out_shape")

    def __init__(self, problem: Problem, caps: DeviceCaps, policy: Policy, selection: Any, lead: tuple[int, ...],
                 bf16: int, splits: int) -> None:
        self.problem, self.caps, self.policy, self.selection = problem, caps, policy, selection
        self.path = selection.path
        self.lead = lead
        self.m, self.n, self.k, self.block_size = problem.m, problem.n, problem.k, problem.block_size
        self.bf16 = bf16
        self.splits = splits
        self.device_index = caps.index
        self.out_shape = lead + (problem.n,)


_plans: dict[tuple, Plan | object] = {}
_plans_lock = threading.Lock()
#: (device index, host global scale) -> the one-element fp32 device tensor the kernels read
_scalars: dict[tuple[int, float], Any] = {}


def matmul(torch: Any, a: Any, b: Any, scales: Any, g: Any, block_size: Any, bias: Any, backend: str,
           policy: Policy | None) -> Any:
    """``nvfp4_matmul`` for CUDA tensors whose signature has a plan; :data:`MISS` otherwise."""
    tensor = torch.Tensor
    if (not ENABLED or backend == "cpu" or not a.is_cuda or type(b) is not tensor or type(scales) is not tensor
            or (bias is not None and type(bias) is not tensor) or type(block_size) is not int):
        return MISS
    from nvfp4_kernels import dispatch

    if policy is None:
        policy = dispatch._policy.get()
    b_aligned = b.data_ptr() % 4 == 0
    key = (a.shape, a.dtype, a.device, b.shape, b.dtype, b.device, scales.shape, scales.dtype, scales.device,
           None if bias is None else (bias.shape, bias.dtype, bias.device), block_size, policy, backend, b_aligned)
    plan = _plans.get(key)
    if plan is None:
        plan = _build_matmul_plan(a, b, scales, g, block_size, bias, backend, policy)
        with _plans_lock:
            if len(_plans) >= PLAN_LIMIT:
                _plans.clear()
            _plans[key] = plan
    if plan is MISS:
        return MISS
    if not (a.is_contiguous() and b.is_contiguous() and scales.is_contiguous()
            and (bias is None or bias.is_contiguous())):
        return MISS
    g_ptr = _global_scale_pointer(torch, g, plan)
    if g_ptr is None:
        return MISS
    from nvfp4_kernels import cuda_backend

    stream = cuda_backend.current_stream(plan.device_index)
    path = plan.path
    if path == "gemv":
        if a.data_ptr() % 16 or b.data_ptr() % 16 or scales.data_ptr() % 2:
            return MISS  # the full path launches on aligned copies
        out = torch.empty((plan.m, plan.n), dtype=a.dtype, device=a.device)
        cuda_backend.launch_gemv(a, b, scales, g_ptr, bias, out, plan.m, plan.n, plan.k, plan.bf16, plan.splits,
                                 stream)
        y = out.view(plan.out_shape)
    else:
        scratch = torch.empty((plan.n, plan.k), dtype=a.dtype, device=a.device)
        cuda_backend.launch_dequant(path, b, scales, g_ptr, block_size, scratch, plan.n, plan.k, plan.bf16, stream)
        with dispatch._fp32_reduction():
            y = torch.matmul(a.view(plan.m, plan.k), scratch.t())
        if bias is not None:
            y = y + bias
        y = y.view(plan.out_shape)
    if bus._listeners:
        dispatch._announce("matmul", path, _problem_for(plan, b), plan.caps, plan.policy, plan.selection)
    return y


def _build_matmul_plan(a: Any, b: Any, scales: Any, g: Any, block_size: int, bias: Any, backend: str,
                       policy: Policy) -> Plan | object:
    """Run the full path's validation and selection for this signature (raising its errors)."""
    from nvfp4_kernels import cuda_backend, dispatch

    prepared = dispatch._prepare_matmul(a, b, scales, g, block_size, bias, backend, policy)
    problem, caps, lead, selection = prepared.problem, prepared.caps, prepared.lead, prepared.selection
    if selection is None or prepared.backend != "cuda" or caps.index is None:
        return MISS  # a shortcut (empty problem), or not a CUDA call
    if selection.path not in ("gemv", "prefill_vec8", "prefill_scalar"):
        return MISS
    splits = cuda_backend.gemv_splits(problem.n, problem.k) if selection.path == "gemv" else 1
    return Plan(problem, caps, policy, selection, lead, 1 if problem.dtype == "bfloat16" else 0, splits)


def _problem_for(plan: Plan, b: Any) -> Problem:
    """The event's problem: the plan's, whose alignment detail names this call's addresses."""
    problem = plan.problem
    if problem.aligned:
        return problem
    from nvfp4_kernels import dispatch

    aligned, why = dispatch._alignment(b, None)
    return Problem(problem.op, problem.m, problem.n, problem.k, problem.block_size, problem.dtype, problem.backend,
                   aligned, why)


def _global_scale_pointer(torch: Any, g: Any, plan: Plan) -> int | None:
    """The device address the kernels read the global scale from, or None to take the full path."""
    kind = type(g)
    if kind is float or kind is int or kind is np.float32:
        value = float(g)
        if not abs(value) < FLT_MAX:
            return None  # NaN, inf, or beyond fp32: the full path raises the helpful error
        key = (plan.device_index, value)
        scalar = _scalars.get(key)
        if scalar is None:
            from nvfp4_kernels import dispatch

            scalar = dispatch._device_global_scale(value, torch.device("cuda", plan.device_index))
            if len(_scalars) >= PLAN_LIMIT:
                _scalars.clear()
            _scalars[key] = scalar
        return scalar.data_ptr()
    if kind is torch.Tensor and g.is_cuda and g.dtype is torch.float32 and g.numel() == 1 \
            and g.device.index == plan.device_index:
        return g.data_ptr()
    return None
