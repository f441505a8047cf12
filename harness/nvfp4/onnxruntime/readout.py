"""ONNX Runtime's dequantized weights, read out of its matmul bit for bit.

ONNX Runtime has no dequantize entry: its dequantized weight W [N, K] lives in a scratch
buffer inside the op. It can still be read exactly through the output. With A = [I_K; 0]
(an identity of K rows, padded with zero rows up to M = max(K, 128)),

    Y[m, n] = sum_k A[m, k] * W[n, k] = W[n, m]      for m < K,

because each output element has exactly one non-zero product, ``1 * W[n, m]``, which is exact,
and every other product is an exact zero. Any summation order, split-K, fp32 or reduced-precision
(fp16/bf16) reduction gives the same value: adding zeros to a value of T never rounds. That is
why cuBLAS's reduced-precision settings cannot spoil the read-out (ONNX Runtime's own
``cublasGemmHelper`` chooses them, not torch), and why no torch flag needs setting. M >= 128
keeps the call on its dequant + cuBLAS path: its GEMV applies the block scale after a partial
sum, ``(code * a) * s * g``, which is not the contract's ``code * (s * g)`` and so is no exact
read-out (the observed path of every read-out call is checked to be a dequant path).

What a matmul cannot show, and how each case handles it:

* **Signed zeros.** Every accumulator starts at +0.0, and under round-to-nearest ``+0 + -0 =
  +0``, so a -0.0 weight reads as +0.0 whatever A is. The comparison is therefore on the
  *observable* bits (:func:`observable`: zeros as +0.0); the number of -0.0 weights whose sign
  cannot be seen is recorded per case, and the contract hash of the full reference (signed zeros
  included) is recorded beside. The second run, A = -I (negated in place: -1 on the diagonal,
  -0.0 elsewhere), reads -W: it checks the sign bit of every non-zero weight through the
  other sign of the products and shows that the zeros still come out +0.0, so the sign of zero
  is unobservable through this op, not lost by one particular A.
* **NaN scales.** A NaN weight makes ``0 * NaN = NaN`` in every output of its row n, so one
  NaN poisons the whole row of the read-out. The NaN scale bytes (0x7F, 0xFF) are therefore
  planted in one known row (``nan_row``): that row must read as all NaN, every other row bit
  for bit. NaN payloads after a GEMM are cuBLAS's, so NaNs compare as NaN (canonical 0x7FFF).
* **Infinities** would poison their row the same way (``0 * inf``); the global scales are
  chosen so that no weight overflows fp16.

:func:`readout_operands` regenerates each case from its seed with the project's StableRng, so
CPU CI recomputes every reference hash from nothing but the seed.
"""

from __future__ import annotations

import zlib
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from nvfp4_harness.nvfp4.onnxruntime.cases import OrtCase, full_suite
from nvfp4_harness.nvfp4.shapes import StableRng
from nvfp4_harness.nvfp4.verify import compare_bitwise, tensor_sha256
from nvfp4_kernels import reference

#: M of every read-out call: above any GEMV threshold ONNX Runtime has had (8, 32, 64)
READOUT_MIN_M = 128
#: global scales cycled over the cases: 1, a checkpoint-like scale, a tiny one (fp16 subnormal
#: weights); the largest weight is 6 * 448 * g, far below fp16's 65504
GLOBAL_SCALES = (1.0, 0.0123, 2.0**-10)
#: scale bytes planted in every case: zeros of both signs, the smallest subnormals, the largest
#: subnormal and smallest normal, the largest finite magnitude (never NaN outside ``nan_row``)
SPECIAL_SCALE_BYTES = np.array([0x00, 0x80, 0x01, 0x81, 0x07, 0x87, 0x08, 0x7E, 0xFE], dtype=np.uint8)
NAN_SCALE_BYTES = (0x7F, 0xFF)
CANONICAL_NAN = 0x7FFF
#: large shapes read out beside the matrix's: (N, K, block_size, dtype)
LARGE = ((4096, 4096, 16, "bfloat16"), (2048, 5112, 6, "float16"), (1000, 5118, 7, "bfloat16"),
         (70000, 64, 16, "bfloat16"), (1500, 4100, 10, "bfloat16"), (512, 2048, 15, "float16"))


@dataclass(frozen=True)
class ReadoutCase:
    """One read-out: the weights' shape, block size, dtype, global scale, seed and NaN row."""

    id: str
    n: int
    k: int
    block_size: int
    dtype: str
    g: float
    seed: int
    nan_row: int | None

    @property
    def readout_m(self) -> int:
        return max(self.k, READOUT_MIN_M)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "readout_m": self.readout_m}


def readout_cases(cases: tuple[OrtCase, ...] | None = None) -> tuple[ReadoutCase, ...]:
    """A read-out per distinct (N, K, block size, dtype) of the full suite that has weights
    (K > 0, N > 0), then :data:`LARGE`."""
    shapes: list[tuple[str, int, int, int, str]] = []
    seen = set()
    for c in cases if cases is not None else full_suite():
        key = (c.n, c.k, c.block_size, c.dtype)
        if c.n > 0 and c.k > 0 and key not in seen:
            seen.add(key)
            shapes.append((f"readout-{c.id}", *key))
    shapes += [(f"readout-large-{n}x{k}-bs{bs}-{dtype}", n, k, bs, dtype) for n, k, bs, dtype in LARGE]
    out = []
    for i, (name, n, k, bs, dtype) in enumerate(shapes):
        out.append(ReadoutCase(name, n, k, bs, dtype, GLOBAL_SCALES[i % len(GLOBAL_SCALES)],
                               zlib.crc32(name.encode()), n // 2 if n >= 3 else None))
    return tuple(out)


def readout_operands(case: ReadoutCase) -> tuple[np.ndarray, np.ndarray, np.float32]:
    """Packed codes, scale bytes and g of ``case``, regenerated from its seed."""
    rng = StableRng(case.seed)
    n, k = case.n, case.k
    nblocks = -(-k // case.block_size)
    packed = rng.integers(0, 256, (n, k // 2)).astype(np.uint8)
    sign = rng.integers(0, 2, (n, nblocks)).astype(np.uint8) << 7
    magnitude = rng.integers(0x01, 0x7F, (n, nblocks)).astype(np.uint8)  # 0x01..0x7E: never NaN
    scales = (sign | magnitude).astype(np.uint8)
    flat = scales.reshape(-1)
    picks = rng.integers(0, flat.size, (len(SPECIAL_SCALE_BYTES),))
    flat[picks] = SPECIAL_SCALE_BYTES
    if case.nan_row is not None:
        blocks = rng.integers(0, nblocks, (len(NAN_SCALE_BYTES),))
        scales[case.nan_row, blocks] = NAN_SCALE_BYTES
    return packed, scales, np.float32(case.g)


def reference_weights(case: ReadoutCase) -> np.ndarray:
    """The contract's dequantized weight [N, K] (``nvfp4_kernels.reference.dequantize``)."""
    packed, scales, g = readout_operands(case)
    return reference.dequantize(packed, scales, float(g), case.block_size, case.dtype)


def _bits(w: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(w).view(np.uint16)


def _nan_mask(bits: np.ndarray, dtype: str) -> np.ndarray:
    exponent = 0x7C00 if dtype == "float16" else 0x7F80
    return (bits & 0x7FFF) > exponent


def observable(w: np.ndarray, dtype: str) -> np.ndarray:
    """What a one-hot matmul can show of ``w`` [N, K]: zeros as +0.0, and every row holding a
    NaN (or an infinity, since ``0 * inf`` is NaN) as all canonical NaN."""
    bits = _bits(w).copy()
    special = (bits & 0x7FFF) >= (0x7C00 if dtype == "float16" else 0x7F80)  # inf or NaN
    bits[(bits & 0x7FFF) == 0] = 0
    bits[special.any(axis=1)] = CANONICAL_NAN
    return bits.view(reference.numpy_dtype(dtype))


def negated(w: np.ndarray, dtype: str) -> np.ndarray:
    """``-w`` (the sign bit of every element flipped: exact in T)."""
    return (_bits(w) ^ np.uint16(0x8000)).view(reference.numpy_dtype(dtype))


def expected(case: ReadoutCase) -> dict[str, Any]:
    """The reference side of a case: the contract hash, the observable hashes for A = I and
    A = -I, the -0.0 weights whose sign is unobservable, and the NaN rows."""
    w = reference_weights(case)
    bits = _bits(w)
    nan_rows = sorted(int(r) for r in np.nonzero(_nan_mask(bits, case.dtype).any(axis=1))[0])
    return {
        "contract_sha256": tensor_sha256(w),
        "reference_sha256": tensor_sha256(observable(w, case.dtype)),
        "reference_negated_sha256": tensor_sha256(observable(negated(w, case.dtype), case.dtype)),
        "negative_zeros": int(np.count_nonzero(bits == 0x8000)),
        "nan_rows": nan_rows,
        "weights": w,
    }


def compare(read: np.ndarray, want: np.ndarray, dtype: str) -> tuple[bool, str]:
    """Observable bits of a read-out against the expected observable bits: (equal, explanation)."""
    got = observable(read, dtype)
    diff = compare_bitwise(want, got)
    return bool(diff), str(diff)


def identity_rows(torch: Any, k: int, m: int, dtype: str, device: Any) -> Any:
    """A = [I_K; 0] of shape [m, k] on the device (m >= k)."""
    a = torch.zeros((m, k), dtype=getattr(torch, dtype), device=device)
    a[:k].fill_diagonal_(1.0)
    return a


def read_out(case: ReadoutCase, run: Any, torch: Any, device: Any) -> dict[str, Any]:
    """Run one case on the device and compare with the reference.

    ``run(a, b, weight_scale, weight_scale_2, problem)`` calls the op once (observed) and returns
    ``(y, event)``; it is given twice, with A = I and with A = -I. Returns the case's record.
    """
    from nvfp4_harness.nvfp4.onnxruntime.model import DEQUANT_PATHS, OrtProblem
    from nvfp4_harness.nvfp4.verify import to_numpy

    packed, scales, g = readout_operands(case)
    want = expected(case)
    w = want.pop("weights")
    record: dict[str, Any] = {**case.to_dict(), **want}
    dev = {"b": torch.from_numpy(packed).to(device), "weight_scale": torch.from_numpy(scales).to(device),
           "weight_scale_2": torch.tensor([float(g)], dtype=torch.float32, device=device)}
    m = case.readout_m
    problem = OrtProblem(m, case.n, case.k, case.block_size, case.dtype, False)
    a = identity_rows(torch, case.k, m, case.dtype, device)
    y, event = run(a, dev["b"], dev["weight_scale"], dev["weight_scale_2"], problem)
    record.update(path=event.path, predicted=event.predicted, finding=event.finding, kernels=list(event.launched),
                  device=event.device.label)
    if event.path not in DEQUANT_PATHS:
        raise RuntimeError(f"the read-out call took {event.path!r}, not a dequant path (kernels: "
                           f"{', '.join(event.launched)}); only dequant + cuBLAS reads W out exactly")
    read = to_numpy(y[: case.k].t().contiguous())
    record["ort_sha256"] = tensor_sha256(observable(read, case.dtype))
    record["equal"], record["difference"] = compare(read, observable(w, case.dtype), case.dtype)
    a.neg_()
    y2, event2 = run(a, dev["b"], dev["weight_scale"], dev["weight_scale_2"], problem)
    read2 = to_numpy(y2[: case.k].t().contiguous())
    record["ort_negated_sha256"] = tensor_sha256(observable(read2, case.dtype))
    record["negated_equal"], record["negated_difference"] = compare(
        read2, observable(negated(w, case.dtype), case.dtype), case.dtype)
    record["negated_path"] = event2.path
    record["zeros_read_as_negative"] = int(np.count_nonzero(_bits(read) == 0x8000))
    rows = want["nan_rows"]
    record["nan_rows_read_all_nan"] = bool(_nan_mask(_bits(read)[rows], case.dtype).all()) if rows else None
    if record["equal"]:
        record.pop("difference")
    if record["negated_equal"]:
        record.pop("negated_difference")
    return record
