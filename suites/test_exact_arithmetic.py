"""Exact-arithmetic checks of every matmul path: bitwise, against float64 rounded by the contract.

Weights are E2M1 values times power-of-two scales, activations are small multiples of 1/2, so
every product and every partial sum is exact in fp32 whatever the summation order. The only
roundings left are the ones the contract prescribes, and the expected output is float64
arithmetic rounded exactly that way:

* GEMV and fused_mma: ``to_T(sum + bias)`` - bias added in fp32 before the single rounding;
* prefill: ``to_T(to_T(sum) + bias)`` - the matmul rounds, then the bias add rounds again.

The default policy takes the GEMV at M <= 8 on every layer these tests build (all far below
its 2^24 weights), so the other paths' decode-sized checks run under :data:`LARGE`, a policy
under which every layer is too large for the GEMV. A GEMV that rounds before adding the bias, a
kernel that accumulates in fp16, a swapped nibble or a scale read one block early all change
bits here, and the values below are chosen so that single and double rounding really differ
(e.g. bf16: sum = 1 + 2^-9, bias = 2^-8).
"""

from __future__ import annotations

import dataclasses
import zlib

import ml_dtypes
import numpy as np
import nvfp4_kernels
import pytest
from nvfp4_harness.nvfp4 import shapes
from nvfp4_harness.nvfp4.shapes import LARGE_LAYERS_POLICY
from nvfp4_harness.nvfp4.verify import assert_bitwise_equal, to_numpy
from nvfp4_kernels.model import Policy

pytestmark = pytest.mark.dispatch

NP = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
_CODE_OF = {0.0: 0, 0.5: 1, 1.0: 2, 1.5: 3, 2.0: 4, 3.0: 5, 4.0: 6, 6.0: 7}


def _cuda_ok() -> bool:
    import torch

    return torch.cuda.is_available()


def _not_hopper() -> bool:
    """A CUDA GPU other than sm_90, where the dispatcher has no fused_wgmma."""
    import torch

    return torch.cuda.is_available() and torch.cuda.get_device_capability(0) != (9, 0)


BACKENDS = [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=pytest.mark.gpu)]
#: the default's GEMV range, spelled out
GEMV_ON = Policy(gemv_max_m=8)
LARGE = LARGE_LAYERS_POLICY  # every layer too large for the GEMV (gemv_max_weights = 0)
#: the paths that add the bias in fp32 before their one rounding (docs/contract.md)
SINGLE_ROUNDING = ("gemv", "fused_mma", "fused_wgmma")


def encode(values: np.ndarray, scale_exponents: np.ndarray, block_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Pack exact weights ``values[n, k] = e2m1 * 2^scale_exponents[n, k // block_size]`` (g = 1/2
    is applied by the caller) into codes and E4M3 power-of-two scale bytes."""
    n, k = values.shape
    codes = np.zeros((n, k), dtype=np.uint8)
    for (i, j), v in np.ndenumerate(values):
        magnitude = abs(v) / 2.0 ** scale_exponents[i, j // block_size]
        codes[i, j] = _CODE_OF[magnitude] | (8 if np.signbit(v) else 0)
    scales = ((scale_exponents + 7) << 3).astype(np.uint8)  # 2^e: exponent field e + 7, mantissa 0
    return (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8), scales


def to_t(x64: np.ndarray, dtype: str) -> np.ndarray:
    """Round float64 values that are exact in fp32 to ``dtype`` once."""
    x32 = np.asarray(x64, dtype=np.float32)
    assert np.array_equal(x32.astype(np.float64), np.asarray(x64)), "test values must be exact in fp32"
    return x32.astype(NP[dtype])


def call(a, b, scales, g, block_size, bias, backend, path=None, policy=None):
    """Run under ``policy`` (None: the default), forcing ``path`` on top of it if given."""
    if backend == "cuda":
        if not _cuda_ok():
            pytest.skip("needs a CUDA GPU (torch.cuda.is_available() is False)")
        a, b, scales, bias = (None if x is None else shapes.place(x, "cuda", True) for x in (a, b, scales, bias))
    if path:
        policy = dataclasses.replace(policy or Policy(), force_path=path)
    with shapes.dispatch_events() as events:
        y = nvfp4_kernels.nvfp4_matmul(a, b, scales, np.float32(g), block_size, bias, backend=backend, policy=policy)
    return to_numpy(y), events[0].path


def _unit_row_problem(dtype: str, a_values: list[float], bias_value: float | None, k: int = 32):
    """A [1, K] against one weight row of ones (code 2, scale 1, g 1)."""
    values = np.zeros((1, k))
    values[0, :len(a_values)] = 1.0
    b, s = encode(values, np.zeros((1, -(-k // 16)), dtype=np.int64), 16)
    a = np.zeros((1, k))
    a[0, :len(a_values)] = a_values
    bias = None if bias_value is None else np.array([bias_value]).astype(NP[dtype])
    return a.astype(NP[dtype]), b, s, bias


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("dtype", "tail", "bias_value"), [
    ("bfloat16", 2.0**-9, 2.0**-8),   # bf16 ulp(1) = 2^-7
    ("float16", 2.0**-12, 2.0**-11),  # fp16 ulp(1) = 2^-10
])
def test_gemv_adds_bias_before_its_single_rounding(dtype: str, tail: float, bias_value: float,
                                                   backend: str) -> None:
    a, b, s, bias = _unit_row_problem(dtype, [1.0, tail], bias_value)
    single = to_t(np.array([[1.0 + tail + bias_value]]), dtype)
    double = to_t(to_t(np.array([[1.0 + tail]]), dtype).astype(np.float64) + bias_value, dtype)
    assert not np.array_equal(single.view(np.uint16), double.view(np.uint16)), "values do not discriminate"
    y, path = call(a, b, s, 1.0, 16, bias, backend, policy=GEMV_ON)
    assert path == "gemv"
    assert_bitwise_equal(single, y, "GEMV: one rounding of sum + bias")
    y, path = call(a, b, s, 1.0, 16, bias, backend, policy=LARGE)
    assert path == "prefill_vec8", "K = 32 on a layer too large for the GEMV: K % 128 != 0 refuses fused_mma"
    assert_bitwise_equal(double, y, "prefill_vec8: matmul rounded, then bias added and rounded")
    for prefill in ("prefill_vec8", "prefill_scalar"):
        y, path = call(a, b, s, 1.0, 16, bias, backend, prefill)
        assert path == prefill
        assert_bitwise_equal(double, y, f"{prefill}: matmul rounded, then bias added and rounded")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("path", ["gemv", "prefill_vec8", "prefill_scalar"])
def test_partial_sums_beyond_half_precision_are_kept(dtype: str, path: str, backend: str) -> None:
    """2048 + 1 - 2048 is 1 in fp32 but 0 in an fp16 or bf16 running sum."""
    a, b, s, _ = _unit_row_problem(dtype, [2048.0, 1.0, -2048.0], None)
    y, taken = call(a, b, s, 1.0, 16, None, backend, path, policy=GEMV_ON if path == "gemv" else None)
    assert taken == path
    assert_bitwise_equal(to_t(np.array([[1.0]]), dtype), y, f"{path}: fp32 accumulation")


EXACT_CASES = [  # (M, N, K, block_size, natural path); gemv cases run under the default, the others under LARGE
    (1, 16, 64, 16, "gemv"), (4, 24, 128, 16, "gemv"), (8, 8, 256, 16, "gemv"),
    (1, 16, 128, 16, "fused_mma"), (8, 24, 256, 16, "fused_mma"), (32, 8, 128, 16, "fused_mma"),
    (64, 8, 128, 16, "fused_wgmma"), (200, 8, 256, 16, "fused_wgmma"),  # a Hopper GPU or the CPU backend
    (1, 16, 96, 16, "prefill_vec8"),  # decode on a layer too large for the GEMV where K % 128 != 0
    (9, 16, 64, 16, "prefill_vec8"), (1, 16, 48, 6, "prefill_vec8"), (12, 8, 40, 2, "prefill_vec8"),
    (9, 16, 96, 32, "prefill_vec8"), (9, 8, 64, 12, "prefill_vec8"), (3, 8, 56, 4, "prefill_vec8"),
    (9, 16, 62, 7, "prefill_scalar"), (1, 8, 36, 16, "prefill_scalar"), (9, 8, 40, 5, "prefill_scalar"),
    (16, 8, 30, 3, "prefill_scalar"), (2, 8, 24, 1, "prefill_scalar"),
]


def _exact_problem(m: int, n: int, k: int, bs: int, dtype: str, seed: int):
    rng = np.random.default_rng(seed)
    e2m1 = rng.choice(list(_CODE_OF), size=(n, k)) * rng.choice([-1.0, 1.0], size=(n, k))
    exponents = rng.integers(-2, 3, size=(n, -(-k // bs)))
    values = e2m1 * 2.0 ** exponents[:, np.arange(k) // bs]
    b, s = encode(values, exponents, bs)
    w = values * 0.5  # g = 1/2
    a = (rng.integers(-8, 9, size=(m, k)) / 2.0).astype(NP[dtype])
    bias = (rng.integers(-512, 513, size=n) / 128.0).astype(NP[dtype])
    return a, b, s, bias, w


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize(("m", "n", "k", "bs", "natural"), EXACT_CASES,
                         ids=[f"m{c[0]}-n{c[1]}-k{c[2]}-bs{c[3]}" for c in EXACT_CASES])
def test_every_path_is_exact_where_the_arithmetic_is(m, n, k, bs, natural, dtype, backend) -> None:
    if natural == "fused_wgmma" and backend == "cuda" and _not_hopper():
        pytest.skip("fused_wgmma runs on Hopper only; this GPU takes fused_mma at these M")
    a, b, s, bias, w = _exact_problem(m, n, k, bs, dtype, zlib.crc32(f"{m},{n},{k},{bs},{dtype}".encode()))
    sums = a.astype(np.float64) @ w.T  # exact: every product and partial sum fits fp32
    bias64 = bias.astype(np.float64)
    expected = {
        "single": to_t(sums + bias64, dtype),
        "prefill": to_t(to_t(sums, dtype).astype(np.float64) + bias64, dtype),
    }
    policy = None if natural == "gemv" else LARGE
    paths = [natural] + (["prefill_vec8", "prefill_scalar"] if natural in SINGLE_ROUNDING else [])
    if natural == "prefill_vec8":
        paths.append("prefill_scalar")
    for path in paths:
        y, taken = call(a, b, s, 0.5, bs, bias, backend, None if path == natural else path, policy)
        assert taken == path
        want = expected["single" if path in SINGLE_ROUNDING else "prefill"]
        assert_bitwise_equal(want, y, f"{path} (M={m}, K={k}, bs={bs})")
