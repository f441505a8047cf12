"""The CUDA backend: the nvcc-built kernel library loaded with ctypes.

Launchers take raw device pointers, sizes and the current torch CUDA stream, and return a
``cudaError_t``; a non-zero one becomes a RuntimeError naming the kernel and CUDA's error string.
Nothing here synchronises the device: the global scale stays in device memory and is read by the
kernels themselves.

Inputs are validated before any launch (ValueError / TypeError saying what to fix), so a bad
call never reaches a kernel: in particular the vec8 preconditions (K % 8 == 0, even block size,
packed data 4-byte aligned, output 16-byte aligned) are re-checked here even though the
dispatcher already routes misaligned views to the scalar kernel.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

#: dispatch path -> the CUDA kernel function it launches (a fragment the profiler's name contains)
KERNEL_NAMES: dict[str, str] = {
    "prefill_vec8": "nvfp4_dequant_vec8_kernel",
    "prefill_scalar": "nvfp4_dequant_scalar_kernel",
    "gemv": "nvfp4_gemv_kernel",
    "fused_mma": "nvfp4_fused_mma_kernel",
    "fused_wgmma": "nvfp4_fused_wgmma_kernel",
}
#: the extra kernel a split-K GEMV or fused launch runs after its main kernel (mma_decode.cuh)
SPLITK_FINALIZE_KERNEL = "nvfp4_splitk_finalize_kernel"
PROBE_KERNEL = "nvfp4_fp4_probe_kernel"

_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_available: tuple[bool, str] | None = None

_P = ctypes.c_void_p
_I32 = ctypes.c_int32
_I64 = ctypes.c_int64
_SIGNATURES: dict[str, tuple[type, list[type]]] = {
    "nvfp4_launch_dequant_scalar": (ctypes.c_int, [_P, _P, _P, _P, _I64, _I64, _I32, _I32, _P]),
    "nvfp4_launch_dequant_vec8": (ctypes.c_int, [_P, _P, _P, _P, _I64, _I64, _I32, _I32, _I32, _P]),
    "nvfp4_launch_gemv": (ctypes.c_int, [_P, _P, _P, _P, _P, _P, _P, _P, _I32, _I64, _I64, _I32, _I32, _P]),
    "nvfp4_gemv_splits": (ctypes.c_int, [_I64, _I64]),
    "nvfp4_launch_fused": (ctypes.c_int, [_P, _P, _P, _P, _P, _P, _P, _P, _I32, _I64, _I64, _I32, _I32, _P]),
    "nvfp4_launch_fused_tiled": (ctypes.c_int,
                                 [_P, _P, _P, _P, _P, _P, _P, _P, _I32, _I64, _I64, _I32, _I32, _P, _I32]),
    "nvfp4_fused_tiles": (ctypes.c_int64, [_I32, _I64]),
    "nvfp4_fused_tile": (ctypes.c_int, [_I32]),
    "nvfp4_fused_occupancy": (ctypes.c_int, [_I32]),
    "nvfp4_fused_launch_occupancy": (ctypes.c_int, [_I32, _I32, _I32]),
    "nvfp4_fused_block_warps": (ctypes.c_int, [_I32, _I64, _I32, _I32]),
    "nvfp4_launch_fused_wgmma_mma_order": (ctypes.c_int, [_P, _P, _P, _P, _P, _P, _P, _P, _I32, _I64, _I64, _I32,
                                                          _I32, _I32, _I32, _P]),
    "nvfp4_fused_wgmma_act_rows": (ctypes.c_int64, [_I32]),
    "nvfp4_fused_wgmma_ring_steps": (ctypes.c_int32, [_I32, _I32]),
    "nvfp4_fused_wgmma_tile_rows": (ctypes.c_int, []),
    "nvfp4_launch_fp4_probe": (ctypes.c_int, [_P, _P]),
    "nvfp4_launch_packed": (ctypes.c_int, [_I32, _P]),
    "nvfp4_launch_args_size": (ctypes.c_int, []),
    "nvfp4_error_string": (ctypes.c_char_p, [ctypes.c_int]),
}


class LaunchArgs(ctypes.Structure):
    """``Nvfp4LaunchArgs`` of kernels/cuda/launch_args.h: one launcher's arguments in one struct,
    so a launch is one ctypes call with two arguments instead of thirteen conversions."""

    _fields_ = [("a", _P), ("packed", _P), ("scales", _P), ("g", _P), ("bias", _P), ("out", _P),
                ("workspace", _P), ("stream", _P), ("n", _I64), ("k", _I64), ("m", _I32), ("block_size", _I32),
                ("out_bf16", _I32), ("splits", _I32), ("counters", _P), ("scale_bytes", _I32), ("whole_tiles", _I32)]


#: the ``kernel`` argument of nvfp4_launch_packed per path
PACKED_KERNEL = {"gemv": 0, "prefill_vec8": 1, "prefill_scalar": 2, "fused_mma": 3, "fused_wgmma": 8}
#: nvfp4_launch_packed's fused kernel on tile-contiguous weights (nvfp4_kernels.layout)
FUSED_TILED_KERNEL = 5
#: nvfp4_launch_packed's fused_wgmma kernel on the same tile-contiguous copy (in fused_mma's K order)
FUSED_WGMMA_TILED_KERNEL = 9
#: the packed kernels whose ``counters`` word carries the permuted activations' workspace
#: (fused_wgmma in fused_mma's K order: :func:`fused_wgmma_act_bytes`)
ACT_WORKSPACE_KERNELS = frozenset((PACKED_KERNEL["fused_wgmma"], FUSED_WGMMA_TILED_KERNEL))
#: nvfp4_launch_packed's retired kernel numbers: the natural-order fused_wgmma launches
#: (benchmarks/NOTES.md, nineteenth session), which the entry now refuses like any unknown number
RETIRED_PACKED_KERNELS = (6, 7)
#: the path each packed kernel serves (for error messages)
_PACKED_KERNEL_PATH = {**{i: p for p, i in PACKED_KERNEL.items()}, FUSED_TILED_KERNEL: "fused_mma",
                       FUSED_WGMMA_TILED_KERNEL: "fused_wgmma"}
#: nvfp4_launch_packed's empty kernel (the fused kernel's parameter list, no work): the benchmark's
#: host-time floor, what one launch through the same call costs on the machine at hand
EMPTY_KERNEL = 4
#: LaunchArgs seen as 14 uint64 words (the fast path writes the per-call ones by index, which
#: costs a tenth of a Structure field write): pointers at 0..7, n, k, then two words that each
#: hold two int32 fields, low half first (little-endian, as on every CUDA host), the split-K
#: counters' pointer, and a word whose low half is the tiled kernel's scale-byte range and whose
#: high half is the fused_wgmma plan's whole tiles
ARG_WORDS = 14
ARG_A, ARG_PACKED, ARG_SCALES, ARG_G, ARG_BIAS, ARG_OUT, ARG_WORKSPACE, ARG_STREAM, ARG_N, ARG_K = range(10)
ARG_M_BLOCK, ARG_BF16_SPLITS, ARG_COUNTERS, ARG_SCALE_BYTES = 10, 11, 12, 13
#: the words a launch call writes per call, in its argument order (a, out, workspace, counters,
#: stream, g)
LAUNCH_CALL_WORDS = (ARG_A, ARG_OUT, ARG_WORKSPACE, ARG_COUNTERS, ARG_STREAM, ARG_G)


def pack_int32_pair(low: int, high: int) -> int:
    """Two int32 fields of LaunchArgs as the one uint64 word that holds them."""
    return (low & 0xFFFFFFFF) | ((high & 0xFFFFFFFF) << 32)


def load_library(path: str | None = None) -> ctypes.CDLL:
    """Build (cached) and load the kernel library, with argument types set for every launcher."""
    global _lib
    with _lock:
        if _lib is not None and path is None:
            return _lib
        if path is None:
            from nvfp4_kernels import build

            path = str(build.build_library())
        lib = ctypes.CDLL(path)
        for name, (restype, argtypes) in _SIGNATURES.items():
            fn = getattr(lib, name)
            fn.restype = restype
            fn.argtypes = argtypes
        if lib.nvfp4_launch_args_size() != ctypes.sizeof(LaunchArgs) or ctypes.sizeof(LaunchArgs) != 8 * ARG_WORDS:
            raise RuntimeError(f"the kernel library's Nvfp4LaunchArgs is {lib.nvfp4_launch_args_size()} bytes, "
                               f"cuda_backend.LaunchArgs {ctypes.sizeof(LaunchArgs)}: rebuild the library")
        _lib = lib
        return lib


def available() -> tuple[bool, str]:
    """(True, "") when torch sees a CUDA GPU and the library builds and loads; else (False, why)."""
    global _available
    if _available is not None:
        return _available
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - torch is a dependency
        _available = (False, f"PyTorch is not importable ({exc})")
        return _available
    if not torch.cuda.is_available():
        _available = (False, "torch.cuda.is_available() is False: no CUDA GPU or driver on this machine")
        return _available
    try:
        load_library()
    except Exception as exc:  # noqa: BLE001 - any build/load failure makes the backend unavailable
        _available = (False, f"the CUDA kernel library could not be built or loaded: {exc}")
        return _available
    _available = (True, "")
    return _available


def _check(err: int, kernel: str) -> None:
    if err != 0:
        text = load_library().nvfp4_error_string(err)
        raise RuntimeError(f"CUDA error {err} launching {kernel}: "
                           f"{text.decode() if text else 'unknown error'}")


def _stream(tensor: Any) -> int:
    return current_stream(tensor.device.index)


def current_stream(device_index: int | None) -> int:
    """The raw ``cudaStream_t`` of torch's current stream on a device."""
    import torch

    index = torch.cuda.current_device() if device_index is None else device_index
    return int(raw_stream_getter()(index))


@functools.lru_cache(maxsize=1)
def raw_stream_getter() -> Any:
    """A function device index -> raw ``cudaStream_t`` of torch's current stream there.

    torch's own accessor takes ~0.1 us against ~2 us for ``torch.cuda.current_stream()``
    (which builds a Stream object per call); the public one is the fallback.
    """
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw
    return lambda index: torch.cuda.current_stream(index).cuda_stream


def _require_cuda(name: str, t: Any, device: Any) -> None:
    import torch

    if not isinstance(t, torch.Tensor) or not t.is_cuda:
        raise TypeError(f"{name} must be a CUDA torch tensor, got {type(t).__name__}"
                        f"{'' if not isinstance(t, torch.Tensor) else ' on ' + str(t.device)}")
    if t.device != device:
        raise ValueError(f"{name} is on {t.device} but the output is on {device}; move it with .to()")
    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous; pass {name}.contiguous()")


def _tiled_copy(tiled: tuple[Any, ...], n: int, k: int, device: Any) -> tuple[Any, Any, Any]:
    """The fused paths' ``tiled`` argument checked against an [n, k] weight on ``device``: its
    tile-contiguous codes and scale bytes (which a kernel then reads instead of the row-major
    pair) and its scale-byte range, or None where it has two items."""
    from nvfp4_kernels import layout

    if len(tiled) not in (2, 3):
        raise ValueError("tiled must be (packed_tiles, scales_tiles[, scale_bytes]) from layout.tile_weights or "
                         f"layout.registered(...), got {len(tiled)} items")
    packed, scales = tiled[0], tiled[1]
    layout.check_tiled(packed, scales, n, k)
    _require_cuda("tiled packed", packed, device)
    _require_cuda("tiled scales", scales, device)
    return packed, scales, tiled[2] if len(tiled) == 3 else None


def _dtype_flag(t: Any, name: str) -> int:
    import torch

    if t.dtype == torch.bfloat16:
        return 1
    if t.dtype == torch.float16:
        return 0
    raise TypeError(f"{name} must be float16 or bfloat16, got {t.dtype}")


def _check_weights(packed: Any, scales: Any, g: Any, block_size: int, n: int, k: int, device: Any) -> None:
    import torch

    _require_cuda("packed", packed, device)
    _require_cuda("scales", scales, device)
    _require_cuda("g", g, device)
    if packed.dtype != torch.uint8 or tuple(packed.shape) != (n, k // 2):
        raise ValueError(f"packed must be uint8 [N, K/2] = [{n}, {k // 2}], got {packed.dtype} "
                         f"{list(packed.shape)}")
    nsc = -(-k // block_size)
    if scales.dtype != torch.uint8 or tuple(scales.shape) != (n, nsc):
        raise ValueError(f"scales must be uint8 [N, ceil(K/block_size)] = [{n}, {nsc}], got "
                         f"{scales.dtype} {list(scales.shape)}")
    if g.dtype != torch.float32 or g.numel() != 1:
        raise ValueError(f"g must be a one-element float32 CUDA tensor, got {g.dtype} with {g.numel()} elements")


def dequantize(path: str, packed: Any, scales: Any, g: Any, block_size: int, out: Any) -> None:
    """Dequantize ``packed`` [N, K/2] with ``scales`` and the device scalar ``g`` into ``out`` [N, K].

    ``path`` is ``"prefill_vec8"`` or ``"prefill_scalar"``. Launches on the current stream and
    returns without synchronising.
    """
    if path not in ("prefill_vec8", "prefill_scalar"):
        raise ValueError(f"path must be 'prefill_vec8' or 'prefill_scalar', got {path!r}")
    if isinstance(block_size, bool) or not isinstance(block_size, (int, np.integer)) or block_size <= 0:
        raise ValueError(f"block_size must be a positive int, got {block_size!r}")
    import torch

    if not isinstance(out, torch.Tensor) or not out.is_cuda:
        raise TypeError("out must be a CUDA torch tensor of dtype float16 or bfloat16")
    if out.dim() != 2:
        raise ValueError(f"out must be 2-D [N, K], got shape {list(out.shape)}")
    n, k = int(out.shape[0]), int(out.shape[1])
    _require_cuda("out", out, out.device)
    bf16 = _dtype_flag(out, "out")
    _check_weights(packed, scales, g, int(block_size), n, k, out.device)
    if n == 0 or k == 0:
        return
    if path == "prefill_vec8":
        problems = []
        if k % 8:
            problems.append(f"K % 8 == 0 (K={k})")
        if block_size % 2:
            problems.append(f"an even block_size (got {block_size})")
        if packed.data_ptr() % 4:
            problems.append(f"packed 4-byte aligned (address {packed.data_ptr():#x})")
        if out.data_ptr() % 16:
            problems.append(f"out 16-byte aligned (address {out.data_ptr():#x})")
        if problems:
            raise ValueError("the vec8 kernel needs " + ", ".join(problems) +
                             "; use path='prefill_scalar' (the dispatcher does this automatically)")
    launch_dequant(path, packed, scales, g.data_ptr(), int(block_size), out, n, k, bf16, _stream(out))


def launch_dequant(path: str, packed: Any, scales: Any, g_ptr: int, block_size: int, out: Any, n: int, k: int,
                   bf16: int, stream: int) -> None:
    """Launch a dequant kernel on arguments :func:`dequantize` (or the dispatcher's plan) has
    already checked, the vec8 preconditions included."""
    lib = _lib if _lib is not None else load_library()
    if path == "prefill_vec8":
        err = lib.nvfp4_launch_dequant_vec8(packed.data_ptr(), scales.data_ptr(), g_ptr, out.data_ptr(), n, k,
                                            block_size, bf16, 0, stream)
    else:
        err = lib.nvfp4_launch_dequant_scalar(packed.data_ptr(), scales.data_ptr(), g_ptr, out.data_ptr(), n, k,
                                              block_size, bf16, stream)
    if err:
        _check(err, KERNEL_NAMES[path])


def _aligned(t: Any, alignment: int) -> Any:
    """``t`` itself when its data is ``alignment``-byte aligned, else an aligned copy (fresh
    allocations from the caching allocator are 512-byte aligned)."""
    return t if t.data_ptr() % alignment == 0 else t.clone()


class PreparedLaunch:
    """What :func:`prepare_gemv`, :func:`prepare_fused_mma` and :func:`prepare_fused_wgmma` return:
    calling it enqueues the launch whose arguments were checked and resolved once. ``buffers``
    holds every tensor those arguments point into (aligned copies, workspaces, the output) for as
    long as it may be called: a tensor dropped after taking its address goes back to the caching
    allocator, and the next allocation could be handed the same memory."""

    __slots__ = ("_launch", "buffers")

    def __init__(self, launch: Callable[[], None], buffers: tuple[Any, ...] = ()) -> None:
        self._launch, self.buffers = launch, buffers

    def __call__(self) -> None:
        self._launch()


def _nothing() -> None:
    """The launch of an empty problem (N = 0 or K = 0 where that means no work)."""


NOTHING = PreparedLaunch(_nothing)


def gemv(a: Any, packed: Any, scales: Any, g: Any, bias: Any | None, out: Any, reduction: str = "auto") -> None:
    """out[M, N] = a[M, K] @ W^T (+ bias) with the fused decode GEMV; 1 <= M <= 8, block_size 16,
    K % 32 == 0. fp32 accumulation; the bias is added in fp32 before the single rounding.
    ``reduction`` (:data:`FUSED_REDUCTIONS`) picks how K splits are summed, with the same bits."""
    prepare_gemv(a, packed, scales, g, bias, out, reduction)()


def prepare_gemv(a: Any, packed: Any, scales: Any, g: Any, bias: Any | None, out: Any,
                 reduction: str = "auto") -> PreparedLaunch:
    """:func:`gemv`'s checks and arguments once; the returned :class:`PreparedLaunch` launches it,
    as often as it is called, into ``out`` on the stream current now (what :func:`gemv` does on
    every call).
    For a loop that must time the launch alone: the benchmark's queued repetitions, whose host work
    has to stay ahead of the GPU on any host (benchmarks/NOTES.md, twenty-fourth session)."""
    m, n, k, bf16 = _check_matmul_operands("GEMV", a, packed, scales, g, bias, out, 8, 32)
    if reduction not in FUSED_REDUCTIONS:
        raise ValueError(f"reduction must be one of {FUSED_REDUCTIONS}, got {reduction!r}")
    if n == 0 or k == 0:
        return NOTHING
    splits = gemv_splits(n, k)
    a_ = _aligned(a, 16)
    packed_ = _aligned(packed, 16)
    scales_ = _aligned(scales, 2)
    chosen = gemv_reduction(splits) if reduction == "auto" else reduction
    launch = functools.partial(launch_gemv, a_, packed_, scales_, g.data_ptr(), bias, out, m, n, k, bf16, splits,
                               _stream(out), chosen)
    return PreparedLaunch(launch, (a_, packed_, scales_, g, bias, out))


@functools.lru_cache(maxsize=1024)
def gemv_splits(n: int, k: int) -> int:
    """How many blocks the GEMV splits K across for an [n, k] weight on the current GPU (asked
    of the kernel library once per shape)."""
    return int(load_library().nvfp4_gemv_splits(n, k))


def launch_gemv(a: Any, packed: Any, scales: Any, g_ptr: int, bias: Any | None, out: Any, m: int, n: int, k: int,
                bf16: int, splits: int, stream: int, reduction: str = "finalize") -> None:
    """Launch the GEMV on arguments :func:`gemv` (or the dispatcher's plan) has already checked:
    CUDA tensors on one device, contiguous, ``a`` and ``packed`` 16-byte and ``scales`` 2-byte
    aligned. With ``splits > 1`` it takes a split-K workspace and, for ``reduction``
    "last_block", the zeroed tile counters (:func:`splitk_buffers`)."""
    workspace = counters = None
    if splits > 1:
        count = gemv_tiles(n) if reduction == "last_block" else 0
        workspace, counters = splitk_buffers(out.device.index, stream, splits * m * n, count)
    lib = _lib if _lib is not None else load_library()
    err = lib.nvfp4_launch_gemv(a.data_ptr(), packed.data_ptr(), scales.data_ptr(), g_ptr,
                                None if bias is None else bias.data_ptr(), out.data_ptr(), workspace,
                                counters or None, m, n, k, bf16, splits, stream)
    if err:
        _check(err, KERNEL_NAMES["gemv"])


def gemv_tiles(n: int) -> int:
    """The GEMV's 16-row tiles of an [n, k] weight (the counters its last-block sum needs)."""
    return (n + 15) // 16


def gemv_reduction(splits: int) -> str:
    """How the GEMV sums ``splits`` K splits by default: "none" for one split, else "last_block"
    (in the launch). Its tile of 16 rows and at most 8 activation rows is summed by a block of
    256 threads in one pass, so unlike the fused kernel's larger tiles it needs no M limit
    (benchmarks/NOTES.md: the GEMV's one-launch split-K sum)."""
    return "none" if splits < 2 else "last_block"


def _check_matmul_operands(kernel: str, a: Any, packed: Any, scales: Any, g: Any, bias: Any | None, out: Any,
                           max_m: int, k_multiple: int) -> tuple[int, int, int, int]:
    """Validate a fused launch (``kernel``: "GEMV" or "fused_mma kernel"); returns (m, n, k, bf16)."""
    import torch

    if not isinstance(out, torch.Tensor) or not out.is_cuda:
        raise TypeError("out must be a CUDA torch tensor of dtype float16 or bfloat16")
    device = out.device
    _require_cuda("a", a, device)
    _require_cuda("out", out, device)
    if a.dim() != 2 or out.dim() != 2:
        raise ValueError(f"a must be [M, K] and out [M, N]; got {list(a.shape)} and {list(out.shape)}")
    m, k = int(a.shape[0]), int(a.shape[1])
    n = int(out.shape[1])
    if int(out.shape[0]) != m:
        raise ValueError(f"out must have M={m} rows, got {list(out.shape)}")
    if not 1 <= m <= max_m:
        raise ValueError(f"the {kernel} takes 1 <= M <= {max_m} activation rows, got M={m}; "
                         f"use the prefill path")
    if k % k_multiple:
        raise ValueError(f"the {kernel} needs K % {k_multiple} == 0, got K={k}; use the prefill path")
    bf16 = _dtype_flag(a, "a")
    if out.dtype != a.dtype:
        raise TypeError(f"out must have a's dtype {a.dtype}, got {out.dtype}")
    _check_weights(packed, scales, g, 16, n, k, device)
    if bias is not None:
        _require_cuda("bias", bias, device)
        if bias.dtype != a.dtype or tuple(bias.shape) != (n,):
            raise ValueError(f"bias must be [{n}] of dtype {a.dtype}, got {bias.dtype} {list(bias.shape)}")
    return m, n, k, bf16


#: how the fused kernel sums its K splits (both sum them in split order from +0.0 and add the
#: bias before the one rounding, so they give the same bits; a GPU test holds them to it):
#: "last_block": in the launch, by the last split block of each tile to finish (partials in a
#: workspace, one zeroed counter per tile); "finalize": partials in a workspace, then the
#: finalize kernel (a second launch). "auto" is :func:`fused_reduction`. Inside a CUDA graph
#: capture the finalize kernel always sums them (:func:`splitk_buffers`).
FUSED_REDUCTIONS = ("auto", "last_block", "finalize")


def fused_mma(a: Any, packed: Any, scales: Any, g: Any, bias: Any | None, out: Any, splits: int | None = None,
              reduction: str = "auto", tiled: tuple[Any, ...] | None = None) -> None:
    """out[M, N] = a[M, K] @ W^T (+ bias) with the fused tensor-core kernel; 1 <= M <= 256,
    block_size 16, K % 128 == 0. fp32 accumulation; the bias is added in fp32 before the single
    rounding. ``splits`` (K splits) defaults to :func:`fused_splits` for the shape and GPU; it
    changes the summation order, so the bits of a shape are pinned per GPU and split count.
    ``reduction`` (:data:`FUSED_REDUCTIONS`) picks how the splits are summed, with the same bits.
    ``tiled``: ``packed`` and ``scales`` in the tile-contiguous layout
    (:func:`nvfp4_kernels.layout.tile_weights`), which the kernel then reads instead (the same bits,
    a faster weight stream); ``packed`` and ``scales`` still describe the weight. A third item, the
    weight's scale-byte range (:func:`nvfp4_kernels.layout.scale_byte_range`, which
    :func:`nvfp4_kernels.layout.registered` hands out), lets the kernel skip its per-step range
    test; it must be the range of these scales' bytes."""
    prepare_fused_mma(a, packed, scales, g, bias, out, splits, reduction, tiled)()


def prepare_fused_mma(a: Any, packed: Any, scales: Any, g: Any, bias: Any | None, out: Any,
                      splits: int | None = None, reduction: str = "auto",
                      tiled: tuple[Any, ...] | None = None) -> PreparedLaunch:
    """:func:`fused_mma`'s checks and arguments once; the returned :class:`PreparedLaunch` launches it (with its
    split-K buffers taken per launch, as :func:`fused_mma` does), as often as it is called, into
    ``out`` on the stream current now. See :func:`prepare_gemv` for why."""
    from nvfp4_kernels.reference import FUSED_STEP_K
    from nvfp4_kernels.tiling import FUSED_MAX_M

    m, n, k, bf16 = _check_matmul_operands("fused_mma kernel", a, packed, scales, g, bias, out, FUSED_MAX_M,
                                           FUSED_STEP_K)
    if k == 0:
        raise ValueError("the fused_mma kernel needs K >= 128; K = 0 has no dot products (nvfp4_matmul returns "
                         "the bias for it, recorded as the shortcut bias_only)")
    if splits is None:
        splits = fused_splits(n, k, m, out.device.index)
    if isinstance(splits, bool) or not isinstance(splits, int) or not 1 <= splits <= k // FUSED_STEP_K:
        raise ValueError(f"splits must be an int in [1, K/{FUSED_STEP_K} = {k // FUSED_STEP_K}], got {splits!r}")
    if reduction not in FUSED_REDUCTIONS:
        raise ValueError(f"reduction must be one of {FUSED_REDUCTIONS}, got {reduction!r}")
    if reduction == "auto":
        reduction = fused_reduction(splits, m)
    if n == 0:
        return NOTHING
    scale_bytes = 0
    if tiled is not None:
        from nvfp4_kernels import layout

        packed, scales, known = _tiled_copy(tiled, n, k, out.device)  # the kernel reads these instead
        scale_bytes = 0 if known is None else layout.check_scale_bytes(known)
    a_, packed_, scales_ = _aligned(a, 16), _aligned(packed, 16), _aligned(scales, 8)
    launch = functools.partial(launch_fused, a_, packed_, scales_, g.data_ptr(), bias, out, m, n, k, bf16, splits,
                               _stream(out), reduction, tiled=tiled is not None, scale_bytes=scale_bytes)
    return PreparedLaunch(launch, (a_, packed_, scales_, g, bias, out))


#: the most activation rows whose split-K sum the fused kernel does in its own launch by default.
#: Measured on the H200 in two runs (scripts/fused_reduction_ab.py, benchmarks/NOTES.md): at M = 1
#: one call with the L2 flushed takes 32.8-33.0 us against 33.5-33.7 with the finalize kernel on
#: 17408 x 5120, 35.0-35.1 against 35.6-35.9 on 5120 x 17408 and 14.7-14.9 against 15.1-15.3 on
#: 4096 x 4096, and it saves an eager call a launch (~4 us of host time); warm, back to back, it is
#: 0.1-1.2 us slower, which a CUDA graph never pays (inside a capture the finalize kernel sums);
#: from M = 4 the tile's last block has more rows to sum than it hides (up to 1.5x at M = 16).
LAST_BLOCK_MAX_M = 1


def fused_reduction(splits: int, m: int) -> str:
    """How the fused kernel sums ``splits`` K splits for ``m`` activation rows by default (the
    dispatcher's choice): "none" for one split, "last_block" (one launch) up to
    :data:`LAST_BLOCK_MAX_M` rows, "finalize" (two launches, the faster kernels) above."""
    if splits < 2:
        return "none"
    return "last_block" if m <= LAST_BLOCK_MAX_M else "finalize"


def fused_tiles(m: int, n: int) -> int:
    """Blocks per split of a fused launch for [m, n] (the counters a last-block sum needs)."""
    return int(load_library().nvfp4_fused_tiles(m, n))


@functools.lru_cache(maxsize=4096)
def fused_splits(n: int, k: int, m: int, device_index: int | None = None) -> int:
    """The fused kernel's K split count for this shape on a GPU (its multiprocessor count and the
    configuration's occupancy asked of the device once per shape)."""
    import torch
    from nvfp4_kernels.tiling import fused_split_count

    index = torch.cuda.current_device() if device_index is None else device_index
    return fused_split_count(n, k, m, sms=_multiprocessors(index), blocks_per_sm=_fused_occupancy(m, index))


@functools.lru_cache(maxsize=1024)
def _fused_occupancy(m: int, device_index: int) -> int:
    """Resident blocks an SM of the fused_mma configuration for M = ``m`` on the device (the
    library asks the CUDA occupancy API, which sets a kernel attribute first); an error where the
    kernel cannot run there. Asked once per M and device: a call that takes no plan (fused_mma's
    split count, fused_wgmma's plan up to M = 64) asks for it every time."""
    import torch

    with torch.cuda.device(device_index):
        occupancy = int(load_library().nvfp4_fused_occupancy(m))
    if occupancy < 1:
        raise RuntimeError(f"nvfp4_fused_occupancy({m}) failed on cuda:{device_index}: the fused kernel cannot run "
                           f"there")
    return occupancy


def launch_fused(a: Any, packed: Any, scales: Any, g_ptr: int, bias: Any | None, out: Any, m: int, n: int, k: int,
                 bf16: int, splits: int, stream: int, reduction: str, tiled: bool = False,
                 scale_bytes: int = 0) -> None:
    """Launch the fused kernel on arguments :func:`fused_mma` (or the dispatcher's plan) has
    already checked: ``a`` and ``packed`` 16-byte and ``scales`` 8-byte aligned. ``reduction``:
    "none" (one split), "last_block" or "finalize" (:data:`FUSED_REDUCTIONS`). ``tiled``: packed
    and scales are in the tile-contiguous layout, whose scale bytes lie in ``scale_bytes``
    (:func:`nvfp4_kernels.layout.scale_byte_range`; 0: not known)."""
    workspace = counters = None
    if splits > 1:
        count = fused_tiles(m, n) if reduction == "last_block" else 0
        workspace, counters = splitk_buffers(out.device.index, stream, splits * m * n, count)
    lib = _lib if _lib is not None else load_library()
    args = (a.data_ptr(), packed.data_ptr(), scales.data_ptr(), g_ptr, None if bias is None else bias.data_ptr(),
            out.data_ptr(), workspace, counters or None, m, n, k, bf16, splits, stream)
    err = lib.nvfp4_launch_fused_tiled(*args, scale_bytes) if tiled else lib.nvfp4_launch_fused(*args)
    if err:
        _check(err, KERNEL_NAMES["fused_mma"])


def fused_wgmma_plan(n: int, k: int, m: int, device_index: int) -> tuple[int, int]:
    """(whole_tiles, splits) the fused_wgmma kernel runs for M = ``m`` rows of an [n, k] weight
    on CUDA device ``device_index`` by default: :func:`nvfp4_kernels.tiling.wgmma_call_plan` for
    its multiprocessor count and, up to its 64-row activation tile, fused_mma's occupancy there
    (fused_mma's split count, so fused_mma's bits). The full path and the eager fast path both
    take it from here, so they sum alike."""
    from nvfp4_kernels.tiling import WGMMA_FUSED_MMA_PLAN_MAX_M, wgmma_call_plan

    occupancy = _fused_occupancy(m, device_index) if 1 <= m <= WGMMA_FUSED_MMA_PLAN_MAX_M else None
    return wgmma_call_plan(n, k, m, _multiprocessors(device_index), occupancy)


def fused_wgmma_workspace_floats(m: int, n: int, plan: tuple[int, int]) -> int:
    """The fp32 partials a fused_wgmma launch of ``plan`` (whole_tiles, splits) writes for M = ``m``:
    ``splits`` per output of the tiles past the whole ones, or 0 when nothing is split."""
    from nvfp4_kernels.tiling import WGMMA_TILE_ROWS

    whole, splits = plan
    rest = n - whole * WGMMA_TILE_ROWS
    return splits * m * rest if splits > 1 and rest > 0 else 0


def fused_wgmma_act_bytes(m: int, k: int) -> int:
    """Bytes of the permuted activations a fused_wgmma launch writes before its kernel: whole
    activation tiles of ``k`` 2-byte values (the library's count)."""
    lib = _lib if _lib is not None else load_library()
    return 2 * k * int(lib.nvfp4_fused_wgmma_act_rows(m))


def fused_wgmma(a: Any, packed: Any, scales: Any, g: Any, bias: Any | None, out: Any,
                plan: tuple[int, int] | None = None, tiled: tuple[Any, ...] | None = None) -> None:
    """out[M, N] = a[M, K] @ W^T (+ bias) with the fused_wgmma kernel (Hopper, sm_90): 1 <= M <= 256,
    block_size 16, K % 128 == 0, the contract's row-major weight. fp32 accumulation; the bias is
    added in fp32 before the single rounding. ``plan`` (whole_tiles, splits) defaults to
    :func:`fused_wgmma_plan` for the shape, M and the GPU; it sets the summation order, so the
    bits of a shape are pinned per GPU and plan (up to M = 64, fused_mma's bits).

    The kernel runs in fused_mma's K order: each lane decodes 32 consecutive codes of a row and
    step, the activations are permuted to match by a kernel launched first (into a workspace kept
    per device and stream), and the bits are fused_mma's at the same K ranges. ``tiled``:
    fused_mma's tile-contiguous copy (:func:`nvfp4_kernels.layout.tile_weights`, or what
    :func:`nvfp4_kernels.layout.registered` hands out for "fused_mma"), read instead of ``packed``
    and ``scales`` (which still give the shape and are checked)."""
    prepare_fused_wgmma(a, packed, scales, g, bias, out, plan, tiled)()


def prepare_fused_wgmma(a: Any, packed: Any, scales: Any, g: Any, bias: Any | None, out: Any,
                        plan: tuple[int, int] | None = None,
                        tiled: tuple[Any, ...] | None = None) -> PreparedLaunch:
    """:func:`fused_wgmma`'s checks, plan and workspaces once; the returned :class:`PreparedLaunch` launches it
    (the activation permutation, then the kernel), as often as it is called, into ``out`` on the
    stream current now. See :func:`prepare_gemv` for why."""
    import torch
    from nvfp4_kernels.model import WGMMA_MAX_M
    from nvfp4_kernels.reference import FUSED_STEP_K
    from nvfp4_kernels.tiling import WGMMA_TILE_ROWS, nonempty_ranges

    m, n, k, bf16 = _check_matmul_operands("fused_wgmma kernel", a, packed, scales, g, bias, out, WGMMA_MAX_M,
                                           FUSED_STEP_K)
    if k == 0:
        raise ValueError("the fused_wgmma kernel needs K >= 128; K = 0 has no dot products (nvfp4_matmul returns "
                         "the bias for it, recorded as the shortcut bias_only)")
    if tiled is not None:
        packed, scales, _ = _tiled_copy(tiled, n, k, out.device)  # the kernel reads these instead
    if n == 0:
        return NOTHING
    index = out.device.index if out.device.index is not None else torch.cuda.current_device()
    if plan is None:
        plan = fused_wgmma_plan(n, k, m, index)
    whole, splits = plan
    tiles, steps = -(-n // WGMMA_TILE_ROWS), k // FUSED_STEP_K
    if not (0 <= whole <= tiles and 1 <= splits <= steps and nonempty_ranges(steps, splits) == splits):
        raise ValueError(f"plan must be (whole_tiles in [0, {tiles}], splits in [1, {steps}] with equal non-empty "
                         f"ranges of ceil({steps} / splits) steps), got {plan!r}")
    lib = _lib if _lib is not None else load_library()
    # Every buffer the launch reads or writes stays held (PreparedLaunch.buffers) for as long as
    # it may be called: an aligned copy or a workspace dropped after taking its address goes back
    # to the caching allocator, and the next allocation here (another copy; inside a CUDA graph
    # capture, any workspace) could be handed the same memory.
    a_, packed_, scales_ = _aligned(a, 16), _aligned(packed, 16), _aligned(scales, 8)
    stream = _stream(out)
    floats = fused_wgmma_workspace_floats(m, n, plan)
    workspace = gemv_workspace(index, stream, floats) if floats else None
    act = byte_workspace(index, stream, fused_wgmma_act_bytes(m, k))
    args = (a_.data_ptr(), act.data_ptr(), packed_.data_ptr(), scales_.data_ptr(), g.data_ptr(),
            None if bias is None else bias.data_ptr(), out.data_ptr(),
            None if workspace is None else workspace.data_ptr(), m, n, k, bf16, whole, splits,
            int(tiled is not None), stream)

    def launch() -> None:
        err = lib.nvfp4_launch_fused_wgmma_mma_order(*args)
        if err:
            _check(err, KERNEL_NAMES["fused_wgmma"])

    return PreparedLaunch(launch, (a_, packed_, scales_, g, bias, out, workspace, act))


@functools.lru_cache(maxsize=64)
def _multiprocessors(device_index: int) -> int:
    import torch

    return int(torch.cuda.get_device_properties(device_index).multi_processor_count)


def packed_launcher() -> Any:
    """``nvfp4_launch_packed(kernel, address) -> cudaError_t`` of the loaded library: the
    dispatcher's fast path calls it directly (:data:`PACKED_KERNEL`, LaunchArgs filled and
    checked) and passes a non-zero result to :func:`raise_launch_error`."""
    return (_lib if _lib is not None else load_library()).nvfp4_launch_packed


#: ``NVFP4_LAUNCH_CALL``: how the fast path calls the library. "auto" (the default): the C
#: extension where it builds, else ctypes; "extension": the extension or an error; "ctypes": always
#: ctypes (for A/B runs and for checking the fallback).
LAUNCH_CALL_ENV = "NVFP4_LAUNCH_CALL"
LAUNCH_CALL_MODES = ("auto", "extension", "ctypes")
#: a launch call: (kernel, words, address, a, out, workspace, counters, stream, g) -> cudaError_t
LaunchCall = Callable[[int, Any, int, int, int, int, int, int, int], int]
_launch_call: tuple[LaunchCall, str, str] | None = None


def launch_call() -> LaunchCall:
    """The fast path's call into the library: ``launch(kernel, words, address, a, out,
    workspace, counters, stream, g)`` writes the six per-call pointers into the argument words at
    ``address`` (``words``, the ctypes array there) and runs ``nvfp4_launch_packed(kernel,
    address)``, returning its ``cudaError_t``.

    It is the C extension ``kernels/host/launch_call.c`` (0.5-1.7 us less host time per call
    than ctypes on the H200 machines, benchmarks/NOTES.md) when it builds, else the same thing through ctypes; which
    one, and why, is :func:`launch_call_kind`. ``$NVFP4_LAUNCH_CALL`` chooses
    (:data:`LAUNCH_CALL_MODES`)."""
    global _launch_call
    if _launch_call is None:
        _launch_call = _make_launch_call(os.environ.get(LAUNCH_CALL_ENV, "auto"))
    return _launch_call[0]


def launch_call_kind() -> tuple[str, str]:
    """("extension", its path) or ("ctypes", why not the extension), once :func:`launch_call`
    has been chosen (it is chosen here if not)."""
    launch_call()
    assert _launch_call is not None
    return _launch_call[1], _launch_call[2]


def _make_launch_call(mode: str) -> tuple[LaunchCall, str, str]:
    if mode not in LAUNCH_CALL_MODES:
        raise ValueError(f"{LAUNCH_CALL_ENV}={mode!r} is not one of {LAUNCH_CALL_MODES}")
    packed = packed_launcher()
    if mode == "ctypes":
        return ctypes_launch_call(packed), "ctypes", f"{LAUNCH_CALL_ENV}=ctypes"
    from nvfp4_kernels import build

    try:
        path = build.build_launch_call()
        module = load_launch_call_module(path)
    except (build.BuildError, ImportError, OSError) as exc:
        if mode == "extension":
            raise RuntimeError(f"{LAUNCH_CALL_ENV}=extension, but the launch-call extension is not usable: "
                               f"{exc}") from exc
        return ctypes_launch_call(packed), "ctypes", f"the extension is not usable: {exc}"
    module.bind(ctypes.cast(packed, ctypes.c_void_p).value, LAUNCH_CALL_WORDS, ARG_WORDS)
    return module.launch, "extension", str(path)


def load_launch_call_module(path: Any) -> Any:
    """Import the built launch-call extension from ``path`` (a fresh module state per path)."""
    from nvfp4_kernels import build

    spec = importlib.util.spec_from_file_location(build.LAUNCH_CALL_MODULE, str(path))
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the launch-call extension from {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ctypes_launch_call(packed: Any) -> LaunchCall:
    """The launch call through ctypes: the same writes and the same library call as the
    extension, for machines without Python's C headers."""
    a_word, out_word, workspace_word, counters_word, stream_word, g_word = LAUNCH_CALL_WORDS

    def launch(kernel: int, words: Any, address: int, a: int, out: int, workspace: int, counters: int, stream: int,
               g: int) -> int:
        words[a_word], words[out_word], words[workspace_word] = a, out, workspace
        words[counters_word], words[stream_word], words[g_word] = counters, stream, g
        return packed(kernel, address)

    return launch


def raise_launch_error(err: int, kernel: int) -> None:
    """The RuntimeError of a failed packed launch, naming the kernel and CUDA's error string."""
    _check(err, KERNEL_NAMES[_PACKED_KERNEL_PATH[kernel]])


_workspaces: dict[tuple[int, int], Any] = {}
_byte_workspaces: dict[tuple[int, int], Any] = {}
_counters: dict[tuple[int, int], Any] = {}


@functools.lru_cache(maxsize=1)
def capture_checker() -> Any:
    """A function () -> True while the current stream is being captured into a CUDA graph
    (torch's own accessor: ~0.1 us against ~0.4 us for the public wrapper around it)."""
    import torch

    return getattr(torch._C, "_cuda_isCurrentStreamCapturing", None) or torch.cuda.is_current_stream_capturing


def gemv_workspace(device_index: int, stream: int, floats: int) -> Any:
    """A split-K workspace of at least ``floats`` fp32, kept per (device, stream) and reused:
    calls on one stream run in order, so they cannot overlap. Inside a CUDA graph capture a
    fresh one is allocated (from the graph's pool), so a replay never shares it."""
    import torch

    return _stream_buffer(_workspaces, device_index, stream, floats, torch.float32)


def byte_workspace(device_index: int, stream: int, nbytes: int) -> Any:
    """A workspace of at least ``nbytes`` bytes (uint8), kept per (device, stream) as
    :func:`gemv_workspace` keeps its own: fused_wgmma's permuted activations in fused_mma's K order."""
    import torch

    return _stream_buffer(_byte_workspaces, device_index, stream, nbytes, torch.uint8)


def _stream_buffer(cache: dict[tuple[int, int], Any], device_index: int, stream: int, numel: int, dtype: Any) -> Any:
    import torch

    if capture_checker()():
        return torch.empty(numel, dtype=dtype, device=torch.device("cuda", device_index))
    key = (device_index, stream)
    buf = cache.get(key)
    if buf is None or buf.numel() < numel:
        buf = torch.empty(numel, dtype=dtype, device=torch.device("cuda", device_index))
        cache[key] = buf
    return buf


def splitk_buffers(device_index: int, stream: int, floats: int, count: int) -> tuple[int, int]:
    """The addresses of a split-K workspace of ``floats`` fp32 and of ``count`` zeroed counters
    for a launch on ``stream`` (:func:`gemv_workspace` and :func:`splitk_counters` in one call,
    for the fast path); the counters' address is 0 when ``count`` is 0.

    Inside a CUDA graph capture it is always 0: the fused kernel then sums its splits with the
    finalize kernel (the same bits). A replay pays no host time per launch, so the one-launch sum
    has nothing to save there, and the finalize kernel needs no zeroed counters in the graph."""
    workspace = gemv_workspace(device_index, stream, floats).data_ptr()
    if not count or capture_checker()():
        return workspace, 0
    return workspace, splitk_counters(device_index, stream, count).data_ptr()


def capture_workspaces(device_index: int, floats: int, nbytes: int) -> tuple[int, int]:
    """Inside a CUDA graph capture, for fused_wgmma in fused_mma's K order on the fast path: the
    addresses of a split-K workspace of ``floats`` fp32 and of ``nbytes`` for the permuted
    activations, both in one allocation from the graph's pool. Two allocations would not do: the
    fast path keeps addresses, not tensors, so the first, dropped, could be handed out again as
    the second."""
    import torch

    offset = -(-4 * floats // 256) * 256  # the activations 256-byte aligned after the partials
    buf = torch.empty(offset + nbytes, dtype=torch.uint8, device=torch.device("cuda", device_index))
    return buf.data_ptr(), buf.data_ptr() + offset


def splitk_counters(device_index: int, stream: int, count: int) -> Any:
    """At least ``count`` int32 counters, all 0, for the fused kernel's last-block split-K sum,
    kept per (device, stream). Every launch that uses them leaves them at 0 again, and launches on
    one stream run in order, so a buffer zeroed once at allocation serves every later call of any
    shape there. Not for use inside a CUDA graph capture (see :func:`splitk_buffers`)."""
    import torch

    if capture_checker()():
        raise RuntimeError("split-K counters are not used inside a CUDA graph capture: the finalize kernel sums "
                           "the splits there (nvfp4_kernels.cuda_backend.splitk_buffers)")
    key = (device_index, stream)
    buf = _counters.get(key)
    if buf is None or buf.numel() < count:
        buf = torch.zeros(max(count, 1024), dtype=torch.int32, device=torch.device("cuda", device_index))
        _counters[key] = buf
    return buf


def fp4x2_to_halfraw2_table() -> np.ndarray:
    """uint16 [256, 2]: row b = the fp16 bits (x, y) NVIDIA's ``__nv_cvt_fp4x2_to_halfraw2(b,
    __NV_E2M1)`` returns on the GPU (x from the low nibble, y from the high one)."""
    import torch

    ok, why = available()
    if not ok:
        raise RuntimeError(f"the fp4 probe needs the CUDA backend: {why}")
    out = torch.empty(512, dtype=torch.int16, device="cuda")
    _check(load_library().nvfp4_launch_fp4_probe(out.data_ptr(), _stream(out)), PROBE_KERNEL)
    return out.cpu().numpy().view(np.uint16).reshape(256, 2).copy()
