"""Hypothesis strategies for NVFP4 operator problems that take a chosen dispatch path.

``nvfp4_problems(path="prefill_scalar")`` draws problems that the dispatcher must send to the
scalar kernel. The problems are built *constructively*: the strategy first picks which guard
keeps each faster path out (say "K % 8 != 0" or "B misaligned"), then draws K, the block size,
M and the alignment so that exactly that happens. Nothing is generated and thrown away, so
Hypothesis never starves on a filter and shrinking stays inside the requested path.

Policies: the default policy (``Policy()``) takes the decode GEMV for ``1 <= M <= 8`` on layers of
at most 2^24 weights, every layer drawn here, and lets fused_mma take the rest of
``1 <= M < wgmma_min_m`` (32) on every backend (up to ``fused_max_m``, 128, where fused_wgmma does
not run; from ``wgmma_min_m`` on, the CPU backend and a Hopper GPU take fused_wgmma, which these
strategies do not draw). Problems that
must reach the fused path or prefill at decode M through the GEMV's small_layer guard carry a
policy under which every layer is too large for the GEMV
(:data:`~nvfp4_harness.nvfp4.shapes.LARGE_LAYERS_POLICY`) in their case's ``policy`` field, and
prefill problems that refuse fused_mma by its M range carry one with fused_wgmma off
(:data:`~nvfp4_harness.nvfp4.shapes.NO_WGMMA_POLICY`), since fused_wgmma would take M <= 256 on
the CPU backend and a Hopper GPU; every other problem runs under the default policy. :meth:`Nvfp4Problem.run` calls the
operator with the case's policy, so run problems through it (or pass ``problem.case.policy`` on)
rather than calling the operator with the default policy. Fused problems draw
``1 <= M <= min(FUSED_MMA_MAX_M, max_m)``; prefill problems refuse the fused paths by K % 128 != 0, a block
size other than 16, or M > 128 with fused_wgmma off.

Every draw calls ``hypothesis.event("path: ...")`` and ``event("why: ...")``, so
``pytest --hypothesis-show-statistics`` tells how the examples were spread over paths and
over the guard that decided them.

Impossible requests (``path="gemv"`` with ``block_size=7``, ``native_fp4`` on a device without
FP4 tensor cores, a gemv dequantize, sizes too small to violate any guard) raise
:class:`hypothesis.errors.InvalidArgument` with what to change.

Settings: the top-level ``conftest.py`` registers a ``ci`` profile (derandomized, so a red
CI run reproduces; no deadline, since the 2-core CI machine is slow) that is loaded when the
``CI`` environment variable is set, and a ``dev`` profile otherwise; choose one explicitly with
``HYPOTHESIS_PROFILE=ci``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import event
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from nvfp4_harness.nvfp4.shapes import DTYPES, LARGE_LAYERS_POLICY, NO_WGMMA_POLICY, Operands, ShapeCase
from nvfp4_kernels.model import Policy

MATMUL_PATHS = ("gemv", "fused_mma", "prefill_vec8", "prefill_scalar")
DEQUANT_PATHS = ("prefill_vec8", "prefill_scalar")
#: block sizes whose scale boundaries fall inside an 8-value chunk (vec8's mid-chunk advance)
CHUNK_CROSSING_BLOCKS = (2, 4, 6, 10, 12, 14)
#: the policy of every drawn problem that does not need the GEMV refused by its layer size
DEFAULT_POLICY = Policy()
#: the largest M a fused_mma problem may have: past it, fused_wgmma takes the call where it runs
FUSED_MMA_MAX_M = min(DEFAULT_POLICY.fused_max_m, DEFAULT_POLICY.wgmma_min_m - 1)


@dataclass
class Nvfp4Problem:
    """A drawn problem: the case (with the path it must take) and its operands."""

    case: ShapeCase
    operands: Operands
    backend: str
    reason: str

    def run(self, policy: Policy | None = None) -> Any:
        """Call the dispatcher (``policy`` overrides the case's, e.g. to force a path)."""
        case = self.case if policy is None else _with_policy(self.case, policy)
        return case.run(self.operands, self.backend)


def _with_policy(case: ShapeCase, policy: Policy) -> ShapeCase:
    from dataclasses import replace

    return replace(case, policy=policy)


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise InvalidArgument(message)


def nvfp4_problems(
    path: str | None = None,
    *,
    op: str = "matmul",
    dtype: str | None = None,
    backend: str = "cpu",
    block_size: int | None = None,
    max_m: int = 160,
    max_n: int = 40,
    max_k: int = 200,
    bias: bool | None = None,
    weights: str | None = None,
    container: str | None = None,
    allow_misaligned: bool = True,
) -> st.SearchStrategy[Nvfp4Problem]:
    """Problems that the dispatcher must send down ``path`` (any reachable path if None).

    ``op`` is ``"matmul"`` or ``"dequantize"``; ``dtype`` ``"float16"``/``"bfloat16"`` (None
    draws both); ``block_size`` pins the block size (it must be compatible with ``path``);
    ``backend`` ``"cpu"`` (numpy or CPU torch tensors, see ``container``) or ``"cuda"``;
    ``weights`` ``"codes"`` or ``"quantized"`` (None draws both); ``allow_misaligned=False``
    keeps every buffer aligned (e.g. to force a GEMV problem through vec8 as well).

    Each problem's case carries the policy it must run under (``problem.case.policy``): the
    default policy, or :data:`~nvfp4_harness.nvfp4.shapes.LARGE_LAYERS_POLICY` where the GEMV
    must refuse a decode M by the layer's size (fused problems at M <= 8, prefill problems whose
    deciding guard is "K % 128 != 0"), or :data:`NO_WGMMA_POLICY` (prefill problems whose
    deciding guard is "M > fused_max_m"). The default ``max_m`` (160) leaves room for M > 128,
    past fused_mma's default range.
    """
    _require(op in ("matmul", "dequantize"), f"op must be 'matmul' or 'dequantize', got {op!r}")
    allowed = MATMUL_PATHS if op == "matmul" else DEQUANT_PATHS
    if path == "native_fp4":
        raise InvalidArgument("native_fp4 needs an sm_120..129 GPU; no backend here can take it. Test its "
                              "guards with nvfp4_kernels.MODEL.select and DeviceCaps.simulated_gpu(12, 0)")
    _require(path is None or path in allowed,
             f"path must be None or one of {allowed} for op={op!r}, got {path!r}"
             + (" (the dequantize entry has no GEMV)" if path == "gemv" else ""))
    _require(dtype is None or dtype in DTYPES, f"dtype must be None or one of {DTYPES}, got {dtype!r}")
    _require(backend in ("cpu", "cuda"), f"backend must be 'cpu' or 'cuda', got {backend!r}")
    _require(container in (None, "numpy", "torch"), "container must be None, 'numpy' or 'torch'")
    _require(not (backend == "cuda" and container == "numpy"), "backend='cuda' takes torch tensors only")
    _require(weights in (None, "codes", "quantized"), "weights must be None, 'codes' or 'quantized'")
    _require(block_size is None or (isinstance(block_size, int) and block_size > 0),
             f"block_size must be None or a positive int, got {block_size!r}")
    _require(max_n >= 1 and max_k >= 2 and max_m >= 1, "max_n, max_m must be >= 1 and max_k >= 2")
    paths = allowed if path is None else (path,)
    feasible = [p for p in paths if _plan_options(p, op, block_size, max_m, max_k, allow_misaligned)]
    if not feasible:
        need = {"gemv": "block_size 16 (or None) and max_k >= 32",
                "fused_mma": "block_size 16 (or None) and max_k >= 128",
                "prefill_vec8": "an even block_size (or None) and max_k >= 8, to refuse the GEMV and the "
                                f"fused paths (K % 128 != 0, M > {DEFAULT_POLICY.fused_max_m} or a block size "
                                "other than 16)",
                "prefill_scalar": "max_k >= 2 (for K % 8 != 0)"}
        raise InvalidArgument(f"no {op} problem can take {path or 'any path'} with block_size={block_size}, "
                              f"max_m={max_m}, max_k={max_k}: {path} needs {need.get(path or '', '')}")
    return _problems(tuple(feasible), op, dtype, backend, block_size, max_m, max_n, max_k, bias, weights,
                     container, allow_misaligned)


def _plan_options(path: str, op: str, bs: int | None, max_m: int, max_k: int,
                  allow_misaligned: bool = True) -> list[str]:
    """The ways (guard that decides) a problem of ``path`` can be built under the limits."""
    if path == "gemv":
        return ["all gemv guards hold"] if bs in (None, 16) and max_k >= 32 else []
    if path == "fused_mma":
        if bs not in (None, 16) or max_k < 128:
            return []
        return ["N * K > gemv_max_weights, fused guards hold"] + (["M > gemv_max_m, fused guards hold"]
                                                                  if max_m >= 9 else [])
    if path == "prefill_vec8":
        if bs is not None and bs % 2:
            return []
        if op == "dequantize":
            return ["vec8 guards hold"] if max_k >= 8 else []
        return [why for why, ok in (("M > gemv_max_m", max_m >= 9 and max_k >= 8),
                                    ("block_size != 16", bs != 16 and max_k >= 8),
                                    ("K % 32 != 0", max_k >= 8),
                                    ("K % 128 != 0", max_k >= 8),
                                    ("M > fused_max_m", max_m > DEFAULT_POLICY.fused_max_m and max_k >= 8)) if ok]
    options = []
    if max_k >= 2:
        options.append("K % 8 != 0")
    if bs is None or bs % 2:
        options.append("odd block_size")
    if allow_misaligned and (bs is None or bs % 2 == 0) and _plan_options("prefill_vec8", op, bs, max_m, max_k):
        options.append("misaligned B")
        if op == "dequantize":
            options.append("misaligned output")
    return options


@st.composite
def _problems(draw: st.DrawFn, paths: tuple[str, ...], op: str, dtype: str | None, backend: str,
              bs: int | None, max_m: int, max_n: int, max_k: int, bias: bool | None, weights: str | None,
              container: str | None, allow_misaligned: bool) -> Nvfp4Problem:
    path = draw(st.sampled_from(paths))
    why = draw(st.sampled_from(_plan_options(path, op, bs, max_m, max_k, allow_misaligned)))
    misaligned = None
    policy = DEFAULT_POLICY
    n_limit = max_n
    if path == "gemv":  # the default policy takes it on layers of at most 2^24 weights
        bs, k = 16, 32 * draw(st.integers(1, max_k // 32))
        m = draw(st.integers(1, min(DEFAULT_POLICY.gemv_max_m, max_m)))
        n_limit = min(max_n, DEFAULT_POLICY.gemv_max_weights // k)
        if allow_misaligned:
            misaligned = draw(st.sampled_from([None, "b"]))  # the GEMV ignores alignment
    elif path == "fused_mma":
        bs, k = 16, 128 * draw(st.integers(1, max_k // 128))
        if why == "M > gemv_max_m, fused guards hold":  # M just past the GEMV
            m = draw(st.integers(DEFAULT_POLICY.gemv_max_m + 1, min(FUSED_MMA_MAX_M, max_m)))
        else:  # every layer too large for the GEMV: decode (M = 1) included
            policy = LARGE_LAYERS_POLICY
            m = draw(st.integers(1, min(FUSED_MMA_MAX_M, max_m)))
        if allow_misaligned:
            misaligned = draw(st.sampled_from([None, "b"]))  # launched on aligned copies
    elif path == "prefill_vec8":
        bs, k, m, policy = _draw_vec8(draw, op, why, bs, max_m, max_k)
    else:
        bs, k, m, misaligned, policy = _draw_scalar(draw, op, why, bs, max_m, max_k)
    event(f"path: {path}")
    event(f"why: {why}")
    dtype = dtype or draw(st.sampled_from(DTYPES))
    n = draw(st.integers(1, n_limit))
    lead = None if op == "dequantize" else _draw_lead(draw, m)
    case = ShapeCase(
        id=f"{path}-m{m}-n{n}-k{k}-bs{bs}-{dtype}", op=op, lead=lead, n=n, k=k, block_size=bs, dtype=dtype,
        path=path, why=why, misaligned=misaligned, policy=policy,
        bias=op == "matmul" and (draw(st.booleans()) if bias is None else bias),
        weights=weights or draw(st.sampled_from(["codes", "quantized"])))
    kind = container or ("torch" if backend == "cuda" else draw(st.sampled_from(["numpy", "torch"])))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    return Nvfp4Problem(case, case.build(rng, backend, kind), backend, why)


def _draw_lead(draw: st.DrawFn, m: int) -> tuple[int, ...]:
    """A's leading dims: [M] or, when M factors, [a, M / a] (leading dims flatten to M)."""
    divisors = [d for d in range(2, m) if m % d == 0]
    if divisors and draw(st.booleans()):
        d = draw(st.sampled_from(divisors))
        return (d, m // d)
    return (m,)


def _even_block(draw: st.DrawFn, exclude_16: bool = False) -> int:
    choices = st.one_of(st.sampled_from(CHUNK_CROSSING_BLOCKS + (8, 16, 32, 64)),
                        st.integers(1, 40).map(lambda x: 2 * x))
    bs = draw(choices)
    return bs + 2 if exclude_16 and bs == 16 else bs


def _draw_vec8(draw: st.DrawFn, op: str, why: str, bs: int | None, max_m: int,
               max_k: int) -> tuple[int, int, int | None, Policy]:
    """K % 8 == 0 and an even block size, with the GEMV and the fused path refused, and the
    policy to run under. ``why`` names the deciding guard: a GEMV guard ("M > gemv_max_m",
    "K % 32 != 0"; the fused path refused by the same guard, by K % 128 != 0 or by the block
    size) or a fused guard ("M > fused_max_m", "block_size != 16", which refuse the GEMV too, and
    "K % 128 != 0", under :data:`LARGE_LAYERS_POLICY` so that the GEMV refuses a decode M by the
    layer's size); "M > fused_max_m" runs under :data:`NO_WGMMA_POLICY`, the rest under the
    default policy."""
    m: int | None = None
    policy = {"K % 128 != 0": LARGE_LAYERS_POLICY, "M > fused_max_m": NO_WGMMA_POLICY}.get(why, DEFAULT_POLICY)
    if why == "block_size != 16":
        bs = bs if bs is not None else _even_block(draw, exclude_16=True)
    elif why == "K % 128 != 0" and bs is None:
        bs = 16  # only K % 128 refuses the fused path
    elif bs is None:
        bs = _even_block(draw)
    if why == "K % 32 != 0":
        k = draw(st.sampled_from([k for k in range(8, max_k + 1, 8) if k % 32]))
    elif why == "K % 128 != 0" or (why == "M > gemv_max_m" and bs == 16):
        k = draw(st.sampled_from([k for k in range(8, max_k + 1, 8) if k % 128]))
    else:
        k = 8 * draw(st.integers(1, max_k // 8))
    if op == "matmul":
        if why == "M > gemv_max_m":
            m = draw(st.integers(DEFAULT_POLICY.gemv_max_m + 1, max_m))
        elif why == "M > fused_max_m":
            m = draw(st.integers(DEFAULT_POLICY.fused_max_m + 1, max_m))
        elif why == "K % 128 != 0":
            m = draw(st.integers(1, min(DEFAULT_POLICY.fused_max_m, max_m)))
        else:
            m = draw(st.integers(1, max_m))
    return bs, k, m, policy


def _draw_scalar(draw: st.DrawFn, op: str, why: str, bs: int | None, max_m: int,
                 max_k: int) -> tuple[int, int, int | None, str | None, Policy]:
    """A problem that vec8 refuses by ``why`` and (for matmul) the GEMV and the fused path
    refuse too, and the policy to run under."""
    misaligned = None
    policy = DEFAULT_POLICY
    m = draw(st.integers(1, max_m)) if op == "matmul" else None
    if why == "K % 8 != 0":  # K % 32 and K % 128 != 0 too: the GEMV and the fused path refused whatever M is
        k = draw(st.sampled_from([k for k in range(2, max_k + 1, 2) if k % 8]))
        bs = bs if bs is not None else draw(st.integers(1, 70))
    elif why == "odd block_size":  # block_size != 16, so the GEMV and the fused path are refused
        bs = bs if bs is not None else 2 * draw(st.integers(0, 35)) + 1
        k = 2 * draw(st.integers(1, max_k // 2))
    else:  # misaligned: shapes that vec8 would take, the GEMV and fused refused as in _draw_vec8
        misaligned = "out" if why == "misaligned output" else "b"
        vec8_why = "vec8 guards hold" if op == "dequantize" else draw(
            st.sampled_from(_plan_options("prefill_vec8", op, bs, max_m, max_k)))
        bs, k, m, policy = _draw_vec8(draw, op, vec8_why, bs, max_m, max_k)
    return bs, k, m, misaligned, policy
