"""The instrumented dispatcher: validate, choose a path, run it, announce what happened.

``nvfp4_matmul`` and ``dequantize`` are the operator's public entries. Each call

1. validates its inputs before touching any of them, with errors that say what to fix;
2. asks the declared model (:data:`nvfp4_kernels.model.MODEL`) for the path: every guard is
   evaluated and the first path whose guards hold is chosen (or a forced one is checked);
3. runs that path on the chosen backend (``"cpu"``: :mod:`nvfp4_kernels.reference`;
   ``"cuda"``: :mod:`nvfp4_kernels.cuda_backend`);
4. announces a :class:`~nvfp4_harness.model.DispatchEvent` when something listens.

The dispatcher knows nothing of pytest: it uses only the dispatch-model API of the harness.
"""

from __future__ import annotations

import functools
import math
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, NamedTuple

import ml_dtypes
import numpy as np
from nvfp4_harness.model import DeviceCaps, Selection, build_event, bus, physical_gpu_index, record_shortcut
from nvfp4_kernels import fast, reference, tiling
from nvfp4_kernels.model import DEFAULT_POLICY, MODEL, Policy, Problem

BACKENDS = ("auto", "cpu", "cuda")
#: the largest block size the kernels take (they index blocks with 32-bit integers)
MAX_BLOCK_SIZE = 2**31 - 1
#: the largest finite fp32, the range of the global scale
FLT_MAX = float(np.finfo(np.float32).max)
CPU = DeviceCaps.cpu()
#: what each path runs: reference functions on the CPU, kernel functions on CUDA
_CPU_KERNELS = {
    ("matmul", "gemv"): ("reference.gemv",),
    ("matmul", "fused_mma"): ("reference.fused_mma",),
    ("matmul", "fused_wgmma"): ("reference.fused_wgmma",),
    ("matmul", "prefill_vec8"): ("reference.dequantize_vec8", "reference.accumulate_fp32"),
    ("matmul", "prefill_scalar"): ("reference.dequantize_scalar", "reference.accumulate_fp32"),
    ("dequantize", "prefill_vec8"): ("reference.dequantize_vec8",),
    ("dequantize", "prefill_scalar"): ("reference.dequantize_scalar",),
}
_CUDA_KERNELS = {
    ("matmul", "gemv"): ("nvfp4_gemv_kernel",),
    ("matmul", "fused_mma"): ("nvfp4_fused_mma_kernel",),
    ("matmul", "fused_wgmma"): ("nvfp4_wgmma_permute_act_kernel", "nvfp4_fused_wgmma_kernel"),
    ("matmul", "prefill_vec8"): ("nvfp4_dequant_vec8_kernel", "cuBLAS GEMM"),
    ("matmul", "prefill_scalar"): ("nvfp4_dequant_scalar_kernel", "cuBLAS GEMM"),
    ("dequantize", "prefill_vec8"): ("nvfp4_dequant_vec8_kernel",),
    ("dequantize", "prefill_scalar"): ("nvfp4_dequant_scalar_kernel",),
}

#: the policy of the innermost ``policy_scope`` of this context (None: no scope in this context)
_policy: ContextVar[Policy | None] = ContextVar("nvfp4_policy", default=None)
#: the policies of the scopes open in any thread, innermost last: what a call in a thread that
#: has no scope of its own (a worker started inside a scope) is governed by
_process_scopes: list[Policy] = []
_scopes_lock = threading.Lock()


def current_policy() -> Policy:
    """The policy used by calls that pass ``policy=None``.

    The innermost :func:`policy_scope` of the calling context, else the innermost scope open in
    any thread of the process (so calls from a ``Thread`` or ``ThreadPoolExecutor`` started
    inside a scope take its forced path too), else the default policy.
    """
    policy = _policy.get()
    if policy is not None:
        return policy
    scopes = _process_scopes
    return scopes[-1] if scopes else DEFAULT_POLICY


@contextmanager
def policy_scope(policy: Policy) -> Iterator[Policy]:
    """Make ``policy`` the default for calls inside the block (e.g. force a path for A/B runs).

    It governs every call that passes no ``policy=``: calls in this context, and calls from
    threads that have no scope of their own while the block is open (a thread pool the block
    uses). Scopes nest; a thread's own scope wins over another thread's.
    """
    if not isinstance(policy, Policy):
        raise TypeError(f"policy_scope expects a Policy, got {type(policy).__name__}; "
                        f"write policy_scope(Policy(force_path=...))")
    token = _policy.set(policy)
    with _scopes_lock:
        _process_scopes.append(policy)
    try:
        yield policy
    finally:
        _policy.reset(token)
        with _scopes_lock:
            for i in range(len(_process_scopes) - 1, -1, -1):
                if _process_scopes[i] is policy:
                    del _process_scopes[i]
                    break


def _checked_policy(policy: Any) -> Policy:
    """``policy`` if it is a Policy, the current one for None; TypeError otherwise."""
    if policy is None:
        return current_policy()
    if not isinstance(policy, Policy):
        hint = " (write Policy(**{...}))" if isinstance(policy, dict) else ""
        raise TypeError(f"policy must be a nvfp4_kernels.Policy or None, got {type(policy).__name__}{hint}")
    return policy


def _announce(op: str, path: str, problem: Problem, caps: DeviceCaps, policy: Policy, selection: Any) -> None:
    """Build and announce the event, only when something listens."""
    if not bus.listening():
        return
    bus.announce(_event(op, path, problem, caps, policy, selection))


def _event(op: str, path: str, problem: Problem, caps: DeviceCaps, policy: Policy, selection: Any) -> Any:
    """The event of a call (the fast path builds it once per plan and announces it per call)."""
    table = _CUDA_KERNELS if problem.backend == "cuda" else _CPU_KERNELS
    return build_event(MODEL, path, problem, device=caps, op=op, policy=policy, forced=selection.forced,
                       backend=problem.backend, kernels=table[(op, path)], selection=selection)


def _announce_shortcut(op: str, name: str, problem: Problem, caps: DeviceCaps) -> None:
    record_shortcut(MODEL, name, problem, device=caps, op=op, backend=problem.backend)


# --- input handling ---------------------------------------------------------------------------


def _is_torch(x: object) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "data_ptr")


def _dtype_of(x: Any) -> str:
    """'float16' / 'bfloat16' / 'uint8' / other name, for numpy arrays and torch tensors alike."""
    if _is_torch(x):
        return str(x.dtype).replace("torch.", "")
    return np.dtype(x.dtype).name


def _is_contiguous(x: Any) -> bool:
    return bool(x.is_contiguous()) if _is_torch(x) else bool(x.flags.c_contiguous)


def _address(x: Any) -> int:
    return int(x.data_ptr()) if _is_torch(x) else int(x.ctypes.data)


def _device_of(x: Any) -> str:
    return str(x.device) if _is_torch(x) else "cpu"


def _to_numpy(x: Any) -> np.ndarray:
    if not _is_torch(x):
        return np.asarray(x)
    import torch

    x = x.detach().cpu()
    if x.dtype == torch.bfloat16:
        return x.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return x.numpy()


def _numpy_to_torch(x: np.ndarray, device: Any) -> Any:
    import torch

    if x.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(np.ascontiguousarray(x).view(np.int16)).view(torch.bfloat16).to(device)
    return torch.from_numpy(np.ascontiguousarray(x)).to(device)


def _output_dtype(dtype: Any) -> str:
    """'float16' or 'bfloat16' from a name, a numpy / ml_dtypes type or a torch dtype."""
    if type(dtype).__module__.startswith("torch"):
        dtype = str(dtype).replace("torch.", "")
    try:
        return reference.dtype_name(dtype)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"dtype must be float16 or bfloat16 (a name, a numpy/ml_dtypes type or a torch dtype), "
                         f"got {dtype!r}") from exc


def _check_array(name: str, x: Any, want: str, fix: str) -> None:
    if not (_is_torch(x) or isinstance(x, np.ndarray)):
        raise TypeError(f"{name} must be a numpy array or a torch tensor, got {type(x).__name__}")
    if _dtype_of(x) not in want.split("|"):
        raise TypeError(f"{name} must have dtype {want.replace('|', ' or ')}, got {_dtype_of(x)}; {fix}")
    if isinstance(x, np.ndarray) and not x.dtype.isnative:
        raise TypeError(f"{name} has byte order {x.dtype.byteorder!r}; pass it in this machine's byte order: "
                        f"{name}.astype({name}.dtype.newbyteorder('='))")
    if not _is_contiguous(x):
        raise ValueError(f"{name} must be contiguous (row-major); pass {name}.contiguous() "
                         f"(torch) or np.ascontiguousarray({name}) (numpy)")


def _global_scale_host(g: Any) -> float | None:
    """The global scale as a Python float when it is on the host (None for a CUDA tensor)."""
    if _is_torch(g):
        if g.numel() != 1:
            raise ValueError(f"weight_scale_2 must hold exactly one value, got shape {tuple(g.shape)}")
        if str(g.dtype) != "torch.float32":
            raise TypeError(f"weight_scale_2 must be float32, got {g.dtype}; use .float()")
        return None if g.is_cuda else float(g.reshape(()).item())
    if isinstance(g, np.ndarray):
        if g.size != 1:
            raise ValueError(f"weight_scale_2 must hold exactly one value, got shape {g.shape}")
        if g.dtype != np.float32:
            raise TypeError(f"weight_scale_2 must be float32, got {g.dtype}; use .astype(np.float32)")
        return float(g.reshape(()))
    if isinstance(g, (bool, np.bool_)) or not isinstance(g, (int, float, np.floating, np.integer)):
        raise TypeError(f"weight_scale_2 must be a float or a one-element float32 array/tensor, "
                        f"got {type(g).__name__}")
    value = float(g)
    if math.isfinite(value) and not math.isfinite(_to_fp32(value)):
        raise ValueError(f"weight_scale_2 = {value!r} is beyond the float32 range (largest finite "
                         f"{FLT_MAX:.7g}), where the global scale is stored; the global scale of a quantized "
                         f"tensor is amax / (448 * 6)")
    return _to_fp32(value)


def _to_fp32(value: float) -> float:
    """``value`` rounded to float32 (to nearest; beyond the range it becomes inf), as a float."""
    with np.errstate(over="ignore"):
        return float(np.float32(value))


def _validate_weights(b: Any, weight_scale: Any, weight_scale_2: Any, block_size: Any) -> tuple[int, int]:
    if isinstance(block_size, bool) or not isinstance(block_size, (int, np.integer)):
        raise TypeError(f"block_size must be an int, got {type(block_size).__name__}")
    if block_size <= 0:
        raise ValueError(f"block_size must be a positive integer, got {block_size}")
    if block_size > MAX_BLOCK_SIZE:
        raise ValueError(f"block_size must be at most {MAX_BLOCK_SIZE} (the kernels index blocks with 32-bit "
                         f"integers; any block_size >= K is one block per row), got {block_size}")
    _check_array("B", b, "uint8", "B holds two packed E2M1 codes per byte (use nvfp4_kernels.nvfp4.pack_codes)")
    if len(b.shape) != 2:
        raise ValueError(f"B must be 2-D [N, K/2], got shape {tuple(b.shape)}")
    _check_array("weight_scale", weight_scale, "uint8", "pass the raw E4M3FN bytes, e.g. x.view(uint8)")
    n, k = int(b.shape[0]), 2 * int(b.shape[1])
    expected = (n, -(-k // int(block_size)))
    if tuple(weight_scale.shape) != expected:
        raise ValueError(f"weight_scale must have shape [N, ceil(K/block_size)] = {list(expected)} "
                         f"for N={n}, K={k}, block_size={block_size}; got {list(weight_scale.shape)}")
    g = _global_scale_host(weight_scale_2)
    if g is not None and not np.isfinite(g):
        raise ValueError(f"weight_scale_2 must be finite, got {g}; the global scale of a quantized "
                         f"tensor is amax / (448 * 6)")
    return n, k


def _resolve_backend(backend: str, tensors: list[Any]) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    devices = {_device_of(t) for t in tensors if t is not None and (_is_torch(t) or isinstance(t, np.ndarray))}
    if len(devices) > 1:
        raise ValueError(f"all inputs must be on one device, got {sorted(devices)}; move them with .to(device)")
    on_gpu = any(d.startswith("cuda") for d in devices)
    if backend == "auto":
        return "cuda" if on_gpu else "cpu"
    if backend == "cpu" and on_gpu:
        raise ValueError("backend='cpu' was given CUDA tensors; move them with .cpu() or use backend='cuda'")
    if backend == "cuda":
        from nvfp4_kernels import cuda_backend

        ok, why = cuda_backend.available()
        if not ok:
            raise RuntimeError(f"backend='cuda' is unavailable: {why}. Use backend='cpu' (or 'auto').")
    return backend


@functools.lru_cache(maxsize=64)
def cuda_device_caps(index: int) -> DeviceCaps:
    """Name and compute capability of CUDA device ``index`` (as this process numbers it), asked
    once per device; the caps carry the host's index of the GPU, which reports show."""
    import torch

    major, minor = torch.cuda.get_device_capability(index)
    return DeviceCaps(torch.cuda.get_device_name(index), (major, minor), index=physical_gpu_index(index))


def _caps_for(backend: str, tensors: list[Any]) -> tuple[DeviceCaps, Any]:
    if backend == "cpu":
        return CPU, None
    import torch

    device = next((t.device for t in tensors if _is_torch(t) and t.is_cuda), None)
    if device is None:
        device = torch.device("cuda", torch.cuda.current_device())
    index = device.index if device.index is not None else torch.cuda.current_device()
    return cuda_device_caps(index), torch.device("cuda", index)


def _alignment(b: Any, out: Any | None) -> tuple[bool, str]:
    """vec8 loads one 32-bit word per thread and stores 16 bytes: check the real addresses."""
    problems = []
    if _address(b) % 4:
        problems.append(f"B at address {_address(b):#x} is not 4-byte aligned")
    if out is not None and _address(out) % 16:
        problems.append(f"output at address {_address(out):#x} is not 16-byte aligned")
    return (not problems, "; ".join(problems) or "B 4-byte and output 16-byte aligned")


# --- public entries ---------------------------------------------------------------------------


def dequantize(
    b: Any, weight_scale: Any, weight_scale_2: Any, block_size: int = 16, dtype: str = "bfloat16",
    *, backend: str = "auto", policy: Policy | None = None, out: Any | None = None,
) -> Any:
    """Dequantize packed NVFP4 weights [N, K/2] to [N, K] fp16/bf16 through the dispatcher.

    Takes ``prefill_vec8`` when its guards hold, else ``prefill_scalar``; the bits are the same.
    ``out`` (optional) is a contiguous [N, K] buffer to write; a misaligned one sends the call
    to the scalar kernel. numpy in, numpy out; torch in, torch out.
    """
    n, k = _validate_weights(b, weight_scale, weight_scale_2, block_size)
    dtype = _output_dtype(dtype)
    if out is not None:
        _check_array("out", out, dtype, f"out must match dtype={dtype!r}")
        if isinstance(out, np.ndarray) and not out.flags.writeable:
            raise ValueError("out is a read-only array; pass a writable one (np.empty((N, K), dtype)) or none")
        if tuple(out.shape) != (n, k):
            raise ValueError(f"out must have shape [N, K] = {[n, k]}, got {list(out.shape)}")
    backend = _resolve_backend(backend, [b, weight_scale, weight_scale_2, out])
    caps, device = _caps_for(backend, [b, weight_scale, weight_scale_2, out])
    policy = _checked_policy(policy)
    aligned, why = _alignment(b, out)
    problem = Problem("dequantize", None, n, k, int(block_size), dtype, backend, aligned, why)
    if n == 0 or k == 0:
        result = out if out is not None else _empty_like_input(b, (n, k), dtype)
        _announce_shortcut("dequantize", "empty", problem, caps)
        return result
    selection = MODEL.select(problem, caps, policy, op="dequantize", force=policy.force_path)
    if backend == "cpu":
        fn = reference.dequantize_vec8 if selection.path == "prefill_vec8" else reference.dequantize_scalar
        g = _global_scale_host(weight_scale_2)
        result_np = fn(_to_numpy(b), _to_numpy(weight_scale), g, int(block_size), dtype)
        result = _deliver(result_np, b, out)
    else:
        result = _cuda_dequantize(selection.path, b, weight_scale, weight_scale_2, int(block_size),
                                  dtype, device, out)
    _announce("dequantize", selection.path, problem, caps, policy, selection)
    return result


class _Prepared(NamedTuple):
    """What validation and selection decide for one matmul call (``selection`` None: a shortcut)."""

    problem: Problem
    caps: DeviceCaps
    device: Any
    backend: str
    lead: tuple[int, ...]
    selection: Selection | None


def _prepare_matmul(a: Any, b: Any, weight_scale: Any, weight_scale_2: Any, block_size: Any, bias: Any,
                    backend: str, policy: Policy) -> _Prepared:
    """Validate every input (errors say what to fix) and choose the path; launches nothing."""
    n, k = _validate_weights(b, weight_scale, weight_scale_2, block_size)
    _check_array("A", a, "float16|bfloat16", "cast the activations with .to(torch.bfloat16) or "
                 ".astype(ml_dtypes.bfloat16)")
    if len(a.shape) < 1 or int(a.shape[-1]) != k:
        got = int(a.shape[-1]) if len(a.shape) else None
        hint = " (K must be even: B packs two values per byte)" if got is not None and got % 2 else ""
        raise ValueError(f"A must have shape [..., K] with K = 2 * B.shape[1] = {k}, got {list(a.shape)}{hint}")
    dtype = _dtype_of(a)
    if bias is not None:
        _check_array("bias", bias, dtype, "bias must have the same dtype as A")
        if tuple(bias.shape) != (n,):
            raise ValueError(f"bias must have shape [N] = [{n}], got {list(bias.shape)}")
    backend = _resolve_backend(backend, [a, b, weight_scale, weight_scale_2, bias])
    caps, device = _caps_for(backend, [a, b, weight_scale, weight_scale_2, bias])
    lead = tuple(int(d) for d in a.shape[:-1])
    m = math.prod(lead)
    aligned, why = _alignment(b, None)  # the scratch buffer is ours and always aligned
    problem = Problem("matmul", m, n, k, int(block_size), dtype, backend, aligned, why)
    if m == 0 or n == 0 or k == 0:
        return _Prepared(problem, caps, device, backend, lead, None)
    selection = MODEL.select(problem, caps, policy, op="matmul", force=policy.force_path)
    return _Prepared(problem, caps, device, backend, lead, selection)


def nvfp4_matmul(
    a: Any, b: Any, weight_scale: Any, weight_scale_2: Any, block_size: int = 16,
    bias: Any | None = None, *, backend: str = "auto", policy: Policy | None = None,
) -> Any:
    """Y = A @ W^T for NVFP4 weights W, with the contract of docs/contract.md.

    ``a`` is fp16/bf16 [..., K]; ``b`` uint8 [N, K/2]; ``weight_scale`` uint8 E4M3FN bytes
    [N, ceil(K/block_size)]; ``weight_scale_2`` the fp32 global scale; ``bias`` [N] of A's
    dtype. Returns [..., N] in A's dtype: numpy in, numpy out; torch in, torch out.

    CUDA tensors take a fast path after the first call of each signature (see
    :mod:`nvfp4_kernels.fast`): the same checks, paths, results and events, in a few
    microseconds of host time.
    """
    torch = sys.modules.get("torch")
    if torch is not None and type(a) is torch.Tensor:
        result = fast.matmul(torch, a, b, weight_scale, weight_scale_2, block_size, bias, backend, policy)
        if result is not fast.MISS:
            return result
    policy = _checked_policy(policy)
    prepared = _prepare_matmul(a, b, weight_scale, weight_scale_2, block_size, bias, backend, policy)
    problem, caps, lead, selection = prepared.problem, prepared.caps, prepared.lead, prepared.selection
    n, k = problem.n, problem.k
    if selection is None:
        return _shortcut(a, bias, lead, n, problem.dtype, problem, caps)
    if prepared.backend == "cpu":
        result = _cpu_matmul(selection.path, a, b, weight_scale, weight_scale_2, int(block_size), bias,
                             lead, n, k)
    else:
        result = _cuda_matmul(selection.path, a, b, weight_scale, weight_scale_2, int(block_size),
                              bias, lead, n, k, prepared.device)
    _announce("matmul", selection.path, problem, caps, policy, selection)
    return result


def _empty_like_input(like: Any, shape: tuple[int, ...], dtype: str) -> Any:
    if _is_torch(like):
        import torch

        return torch.zeros(shape, dtype=getattr(torch, dtype), device=like.device)
    return np.zeros(shape, dtype=reference.numpy_dtype(dtype))


def _shortcut(a: Any, bias: Any, lead: tuple[int, ...], n: int, dtype: str, problem: Problem,
              caps: DeviceCaps) -> Any:
    result = _empty_like_input(a, lead + (n,), dtype)
    if problem.m == 0 or n == 0:
        kind = "empty"
    else:
        kind = "bias_only"
        if bias is not None:  # the bias may come in the other container (numpy for a torch A, or back)
            if _is_torch(result):
                result.copy_(bias if _is_torch(bias) else _numpy_to_torch(_to_numpy(bias), result.device))
            else:
                result[...] = _to_numpy(bias)
    _announce_shortcut("matmul", kind, problem, caps)
    return result


def _deliver(result_np: np.ndarray, like: Any, out: Any | None) -> Any:
    """Return a CPU result in the caller's container (numpy or torch), into ``out`` if given."""
    if out is not None:
        if _is_torch(out):
            out.copy_(_numpy_to_torch(result_np, out.device))
        else:
            out[...] = result_np
        return out
    return _numpy_to_torch(result_np, "cpu") if _is_torch(like) else result_np


def _cpu_matmul(path: str, a: Any, b: Any, weight_scale: Any, weight_scale_2: Any, block_size: int,
                bias: Any, lead: tuple[int, ...], n: int, k: int) -> Any:
    a_np = _to_numpy(a).reshape(-1, k)
    b_np, s_np = _to_numpy(b), _to_numpy(weight_scale)
    bias_np = None if bias is None else _to_numpy(bias)
    g = _global_scale_host(weight_scale_2)
    if path == "gemv":
        y = reference.gemv(a_np, b_np, s_np, g, block_size, bias_np)
    elif path == "fused_mma":
        splits = tiling.fused_split_count(n, k, a_np.shape[0])  # the split structure an H200 runs
        y = reference.fused_mma(a_np, b_np, s_np, g, block_size, bias_np, splits=splits)
    elif path == "fused_wgmma":
        whole, splits = tiling.wgmma_call_plan(n, k, a_np.shape[0])  # the plan an H200 runs
        y = reference.fused_wgmma(a_np, b_np, s_np, g, block_size, bias_np,
                                  whole_rows=min(n, whole * tiling.WGMMA_TILE_ROWS), splits=splits)
    elif path in ("prefill_vec8", "prefill_scalar"):
        y = reference.prefill(a_np, b_np, s_np, g, block_size, bias_np,
                              dequant_path="vec8" if path == "prefill_vec8" else "scalar")
    else:
        raise NotImplementedError(f"the CPU backend has no implementation of path {path!r}")
    return _deliver(y.reshape(lead + (n,)), a, None)


def _device_global_scale(weight_scale_2: Any, device: Any) -> Any:
    """The global scale as a one-element fp32 tensor on ``device`` (the kernels read it there)."""
    import torch

    if _is_torch(weight_scale_2):
        return weight_scale_2.reshape(1).to(device=device, dtype=torch.float32)
    if isinstance(weight_scale_2, np.ndarray):
        weight_scale_2 = weight_scale_2.reshape(())
    bits = int(np.float32(weight_scale_2).view(np.uint32))
    return _cached_device_scalar(str(torch.device(device)), bits)


@functools.lru_cache(maxsize=256)
def _cached_device_scalar(device: str, float32_bits: int) -> Any:
    """A host float becomes a device tensor once per (device, value), not once per call: a
    pageable host-to-device copy on every decode step would cost more than the GEMV itself.
    The tensors are never written, so sharing them is safe."""
    import torch

    value = np.array([float32_bits], dtype=np.uint32).view(np.float32)
    return torch.from_numpy(value).to(device)


def _on_device(x: Any, device: Any) -> Any:
    if x is None:
        return None
    return x if _is_torch(x) and x.is_cuda else _numpy_to_torch(_to_numpy(x), device)


@contextmanager
def _fp32_reduction() -> Iterator[None]:
    """Keep cuBLAS's split-K reductions in fp32 for the prefill GEMM, as the contract says.

    torch lets cuBLAS reduce fp16/bf16 partial sums in reduced precision by default; the
    flags are process-wide, so they are set for the duration of the call and restored.
    """
    import torch

    flags = torch.backends.cuda.matmul
    names = [n for n in ("allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction")
             if hasattr(flags, n)]
    saved = {n: getattr(flags, n) for n in names}
    try:
        for n in names:
            setattr(flags, n, False)
        yield
    finally:
        for n, v in saved.items():
            setattr(flags, n, v)


def _cuda_dequantize(path: str, b: Any, weight_scale: Any, weight_scale_2: Any, block_size: int,
                     dtype: str, device: Any, out: Any | None) -> Any:
    import torch
    from nvfp4_kernels import cuda_backend

    on_host = not _is_torch(b) or not b.is_cuda
    target = out if out is not None and _is_torch(out) and out.is_cuda else None
    if target is None:
        target = torch.empty((b.shape[0], 2 * b.shape[1]), dtype=getattr(torch, dtype), device=device)
    cuda_backend.dequantize(path, _on_device(b, device), _on_device(weight_scale, device),
                            _device_global_scale(weight_scale_2, device), block_size, target)
    if on_host:
        return _deliver(_to_numpy(target), b, out)
    return target


def _cuda_matmul(path: str, a: Any, b: Any, weight_scale: Any, weight_scale_2: Any, block_size: int,
                 bias: Any, lead: tuple[int, ...], n: int, k: int, device: Any) -> Any:
    import torch
    from nvfp4_kernels import cuda_backend

    on_host = not _is_torch(a) or not a.is_cuda
    a_dev = _on_device(a, device).reshape(-1, k)
    b_dev, s_dev = _on_device(b, device), _on_device(weight_scale, device)
    g_dev = _device_global_scale(weight_scale_2, device)
    bias_dev = _on_device(bias, device)
    if path == "gemv":
        y = torch.empty((a_dev.shape[0], n), dtype=a_dev.dtype, device=device)
        cuda_backend.gemv(a_dev, b_dev, s_dev, g_dev, bias_dev, y)
    elif path == "fused_mma":
        from nvfp4_kernels import layout

        y = torch.empty((a_dev.shape[0], n), dtype=a_dev.dtype, device=device)
        # a weight registered for the tile-contiguous layout (nvfp4_kernels.layout.register): its copy
        tiled = layout.registered(b, weight_scale) if b_dev is b and s_dev is weight_scale else None
        cuda_backend.fused_mma(a_dev, b_dev, s_dev, g_dev, bias_dev, y, tiled=tiled)
    elif path == "fused_wgmma":
        from nvfp4_kernels import layout

        y = torch.empty((a_dev.shape[0], n), dtype=a_dev.dtype, device=device)
        # in fused_mma's K order, on a registered weight's tile-contiguous copy (nvfp4_kernels.layout.register)
        tiled = layout.registered(b, weight_scale, "fused_wgmma") if b_dev is b and s_dev is weight_scale else None
        cuda_backend.fused_wgmma(a_dev, b_dev, s_dev, g_dev, bias_dev, y, tiled=tiled)
    elif path in ("prefill_vec8", "prefill_scalar"):
        scratch = torch.empty((n, k), dtype=a_dev.dtype, device=device)
        cuda_backend.dequantize(path, b_dev, s_dev, g_dev, block_size, scratch)
        with _fp32_reduction():
            y = torch.matmul(a_dev, scratch.t())
        if bias_dev is not None:
            y = y + bias_dev
    else:
        raise NotImplementedError(f"no CUDA implementation of path {path!r} on this build")
    y = y.reshape(lead + (n,))
    return _deliver(_to_numpy(y), a, None) if on_host else y
