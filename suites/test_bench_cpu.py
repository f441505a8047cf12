"""pytest-benchmark timings of the host-side costs: what CPU CI and the harness itself spend.

* the CPU reference dequantization, per path (what every CPU-CI bitwise check pays);
* SHA-256 tensor hashing throughput (every golden check hashes whole outputs);
* the dispatcher's cost per call, with and without a listener registered (what the coverage
  recorder adds to every operator call).

Each benchmark also checks its result against an independent computation, so a fast wrong
answer fails; none asserts on a time. Under pytest-xdist pytest-benchmark disables timing and
runs each function once, and the checks still run. Compare the groups with
``pytest suites/test_bench_cpu.py --benchmark-only --benchmark-group-by=group``.
"""

from __future__ import annotations

import hashlib

import ml_dtypes
import numpy as np
import nvfp4_kernels
import pytest
from nvfp4_harness.nvfp4.verify import tensor_sha256
from nvfp4_kernels import reference


def _weights(n: int, k: int, bs: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.float32]:
    rng = np.random.default_rng(seed)
    packed = rng.integers(0, 256, (n, k // 2), dtype=np.uint8)
    scales = rng.integers(0x20, 0x50, (n, -(-k // bs)), dtype=np.uint8)  # positive, normal, no NaN
    return packed, scales, np.float32(0.0123)


def _ml_dtypes_dequant(packed: np.ndarray, scales: np.ndarray, g: np.float32, bs: int) -> np.ndarray:
    """The contract through ml_dtypes' own float4/float8 decoders (independent of nvfp4_kernels.nvfp4)."""
    n, k = packed.shape[0], packed.shape[1] * 2
    codes = np.stack((packed & 0x0F, packed >> 4), axis=-1).reshape(n, k)
    e2m1 = codes.view(ml_dtypes.float4_e2m1fn).astype(np.float32)
    scale = scales.view(ml_dtypes.float8_e4m3fn).astype(np.float32) * g
    return (e2m1 * np.repeat(scale, bs, axis=1)[:, :k]).astype(ml_dtypes.bfloat16)


@pytest.mark.parametrize("path", ["scalar", "vec8"])
def test_reference_dequant_1024x1024(benchmark: pytest.FixtureDef, path: str) -> None:
    benchmark.group = "reference dequant 1024 x 1024 bf16 bs16"
    packed, scales, g = _weights(1024, 1024, 16)
    out = benchmark.pedantic(reference.dequantize, args=(packed, scales, g, 16, "bfloat16", path),
                             rounds=5, warmup_rounds=1)
    expected = _ml_dtypes_dequant(packed, scales, g, 16)
    assert np.array_equal(out.view(np.uint16), expected.view(np.uint16))


def test_tensor_sha256_throughput_4mb(benchmark: pytest.FixtureDef) -> None:
    benchmark.group = "tensor_sha256"
    data = np.random.default_rng(1).integers(0, 2**16, 2 * 1024 * 1024, dtype=np.uint16).view(np.float16)
    digest = benchmark.pedantic(tensor_sha256, args=(data,), rounds=10, warmup_rounds=1)
    # the documented layout: "dtype name|shape|" then the little-endian bytes
    expected = hashlib.sha256(b"float16|2097152|" + data.astype("<f2").tobytes()).hexdigest()
    assert digest == expected
    benchmark.extra_info["bytes"] = data.nbytes


def _tiny_call() -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.float32]]:
    packed, scales, g = _weights(2, 16, 16, seed=2)
    return nvfp4_kernels.dequantize(packed, scales, g, 16, "bfloat16", backend="cpu"), (packed, scales, g)


@pytest.mark.parametrize("listener", [False, True], ids=["no-listener", "with-listener"])
def test_dispatch_overhead_per_call(benchmark: pytest.FixtureDef, listener: bool) -> None:
    benchmark.group = "dispatch overhead per call (2 x 16 dequantize, CPU backend)"
    events: list[nvfp4_kernels.DispatchEvent] = []
    calls = []

    def call() -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.float32]]:
        calls.append(1)
        return _tiny_call()

    registered = nvfp4_kernels.add_listener(events.append) if listener else None
    try:
        out, (packed, scales, g) = benchmark.pedantic(call, rounds=200, warmup_rounds=5)
    finally:
        if registered is not None:
            nvfp4_kernels.remove_listener(registered)
    assert np.array_equal(out.view(np.uint16), _ml_dtypes_dequant(packed, scales, g, 16).view(np.uint16))
    if listener:  # every call announced exactly one event, with the path the guards choose
        assert len(events) == len(calls) >= 1
        assert all(e.op == "dequantize" and e.path == "prefill_vec8" and e.backend == "cpu" for e in events)
    else:
        assert events == []
