"""ONNX Runtime 1.31.1's ``com.microsoft::MatMulBlockQuantizedFp4Weight`` (CUDA execution
provider), declared as a dispatch model from the outside, through the public API only.

This module imports nothing of the project but :mod:`nvfp4_harness.model`, the way a user
declaring a library they cannot edit would. The declarations come from ONNX Runtime's source
(``github.com/microsoft/onnxruntime``) and, where the source that could be read is older than
the 1.31.1 build, from what that build was seen doing on an H200; each one names its evidence.

``CC``  = ``onnxruntime/contrib_ops/cuda/math/matmul_block_scaled_fp4.cc``, ``ComputeImpl`` - the
          dispatch, in this order (the stored copy read, commit ``0be9ba6d5dcb``, still calls the op
          ``MatMulBlockScaledFp4``):

1. ``Y->Shape().Size() == 0`` -> return, nothing launched (shortcut ``empty``: M == 0 or N == 0);
2. ``k_i == 0`` -> ``cudaMemsetAsync(Y)`` and, with a bias, ``LaunchAddBiasNvFp4`` (shortcut
   ``bias_only``; no path kernel);
3. ``m_i > 0 && m_i <= kGemvMaxM && block_size_ == 16 && (k_i % 32 == 0)`` -> the GEMV launcher,
   which picks one of two kernels (below): paths ``gemv_mma`` and ``gemv``;
4. ``#if defined(ORT_ENABLE_BLOCKQUANT_SM120)``: ``IsNativeSm120Fp4Enabled()`` (environment
   variable ``ORT_MATMUL_BLOCK_SCALED_FP4_NATIVE_SM120``, default off) ``&& sm_ >= 120 && sm_ <
   130 && block_size_ == 16 && k_i % 32 == 0 && n_i % 32 == 0`` -> native NVFP4 x NVFP4 CUTLASS
   GEMM (path ``native_sm120``);
5. otherwise ``LaunchDequantizeNvFp4`` into an [N, K] scratch of A's type, ``cublasGemmHelper``,
   then ``LaunchAddBiasNvFp4`` when a bias is given.

``CU``  = ``onnxruntime/contrib_ops/cuda/math/matmul_block_scaled_fp4.cu`` (stored copy read:
          commit ``8c3a8503bd5e``):

* ``LaunchMatMulBlockQuantizedFp4WeightGemv`` launches the tensor-core kernel when
  ``device_prop.major >= 8 && k % 128 == 0 && m <= 8 && Fp4GemvMmaEnabled()`` ("Tensor-core
  sub-path: needs mma.m16n8k16 (SM80+), a whole number of 128-element K windows, and M within the
  mma's 8-row N extent. Everything else falls back to the scalar GEMV."), that is
  ``MatMulBlockQuantizedFp4WeightMmaGemvKernel<T, KSplit, ColTiles>``, and otherwise the warp
  reduction ``MatMulBlockQuantizedFp4WeightGemvKernel<T, RowsPerBlock>``. The two are declared
  as two paths, ``gemv_mma`` first, because which one runs is a dispatch decision the profiler's
  kernel names show, and the two stop at different M.
* ``LaunchDequantizeNvFp4`` picks ``DequantizeNvFp4Vec8Kernel`` "when K % 8 == 0 and
  block_size is even, and the scalar DequantizeNvFp4Kernel otherwise" (the op's own test file,
  ``onnxruntime/test/contrib_ops/matmul_block_scaled_fp4_test.cc``, and
  ``docs/contrib_ops/cuda/matmul_block_scaled_fp4.md`` section 5.1, from PR #32128). The stored
  copy of the ``.cu`` predates that PR (its launcher only has the scalar kernel), so the vec8
  launcher's own code was not read: its guards are the documented ones, and the observed run
  checks them.

``OBS`` = the H200 run of ONNX Runtime 1.31.1 (``fixtures/gpu/onnxruntime-*.json``, provenance
          in each file). Where it disagrees with the stored source, **the observation wins**:

* The source's K choice holds: the tensor-core kernel ran only at K % 128 == 0 (17408 x 5120:
  ``MatMulBlockQuantizedFp4WeightMmaGemvKernel<__nv_bfloat16, 2, 1, R>``), the warp kernel only
  at K % 128 != 0 (4096 x 4064: ``MatMulBlockQuantizedFp4WeightGemvKernel<__nv_bfloat16, 1|4>``).
* The source's M limits do not: ``kGemvMaxM = 8`` in CC and ``m <= 8`` in CU, but the build
  observed ran the tensor-core GEMV for every M = 1..32 (its fourth template argument R = 1, 2, 4
  for M = 1..8, 9..16, 17..32: row tiles of 8, 16 and 32 rows, which the stored ``<T, KSplit,
  ColTiles>`` does not have, i.e. PR #32289 "Extend speculative decode GEMVs to 64 rows" or a
  part of it) and dequant + cuBLAS for M = 33..64; the warp GEMV for M = 1 and 8 and dequant +
  cuBLAS for M = 9..65 at K % 128 != 0. So the M limit depends on the kernel, and each is a
  *policy value found by observation*: :attr:`OrtPolicy.gemv_mma_max_m` (observed 32) and
  :attr:`OrtPolicy.gemv_max_m` (observed 8). The GPU run searches M at one shape of each kind
  (:data:`~nvfp4_harness.nvfp4.onnxruntime.cases.CROSSOVER`) and CPU CI holds the committed
  crossovers to these values. The model with one ``gemv`` path up to M = 32 mispredicted five
  calls of that run (M = 9..32 at K % 128 != 0), which is how this was found.

What cannot be seen from Python, and how the model treats it:

* ``device_prop.major >= 8`` (CU) is not declared as a guard: the engine can declare only a
  guard's *true* side unreachable on a device, and on every device this model was observed on
  (sm_90) the false side cannot occur. On a pre-SM80 GPU the warp kernel would run where the model
  predicts ``gemv_mma``: a finding, which is what observed mode is for.
* ``ORT_FP4_GEMV_MMA`` (CU, ``Fp4GemvMmaEnabled()``, default on) turns the tensor-core kernel
  off; :meth:`OrtPolicy.from_environment` then sets ``gemv_mma_max_m = 0`` (what the warp
  GEMV does above M = 8 at K % 128 == 0 with the switch off was not observed).
* ``ORT_ENABLE_BLOCKQUANT_SM120`` is a build flag: whether the wheel was built with it is not
  visible; the native path is declared, and on a device other than sm_120..129 it is
  unreachable with that reason. :attr:`OrtPolicy.native_sm120` says whether the environment
  variable asks for it.
* Alignment: the GEMV and vec8 kernels use 16-byte and 4-byte vector accesses and rely on ORT
  allocations being at least 256-byte aligned (the comment in the GEMV kernel); nothing checks a
  bound buffer's address at run time. So alignment is no guard here: a misaligned bound buffer
  is outside the operator's contract, not another path (our own operator, by contrast, sends
  misaligned buffers to its scalar kernel and declares that guard).
* cuBLAS picks its own kernels; their names are shared kernels of every prefill path.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from nvfp4_harness.model import DeviceCaps, DispatchModel, Guard, InvalidArgument, ModelRegistry, PathSpec

#: the ONNX Runtime release this model declares (the ``[onnxruntime]`` extra pins 1.31.x)
ORT_VERSION = "1.31.1"
#: the op as ONNX names it
OP_DOMAIN, OP_TYPE = "com.microsoft", "MatMulBlockQuantizedFp4Weight"
#: the environment variable of ``IsNativeSm120Fp4Enabled()`` (CC)
NATIVE_SM120_ENV = "ORT_MATMUL_BLOCK_SCALED_FP4_NATIVE_SM120"
#: the environment variable of ``Fp4GemvMmaEnabled()`` (CU): the tensor-core GEMV's kill switch
GEMV_MMA_ENV = "ORT_FP4_GEMV_MMA"
#: the tensor-core GEMV's largest M as seen on an H200 with 1.31.1 (OBS: Mma GEMV for M = 1..32
#: at 17408 x 5120, dequant + cuBLAS for M = 33..64)
OBSERVED_GEMV_MMA_MAX_M = 32
#: the warp GEMV's largest M as seen on an H200 with 1.31.1 (OBS: warp GEMV at M = 1 and 8 at
#: 4096 x 4064, dequant + cuBLAS for M = 9..65; kGemvMaxM = 8 in the source read)
OBSERVED_GEMV_MAX_M = 8

#: kernel-name patterns (regular expressions searched in the profiler's names, which may be
#: demangled C++ or mangled symbols: plain substrings, no word boundaries). Each GEMV pattern
#: matches its own kernel only: ``...Fp4WeightGemvKernel`` is not a substring of
#: ``...Fp4WeightMmaGemvKernel`` (the pre-rename ``MatMulBlockScaledFp4...`` names as well).
GEMV_MMA_KERNELS = r"MatMulBlock(?:QuantizedFp4Weight|ScaledFp4)MmaGemvKernel"
GEMV_WARP_KERNELS = r"MatMulBlock(?:QuantizedFp4Weight|ScaledFp4)GemvKernel"
VEC8_KERNELS = r"DequantizeNvFp4Vec8Kernel"
SCALAR_KERNELS = r"DequantizeNvFp4Kernel"
NATIVE_KERNELS = r"Sm120"
#: kernels several paths launch (cuBLAS, the bias add, memsets): never "unmatched"
SHARED_KERNELS = (r"gemm", r"Gemm", r"gemv", r"nvjet", r"cutlass", r"xmma", r"splitK", r"reduce", r"dot_kernel",
                  r"AddBiasKernel", r"Memset", r"Memcpy")


def _threshold(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgument(f"OrtPolicy({name}=...) must be an int >= 0, got {value!r}")


def _env_bool(raw: str | None, default: bool) -> bool:
    """How ``ParseEnvironmentVariableWithDefault<bool>`` reads a variable: ``1``/``true`` and
    ``0``/``false``; unset or empty is the default."""
    value = (raw or "").strip().lower()
    if value in ("1", "true"):
        return True
    if value in ("0", "false"):
        return False
    return default


@dataclass(frozen=True)
class OrtPolicy:
    """What fixes ONNX Runtime's dispatch beyond the shapes, as far as Python can know it.

    ``gemv_mma_max_m``: the largest M the tensor-core GEMV takes (K % 128 == 0), and
    ``gemv_max_m``: the largest M the warp GEMV takes; both compile-time limits of the build,
    found by the crossover search of the GPU run (0: that kernel never runs). ``native_sm120``:
    the opt-in environment variable of the native Blackwell path is set (the build flag is not
    visible).
    """

    gemv_mma_max_m: int = OBSERVED_GEMV_MMA_MAX_M
    gemv_max_m: int = OBSERVED_GEMV_MAX_M
    native_sm120: bool = False

    def __post_init__(self) -> None:
        _threshold("gemv_mma_max_m", self.gemv_mma_max_m)
        _threshold("gemv_max_m", self.gemv_max_m)
        if not isinstance(self.native_sm120, bool):
            raise InvalidArgument(f"OrtPolicy(native_sm120=...) must be True or False, got {self.native_sm120!r}")

    @classmethod
    def from_environment(cls, environ: dict[str, str] | None = None, **overrides: int | bool) -> OrtPolicy:
        """The policy of this process: the observed thresholds, the environment variable
        ``IsNativeSm120Fp4Enabled()`` reads, and ``Fp4GemvMmaEnabled()``'s kill switch (off: the
        tensor-core GEMV never runs, ``gemv_mma_max_m = 0``); ``overrides`` win."""
        environ = os.environ if environ is None else environ
        values: dict[str, int | bool] = {"native_sm120": _env_bool(environ.get(NATIVE_SM120_ENV), False)}
        if not _env_bool(environ.get(GEMV_MMA_ENV), True):
            values["gemv_mma_max_m"] = 0
        values.update(overrides)
        return cls(**values)  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, int | bool]:
        """The policy as the result files keep it."""
        return {"gemv_mma_max_m": self.gemv_mma_max_m, "gemv_max_m": self.gemv_max_m,
                "native_sm120": self.native_sm120}

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> OrtPolicy:
        """The policy a result file recorded (:meth:`to_dict`)."""
        unknown = set(doc) - {"gemv_mma_max_m", "gemv_max_m", "native_sm120"}
        if unknown or "gemv_mma_max_m" not in doc:
            raise InvalidArgument(f"not a policy of the two-GEMV model: {doc!r}")
        return cls(**doc)


#: the policy the declarations are checked against unless a run says otherwise
DEFAULT_POLICY = OrtPolicy()


@dataclass(frozen=True)
class OrtProblem:
    """The facts of one call the guards look at (hashable, so selections are cached).

    ``m`` is the product of A's leading dimensions (``MatMulComputeHelper`` flattens them), ``n``
    and ``k`` come from B's shape [N, K/2] (CC: "N and K are derived from the packed weight shape").
    """

    m: int
    n: int
    k: int
    block_size: int
    dtype: str = "bfloat16"
    bias: bool = False

    def __post_init__(self) -> None:
        for name in ("m", "n", "k", "block_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidArgument(f"OrtProblem.{name} must be an int >= 0, got {value!r}")
        if self.block_size == 0:
            raise InvalidArgument("OrtProblem.block_size must be positive (ONNX Runtime enforces block_size > 0)")
        if self.k % 2:
            raise InvalidArgument(f"OrtProblem.k must be even (K = 2 * B.shape[1]), got {self.k}")
        if self.dtype not in ("float16", "bfloat16"):
            raise InvalidArgument(f"OrtProblem.dtype must be 'float16' or 'bfloat16', got {self.dtype!r}")


def expected_shortcut(problem: OrtProblem) -> str | None:
    """The launch-free outcome ``ComputeImpl`` returns before any path (CC), or None."""
    if problem.m == 0 or problem.n == 0:
        return "empty"
    if problem.k == 0:
        return "bias_only"
    return None


def _native_arch_missing(device: DeviceCaps) -> str | None:
    if device.sm is None:
        return "native_sm120 needs an sm_120..129 GPU (ComputeImpl: sm_ >= 120 && sm_ < 130); a CPU has none"
    if not 120 <= device.sm <= 129:
        return (f"native_sm120 needs an sm_120..129 GPU (ComputeImpl: sm_ >= 120 && sm_ < 130); {device.label} is "
                "not one")
    return None


def _block_size_16() -> Guard:
    return Guard("block_size_16", "block_size == 16", lambda p, d, pol: p.block_size == 16,
                 detail=lambda p, d, pol: f"block_size={p.block_size}")


MODEL = DispatchModel("onnxruntime_fp4", [
    PathSpec("gemv_mma", "tensor-core decode GEMV (MatMulBlockQuantizedFp4WeightMmaGemvKernel, mma.m16n8k16)",
             kernels=(GEMV_MMA_KERNELS,), guards=[
        Guard("m_in_range", "1 <= M <= policy.gemv_mma_max_m (observed 32)",
              lambda p, d, pol: 1 <= p.m <= pol.gemv_mma_max_m,
              detail=lambda p, d, pol: f"M={p.m}, gemv_mma_max_m={pol.gemv_mma_max_m}"),
        _block_size_16(),
        Guard("k_mod_128", "K % 128 == 0", lambda p, d, pol: p.k % 128 == 0,
              detail=lambda p, d, pol: f"K={p.k}, K % 128 = {p.k % 128}"),
    ]),
    PathSpec("gemv", "warp-reduction decode GEMV (MatMulBlockQuantizedFp4WeightGemvKernel)",
             kernels=(GEMV_WARP_KERNELS,), guards=[
        Guard("m_in_range", "1 <= M <= policy.gemv_max_m (observed 8)",
              lambda p, d, pol: 1 <= p.m <= pol.gemv_max_m,
              detail=lambda p, d, pol: f"M={p.m}, gemv_max_m={pol.gemv_max_m}"),
        _block_size_16(),
        Guard("k_mod_32", "K % 32 == 0", lambda p, d, pol: p.k % 32 == 0,
              detail=lambda p, d, pol: f"K={p.k}, K % 32 = {p.k % 32}"),
    ]),
    PathSpec("native_sm120", "opt-in native NVFP4 x NVFP4 CUTLASS GEMM (ORT_ENABLE_BLOCKQUANT_SM120 builds)",
             kernels=(NATIVE_KERNELS,), guards=[
        Guard("arch_sm120", "GPU compute capability 12.x", lambda p, d, pol: d.sm is not None and 120 <= d.sm <= 129,
              detail=lambda p, d, pol: f"device {d.label}", true_unreachable=_native_arch_missing),
        Guard("enabled", f"{NATIVE_SM120_ENV}=1 (policy.native_sm120)", lambda p, d, pol: pol.native_sm120,
              detail=lambda p, d, pol: f"native_sm120={pol.native_sm120}"),
        _block_size_16(),
        Guard("k_mod_32", "K % 32 == 0", lambda p, d, pol: p.k % 32 == 0,
              detail=lambda p, d, pol: f"K={p.k}, K % 32 = {p.k % 32}"),
        Guard("n_mod_32", "N % 32 == 0", lambda p, d, pol: p.n % 32 == 0,
              detail=lambda p, d, pol: f"N={p.n}, N % 32 = {p.n % 32}"),
    ]),
    PathSpec("prefill_vec8", "DequantizeNvFp4Vec8Kernel to an [N, K] scratch, then cuBLAS",
             kernels=(VEC8_KERNELS,), guards=[
        Guard("k_mod_8", "K % 8 == 0", lambda p, d, pol: p.k % 8 == 0,
              detail=lambda p, d, pol: f"K={p.k}, K % 8 = {p.k % 8}"),
        Guard("block_size_even", "block_size % 2 == 0", lambda p, d, pol: p.block_size % 2 == 0,
              detail=lambda p, d, pol: f"block_size={p.block_size}"),
    ]),
    PathSpec("prefill_scalar", "DequantizeNvFp4Kernel (one packed byte per thread) to scratch, then cuBLAS",
             kernels=(SCALAR_KERNELS,)),
], summary=f"ONNX Runtime {ORT_VERSION} {OP_DOMAIN}::{OP_TYPE}, CUDA execution provider (observed)", shortcuts={
    "empty": "M == 0 or N == 0: ComputeImpl returns before launching anything",
    "bias_only": "K == 0: cudaMemsetAsync of Y, then AddBiasKernel when a bias is given (no path kernel)",
}, shared_kernels=SHARED_KERNELS)

PATH_NAMES: tuple[str, ...] = MODEL.path_names
#: the two decode GEMVs, in preference order: fused, no scratch, one rounding of the products
GEMV_PATHS = ("gemv_mma", "gemv")
#: which policy value limits each GEMV's M
GEMV_LIMITS = {"gemv_mma": "gemv_mma_max_m", "gemv": "gemv_max_m"}
#: the paths that dequantize to a scratch buffer (the prefill the seed's lesson is about)
DEQUANT_PATHS = ("prefill_vec8", "prefill_scalar")


def dispatch_init(reg: ModelRegistry) -> None:
    """Register the model (``--dispatch-model=nvfp4_harness.nvfp4.onnxruntime.model``)."""
    reg.add_model(MODEL)


def predict(problem: OrtProblem, device: DeviceCaps, policy: OrtPolicy | None = None) -> str:
    """The shortcut or path the model expects ONNX Runtime to take for ``problem``."""
    return expected_shortcut(problem) or MODEL.select(problem, device, policy or DEFAULT_POLICY).path
