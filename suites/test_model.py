"""Level 3 of the bitwise evidence: greedy generation of a tiny NVFP4 language model.

The SHA-256 of the 32 generated token ids is a golden (key ``cpu`` on the CPU backend, the GPU
environment key on a GPU), and it must not depend on which prefill kernel ran the prompt, nor on
whether the decode steps ran the default policy's paths or the GEMV (enabled by a policy).
"""

from __future__ import annotations

import functools

import numpy as np
import nvfp4_kernels
import pytest
from nvfp4_harness.nvfp4 import shapes
from nvfp4_harness.nvfp4.tiny_lm import PROMPT, ModelConfig, TinyCausalLM, generate, model_fingerprint
from nvfp4_harness.nvfp4.verify import assert_bitwise_equal, tensor_sha256
from nvfp4_kernels.model import Policy

pytestmark = pytest.mark.dispatch

STEPS = 32
CONFIG = ModelConfig()
BACKENDS = [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=pytest.mark.gpu)]
#: the policy that enables the GEMV (the default, gemv_max_m = 0, never takes it)
GEMV_ON = Policy(gemv_max_m=8)


def default_decode_path(k: int, block_size: int) -> str:
    """The path of a decode step (M = 1, aligned buffers) under the default policy, from the
    guard table of docs/paths.md: no GEMV (gemv_max_m = 0); fused_mma where block 16 and
    K % 128 == 0 (M = 1 <= fused_max_m = 128); otherwise prefill_vec8 (K % 8 == 0, even block)."""
    if block_size == 16 and k % 128 == 0:
        return "fused_mma"
    assert k % 8 == 0 and block_size % 2 == 0, "the tiny model's shapes all satisfy vec8's guards"
    return "prefill_vec8"


@functools.lru_cache(maxsize=2)
def model_on(device: str) -> TinyCausalLM:
    return TinyCausalLM(CONFIG, device)


def _device(backend: str) -> str:
    if backend == "cuda":
        import torch

        if not torch.cuda.is_available():
            pytest.skip("needs a CUDA GPU (torch.cuda.is_available() is False)")
    return backend


@pytest.mark.parametrize("backend", BACKENDS)
def test_greedy_tokens_are_golden_and_independent_of_the_prefill_path(backend: str, golden) -> None:
    model = model_on(_device(backend))
    runs = {}
    for path in ("prefill_vec8", "prefill_scalar"):
        with shapes.dispatch_events() as events:
            runs[path] = generate(model, PROMPT, STEPS, Policy(force_path=path))
        matmuls = [e for e in events if e.op == "matmul"]
        per_forward = sum(1 for _ in model.linears())
        prefill, decode = matmuls[:per_forward], matmuls[per_forward:]
        assert {(e.path, e.problem.m, e.forced) for e in prefill} == {(path, len(PROMPT), True)}, (
            "the prompt's forward pass must run every linear through the forced prefill path")
        assert len(decode) == per_forward * (STEPS - 1)
        # restated from the layer shapes: K = hidden (64) goes to vec8, K = intermediate (128) to fused_mma
        want = [(default_decode_path(lin.in_features, lin.block_size), 1, lin.in_features)
                for lin in model.linears()] * (STEPS - 1)
        assert [(e.path, e.problem.m, e.problem.k) for e in decode] == want, (
            "decode steps must take the default policy's paths for their layer's K")
        assert {path for path, _, _ in want} == {"fused_mma", "prefill_vec8"}
        assert {e.backend for e in matmuls} == {backend}
    vec8, scalar = runs["prefill_vec8"], runs["prefill_scalar"]
    assert_bitwise_equal(vec8.prefill_logits, scalar.prefill_logits, "prompt logits, vec8 vs scalar prefill")
    assert vec8.tokens == scalar.tokens
    unforced = generate(model, PROMPT, STEPS)  # the default policy's own choice
    assert unforced.tokens == vec8.tokens
    with shapes.dispatch_events() as events, nvfp4_kernels.policy_scope(GEMV_ON):
        gemv_decode = generate(model, PROMPT, STEPS)  # the GEMV enabled: every decode step takes it
    decode = [e for e in events if e.op == "matmul"][per_forward:]
    assert {(e.path, e.problem.m) for e in decode} == {("gemv", 1)}, "decode steps must take the enabled GEMV"
    assert gemv_decode.tokens == vec8.tokens
    assert len(vec8.tokens) == STEPS and all(0 <= t < CONFIG.vocab for t in vec8.tokens)
    ids = np.array(vec8.tokens, dtype=np.int64)
    golden.check(f"model/tiny-lm-{model_fingerprint(CONFIG)}/greedy-{STEPS}", ids, key=golden.key_for(backend))


def test_the_model_is_sensitive_to_its_nvfp4_weights() -> None:
    """A golden of token ids is only evidence if the ids move when the weights do: flipping
    one nibble of the lm_head changes the prompt's logits."""
    model = TinyCausalLM(CONFIG, "cpu")
    before = generate(model, PROMPT, 1)
    model.lm_head.packed[0, 0] ^= 0x07
    after = generate(model, PROMPT, 1)
    assert tensor_sha256(before.prefill_logits) != tensor_sha256(after.prefill_logits)


def test_config_refuses_shapes_that_would_never_reach_the_gemv() -> None:
    with pytest.raises(ValueError, match="multiple of 32"):
        ModelConfig(hidden=48, heads=4)
    with pytest.raises(ValueError, match="block_size 16"):
        ModelConfig(block_size=32)
