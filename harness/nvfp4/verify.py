"""Verifiers: SHA-256 tensor hashes and bitwise comparisons that explain their differences.

A hash covers a canonical header (dtype name and shape) and the contiguous little-endian
bytes, so the same bits give the same string whether the tensor is a numpy array, a torch
tensor on the CPU, or a torch tensor on a GPU. Comparisons are on bit patterns, never on
values: -0.0 differs from +0.0 and two NaNs with different payloads differ.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import ml_dtypes
import numpy as np

_TORCH_TO_NUMPY_NAME = {
    "torch.float16": "float16", "torch.bfloat16": "bfloat16", "torch.float32": "float32",
    "torch.float64": "float64", "torch.uint8": "uint8", "torch.int8": "int8", "torch.int16": "int16",
    "torch.int32": "int32", "torch.int64": "int64", "torch.bool": "bool",
}


def to_numpy(x: Any) -> np.ndarray:
    """A host numpy view of ``x`` with the same bits (bfloat16 as ml_dtypes.bfloat16)."""
    if type(x).__module__.startswith("torch"):
        import torch

        t = x.detach()
        if t.is_cuda:
            t = t.cpu()
        t = t.contiguous()
        if t.dtype == torch.bfloat16:
            return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        if str(t.dtype) not in _TORCH_TO_NUMPY_NAME:
            raise TypeError(f"tensor_sha256 does not support torch dtype {t.dtype}")
        return t.numpy()
    return np.asarray(x)


def _bits_view(x: np.ndarray) -> np.ndarray:
    """The array reinterpreted as unsigned integers of the same width (bit patterns)."""
    width = x.dtype.itemsize
    return np.ascontiguousarray(x).view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[width])


def tensor_sha256(x: Any) -> str:
    """SHA-256 hex digest of ``dtype name | shape | little-endian contiguous bytes``."""
    arr = to_numpy(x)
    bits = _bits_view(arr).astype(_bits_view(arr).dtype.newbyteorder("<"), copy=False)
    header = f"{arr.dtype.name}|{','.join(str(d) for d in arr.shape)}|".encode()
    digest = hashlib.sha256(header)
    digest.update(np.ascontiguousarray(bits).tobytes())
    return digest.hexdigest()


@dataclass
class BitwiseDiff:
    """The outcome of :func:`compare_bitwise`; falsy when the tensors differ."""

    equal: bool
    reason: str = ""
    mismatches: int = 0
    total: int = 0
    #: (index tuple, expected bits, actual bits) for the first few differing elements
    first: list[tuple[tuple[int, ...], int, int]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return self.equal

    def __str__(self) -> str:
        if self.equal:
            return f"bitwise equal ({self.total} elements)"
        if self.reason:
            return self.reason
        lines = [f"{self.mismatches} of {self.total} elements differ bitwise; first:"]
        width = 0
        for index, want, got in self.first:
            width = width or max(len(f"{want:x}"), len(f"{got:x}"))
            lines.append(f"  at {list(index)}: expected 0x{want:0{width}x}, got 0x{got:0{width}x}")
        return "\n".join(lines)


def compare_bitwise(expected: Any, actual: Any, max_report: int = 8) -> BitwiseDiff:
    """Compare two tensors bit for bit: dtype, shape, then every element's bit pattern."""
    want, got = to_numpy(expected), to_numpy(actual)
    if want.dtype != got.dtype:
        return BitwiseDiff(False, f"dtype differs: expected {want.dtype}, got {got.dtype}")
    if want.shape != got.shape:
        return BitwiseDiff(False, f"shape differs: expected {want.shape}, got {got.shape}")
    want_bits, got_bits = _bits_view(want), _bits_view(got)
    differ = want_bits != got_bits
    count = int(differ.sum())
    first = [(tuple(int(i) for i in idx), int(want_bits[tuple(idx)]), int(got_bits[tuple(idx)]))
             for idx in np.argwhere(differ)[:max_report]]
    return BitwiseDiff(count == 0, "", count, int(want.size), first)


def assert_bitwise_equal(expected: Any, actual: Any, what: str = "tensor") -> None:
    """Raise AssertionError with the first differing bit patterns when the tensors differ."""
    diff = compare_bitwise(expected, actual)
    if not diff:
        raise AssertionError(f"{what}: {diff}")


def relative_error(reference: Any, actual: Any) -> float:
    """||actual - reference|| / ||reference|| in float64 (inf if any NaN appears in actual)."""
    ref = to_numpy(reference).astype(np.float64)
    act = to_numpy(actual).astype(np.float64)
    if np.isnan(act).any() and not np.isnan(ref).any():
        return float("inf")
    mask = ~np.isnan(ref)
    norm = np.linalg.norm(ref[mask])
    return float(np.linalg.norm(act[mask] - ref[mask]) / (norm if norm else 1.0))
