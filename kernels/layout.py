"""The fused kernels' weight layouts: one-time transforms of packed weights and scales.

The contract's packed weight is row-major, [N, K/2] bytes. The fused kernel reads it in 64-row
tiles, 64 bytes per row and K step of 128 values, so in that layout each step of a tile is 64
pieces of 64 bytes, K/2 bytes apart. Read with the kernel's grid and no decode at all, that stream
alone took 25.3 us for a 17408 x 5120 weight on the H200 against 16.3 us for a contiguous read of
the same bytes (benchmarks/experiments/weight-stream-layout-probe-2026-12-02.json).

The tile-contiguous layout stores each (tile, step) piece in one run: the packed bytes as
``[ceil(N / 64), K / 128, 64, 64]`` and the scale bytes as ``[ceil(N / 64), K / 128, 64, 8]``,
element ``[t, s, r, c]`` being row ``64 t + r``'s byte ``64 s + c`` (scales: ``8 s + c``), with one
change inside each aligned 4-byte word of packed codes (:func:`place_signs`): its eight sign bits
move to where the kernel's table decode XORs them into the values' high bytes (code i's sign at
bit 8 i + 7 for i < 4, at bit 8 (i - 4) + 3 for i >= 4; the magnitudes stay in place), which saves
the decode two byte permutes per eight weights (benchmarks/NOTES.md). Rows past N are zero
padding. The kernel decodes the same values for the same threads, so it gives the same bits from
either layout (``nvfp4_launch_fused_tiled``). The contract's row-major inputs stay accepted
everywhere; this is a transform a caller applies once per weight.

Works on numpy arrays and torch tensors alike (the same reshape and transpose).

:func:`register` makes the dispatcher use it: it copies a weight once (on the weight's device)
and keeps the copy beside the weight, which :func:`nvfp4_kernels.nvfp4_matmul` then hands to the
fused kernel whenever it takes that path for the weight (its other paths read the row-major weight
as before). Registration costs a second copy of the weight's bytes, as a runtime's load-time repack
would if it kept the original; :func:`unregister` frees it. A weight changed in place after
registration (another version counter, address or shape) is no longer matched: the call reads the
row-major weight, and :func:`register` must be called again to copy the new values.

The fused_wgmma path (Hopper) reads the same tile-contiguous copy: it runs in fused_mma's K order,
so a lane's 16 bytes of a row and step are the same in both kernels, and one copy serves both
paths. (Its first form, in the natural K order, had a fragment-ordered layout of its own; it was
retired with that kernel form, benchmarks/NOTES.md, nineteenth session.)
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import Any, NamedTuple

from nvfp4_kernels.model import FUSED_K_MULTIPLE

#: the fused kernel's row tile (64 rows, a warp's 16 x 4 warps) and K step (its k_mod_128 guard)
TILE_ROWS = 64
STEP_K = FUSED_K_MULTIPLE
_PACKED_PER_STEP = STEP_K // 2  # bytes of one row in one K step
_SCALES_PER_STEP = STEP_K // 16


def _check(packed: Any, scales: Any) -> tuple[int, int]:
    if packed.ndim != 2 or scales.ndim != 2:
        raise ValueError(f"packed and scales must be 2-D [N, K/2] and [N, K/16], got {tuple(packed.shape)} "
                         f"and {tuple(scales.shape)}")
    n, half_k = packed.shape
    k = 2 * half_k
    if k % STEP_K:
        raise ValueError(f"the tile-contiguous layout needs K % {STEP_K} == 0 (the fused kernel's guard), got K={k}")
    if tuple(scales.shape) != (n, k // 16):
        raise ValueError(f"scales must be [N, K/16] = [{n}, {k // 16}] for block size 16, got {tuple(scales.shape)}")
    return n, k


def _pad_rows(x: Any, rows: int) -> Any:
    extra = rows - x.shape[0]
    if extra == 0:
        return x
    if hasattr(x, "new_zeros"):  # torch
        import torch

        return torch.cat([x, x.new_zeros((extra, x.shape[1]))])
    import numpy as np

    return np.concatenate([x, np.zeros((extra, x.shape[1]), dtype=x.dtype)])


def _tile(x: Any, per_step: int) -> Any:
    tiles = x.shape[0] // TILE_ROWS
    steps = x.shape[1] // per_step
    y = x.reshape(tiles, TILE_ROWS, steps, per_step)
    if hasattr(y, "permute"):  # torch: always a new tensor, never a view that keeps the input alive
        import torch

        return y.permute(0, 2, 1, 3).clone(memory_format=torch.contiguous_format)
    return y.transpose(0, 2, 1, 3).copy()


def _sign(x: Any, byte: int, bit: int) -> Any:
    """Bit ``bit`` of byte ``byte`` of every 4-byte word of ``x`` [..., 4], as 0/1 bytes."""
    return (x[..., byte] >> bit) & 1


def _stack_bytes(x: Any, parts: list[Any]) -> Any:
    if hasattr(x, "permute"):  # torch
        import torch

        return torch.stack(parts, dim=-1)
    import numpy as np

    return np.stack(parts, axis=-1)


def _check_words(x: Any) -> None:
    if x.ndim < 1 or x.shape[-1] % 4 or str(x.dtype).rsplit(".", 1)[-1] != "uint8":
        raise ValueError(f"sign placement works on uint8 codes whose last dimension is a multiple of 4 "
                         f"(whole 32-bit words), got {x.dtype} of shape {tuple(x.shape)}")


def place_signs(packed: Any) -> Any:
    """Move the sign bits of every aligned 4-byte word of packed codes (uint8, last dimension a
    multiple of 4) to where the fused kernel's decode of the tiled layout reads them.

    A little-endian word holds codes 0..7 as nibbles 0..7 (byte j: code 2 j low, 2 j + 1 high);
    code i's sign is bit 3 of its nibble. Afterwards byte j holds the magnitudes of codes 2 j and
    2 j + 1 as before, the sign of code j at bit 7 and the sign of code j + 4 at bit 3; this is
    ``place_signs`` of kernels/cuda/mma_decode.cuh on one word."""
    _check_words(packed)
    words = packed.reshape(*packed.shape[:-1], packed.shape[-1] // 4, 4)
    parts = []
    for j in range(4):
        sign_j = _sign(words, j // 2, 3 + 4 * (j % 2))            # code j
        sign_j4 = _sign(words, 2 + j // 2, 3 + 4 * (j % 2))       # code j + 4
        parts.append((words[..., j] & 0x77) | (sign_j << 7) | (sign_j4 << 3))
    return _stack_bytes(packed, parts).reshape(packed.shape)


def unplace_signs(placed: Any) -> Any:
    """The inverse of :func:`place_signs`: the contract's code bytes back."""
    _check_words(placed)
    words = placed.reshape(*placed.shape[:-1], placed.shape[-1] // 4, 4)
    parts = []
    for b in range(4):
        out = words[..., b] & 0x77
        for half in range(2):
            code = 2 * b + half
            sign = _sign(words, code, 7) if code < 4 else _sign(words, code - 4, 3)
            out = out | (sign << (3 + 4 * half))
        parts.append(out)
    return _stack_bytes(placed, parts).reshape(placed.shape)


def _padded_rows(n: int) -> int:
    return -(-n // TILE_ROWS) * TILE_ROWS


def _tiled_scales(scales: Any) -> Any:
    """The scale bytes as both layouts store them: [ceil(N / 64), K / 128, 64, 8]."""
    return _tile(_pad_rows(scales, _padded_rows(scales.shape[0])), _SCALES_PER_STEP)


def _tiled_codes(packed: Any) -> Any:
    """The packed codes of :func:`tile_weights`: tile-contiguous, signs placed."""
    return place_signs(_tile(_pad_rows(packed, _padded_rows(packed.shape[0])), _PACKED_PER_STEP))


def tile_weights(packed: Any, scales: Any) -> tuple[Any, Any]:
    """Row-major ``packed`` [N, K/2] and ``scales`` [N, K/16] (uint8) -> the tile-contiguous pair
    (the packed codes with their signs placed, :func:`place_signs`)."""
    _check(packed, scales)
    return _tiled_codes(packed), _tiled_scales(scales)


def _untile(y: Any, n: int) -> Any:
    tiles, steps, rows, per_step = y.shape
    x = y.permute(0, 2, 1, 3) if hasattr(y, "permute") else y.transpose(0, 2, 1, 3)
    x = x.reshape(tiles * rows, steps * per_step)
    return x[:n]


def untile_weights(packed_tiles: Any, scales_tiles: Any, n: int) -> tuple[Any, Any]:
    """The inverse of :func:`tile_weights` (drops the padding rows): for checking the transform."""
    if packed_tiles.ndim != 4 or scales_tiles.ndim != 4:
        raise ValueError("tile-contiguous weights are 4-D: [tiles, K/128, 64, 64] and [tiles, K/128, 64, 8]")
    return _untile(unplace_signs(packed_tiles), n), _untile(scales_tiles, n)


def tiled_shapes(n: int, k: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The shapes :func:`tile_weights` gives for an [n, k] weight."""
    tiles, steps = -(-n // TILE_ROWS), k // STEP_K
    return (tiles, steps, TILE_ROWS, _PACKED_PER_STEP), (tiles, steps, TILE_ROWS, _SCALES_PER_STEP)


def check_tiled(packed_tiles: Any, scales_tiles: Any, n: int, k: int) -> None:
    """Raise unless the pair is uint8, contiguous and shaped as :func:`tile_weights` makes it for
    [n, k]."""
    want_p, want_s = tiled_shapes(n, k)
    for name, x, want in (("packed", packed_tiles, want_p), ("scales", scales_tiles, want_s)):
        if tuple(x.shape) != want:
            raise ValueError(f"tiled {name} must be {list(want)} for an [{n}, {k}] weight "
                             f"(nvfp4_kernels.layout.tile_weights), got {list(x.shape)}")
        if str(x.dtype).rsplit(".", 1)[-1] != "uint8":
            raise TypeError(f"tiled {name} must be uint8 (nvfp4_kernels.layout.tile_weights), got {x.dtype}")
        if hasattr(x, "is_contiguous") and not x.is_contiguous():
            raise ValueError(f"tiled {name} must be contiguous (tile_weights returns contiguous tensors)")


#: the scale bytes a range may span: positive, finite, non-zero E4M3 values (0x00 is zero, 0x7F
#: NaN, 0x80 and up negative or -0 / -NaN)
ORDINARY_SCALE_BYTES = (0x01, 0x7E)


def scale_byte_range(scales: Any) -> int:
    """The range of a weight's E4M3 scale bytes as the tiled kernel takes it: ``lo | hi << 8``
    when every byte lies in ``[lo, hi]`` inside :data:`ORDINARY_SCALE_BYTES`, else 0 (not known).

    Why: the fused kernel's fast table decode holds for a scale block when s = fp32(e4m3 * g)
    lies in the table's range, which it otherwise tests every K step. s is monotone in the
    ordinary bytes for any g, so the kernel tests the two ends once per block instead and skips
    the per-step test where both pass (the same bits either way). One pass over the scales, on
    their device; :func:`register` computes it once per weight."""
    if scales.ndim != 2:
        raise ValueError(f"scales must be 2-D [N, K/16], got shape {tuple(scales.shape)}")
    if scales.shape[0] * scales.shape[1] == 0:
        return 0
    lo, hi = int(scales.min()), int(scales.max())
    if lo < ORDINARY_SCALE_BYTES[0] or hi > ORDINARY_SCALE_BYTES[1]:
        return 0
    return lo | hi << 8


def check_scale_bytes(scale_bytes: Any) -> int:
    """``scale_bytes`` if it is a range :func:`scale_byte_range` can give (0, or ``lo | hi << 8``
    with ``1 <= lo <= hi <= 0x7E``), else a ValueError that says what it must be."""
    if isinstance(scale_bytes, bool) or not isinstance(scale_bytes, int):
        raise ValueError(f"scale_bytes must be an int (layout.scale_byte_range), got {scale_bytes!r}")
    lo, hi = scale_bytes & 0xFF, scale_bytes >> 8
    if scale_bytes != 0 and not (ORDINARY_SCALE_BYTES[0] <= lo <= hi <= ORDINARY_SCALE_BYTES[1]):
        raise ValueError(f"scale_bytes must be 0 or lo | hi << 8 with 1 <= lo <= hi <= 0x7E "
                         f"(layout.scale_byte_range of the weight's scales), got {scale_bytes:#x}")
    return scale_bytes


#: the paths whose kernels read a registered weight's own copy, and the layout each reads
REGISTERED_PATHS: dict[str, str] = {"fused_mma": "tile-contiguous (tile_weights)",
                                    "fused_wgmma": "tile-contiguous (tile_weights), read in fused_mma's K order"}


@dataclass
class _Entry:
    """A registered weight: weak references to the row-major pair, what identified it when it was
    copied, the range of its scale bytes, the paths it was registered for and its one
    tile-contiguous copy (codes and scale bytes), which both fused paths read."""

    b_ref: Any
    scales_ref: Any
    stamp: tuple
    paths: tuple[str, ...]
    packed_tiles: Any
    scales_tiles: Any
    scale_bytes: int

    def copy_for(self, path: str) -> TiledWeight | None:
        return TiledWeight(self.packed_tiles, self.scales_tiles, self.scale_bytes) if path in self.paths else None


class TiledWeight(NamedTuple):
    """What :func:`registered` hands out: the tile-contiguous packed codes and scale bytes and the
    weight's scale-byte range (:func:`scale_byte_range`), in the order
    :func:`nvfp4_kernels.cuda_backend.fused_mma` and :func:`nvfp4_kernels.cuda_backend.fused_wgmma`
    take as their ``tiled`` argument."""

    packed: Any
    scales: Any
    scale_bytes: int


_registry: dict[int, _Entry] = {}
_lock = threading.Lock()


def _stamp(b: Any, scales: Any) -> tuple:
    """What must not change for a registered copy to stay the weight's: addresses, shapes and version
    counters (inference tensors keep none; their shapes and addresses stand in)."""
    def version(x: Any) -> int | None:
        try:
            return int(x._version)
        except (AttributeError, RuntimeError):
            return None

    return (b.data_ptr(), tuple(b.shape), version(b), scales.data_ptr(), tuple(scales.shape), version(scales))


def tiled_weight(packed: Any, scales: Any) -> TiledWeight:
    """What :func:`register` keeps for a weight's fused_mma path: :func:`tile_weights` of the pair
    and the range of its scale bytes (:func:`scale_byte_range`), ready to pass as ``tiled`` to
    :func:`nvfp4_kernels.cuda_backend.fused_mma` (the benchmark times the registered path this way)."""
    packed_tiles, scales_tiles = tile_weights(packed, scales)
    return TiledWeight(packed_tiles, scales_tiles, scale_byte_range(scales))


def default_paths(device: Any) -> tuple[str, ...]:
    """The paths :func:`register` keeps a copy for when not told: fused_mma everywhere, and
    fused_wgmma where its kernel runs (a CUDA device of compute capability 9.0, the path's
    arch_sm90 guard)."""
    import torch

    device = torch.device(device)
    if device.type == "cuda" and torch.cuda.get_device_capability(device) == (9, 0):
        return ("fused_mma", "fused_wgmma")
    return ("fused_mma",)


class Registration(NamedTuple):
    """What :func:`register` kept for a weight: the paths that now read the registered copy, and the
    bytes it takes on the weight's device beside the weight itself (one tile-contiguous copy of
    the packed codes and of the scale bytes, rows padded to whole 64-row tiles, whichever paths
    read it)."""

    paths: tuple[str, ...]
    extra_bytes: int


def register(b: Any, weight_scale: Any, paths: tuple[str, ...] | list[str] | None = None) -> Registration:
    """Copy the packed weight ``b`` [N, K/2] and its scales [N, K/16] (uint8 torch tensors on one
    device) once into the layout each of ``paths`` reads fastest (:data:`REGISTERED_PATHS`), so
    that the dispatcher hands that path the copy for this weight: the same bits, a faster weight
    stream. ``paths`` defaults to :func:`default_paths` for the weight's device (on an H200 both
    fused paths, which read the same tile-contiguous copy). Memory: the packed bytes once more
    (N K / 2) and the scale bytes once more (N K / 16), however many paths read them.
    Registering again replaces the copies (after an in-place change, or to change the paths).
    Returns the paths and the bytes kept (:class:`Registration`)."""
    import torch

    if not isinstance(b, torch.Tensor) or not isinstance(weight_scale, torch.Tensor):
        raise TypeError("register takes the torch tensors nvfp4_matmul is called with (b, weight_scale)")
    if b.dtype != torch.uint8 or weight_scale.dtype != torch.uint8:
        raise TypeError(f"b and weight_scale must be uint8 (packed E2M1 codes, E4M3 bytes), got {b.dtype} and "
                        f"{weight_scale.dtype}")
    if b.device != weight_scale.device:
        raise ValueError(f"b and weight_scale must be on one device, got {b.device} and {weight_scale.device}")
    chosen = default_paths(b.device) if paths is None else tuple(paths)
    unknown = [p for p in chosen if p not in REGISTERED_PATHS]
    if unknown or not chosen:
        raise ValueError(f"paths must name one or more of {sorted(REGISTERED_PATHS)} (the paths that read a "
                         f"registered copy), got {paths!r}")
    b_c, s_c = b.contiguous(), weight_scale.contiguous()
    _check(b_c, s_c)
    packed_tiles, scales_tiles = _tiled_codes(b_c), _tiled_scales(s_c)  # one copy, read by every path
    kept_paths = tuple(p for p in REGISTERED_PATHS if p in chosen)
    key = id(b)
    entry = _Entry(weakref.ref(b, lambda _ref, key=key: _forget(key)), weakref.ref(weight_scale),
                   _stamp(b, weight_scale), kept_paths, packed_tiles, scales_tiles, scale_byte_range(s_c))
    with _lock:
        _registry[key] = entry
    _forget_plans(b)
    return Registration(kept_paths, sum(int(x.numel()) * x.element_size() for x in (packed_tiles, scales_tiles)))


def _forget_plans(b: Any) -> None:
    """The dispatcher's fast path keeps one plan per weight and input shape, and a plan fixes the
    layout its kernel reads: (un)registering a weight drops its plans."""
    from nvfp4_kernels import fast

    fast.forget_weight(b)


def _forget(key: int) -> None:
    with _lock:
        entry = _registry.get(key)
        if entry is not None and entry.b_ref() is None:
            del _registry[key]


def unregister(b: Any) -> bool:
    """Drop ``b``'s copies; True when there were any."""
    with _lock:
        entry = _registry.get(id(b))
        if entry is None or entry.b_ref() is not b:
            return False
        del _registry[id(b)]
    _forget_plans(b)
    return True


def registered(b: Any, weight_scale: Any, path: str = "fused_mma") -> TiledWeight | None:
    """``path``'s copy of a registered (``b``, ``weight_scale``) that still matches them, with the
    shared scale bytes and their range; None when the weight is not registered, was changed in
    place since (the stale copies are dropped), or was registered without ``path``."""
    if path not in REGISTERED_PATHS:
        raise ValueError(f"path must be one of {sorted(REGISTERED_PATHS)}, got {path!r}")
    if not _registry:
        return None
    entry = _registry.get(id(b))
    if entry is None or entry.b_ref() is not b or entry.scales_ref() is not weight_scale:
        return None
    if entry.stamp != _stamp(b, weight_scale):
        # changed in place since it was copied: the copies are stale, the row-major weight is read
        with _lock:
            if _registry.get(id(b)) is entry:
                del _registry[id(b)]
        return None
    return entry.copy_for(path)
