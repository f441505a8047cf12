"""Shape matrices that force every dispatch path and both sides of every guard.

A suite that only ever calls the operator with M <= 8 and K % 128 == 0 never leaves the fused
decode path, however many cases it has (and never meets the GEMV at all: the default policy
turns it off, so the GEMV cases here carry a policy that enables it). The matrix here is
written the other way round: every :class:`ShapeCase` states the path it is meant to force
(``case.path``) and, computed from the guard table of docs/paths.md (restated in
:func:`expected_guards`, independently of :mod:`nvfp4_kernels.paths`), the outcome of every
guard the dispatcher evaluates for it. The suites run each case through the dispatcher and
fail when the announced event disagrees, so a case that does not force what it claims is a
test failure, not a silent loss of coverage.

Cases build their own operands (:meth:`ShapeCase.build`), including misaligned views of B or
of the output buffer, on the CPU (numpy) or on a GPU (torch CUDA tensors). Cases marked
``gpu_only`` need a CUDA device (e.g. misaligned CUDA views).

The module also holds the independent oracle the suites check results against:
:func:`oracle_dequantize` decodes with ml_dtypes' own E2M1 / E4M3 types (not the tables of
:mod:`nvfp4_kernels.nvfp4`), and :func:`matmul_error_bound` gives a sound elementwise bound for
comparing any path's output with a float64 product.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import ml_dtypes
import numpy as np
import nvfp4_kernels
from nvfp4_kernels.model import PATH_NAMES, Policy

#: Paths that add the bias in fp32 before their one rounding to T (docs/contract.md).
SINGLE_ROUNDING_PATHS = ("gemv", "fused_mma", "fused_wgmma")
#: Outcomes that launch no kernel (the dispatcher announces them with these names).
SHORTCUT_PATHS = ("empty", "bias_only")
DTYPES = ("float16", "bfloat16")
_NP_DTYPES = {"float16": np.dtype(np.float16), "bfloat16": np.dtype(ml_dtypes.bfloat16)}
#: Alignment the matrix gives to "aligned" buffers (more than the 16 bytes vec8 needs).
BUFFER_ALIGNMENT = 64


# --- random sources ---------------------------------------------------------------------------


class RandomSource(Protocol):
    """The part of ``numpy.random.Generator`` that :meth:`ShapeCase.build` uses."""

    def integers(self, low: int, high: int, size: Any = None) -> Any: ...

    def uniform(self, low: float, high: float, size: Any = None) -> Any: ...


class StableRng:
    """A counter-based generator (SplitMix64) whose streams never change.

    ``numpy.random.Generator`` does not promise identical streams across numpy versions, which
    is fine for property tests but not for goldens: a golden must depend only on the operator.
    Only integer arithmetic and one exact scaling are used, so every machine draws the same bits.
    """

    def __init__(self, seed: int) -> None:
        self._seed = np.uint64(seed & 0xFFFFFFFFFFFFFFFF)
        self._counter = 0

    def _bits(self, count: int) -> np.ndarray:
        idx = np.arange(self._counter, self._counter + count, dtype=np.uint64)
        self._counter += count
        with np.errstate(over="ignore"):
            z = self._seed + (idx + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15)
            z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))

    def integers(self, low: int, high: int, size: Any = None) -> np.ndarray:
        shape = () if size is None else tuple(np.atleast_1d(size))
        count = int(np.prod(shape)) if shape else 1
        span = np.uint64(high - low)
        values = (self._bits(count) % span).astype(np.int64) + low
        return values.reshape(shape)

    def uniform(self, low: float, high: float, size: Any = None) -> np.ndarray:
        shape = () if size is None else tuple(np.atleast_1d(size))
        count = int(np.prod(shape)) if shape else 1
        unit = (self._bits(count) >> np.uint64(11)).astype(np.float64) * 2.0**-53
        return (low + (high - low) * unit).reshape(shape)


# --- the guard table, restated ----------------------------------------------------------------


def expected_guards(op: str, m: int | None, n: int, k: int, block_size: int, aligned: bool,
                    sm: int | None = None, policy: Policy | None = None) -> dict[str, bool]:
    """Every guard outcome the dispatcher should announce, from docs/paths.md.

    Written out again here (not read from :mod:`nvfp4_kernels.model`) so that a weakened guard in
    the dispatcher disagrees with the matrix instead of silently agreeing with itself.
    """
    policy = policy or Policy()
    outcomes: dict[str, bool] = {}
    if op == "matmul":
        outcomes.update({
            "gemv.m_in_range": m is not None and 1 <= m <= policy.gemv_max_m,
            "gemv.small_layer": policy.gemv_max_weights is None or n * k <= policy.gemv_max_weights,
            "gemv.block_size_16": block_size == 16,
            "gemv.k_mod_32": k % 32 == 0,
            "native_fp4.arch_sm120": sm is not None and 120 <= sm <= 129,
            "native_fp4.enabled": policy.native_fp4_enabled,
            "native_fp4.block_size_16": block_size == 16,
            "native_fp4.k_mod_32": k % 32 == 0,
            "native_fp4.n_mod_32": n % 32 == 0,
            "fused_mma.m_in_range": m is not None and 1 <= m <= policy.fused_max_m,
            "fused_mma.block_size_16": block_size == 16,
            "fused_mma.k_mod_128": k % 128 == 0,
            "fused_wgmma.m_in_range": m is not None and policy.wgmma_min_m <= m <= policy.wgmma_max_m,
            "fused_wgmma.arch_sm90": sm is None or sm == 90,  # sm None: the CPU backend
            "fused_wgmma.block_size_16": block_size == 16,
            "fused_wgmma.k_mod_128": k % 128 == 0,
        })
    outcomes.update({
        "prefill_vec8.k_mod_8": k % 8 == 0,
        "prefill_vec8.block_size_even": block_size % 2 == 0,
        "prefill_vec8.aligned": aligned,
    })
    return outcomes


def path_from_guards(guards: Mapping[str, bool]) -> str:
    """The first path in preference order whose guards all hold (prefill_scalar has none)."""
    for path in PATH_NAMES:
        mine = [v for name, v in guards.items() if name.split(".", 1)[0] == path]
        if path == "prefill_scalar" or (mine and all(mine)):
            return path
    raise AssertionError("unreachable: prefill_scalar is the unconditional fallback")


# --- cases ------------------------------------------------------------------------------------


@dataclass
class Operands:
    """The inputs of one call, in the container the backend takes (numpy or torch)."""

    a: Any | None
    b: Any
    weight_scale: Any
    weight_scale_2: np.float32
    bias: Any | None = None
    out: Any | None = None


@dataclass(frozen=True)
class ShapeCase:
    """One call of the operator that must take ``path`` with the guard outcomes ``guards``.

    ``lead`` are A's leading dimensions (their product is M); ``misaligned`` names the buffer
    placed one byte off an aligned address (``"b"`` or ``"out"``), which is what sends vec8
    calls to the scalar kernel. ``gpu_only`` cases need CUDA tensors to mean anything.
    """

    id: str
    op: str
    lead: tuple[int, ...] | None
    n: int
    k: int
    block_size: int
    dtype: str
    path: str
    why: str
    misaligned: str | None = None
    bias: bool = False
    gpu_only: bool = False
    policy: Policy = field(default_factory=Policy)
    #: ``"codes"``: random codes and finite scale bytes; ``"quantized"``: nvfp4_kernels.nvfp4.quantize
    #: of uniform random weights (the scales a real checkpoint has)
    weights: str = "codes"

    @property
    def m(self) -> int | None:
        return None if self.lead is None else int(np.prod(self.lead))

    def guards(self, sm: int | None = None) -> dict[str, bool]:
        """Guard outcomes this case must produce on a device of compute capability ``sm``."""
        if self.path in SHORTCUT_PATHS:
            return {}  # shortcuts launch nothing and evaluate no guard
        return expected_guards(self.op, self.m, self.n, self.k, self.block_size,
                               self.misaligned is None, sm, self.policy)

    def build(self, rng: RandomSource, backend: str = "cpu", container: str = "numpy") -> Operands:
        """Random codes, random finite E4M3 scale bytes (both signs, 2^-3..2^3), activations
        in [-2, 2] and bias in [-1, 1], placed in ``backend``'s memory with the alignment the
        case asks for. ``container`` is ``"numpy"`` or ``"torch"`` for the CPU backend."""
        n, k, bs = self.n, self.k, self.block_size
        if self.weights == "quantized":
            from nvfp4_kernels.nvfp4 import quantize

            packed, scales, g = quantize(rng.uniform(-4, 4, (n, k)).astype(np.float32), bs)
        else:
            packed, scales = random_weights(rng, n, k, bs)
            g = np.float32(0.125)
        np_dtype = _NP_DTYPES[self.dtype]
        a = None if self.lead is None else rng.uniform(-2, 2, self.lead + (k,)).astype(np_dtype)
        bias = rng.uniform(-1, 1, (n,)).astype(np_dtype) if self.bias else None
        torch_out = backend == "cuda" or container == "torch"
        device = "cuda" if backend == "cuda" else "cpu"
        b = place(packed, device, torch_out, offset=1 if self.misaligned == "b" else 0)
        out = None
        if self.op == "dequantize" and self.misaligned == "out":
            out = place(np.zeros((n, k), dtype=np_dtype), device, torch_out, offset=2)
        convert = (lambda x: place(x, device, True)) if torch_out else (lambda x: x)
        return Operands(a=None if a is None else convert(a), b=b, weight_scale=convert(scales),
                        weight_scale_2=g, bias=None if bias is None else convert(bias), out=out)

    def run(self, ops: Operands, backend: str = "auto") -> Any:
        """Call the dispatcher with this case's operands and policy."""
        if self.op == "dequantize":
            return nvfp4_kernels.dequantize(ops.b, ops.weight_scale, ops.weight_scale_2, self.block_size,
                                      self.dtype, backend=backend, policy=self.policy, out=ops.out)
        return nvfp4_kernels.nvfp4_matmul(ops.a, ops.b, ops.weight_scale, ops.weight_scale_2,
                                    self.block_size, ops.bias, backend=backend, policy=self.policy)


def random_weights(rng: RandomSource, n: int, k: int, block_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(packed, scale bytes) for an [n, k] weight: uniformly random E2M1 codes, and finite E4M3
    scale bytes of both signs with exponents 2^-3..2^3 (every mantissa). Draws codes, then signs,
    exponents and mantissas, in that order: the seeds of committed results depend on it."""
    codes = rng.integers(0, 16, (n, k)).astype(np.uint8)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    nblocks = -(-k // block_size)
    sign = rng.integers(0, 2, (n, nblocks)).astype(np.uint8) << 7
    exponent = rng.integers(4, 11, (n, nblocks)).astype(np.uint8) << 3
    mantissa = rng.integers(0, 8, (n, nblocks)).astype(np.uint8)
    return packed, (sign | exponent | mantissa).astype(np.uint8)


def place(host: np.ndarray, device: str = "cpu", as_torch: bool = False, offset: int = 0) -> Any:
    """Copy ``host`` into a fresh buffer whose first byte is ``offset`` bytes past a
    :data:`BUFFER_ALIGNMENT`-aligned address: a contiguous view, aligned or deliberately not."""
    host = np.ascontiguousarray(host)
    nbytes = host.nbytes
    if as_torch or device != "cpu":
        import torch

        raw = torch.empty(nbytes + 2 * BUFFER_ALIGNMENT, dtype=torch.uint8, device=device)
        start = (-raw.data_ptr()) % BUFFER_ALIGNMENT + offset
        view = raw[start:start + nbytes]
        view.copy_(torch.from_numpy(host.reshape(-1).view(np.uint8).copy()).to(device))
        torch_dtype = {"uint8": torch.uint8, "float16": torch.float16, "bfloat16": torch.bfloat16,
                       "float32": torch.float32}[host.dtype.name]
        return view.view(torch_dtype).reshape(host.shape)
    raw = np.empty(nbytes + 2 * BUFFER_ALIGNMENT, dtype=np.uint8)
    start = (-raw.ctypes.data) % BUFFER_ALIGNMENT + offset
    view = raw[start:start + nbytes].view(host.dtype).reshape(host.shape)
    view[...] = host
    return view


def _mm(id: str, lead: tuple[int, ...], n: int, k: int, bs: int, dtype: str, path: str, why: str,
        **extra: Any) -> ShapeCase:
    return ShapeCase(id, "matmul", lead, n, k, bs, dtype, path, why, **extra)


def _dq(id: str, n: int, k: int, bs: int, dtype: str, path: str, why: str, **extra: Any) -> ShapeCase:
    return ShapeCase(id, "dequantize", None, n, k, bs, dtype, path, why, **extra)


BIG_N = 65_537  # more rows than a 2-D grid's blockIdx.y can cover (65,535)

#: The policy under which every layer is too large for the decode GEMV (``gemv_max_weights = 0``:
#: its small_layer guard false). The default takes the GEMV for 1 <= M <= 8 on every layer of at
#: most 2^24 weights (the H200 crossover), which is every layer of this matrix (a 2^24-weight
#: layer would take the CPU backend minutes), so the cases that reach the fused path or prefill at
#: decode M through that guard carry this policy.
LARGE_LAYERS_POLICY = Policy(gemv_max_weights=0)
#: The policy that lets fused_mma take M up to its kernel's own limit (256), with fused_wgmma off
#: (it would take M >= wgmma_min_m, 33, first on the CPU backend and a Hopper GPU); the default stops fused_mma
#: at M = 128 (the H200 crossover against prefill).
FUSED_FULL_POLICY = Policy(fused_max_m=256, wgmma_max_m=0)
#: fused_wgmma off, as on a GPU other than Hopper: fused_mma keeps its whole default range
NO_WGMMA_POLICY = Policy(wgmma_max_m=0)

#: The matrix: (path forced, guard side exercised) for every path, edges included.
MATRIX: tuple[ShapeCase, ...] = (
    # gemv: 1 <= M <= gemv_max_m (8), N * K <= gemv_max_weights (2^24), block 16, K % 32 == 0
    _mm("gemv-m1-n1", (1,), 1, 32, 16, "float16", "gemv", "M = 1, N = 1"),
    _mm("gemv-m1-bias", (1,), 48, 64, 16, "bfloat16", "gemv", "M = 1 with bias", bias=True),
    _mm("gemv-m8-edge", (8,), 40, 96, 16, "float16", "gemv", "M = 8: the last M the GEMV takes (gemv_max_m = 8)",
        bias=True),
    _mm("gemv-lead-2x3", (2, 3), 24, 128, 16, "bfloat16", "gemv", "A [2, 3, K]: leading dims flatten to M"),
    _mm("gemv-misaligned-b", (2,), 16, 64, 16, "bfloat16", "gemv",
        "misaligned B does not matter to the GEMV (vec8's aligned guard false, gemv still taken)",
        misaligned="b"),
    _mm("gemv-big-n", (1,), BIG_N, 32, 16, "bfloat16", "gemv", "N > 65,535 rows"),
    _mm("gemv-layer-edge", (2,), 24, 128, 16, "bfloat16", "gemv",
        "N * K = 3072 = gemv_max_weights: the largest layer the GEMV takes", policy=Policy(gemv_max_weights=3072)),
    _mm("gemv-any-layer", (4,), 24, 128, 16, "float16", "gemv",
        "gemv_max_weights = None: the GEMV takes decode on a layer of any size",
        policy=Policy(gemv_max_weights=None)),
    # fused_mma: gemv_max_m < M <= fused_max_m (128 by default, at most 256) and, where fused_wgmma
    # runs (the CPU backend, Hopper), M < wgmma_min_m (33 by default); block 16, K % 128 == 0
    _mm("fused-m1-decode", (1,), 16, 128, 16, "bfloat16", "fused_mma",
        "M = 1 on a layer too large for the GEMV: gemv.small_layer false (gemv_max_weights = 0), the fused "
        "path takes decode", policy=LARGE_LAYERS_POLICY),
    _mm("fused-layer-edge-plus-1", (2,), 24, 128, 16, "float16", "fused_mma",
        "N * K = 3072 = gemv_max_weights + 1: the smallest layer the GEMV leaves to the fused path",
        policy=Policy(gemv_max_weights=3071)),
    _mm("fused-m1-gemv-off", (1,), 16, 256, 16, "bfloat16", "fused_mma",
        "gemv_max_m = 0 turns the GEMV off: gemv.m_in_range false at M = 1", policy=Policy(gemv_max_m=0)),
    _mm("fused-m9", (9,), 40, 128, 16, "bfloat16", "fused_mma",
        "M = 9 with gemv_max_m = 8: the first M past the GEMV", bias=True),
    _mm("fused-m32-edge", (32,), 24, 128, 16, "float16", "fused_mma",
        "M = 32 = wgmma_min_m - 1: the last M fused_mma takes by default where fused_wgmma runs "
        "(fused_wgmma.m_in_range false below it), one 32-row M tile", bias=True),
    _mm("fused-m128-edge", (128,), 24, 128, 16, "bfloat16", "fused_mma",
        "M = 128 with fused_wgmma off (wgmma_max_m = 0, as on a GPU without it): the last M fused_mma "
        "takes by default (fused_max_m = 128), two 64-row M tiles", bias=True, policy=NO_WGMMA_POLICY),
    _mm("fused-m256-edge", (256,), 24, 256, 16, "float16", "fused_mma",
        "M = 256 with fused_max_m = 256: the last M the fused kernel takes", policy=FUSED_FULL_POLICY),
    _mm("fused-lead-3x5-tail", (3, 5), 70, 384, 16, "bfloat16", "fused_mma",
        "A [3, 5, K]; N = 70 leaves a partial 64-row tile", bias=True),
    _mm("fused-splitk", (9,), 64, 2048, 16, "float16", "fused_mma",
        "one row tile, 16 K steps: the H200 split-K structure (4 splits)", bias=True),
    _mm("fused-misaligned-b", (12,), 16, 128, 16, "bfloat16", "fused_mma",
        "misaligned B does not matter to the fused path (vec8's aligned guard false)", misaligned="b"),
    # fused_wgmma: wgmma_min_m (33) <= M <= wgmma_max_m (256), ahead of fused_mma, a Hopper GPU or
    # the CPU backend, block 16, K % 128 == 0; the plan of tiling.wgmma_call_plan (up to M = 64
    # fused_mma's split count, above it whole 128-row tiles and the rest split in K)
    _mm("wgmma-m33", (33,), 16, 128, 16, "float16", "fused_wgmma",
        "M = 33 = wgmma_min_m, K % 128 == 0: the first M fused_wgmma takes by default, ahead of fused_mma "
        "(whose m_in_range still holds); its 64-row activation tile"),
    _mm("wgmma-m64-splitk", (64,), 64, 2048, 16, "bfloat16", "fused_wgmma",
        "M = 64: the last M of the 64-row activation tile, which sums fused_mma's K ranges (its 7 splits "
        "of 16 steps, 3 steps a range: 6 ranges)", bias=True),
    _mm("wgmma-m65", (65,), 16, 128, 16, "float16", "fused_wgmma",
        "M = 65: the first M of the 128-row activation tile and of the whole-tile plan (tiling.wgmma_plan)"),
    _mm("wgmma-m129", (129,), 16, 128, 16, "float16", "fused_wgmma",
        "M = 129: fused_mma.m_in_range false too under the default policy (fused_max_m = 128)"),
    _mm("wgmma-m256-edge", (256,), 24, 256, 16, "bfloat16", "fused_wgmma",
        "M = 256 = wgmma_max_m: the last M it takes, one 256-row activation tile", bias=True),
    _mm("wgmma-lead-2x75-tail", (2, 75), 200, 384, 16, "float16", "fused_wgmma",
        "A [2, 75, K]; N = 200: two 128-row tiles, the second partial, K split in 3 (the plan for 2 tiles)",
        bias=True),
    _mm("wgmma-whole-tiles-and-split", (130,), 16966, 256, 16, "bfloat16", "fused_wgmma",
        "N = 132 x 128 + 70: one whole wave of 132 tiles in one block each, the left-over partial tile split "
        "in 2 (the plan's two kinds of tile in one call)", bias=True),
    _mm("wgmma-m1-min-1", (1,), 16, 256, 16, "bfloat16", "fused_wgmma",
        "gemv_max_m = 0 and wgmma_min_m = 1: fused_wgmma takes decode M, ahead of fused_mma",
        policy=Policy(gemv_max_m=0, wgmma_min_m=1)),
    _mm("wgmma-misaligned-b", (140,), 16, 128, 16, "bfloat16", "fused_wgmma",
        "misaligned B does not matter to fused_wgmma (vec8's aligned guard false)", misaligned="b"),
    # fused_mma and fused_wgmma guards false one at a time -> prefill_vec8
    _mm("vec8-m129-wgmma-off", (129,), 16, 128, 16, "float16", "prefill_vec8",
        "M = 129 with wgmma_max_m = 0: fused_mma.m_in_range and fused_wgmma.m_in_range false",
        policy=Policy(wgmma_max_m=0)),
    _mm("vec8-m257", (257,), 16, 128, 16, "bfloat16", "prefill_vec8",
        "M = 257 with fused_max_m = 256: past both fused kernels' own limit", policy=FUSED_FULL_POLICY),
    _mm("vec8-m16-bs32-k128", (16,), 16, 128, 32, "float16", "prefill_vec8",
        "M = 16, K % 128 == 0 but block 32: fused_mma.block_size_16 and fused_wgmma.block_size_16 false"),
    _mm("vec8-fused-disabled", (9,), 16, 128, 16, "bfloat16", "prefill_vec8",
        "policy fused_max_m = 0 and wgmma_max_m = 0 turn both fused paths off",
        policy=Policy(fused_max_m=0, wgmma_max_m=0)),
    # gemv guards false one at a time -> prefill_vec8 (K % 128 != 0 refuses fused)
    _mm("vec8-m9", (9,), 32, 64, 16, "float16", "prefill_vec8", "M = 9 with gemv_max_m = 8: gemv.m_in_range false"),
    _mm("vec8-m1-k40", (1,), 16, 40, 16, "bfloat16", "prefill_vec8",
        "M = 1 but K % 32 != 0: gemv.k_mod_32 false, prefill taken; partial last block", bias=True),
    _mm("vec8-m8-bs32", (8,), 16, 64, 32, "float16", "prefill_vec8", "M = 8 but block 32: gemv.block_size_16 false"),
    _mm("vec8-m1-large-layer", (1,), 32, 64, 16, "bfloat16", "prefill_vec8",
        "M = 1 on a layer too large for the GEMV (gemv.small_layer false) and K % 128 != 0",
        policy=LARGE_LAYERS_POLICY),
    _mm("vec8-native-disabled", (9,), 32, 64, 16, "float16", "prefill_vec8",
        "policy native_fp4_enabled = False: native_fp4.enabled false",
        policy=Policy(native_fp4_enabled=False)),
    # vec8 block sizes: chunk-crossing (2, 4, 6, 10, 12), block == K, block > K, partial blocks
    _mm("vec8-bs2", (9,), 8, 16, 2, "bfloat16", "prefill_vec8", "block 2: four scales per 8-value chunk"),
    _mm("vec8-bs4-partial", (9,), 8, 24, 4, "float16", "prefill_vec8", "block 4: two scales per chunk"),
    _mm("vec8-bs6-partial", (10,), 12, 64, 6, "bfloat16", "prefill_vec8",
        "block 6: boundaries inside chunks at shifting offsets, partial last block", bias=True),
    _mm("vec8-bs10-partial", (9,), 8, 72, 10, "float16", "prefill_vec8", "block 10 crosses chunk boundaries"),
    _mm("vec8-bs12-partial", (12,), 8, 40, 12, "bfloat16", "prefill_vec8", "block 12, partial last block"),
    _mm("vec8-bs64-partial", (9,), 8, 96, 64, "float16", "prefill_vec8", "block larger than a chunk, partial"),
    _mm("vec8-bs-gt-k", (9,), 8, 16, 32, "bfloat16", "prefill_vec8", "one partial block wider than K"),
    _mm("vec8-n1", (16,), 1, 32, 16, "float16", "prefill_vec8", "N = 1"),
    _mm("vec8-big-n", (9,), BIG_N, 8, 2, "bfloat16", "prefill_vec8", "N > 65,535 rows, K tiny"),
    # prefill_scalar: K % 8 in {2, 4, 6}, odd blocks, misaligned B
    _mm("scalar-k2", (1,), 8, 2, 16, "float16", "prefill_scalar", "K = 2: the smallest even K, one partial block"),
    _mm("scalar-m1-kmod8-2", (1,), 16, 34, 16, "bfloat16", "prefill_scalar",
        "M = 1 and K % 8 == 2: gemv and vec8 both refused"),
    _mm("scalar-m8-kmod8-4", (8,), 16, 36, 16, "float16", "prefill_scalar", "M = 8, K % 8 == 4", bias=True),
    _mm("scalar-m9-kmod8-6", (9,), 16, 38, 16, "bfloat16", "prefill_scalar", "M = 9, K % 8 == 6"),
    _mm("scalar-bs1", (9,), 8, 16, 1, "float16", "prefill_scalar", "block 1: one scale per value"),
    _mm("scalar-bs5", (9,), 8, 40, 5, "bfloat16", "prefill_scalar", "block 5: odd, scale changes inside a byte"),
    _mm("scalar-bs7-partial", (10,), 8, 64, 7, "float16", "prefill_scalar", "block 7, partial last block",
        bias=True),
    _mm("scalar-bs15-kmod8-6", (1,), 8, 30, 15, "bfloat16", "prefill_scalar", "odd block and K % 8 != 0"),
    _mm("scalar-misaligned-b", (9,), 16, 64, 16, "float16", "prefill_scalar",
        "B one byte off: vec8's aligned guard false", misaligned="b"),
    _mm("scalar-n1", (9,), 1, 6, 2, "bfloat16", "prefill_scalar", "N = 1, K % 8 == 6"),
    _mm("scalar-big-n", (9,), BIG_N, 6, 2, "float16", "prefill_scalar", "N > 65,535 rows, K tiny"),
    # shortcuts: no kernel
    _mm("empty-m0", (0,), 16, 32, 16, "float16", "empty", "M = 0: empty output"),
    _mm("bias-only-k0", (3,), 8, 0, 16, "bfloat16", "bias_only", "K = 0: output is the bias", bias=True),
    # the dequantize entry
    _dq("dq-vec8-bs16", 24, 64, 16, "bfloat16", "prefill_vec8", "dequantize, aligned K"),
    _dq("dq-vec8-bs2", 8, 48, 2, "float16", "prefill_vec8", "dequantize, block 2"),
    _dq("dq-vec8-bs6-partial", 8, 56, 6, "bfloat16", "prefill_vec8", "dequantize, block 6, partial block"),
    _dq("dq-vec8-bs12-partial", 8, 40, 12, "float16", "prefill_vec8", "dequantize, block 12, partial block"),
    _dq("dq-scalar-kmod8-4", 8, 44, 16, "float16", "prefill_scalar", "dequantize, K % 8 == 4"),
    _dq("dq-scalar-bs3", 8, 48, 3, "bfloat16", "prefill_scalar", "dequantize, block 3"),
    _dq("dq-scalar-misaligned-b", 8, 64, 16, "bfloat16", "prefill_scalar", "dequantize, B one byte off",
        misaligned="b"),
    _dq("dq-scalar-misaligned-out", 8, 64, 16, "float16", "prefill_scalar",
        "dequantize into an output buffer that is not 16-byte aligned", misaligned="out"),
    # GPU-only: misaligned CUDA views (the address guard as the CUDA kernels see it)
    _mm("gpu-scalar-misaligned-b", (16,), 64, 96, 16, "bfloat16", "prefill_scalar",
        "CUDA B view one byte off", misaligned="b", gpu_only=True),
    _dq("gpu-dq-scalar-misaligned-out", 32, 128, 16, "bfloat16", "prefill_scalar",
        "CUDA output view not 16-byte aligned", misaligned="out", gpu_only=True),
    _mm("gpu-gemv-misaligned-b", (1,), 64, 128, 16, "float16", "gemv",
        "CUDA B view one byte off, still GEMV", misaligned="b", gpu_only=True),
    _mm("gpu-fused-misaligned-b", (24,), 64, 256, 16, "bfloat16", "fused_mma",
        "CUDA B view one byte off, still fused (launched on an aligned copy)", misaligned="b", gpu_only=True),
    _mm("gpu-wgmma-misaligned-b", (200,), 64, 256, 16, "float16", "fused_wgmma",
        "CUDA B view one byte off, still fused_wgmma (launched on an aligned copy)", misaligned="b",
        gpu_only=True),
)


def cases(path: str | None = None, *, include_gpu: bool = True) -> tuple[ShapeCase, ...]:
    """The matrix, optionally only the cases forcing ``path`` and/or without GPU-only cases."""
    return tuple(c for c in MATRIX if (path is None or c.path == path) and (include_gpu or not c.gpu_only))


def summary() -> dict[str, int]:
    """How many cases force each path (shortcuts included)."""
    return dict(Counter(c.path for c in MATRIX))


# --- observing the dispatcher -----------------------------------------------------------------


@contextlib.contextmanager
def dispatch_events() -> Iterator[list[Any]]:
    """Collect the :class:`nvfp4_kernels.DispatchEvent` of every call made inside the block."""
    events: list[Any] = []
    listener = nvfp4_kernels.add_listener(events.append)
    try:
        yield events
    finally:
        nvfp4_kernels.remove_listener(listener)


# --- the independent oracle -------------------------------------------------------------------


def oracle_dequantize(packed: Any, weight_scale: Any, weight_scale_2: float, block_size: int,
                      dtype: str) -> np.ndarray:
    """The contract of docs/contract.md, decoded with ml_dtypes' E2M1 and E4M3 types:
    ``to_T(e2m1(code) * (e4m3(scale) * g))`` with fp32 multiplies, NaN written as 0x7FFF."""
    from nvfp4_harness.nvfp4.verify import to_numpy

    packed, scales = to_numpy(packed), to_numpy(weight_scale)
    n, k = packed.shape[0], 2 * packed.shape[1]
    codes = np.stack([packed & 0x0F, packed >> 4], axis=-1).reshape(n, k)
    values = codes.view(ml_dtypes.float4_e2m1fn).astype(np.float32)
    block_scale = scales.view(ml_dtypes.float8_e4m3fn).astype(np.float32) * np.float32(weight_scale_2)
    w32 = values * block_scale[:, np.arange(k) // block_size]
    out = w32.astype(_NP_DTYPES[dtype])
    out.view(np.uint16)[np.isnan(w32)] = 0x7FFF
    return out


_PRECISION_BITS = {"float16": 11, "bfloat16": 8}


def matmul_error_bound(a: np.ndarray, w: np.ndarray, bias: np.ndarray | None, dtype: str,
                       roundings: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """``(y64, bound)``: the float64 product of A [M, K] and W [N, K] (plus bias) and, per
    element, how far a correct fp32-accumulating path may land from it: ``roundings`` half-ulp
    roundings to ``dtype`` plus the fp32 summation error of K terms (any order)."""
    a64, w64 = a.astype(np.float64), w.astype(np.float64)
    y64 = a64 @ w64.T
    magnitude = np.abs(a64) @ np.abs(w64).T
    if bias is not None:
        y64 = y64 + bias.astype(np.float64)
    k = a.shape[-1]
    half_ulp = 2.0 ** -_PRECISION_BITS[dtype]
    extra = np.abs(bias.astype(np.float64)) if bias is not None else 0.0
    bound = (roundings * half_ulp + 2.0**-22) * (np.abs(y64) + extra) + (k + 2) * 2.0**-23 * magnitude
    # the smallest subnormal step of the output type, for results that underflow
    bound = bound + (2.0**-24 if dtype == "float16" else 2.0**-133)
    return y64, bound


def check_against_oracle(case: ShapeCase, ops: Operands, result: Any, path: str) -> None:
    """Raise AssertionError unless ``result`` is right for ``path``.

    Dequantize: bitwise equal to :func:`oracle_dequantize` (and so is ``ops.out`` when given).
    Matmul: every element within :func:`matmul_error_bound` of the float64 product, with one
    rounding for the GEMV (its bias is added before rounding) and two for prefill.
    """
    from nvfp4_harness.nvfp4.verify import assert_bitwise_equal, to_numpy

    host = to_numpy(result)
    if case.op == "dequantize":
        want = oracle_dequantize(ops.b, ops.weight_scale, ops.weight_scale_2, case.block_size, case.dtype)
        assert_bitwise_equal(want, host, f"{case.id}: dequantized weights")
        if ops.out is not None:
            assert_bitwise_equal(want, to_numpy(ops.out), f"{case.id}: the out= buffer")
        return
    assert host.shape == case.lead + (case.n,), f"{case.id}: output shape {host.shape}"
    bias = None if ops.bias is None else to_numpy(ops.bias)
    if path == "empty":
        return
    if path == "bias_only":
        want = np.broadcast_to(bias, host.shape) if bias is not None else np.zeros_like(host)
        assert_bitwise_equal(want, host, f"{case.id}: K = 0 output")
        return
    a = to_numpy(ops.a).reshape(-1, case.k)
    w = oracle_dequantize(ops.b, ops.weight_scale, ops.weight_scale_2, case.block_size, case.dtype)
    y64, bound = matmul_error_bound(a, w, bias, case.dtype, roundings=1 if path in SINGLE_ROUNDING_PATHS else 2)
    got = host.reshape(-1, case.n)
    err = np.abs(got.astype(np.float64) - y64)
    bad = np.argwhere(~(err <= bound))
    assert bad.size == 0, (
        f"{case.id} ({path}): {len(bad)} of {err.size} outputs outside the float64 bound; first at "
        f"{bad[0].tolist()}: got {got[tuple(bad[0])]}, float64 {y64[tuple(bad[0])]}, "
        f"bound {bound[tuple(bad[0])]:.3g}")


# --- events without a kernel ------------------------------------------------------------------


def simulated_event(m: int | None, k: int, block_size: int = 16, *, n: int = 32, caps: Any = None,
                    aligned: bool = True, op: str = "matmul", dtype: str = "bfloat16",
                    policy: Policy | None = None) -> Any:
    """The event an NVFP4 call would announce on ``caps`` (CPU by default), from the declared
    model's own selection, without running anything: coverage data for devices that are not
    here (a simulated sm_120) and report tests."""
    from nvfp4_harness.model import DeviceCaps, simulate
    from nvfp4_kernels.model import MODEL, Problem

    caps = caps or DeviceCaps.cpu()
    backend = "cpu" if caps.sm is None else "cuda"
    problem = Problem(op, m, n, k, block_size, dtype, backend, aligned, "simulated")
    policy = policy or Policy()
    return simulate(MODEL, problem, caps, policy, op=op, force=policy.force_path)
