"""The NVFP4 operator's dispatch model, declared through the public dispatch-model API.

This module is the operator's whole dispatch policy as data: six paths in preference order,
each with the guards that must all hold (every guard on its own line, which is the line a
coverage report points at), the operations that may take it, and the kernels it launches.
:mod:`nvfp4_kernels.dispatch` chooses paths with ``MODEL.select`` and announces each call;
the harness reads nothing else of this package. The rules and their reasons:
docs/paths.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nvfp4_harness.model import DeviceCaps, DispatchModel, Guard, InvalidArgument, ModelRegistry, PathSpec, Selection

#: the largest M the fused tensor-core kernel takes (kernels/cuda/fused_mma.cu; nvfp4_kernels.tiling)
FUSED_MAX_M = 256
#: the largest M the decode GEMV kernel takes (kernels/cuda/gemv.cu refuses more: its block holds
#: the activations of at most 8 rows, one MMA's N)
GEMV_MAX_M = 8
#: the fused kernel's K step: 128 values per step, so K % 128 == 0
FUSED_K_MULTIPLE = 128
#: the largest M the fused_wgmma kernel takes (kernels/cuda/fused_wgmma.cu: one block holds the
#: activations of 256 rows, its warpgroup MMA's N)
WGMMA_MAX_M = 256
#: the smallest M the fused_wgmma path takes under the default policy: on the H200 fused_mma was
#: fastest at every M up to 32 (its 32-row activation tile) and fused_wgmma from M = 33 on, on both
#: large shapes, once its 64-row tile kept a ring of weight steps and ran fused_mma's split plan
#: (benchmarks/NOTES.md, twenty-third session; a CPU test holds it to the newest committed run)
WGMMA_DEFAULT_MIN_M = 33
#: the most weights (N * K) of a layer the decode GEMV takes under the default policy. On the
#: H200, calls back to back and every call streaming its weights, the GEMV took at most 1.12x
#: fused_mma's time at M = 1 and 8 on every layer of at most 2^24 weights timed (1024 x 1024 to
#: 4096 x 4096; up to 1.57x faster on small ones), fused_mma at most 1.06x the GEMV's on every
#: larger one (3072 x 8192 to 248320 x 2048). 2^23 or 2^25 would cost some layer 1.20x or more
#: (benchmarks/experiments/decode-paths-rotating-2026-12-03-3f7e6fb.json, at the single-wave
#: split counts; a CPU test holds the limit to it). It was 2^26 at the fill model's counts,
#: which left fused_mma up to 1.2x slower on the layers between 2^24 and 2^26 weights.
GEMV_DEFAULT_MAX_WEIGHTS = 1 << 24

OPS = ("matmul", "dequantize")


@dataclass(frozen=True)
class Policy:
    """Tunable dispatch policy.

    ``gemv_max_m``: the largest M the decode GEMV takes (at most 8; 0 turns it off), on layers of
    at most ``gemv_max_weights`` weights (N * K; None: any layer). ``fused_max_m``: the largest M
    the fused_mma path takes (at most 256); the GEMV (and, on Hopper, fused_wgmma) come first in
    preference order, so fused_mma takes the M <= fused_max_m that they do not. The defaults are
    the crossovers measured on the H200: the GEMV was within 12% of fused_mma or faster at every
    M from 1 to 8 on every layer of at most 2^24 weights, fused_mma within 6% of it on larger ones
    (:data:`GEMV_DEFAULT_MAX_WEIGHTS`), so on the bench's two large shapes (89 M weights)
    fused_mma takes decode (BENCHMARKS.md, section "paths"; a CPU test checks the committed runs);
    fused_mma beat prefill up to M = 128 (with the split model of nvfp4_kernels.tiling) and lost
    from M = 160 on, which is its range on a GPU without fused_wgmma.
    ``wgmma_min_m`` and ``wgmma_max_m``: the M range the fused_wgmma path takes (``wgmma_max_m``
    at most 256; 0 turns it off). It comes before fused_mma in preference order but exists only
    on Hopper, so on Hopper (and the CPU backend, which runs every path's algorithm) fused_mma
    keeps gemv_max_m < M < wgmma_min_m and fused_wgmma takes wgmma_min_m..wgmma_max_m, while on
    other GPUs fused_mma keeps its whole range up to ``fused_max_m``. On the H200, with
    fused_wgmma walking K in fused_mma's order, fused_mma was fastest up to M = 32 and fused_wgmma
    from M = 33 to 256 on both large shapes, ahead of prefill at every one of those M
    (benchmarks/NOTES.md, seventeenth and twenty-third sessions; a CPU test recomputes both from
    the committed run). Up to M = 64 fused_wgmma runs fused_mma's split plan, so those calls have
    fused_mma's bits (nvfp4_kernels.tiling.wgmma_call_plan).
    ``native_fp4_enabled``: allow the Blackwell path where the GPU has it.
    ``force_path``: take this path regardless of preference order, for A/B runs; its guards
    must still hold, otherwise the call raises instead of running a kernel out of its domain.
    """

    gemv_max_m: int = 8
    gemv_max_weights: int | None = GEMV_DEFAULT_MAX_WEIGHTS
    fused_max_m: int = 128
    wgmma_min_m: int = WGMMA_DEFAULT_MIN_M
    wgmma_max_m: int = WGMMA_MAX_M
    native_fp4_enabled: bool = True
    force_path: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.gemv_max_m, bool) or not isinstance(self.gemv_max_m, int):
            raise InvalidArgument(f"Policy(gemv_max_m=...) must be an int, got {self.gemv_max_m!r}")
        if not 0 <= self.gemv_max_m <= GEMV_MAX_M:
            raise InvalidArgument(f"Policy(gemv_max_m=...) must be in [0, {GEMV_MAX_M}] (the decode GEMV kernel "
                                  f"takes at most {GEMV_MAX_M} rows of A), got {self.gemv_max_m}")
        if self.gemv_max_weights is not None and (isinstance(self.gemv_max_weights, bool)
                                                  or not isinstance(self.gemv_max_weights, int)
                                                  or self.gemv_max_weights < 0):
            raise InvalidArgument(f"Policy(gemv_max_weights=...) must be an int >= 0 (the most weights N * K of a "
                                  f"layer the GEMV takes) or None (any layer), got {self.gemv_max_weights!r}")
        if isinstance(self.fused_max_m, bool) or not isinstance(self.fused_max_m, int):
            raise InvalidArgument(f"Policy(fused_max_m=...) must be an int, got {self.fused_max_m!r}")
        if not 0 <= self.fused_max_m <= FUSED_MAX_M:
            raise InvalidArgument(f"Policy(fused_max_m=...) must be in [0, {FUSED_MAX_M}] (the fused kernel's "
                                  f"largest M tile range), got {self.fused_max_m}")
        if isinstance(self.wgmma_min_m, bool) or not isinstance(self.wgmma_min_m, int):
            raise InvalidArgument(f"Policy(wgmma_min_m=...) must be an int, got {self.wgmma_min_m!r}")
        if not 1 <= self.wgmma_min_m <= WGMMA_MAX_M:
            raise InvalidArgument(f"Policy(wgmma_min_m=...) must be in [1, {WGMMA_MAX_M}] (the smallest M "
                                  f"fused_wgmma takes; wgmma_max_m=0 turns the path off), got {self.wgmma_min_m}")
        if isinstance(self.wgmma_max_m, bool) or not isinstance(self.wgmma_max_m, int):
            raise InvalidArgument(f"Policy(wgmma_max_m=...) must be an int, got {self.wgmma_max_m!r}")
        if not 0 <= self.wgmma_max_m <= WGMMA_MAX_M:
            raise InvalidArgument(f"Policy(wgmma_max_m=...) must be in [0, {WGMMA_MAX_M}] (the fused_wgmma kernel "
                                  f"holds at most {WGMMA_MAX_M} activation rows a block), got {self.wgmma_max_m}")
        if not isinstance(self.native_fp4_enabled, bool):
            raise InvalidArgument(f"Policy(native_fp4_enabled=...) must be True or False, got "
                                  f"{self.native_fp4_enabled!r}")
        if self.force_path is not None and self.force_path not in PATH_NAMES:
            raise InvalidArgument(f"Policy(force_path=...) must be one of {PATH_NAMES} or None, got "
                                  f"{self.force_path!r}")

    def gemv_max_m_for(self, n: int, k: int) -> int:
        """The largest M the GEMV takes on an N x K layer under this policy (0: none)."""
        small = self.gemv_max_weights is None or n * k <= self.gemv_max_weights
        return self.gemv_max_m if small else 0


@dataclass(frozen=True)
class Problem:
    """The facts about one call that guards look at (hashable: selections are cached on it)."""

    op: str
    m: int | None
    n: int
    k: int
    block_size: int
    dtype: str
    backend: str
    #: packed rows start on 4-byte boundaries and the output/scratch on 16-byte boundaries
    aligned: bool = True
    #: the addresses behind ``aligned``, for messages only (not part of equality or the hash)
    alignment_detail: str = field(default="buffers aligned", compare=False)


def _native_arch_missing(device: DeviceCaps) -> str | None:
    if device.sm is None:
        return "native_fp4 needs FP4 tensor cores of an sm_120..129 GPU; the CPU backend has none"
    if not 120 <= device.sm <= 129:
        return f"native_fp4 needs an sm_120..129 GPU (Blackwell); {device.label} is not one"
    return None


def _wgmma_arch_missing(device: DeviceCaps) -> str | None:
    if device.sm is not None and device.sm != 90:
        return f"fused_wgmma's kernel is built for sm_90a (Hopper warpgroup MMAs); {device.label} is not sm_90"
    return None


def _wgmma_arch_always_holds(device: DeviceCaps) -> str | None:
    if device.sm is None:
        return "the CPU backend runs fused_wgmma's algorithm on every machine"
    if device.sm == 90:
        return f"{device.label} is a Hopper GPU (sm_90), which fused_wgmma's kernel is built for"
    return None


def _alignment_detail(p: Problem, d: DeviceCaps, pol: Policy) -> str:
    return p.alignment_detail if p.aligned else f"misaligned: {p.alignment_detail}"


MODEL = DispatchModel("nvfp4", [
    PathSpec("gemv", "fused decode GEMV: packed weights read once, decoded in registers", ops=("matmul",),
             kernels=(r"nvfp4_gemv_kernel",), guards=[
        Guard("m_in_range", "1 <= M <= policy.gemv_max_m",
              lambda p, d, pol: p.m is not None and 1 <= p.m <= pol.gemv_max_m,
              detail=lambda p, d, pol: f"M={p.m}, gemv_max_m={pol.gemv_max_m}"),
        Guard("small_layer", "N * K <= policy.gemv_max_weights",
              lambda p, d, pol: pol.gemv_max_weights is None or p.n * p.k <= pol.gemv_max_weights,
              detail=lambda p, d, pol: f"N*K={p.n * p.k}, gemv_max_weights={pol.gemv_max_weights}"),
        Guard("block_size_16", "block_size == 16", lambda p, d, pol: p.block_size == 16,
              detail=lambda p, d, pol: f"block_size={p.block_size}"),
        Guard("k_mod_32", "K % 32 == 0", lambda p, d, pol: p.k % 32 == 0,
              detail=lambda p, d, pol: f"K={p.k}, K % 32 = {p.k % 32}"),
    ]),
    PathSpec("native_fp4", "Blackwell FP4 tensor-core GEMM", ops=("matmul",), guards=[
        Guard("arch_sm120", "GPU compute capability 12.x", lambda p, d, pol: d.sm is not None and 120 <= d.sm <= 129,
              detail=lambda p, d, pol: f"device {d.label}", true_unreachable=_native_arch_missing),
        Guard("enabled", "policy.native_fp4_enabled", lambda p, d, pol: pol.native_fp4_enabled,
              detail=lambda p, d, pol: f"native_fp4_enabled={pol.native_fp4_enabled}"),
        Guard("block_size_16", "block_size == 16", lambda p, d, pol: p.block_size == 16,
              detail=lambda p, d, pol: f"block_size={p.block_size}"),
        Guard("k_mod_32", "K % 32 == 0", lambda p, d, pol: p.k % 32 == 0,
              detail=lambda p, d, pol: f"K={p.k}, K % 32 = {p.k % 32}"),
        Guard("n_mod_32", "N % 32 == 0", lambda p, d, pol: p.n % 32 == 0,
              detail=lambda p, d, pol: f"N={p.n}, N % 32 = {p.n % 32}"),
    ]),
    PathSpec("fused_wgmma", "Hopper warpgroup tensor-core matmul for medium M: each packed weight read and decoded "
             "once, straight into the MMA's register operand", ops=("matmul",),
             kernels=(r"nvfp4_wgmma_permute_act_kernel", r"nvfp4_fused_wgmma_kernel"), guards=[
        Guard("m_in_range", "policy.wgmma_min_m <= M <= policy.wgmma_max_m",
              lambda p, d, pol: p.m is not None and pol.wgmma_min_m <= p.m <= pol.wgmma_max_m,
              detail=lambda p, d, pol: f"M={p.m}, wgmma_min_m={pol.wgmma_min_m}, wgmma_max_m={pol.wgmma_max_m}"),
        Guard("arch_sm90", "a Hopper GPU (compute capability 9.0) or the CPU backend",
              lambda p, d, pol: p.backend == "cpu" or d.sm == 90,
              detail=lambda p, d, pol: f"backend {p.backend}, device {d.label}",
              true_unreachable=_wgmma_arch_missing, false_unreachable=_wgmma_arch_always_holds),
        Guard("block_size_16", "block_size == 16", lambda p, d, pol: p.block_size == 16,
              detail=lambda p, d, pol: f"block_size={p.block_size}"),
        Guard("k_mod_128", "K % 128 == 0", lambda p, d, pol: p.k % FUSED_K_MULTIPLE == 0,
              detail=lambda p, d, pol: f"K={p.k}, K % 128 = {p.k % FUSED_K_MULTIPLE}"),
    ]),
    PathSpec("fused_mma", "fused tensor-core matmul: packed weights read once per M tile, decoded in registers",
             ops=("matmul",), kernels=(r"nvfp4_fused_mma_kernel",), guards=[
        Guard("m_in_range", "1 <= M <= policy.fused_max_m",
              lambda p, d, pol: p.m is not None and 1 <= p.m <= pol.fused_max_m,
              detail=lambda p, d, pol: f"M={p.m}, fused_max_m={pol.fused_max_m}"),
        Guard("block_size_16", "block_size == 16", lambda p, d, pol: p.block_size == 16,
              detail=lambda p, d, pol: f"block_size={p.block_size}"),
        Guard("k_mod_128", "K % 128 == 0", lambda p, d, pol: p.k % FUSED_K_MULTIPLE == 0,
              detail=lambda p, d, pol: f"K={p.k}, K % 128 = {p.k % FUSED_K_MULTIPLE}"),
    ]),
    PathSpec("prefill_vec8", "8 values per thread dequant to scratch, then cuBLAS", ops=OPS,
             kernels=(r"nvfp4_dequant_vec8_kernel",), guards=[
        Guard("k_mod_8", "K % 8 == 0", lambda p, d, pol: p.k % 8 == 0,
              detail=lambda p, d, pol: f"K={p.k}, K % 8 = {p.k % 8}"),
        Guard("block_size_even", "block_size % 2 == 0", lambda p, d, pol: p.block_size % 2 == 0,
              detail=lambda p, d, pol: f"block_size={p.block_size}"),
        Guard("aligned", "packed rows 4-byte, output 16-byte aligned", lambda p, d, pol: p.aligned,
              detail=_alignment_detail),
    ]),
    PathSpec("prefill_scalar", "one byte per thread dequant, then cuBLAS", ops=OPS,
             kernels=(r"nvfp4_dequant_scalar_kernel",)),
], ops=OPS, summary="NVFP4 weight-only matmul and dequantization (nvfp4_kernels)", shortcuts={
    "empty": "M == 0 or N == 0: the output has no elements, nothing is launched",
    "bias_only": "K == 0: the dot products are empty, the output is the bias (or zeros)",
}, shared_kernels=(r"gemm", r"gemv", r"nvjet", r"cutlass", r"xmma", r"elementwise", r"Memcpy", r"Memset",
                   r"splitk_finalize", r"reduce"), kernel_sources=("cuda/*.cu",))

PATH_NAMES: tuple[str, ...] = MODEL.path_names
DEFAULT_POLICY = Policy()


def dispatch_init(reg: ModelRegistry) -> None:
    """Register the NVFP4 model (``dispatch_models = nvfp4_kernels.model`` in an ini file)."""
    reg.add_model(MODEL)


def select_path(problem: Problem, device: DeviceCaps, policy: Policy | None = None) -> Selection:
    """The model's choice for ``problem`` on ``device`` under ``policy`` (its ``force_path``
    honoured): what :func:`nvfp4_kernels.nvfp4_matmul` and ``dequantize`` run."""
    policy = policy or DEFAULT_POLICY
    return MODEL.select(problem, device, policy, op=problem.op, force=policy.force_path)
