"""The eager fast path for CUDA tensors: validate once per call signature, then only what can
change between two calls with that signature.

Why: a decode loop calls the operator with the same weight tensors and activations of the same
shape over and over, and every microsecond of Python per call is a microsecond the GPU waits (a
GEMV at M = 1 runs in about 30 us). Everything the full validation and the path selection derive
from a signature (N, K, M, the path, the event's problem, the kernel's split count) is computed
once, by the full path's own functions, and kept in a :class:`Plan`.

A plan is found by the identity of the weight tensors (``B``, its scales, the global scale, the
bias; held by weak references, so a plan never keeps a model's weights alive) and the shape and
dtype of ``A``. A call then checks only what identity cannot vouch for: that the weights still
sit at the addresses the plan was made for (so their alignment guards still hold) and were not
changed in place since (their version counters; a shrinking ``resize_`` or an ``unsqueeze_``
keeps the object and the address), that every tensor is contiguous and on the plan's device,
and ``A``'s address for the GEMV's 16-byte loads. It makes one call into the kernel library
(:func:`nvfp4_kernels.cuda_backend.launch_call`: a small C extension, or ctypes where it cannot
be built), which writes the per-call pointers into a preallocated argument struct and launches. Whatever does not fit (a
misaligned view, another device, a CPU tensor, an empty problem) returns :data:`MISS`, and the
full path runs: it raises the same error as always or handles the case. Events carry exactly
what the full path's events carry.
"""

from __future__ import annotations

import ctypes
import os
import threading
import weakref
from threading import get_ident
from typing import Any

import numpy as np
from nvfp4_harness.model import bus
from nvfp4_kernels import cuda_backend, dispatch, layout
from nvfp4_kernels.model import Policy

#: returned when a call does not fit the fast path
MISS = object()
#: ``NVFP4_FAST_PATH=0`` sends every call down the full path (for A/B checks of this module)
ENABLED = os.environ.get("NVFP4_FAST_PATH", "1") != "0"
#: plans (and device copies of host global scales) kept per process; a model has a few layer
#: shapes, one plan per layer and activation shape
PLAN_LIMIT = 4096
#: the largest finite fp32; host global scales at or beyond it take the full path
FLT_MAX = float(np.finfo(np.float32).max)
#: the paths whose kernel writes the output itself (the rest dequantize for a torch.matmul)
ONE_LAUNCH_PATHS = frozenset(("gemv", "fused_mma", "fused_wgmma"))
#: the packed kernel that reads a registered weight's copy, per path (nvfp4_kernels.layout)
TILED_KERNEL = {"fused_mma": cuda_backend.FUSED_TILED_KERNEL, "fused_wgmma": cuda_backend.FUSED_WGMMA_TILED_KERNEL}


class Plan:
    """What the full path decided for one call signature, and the weights it was made for."""

    __slots__ = ("problem", "caps", "policy", "selection", "path", "kernel", "m", "n", "k", "block_size", "bf16",
                 "splits", "workspace_floats", "counter_count", "device_index", "out_shape", "reshape", "b_ref",
                 "b_ptr", "scales_ref", "scales_ptr", "g_ref", "g_value", "g_ptr", "bias_ref", "bias_ptr", "template",
                 "per_thread", "launch", "stream_of", "a_dtype", "event", "weights_aligned", "versions", "shapes",
                 "split_buffers", "tiled", "whole_tiles", "act_bytes", "buffers", "__weakref__")

    def __init__(self, torch: Any, prepared: Any, policy: Policy, b: Any, scales: Any, g: Any, bias: Any,
                 g_ptr: int) -> None:
        problem = prepared.problem
        self.problem, self.caps, self.policy, self.selection = problem, prepared.caps, policy, prepared.selection
        self.path = prepared.selection.path
        self.kernel = cuda_backend.PACKED_KERNEL[self.path]
        # a weight registered for this path (one tile-contiguous copy, which both fused paths
        # read): the kernel reads that copy. The registry owns the copy (while the
        # weight lives, unchanged and registered: the row-major weight's identity, address and
        # version checks of every call, and unregister dropping the weight's plans, vouch for
        # that); the plan holds it weakly, so that plans left behind by a freed weight do not keep
        # a second copy of its bytes on the GPU, and a call whose copy is gone takes the full path
        tiled = layout.registered(b, scales, self.path) if self.path in layout.REGISTERED_PATHS else None
        self.tiled = None if tiled is None else (weakref.ref(tiled[0]), weakref.ref(tiled[1]))
        if tiled is not None:
            self.kernel = TILED_KERNEL[self.path]
        self.launch = cuda_backend.launch_call()
        self.stream_of = cuda_backend.raw_stream_getter()
        self.a_dtype = getattr(torch, problem.dtype)
        self.m, self.n, self.k, self.block_size = problem.m, problem.n, problem.k, problem.block_size
        self.bf16 = 1 if problem.dtype == "bfloat16" else 0
        self.device_index = prepared.device.index  # as this process numbers it (caps carry the host's)
        #: fused_wgmma's plan: the row tiles that take every K step in one block (the rest split)
        self.whole_tiles = 0
        if self.path == "gemv":
            self.splits = cuda_backend.gemv_splits(problem.n, problem.k)
        elif self.path == "fused_mma":
            self.splits = cuda_backend.fused_splits(problem.n, problem.k, problem.m, self.device_index)
        elif self.path == "fused_wgmma":
            self.whole_tiles, self.splits = cuda_backend.fused_wgmma_plan(problem.n, problem.k, problem.m,
                                                                             self.device_index)
        else:
            self.splits = 0
        # split-K partials in a workspace and, for the fused kernel's in-launch sum, one zeroed
        # counter per tile
        if self.path == "fused_wgmma":
            self.workspace_floats = cuda_backend.fused_wgmma_workspace_floats(
                problem.m, problem.n, (self.whole_tiles, self.splits))
        else:
            self.workspace_floats = self.splits * problem.m * problem.n if self.splits > 1 else 0
        if self.path == "fused_mma" and cuda_backend.fused_reduction(self.splits, problem.m) == "last_block":
            self.counter_count = cuda_backend.fused_tiles(problem.m, problem.n)
        elif self.path == "gemv" and cuda_backend.gemv_reduction(self.splits) == "last_block":
            self.counter_count = cuda_backend.gemv_tiles(problem.n)
        else:
            self.counter_count = 0
        #: fused_wgmma in fused_mma's K order: the bytes of its permuted activations, a per-stream
        #: workspace whose address rides in the counters' word (which that kernel has no use for)
        self.act_bytes = (cuda_backend.fused_wgmma_act_bytes(problem.m, problem.k)
                          if self.kernel in cuda_backend.ACT_WORKSPACE_KERNELS else 0)
        #: whether a launch needs per-stream buffers (split_buffers_for)
        self.buffers = bool(self.workspace_floats or self.act_bytes)
        self.out_shape = prepared.lead + (problem.n,)
        self.reshape = self.out_shape != (problem.m, problem.n)
        self.b_ref, self.b_ptr = weakref.ref(b), b.data_ptr()
        self.scales_ref, self.scales_ptr = weakref.ref(scales), scales.data_ptr()
        self.g_ref = weakref.ref(g) if type(g) is torch.Tensor else None
        self.g_value = None if self.g_ref is not None else g
        self.g_ptr = g_ptr
        # the GEMV's 16-byte weight loads and 2-byte scale loads, the fused kernel's 16- and 8-byte
        # copies: fixed for the plan's weights (whose addresses every call checks)
        self.weights_aligned = self.b_ptr % 16 == 0 and self.scales_ptr % (2 if self.path == "gemv" else 8) == 0
        self.bias_ref = None if bias is None else weakref.ref(bias)
        self.bias_ptr = 0 if bias is None else bias.data_ptr()
        # what an in-place change of the weights would alter: their version counters, or (for
        # inference tensors, which keep none) their shapes
        self.versions, self.shapes = weight_versions(b, scales, bias), weight_shapes(b, scales, bias)
        #: (stream, workspace address, counters address, the buffers) of the last stream the plan
        #: ran on (see split_buffers_for); one tuple, replaced whole, so a thread never reads one
        #: stream's workspace with another's stream
        self.split_buffers: tuple[Any, int, int, Any] = (None, 0, 0, None)
        # the launch arguments that are the same for every call of the plan
        words = [0] * cuda_backend.ARG_WORDS
        words[cuda_backend.ARG_PACKED], words[cuda_backend.ARG_SCALES] = (
            (tiled[0].data_ptr(), tiled[1].data_ptr()) if tiled is not None else (self.b_ptr, self.scales_ptr))
        words[cuda_backend.ARG_G], words[cuda_backend.ARG_BIAS] = g_ptr, self.bias_ptr
        words[cuda_backend.ARG_N], words[cuda_backend.ARG_K] = self.n, self.k
        words[cuda_backend.ARG_M_BLOCK] = cuda_backend.pack_int32_pair(self.m, self.block_size)
        words[cuda_backend.ARG_BF16_SPLITS] = cuda_backend.pack_int32_pair(self.bf16, self.splits)
        # the tiled fused_mma kernel's scale-byte range (nvfp4_kernels.layout.scale_byte_range):
        # fixed for the registered weight, whose version checks every call makes; beside it
        # fused_wgmma's whole tiles
        scale_bytes = tiled.scale_bytes if tiled is not None and self.path == "fused_mma" else 0
        words[cuda_backend.ARG_SCALE_BYTES] = cuda_backend.pack_int32_pair(scale_bytes, self.whole_tiles)
        self.template = words
        #: the event every call of the plan announces (built at the first call with a listener;
        #: one object, so a recorder counts its repeats without re-checking it)
        self.event: Any = None
        #: thread id -> (its argument words, their address): calls from several threads at once
        #: each fill their own
        self.per_thread: dict[int, tuple[Any, int]] = {}

    def split_buffers_for(self, index: int, stream: int) -> tuple[int, int]:
        """The addresses of a split-K workspace and of the last-block sum's zeroed counters (0
        when the plan sums with the finalize kernel; for fused_wgmma in fused_mma's K order, its
        permuted activations' workspace instead) for a launch on ``stream``: cuda_backend's
        per-stream buffers. Outside a CUDA graph capture the plan keeps them, so the next call on
        the same stream skips the lookups; the plan's references keep them alive even if
        cuda_backend replaces them by larger ones (both then serve launches on that one stream, in
        order, and every launch leaves its counters at 0). Inside a capture the workspaces come
        from the graph's pool and there are no counters (cuda_backend.splitk_buffers)."""
        if _capturing():
            if self.act_bytes:
                return cuda_backend.capture_workspaces(index, self.workspace_floats, self.act_bytes)
            return cuda_backend.splitk_buffers(index, stream, self.workspace_floats, self.counter_count)
        workspace = cuda_backend.gemv_workspace(index, stream, self.workspace_floats)
        if self.act_bytes:
            counters = cuda_backend.byte_workspace(index, stream, self.act_bytes)
        else:
            counters = cuda_backend.splitk_counters(index, stream, self.counter_count) if self.counter_count else None
        found = (stream, workspace.data_ptr(), 0 if counters is None else counters.data_ptr(), (workspace, counters))
        self.split_buffers = found
        return found[1], found[2]

    def args(self) -> tuple[Any, int]:
        """This thread's argument words (prefilled from the template) and their address."""
        words = (ctypes.c_uint64 * cuda_backend.ARG_WORDS)(*self.template)
        found = self.per_thread[get_ident()] = (words, ctypes.addressof(words))
        return found


#: () -> True while the current stream is captured into a CUDA graph (torch's own accessor; set
#: by the first plan, so that importing this module does not import torch)
_capturing: Any = None
_plans: dict[tuple, Plan] = {}
_plans_lock = threading.Lock()
#: (device index, host global scale) -> the one-element fp32 device tensor the kernels read
_scalars: dict[tuple[int, float], Any] = {}


def matmul(torch: Any, a: Any, b: Any, scales: Any, g: Any, block_size: Any, bias: Any, backend: str,
           policy: Policy | None) -> Any:
    """``nvfp4_matmul`` for CUDA tensors; :data:`MISS` when the call needs the full path."""
    if not ENABLED or backend == "cpu" or not a.is_cuda:
        return MISS
    if policy is None:
        policy = dispatch.current_policy()
    elif type(policy) is not Policy:
        return MISS  # the full path says what is wrong with it
    key = (id(b), a.shape)
    plan = _plans.get(key)
    if (plan is None or plan.b_ref() is not b or plan.scales_ref() is not scales or plan.policy is not policy
            or plan.block_size != block_size or a.dtype is not plan.a_dtype
            or (plan.g_ref() is not g if plan.g_ref is not None
                else type(g) is not type(plan.g_value) or g != plan.g_value)
            or (plan.bias_ref() is not bias if plan.bias_ref is not None else bias is not None)
            # changed in place since the plan was made (a weight update, a resize_, an unsqueeze_):
            # the full path validates them again for a new plan
            or (weight_versions(b, scales, bias) != plan.versions if plan.versions is not None
                else weight_shapes(b, scales, bias) != plan.shapes)):
        plan = _make_plan(torch, a, b, scales, g, block_size, bias, backend, policy)
        if plan is None:
            return MISS
        with _plans_lock:
            if len(_plans) >= PLAN_LIMIT:
                _plans.clear()
            _plans[key] = plan
    index = plan.device_index
    if (a.get_device() != index or b.data_ptr() != plan.b_ptr or scales.data_ptr() != plan.scales_ptr
            or not (a.is_contiguous() and b.is_contiguous() and scales.is_contiguous())
            or (bias is not None and (bias.data_ptr() != plan.bias_ptr or not bias.is_contiguous()))):
        return MISS
    words, address = plan.per_thread.get(get_ident()) or plan.args()
    stream = plan.stream_of(index)
    g_ptr = g.data_ptr() if plan.g_ref is not None else plan.g_ptr  # a device scale is read where it lies now
    path = plan.path
    if path in ONE_LAUNCH_PATHS:
        a_ptr = a.data_ptr()
        if a_ptr % 16 or not plan.weights_aligned:
            return MISS  # the full path launches on aligned copies
        if plan.tiled is not None and plan.tiled[0]() is None:
            return MISS  # the weight's tiled copy is gone (see Plan)
        out = a.new_empty(plan.m, plan.n)  # the varargs form costs ~0.7 us less than a shape tuple
        workspace = counters = 0
        if plan.buffers:
            cached = plan.split_buffers  # one read: the stream and its buffers together
            if cached[0] == stream and not _capturing():
                workspace, counters = cached[1], cached[2]
            else:
                workspace, counters = plan.split_buffers_for(index, stream)
        err = plan.launch(plan.kernel, words, address, a_ptr, out.data_ptr(), workspace, counters, stream, g_ptr)
        if err:
            cuda_backend.raise_launch_error(err, plan.kernel)
        y = out.view(plan.out_shape) if plan.reshape else out
    else:
        scratch = a.new_empty(plan.n, plan.k)
        err = plan.launch(plan.kernel, words, address, 0, scratch.data_ptr(), 0, 0, stream, g_ptr)
        if err:
            cuda_backend.raise_launch_error(err, plan.kernel)
        with dispatch._fp32_reduction():
            y = torch.matmul(a.view(plan.m, plan.k) if plan.reshape else a, scratch.t())
        if bias is not None:
            y = y + bias
        if plan.reshape:
            y = y.view(plan.out_shape)
    if bus._listeners:
        event = plan.event
        if event is None:
            event = plan.event = dispatch._event("matmul", path, plan.problem, plan.caps, plan.policy, plan.selection)
        bus.announce(event)
    return y


def forget_weight(b: Any) -> None:
    """Drop the plans made for weight ``b`` (nvfp4_kernels.layout.register and unregister call it:
    a plan made before decides the layout its kernel reads)."""
    with _plans_lock:
        for key in [key for key in _plans if key[0] == id(b)]:
            del _plans[key]


def weight_versions(b: Any, scales: Any, bias: Any) -> tuple[int, int, int] | None:
    """The version counters of the weight tensors (every in-place op, data or metadata, bumps
    them), or None when one is an inference tensor (``torch.inference_mode``), which keeps none."""
    try:
        return b._version, scales._version, -1 if bias is None else bias._version
    except RuntimeError:
        return None


def weight_shapes(b: Any, scales: Any, bias: Any) -> tuple[Any, Any, Any]:
    """The weight tensors' shapes: what the plan checks in place of versions for inference
    tensors (with their addresses and contiguity, also checked, they fix the tensors' views)."""
    return b.shape, scales.shape, None if bias is None else bias.shape


def _make_plan(torch: Any, a: Any, b: Any, scales: Any, g: Any, block_size: Any, bias: Any, backend: str,
               policy: Policy) -> Plan | None:
    """Run the full path's validation and selection for this call (raising its errors); None
    when the call is not one the fast path serves."""
    global _capturing
    if _capturing is None:
        _capturing = cuda_backend.capture_checker()
    tensor = torch.Tensor
    if type(b) is not tensor or type(scales) is not tensor or (bias is not None and type(bias) is not tensor):
        return None
    if type(block_size) is not int:
        return None
    prepared = dispatch._prepare_matmul(a, b, scales, g, block_size, bias, backend, policy)
    selection = prepared.selection
    if selection is None or prepared.backend != "cuda" or prepared.device is None or prepared.device.index is None:
        return None  # a shortcut (empty problem), or not a CUDA call
    if selection.path not in cuda_backend.PACKED_KERNEL or not prepared.problem.aligned:
        return None  # a path without a packed launcher, or an event whose detail names this call's addresses
    g_ptr = _global_scale_pointer(torch, g, prepared.device.index)
    if g_ptr is None:
        return None
    return Plan(torch, prepared, policy, b, scales, g, bias, g_ptr)


def _global_scale_pointer(torch: Any, g: Any, device_index: int) -> int | None:
    """The device address the kernels read the global scale from, or None for the full path."""
    kind = type(g)
    if kind is float or kind is int or kind is np.float32:
        value = float(g)
        if not abs(value) < FLT_MAX:
            return None  # NaN, inf, or beyond fp32: the full path raises the helpful error
        key = (device_index, value)
        scalar = _scalars.get(key)
        if scalar is None:
            scalar = dispatch._device_global_scale(value, torch.device("cuda", device_index))
            if len(_scalars) >= PLAN_LIMIT:
                _scalars.clear()
            _scalars[key] = scalar
        return scalar.data_ptr()
    if kind is torch.Tensor and g.is_cuda and g.dtype is torch.float32 and g.numel() == 1 \
            and g.device.index == device_index:
        return 0  # read per call from the tensor itself
    return None

