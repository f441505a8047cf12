"""Level 2 of the bitwise evidence (docs/contract.md, "Three levels"): whole operator outputs, hashed.

Eight configurations, fp16/bf16 x block size 16/32 x aligned/non-aligned K, with N and K
between 128 and 5120. For each, every path that can run it is forced in turn:

* the dequantized scratch from every dequant path is the same bits, equal to the independent
  oracle and to one *portable* golden (the same file on every machine and backend);
* every matmul path's output (GEMV at M = 1 and 8, fused_mma at M = 1 and 16 and fused_wgmma at
  M = 16 where their guards allow, prefill vec8 and prefill scalar at M = 16) is hashed into a
  golden keyed by the
  backend environment; the two
  prefill paths give identical bits (same scratch, same matmul), and every output lies within
  the sound float64 bound of the oracle.
"""

from __future__ import annotations

import functools
import zlib
from dataclasses import dataclass

import nvfp4_kernels
import pytest
from nvfp4_harness.nvfp4 import shapes
from nvfp4_harness.nvfp4.shapes import ShapeCase, StableRng
from nvfp4_harness.nvfp4.verify import assert_bitwise_equal, tensor_sha256
from nvfp4_kernels.model import Policy

pytestmark = pytest.mark.dispatch

PREFILL_M = 16
GEMV_MS = (1, 8)
FUSED_MS = (1, 16)
WGMMA_MS = (16,)


@dataclass(frozen=True)
class OpConfig:
    name: str
    dtype: str
    block_size: int
    n: int
    k: int

    @property
    def dequant_paths(self) -> tuple[str, ...]:
        vec8 = self.k % 8 == 0 and self.block_size % 2 == 0
        return ("prefill_vec8", "prefill_scalar") if vec8 else ("prefill_scalar",)

    @property
    def gemv_allowed(self) -> bool:
        return self.block_size == 16 and self.k % 32 == 0

    @property
    def fused_allowed(self) -> bool:
        return self.block_size == 16 and self.k % 128 == 0


CONFIGS = (
    OpConfig("fp16-bs16-aligned", "float16", 16, 256, 5120),
    OpConfig("fp16-bs16-unaligned", "float16", 16, 256, 5112),   # K % 32 = 24, partial last block
    OpConfig("fp16-bs32-aligned", "float16", 32, 384, 4096),
    OpConfig("fp16-bs32-unaligned", "float16", 32, 128, 1030),   # K % 8 = 6: scalar only
    OpConfig("bf16-bs16-aligned", "bfloat16", 16, 1024, 2048),   # the larger one
    OpConfig("bf16-bs16-unaligned", "bfloat16", 16, 512, 1004),  # K % 8 = 4: scalar only
    OpConfig("bf16-bs32-aligned", "bfloat16", 32, 256, 5120),
    OpConfig("bf16-bs32-unaligned", "bfloat16", 32, 256, 5112),  # partial last block of 24
)
BACKENDS = [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=pytest.mark.gpu)]


def _need(backend: str) -> None:
    if backend == "cuda":
        import torch

        if not torch.cuda.is_available():
            pytest.skip("needs a CUDA GPU (torch.cuda.is_available() is False)")


@functools.lru_cache(maxsize=2)
def operands(config: OpConfig, backend: str) -> tuple[ShapeCase, shapes.Operands]:
    """Deterministic (StableRng) operands, so the goldens depend on the operator alone."""
    case = ShapeCase(f"operator-{config.name}", "matmul", (PREFILL_M,), config.n, config.k, config.block_size,
                     config.dtype, "prefill", "level-2 hash", bias=True)
    rng = StableRng(zlib.crc32(config.name.encode()))
    return case, case.build(rng, backend, "torch" if backend == "cuda" else "numpy")


def _forced(path: str):
    """Force ``path``; a forced path's guards must still hold, so the policy's GEMV range covers
    GEMV_MS (the default's is M <= 8, spelled out) and fused_wgmma's starts at M = 1."""
    return Policy(gemv_max_m=max(GEMV_MS), wgmma_min_m=1, force_path=path)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.name)
def test_dequantized_scratch_is_portable(config: OpConfig, backend: str, golden) -> None:
    _need(backend)
    case, ops = operands(config, backend)
    want = shapes.oracle_dequantize(ops.b, ops.weight_scale, ops.weight_scale_2, config.block_size, config.dtype)
    for path in config.dequant_paths:
        with shapes.dispatch_events() as events:
            got = nvfp4_kernels.dequantize(ops.b, ops.weight_scale, ops.weight_scale_2, config.block_size,
                                     config.dtype, backend=backend, policy=_forced(path))
        assert events[0].path == path
        assert_bitwise_equal(want, got, f"{config.name}: {path} scratch vs oracle")
    golden.check(f"operator/{config.name}/dequant", want, key=golden.PORTABLE)


def _output_runs(config: OpConfig) -> list[tuple[str, int]]:
    runs = [("gemv", m) for m in GEMV_MS] if config.gemv_allowed else []
    runs += [("fused_mma", m) for m in FUSED_MS] if config.fused_allowed else []
    runs += [("fused_wgmma", m) for m in WGMMA_MS] if config.fused_allowed else []
    return runs + [(path, PREFILL_M) for path in config.dequant_paths]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.name)
def test_outputs_of_every_path(config: OpConfig, backend: str, golden) -> None:
    _need(backend)
    case, ops = operands(config, backend)
    key = golden.key_for(backend)
    hashes = {}
    for path, m in _output_runs(config):
        a = ops.a[:m]
        with shapes.dispatch_events() as events:
            y = nvfp4_kernels.nvfp4_matmul(a, ops.b, ops.weight_scale, ops.weight_scale_2, config.block_size, ops.bias,
                                     backend=backend, policy=_forced(path))
        assert events[0].path == path and events[0].problem.m == m
        sub = ShapeCase(case.id, "matmul", (m,), config.n, config.k, config.block_size, config.dtype, path, "")
        shapes.check_against_oracle(sub, shapes.Operands(a, ops.b, ops.weight_scale, ops.weight_scale_2, ops.bias),
                                    y, path)
        hashes[(path, m)] = tensor_sha256(y)
        golden.check(f"operator/{config.name}/{path}-m{m}", y, key=key)
    if ("prefill_vec8", PREFILL_M) in hashes:
        assert hashes[("prefill_vec8", PREFILL_M)] == hashes[("prefill_scalar", PREFILL_M)], (
            f"{config.name}: prefill vec8 and prefill scalar outputs differ (same scratch, same matmul)")


def test_the_configurations_cover_the_level_2_matrix() -> None:
    combos = {(c.dtype, c.block_size, c.k % c.block_size == 0 and c.k % 32 == 0) for c in CONFIGS}
    assert len(combos) == 8, "fp16/bf16 x block 16/32 x aligned/non-aligned K"
    assert all(128 <= c.n <= 5120 and 128 <= c.k <= 5120 for c in CONFIGS)
    assert any(c.k % 8 for c in CONFIGS) and any(c.k % c.block_size for c in CONFIGS)
    assert {p for c in CONFIGS for p, _ in _output_runs(c)} == {"gemv", "fused_mma", "fused_wgmma", "prefill_vec8",
                                                                "prefill_scalar"}
