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
from nvfp4_harness.nvfp4.shapes import LARGE_LAYERS_POLICY
from nvfp4_harness.nvfp4.tiny_lm import PROMPT, ModelConfig, TinyCausalLM, generate, model_fingerprint
from nvfp4_harness.nvfp4.verify import assert_bitwise_equal, tensor_sha256
from nvfp4_kernels.model import Policy

pytestmark = pytest.mark.dispatch

STEPS = 32
CONFIG = ModelConfig()
BACKENDS = [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=pytest.mark.gpu)]
#: every layer too large for the GEMV: decode steps go to fused_mma or prefill_vec8
LARGE = LARGE_LAYERS_POLICY  # every layer too large for the GEMV (gemv_max_weights = 0)


def large_layer_decode_path(k: int, block_size: int) -> str:
    """The path of a decode step (M = 1, aligned buffers) when the GEMV refuses the layer as too
    large (LARGE), from the guard table of docs/paths.md: fused_mma where block 16 and
    K % 128 == 0 (M = 1 <= fused_max_m = 128); otherwise prefill_vec8 (K % 8 == 0, even block).
    Under the default policy every decode step takes the GEMV (M = 1 <= gemv_max_m = 8, block 16,
    K % 32 == 0, and the tiny model's layers are far below 2^24 weights)."""
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
        # the default policy: every layer is small, so every decode step takes the GEMV
        assert [(e.path, e.problem.m) for e in decode] == [("gemv", 1)] * len(decode), (
            "decode steps must take the default policy's GEMV")
        assert {e.backend for e in matmuls} == {backend}
    vec8, scalar = runs["prefill_vec8"], runs["prefill_scalar"]
    assert_bitwise_equal(vec8.prefill_logits, scalar.prefill_logits, "prompt logits, vec8 vs scalar prefill")
    assert vec8.tokens == scalar.tokens
    unforced = generate(model, PROMPT, STEPS)  # the default policy's own choice
    assert unforced.tokens == vec8.tokens
    with shapes.dispatch_events() as events, nvfp4_kernels.policy_scope(LARGE):
        large_decode = generate(model, PROMPT, STEPS)  # the GEMV refuses every layer as too large
    decode = [e for e in events if e.op == "matmul"][per_forward:]
    # restated from the layer shapes: K = hidden (64) goes to vec8, K = intermediate (128) to fused_mma
    want = [(large_layer_decode_path(lin.in_features, lin.block_size), 1, lin.in_features)
            for lin in model.linears()] * (STEPS - 1)
    assert [(e.path, e.problem.m, e.problem.k) for e in decode] == want, (
        "decode steps must take fused_mma or prefill_vec8 by their layer's K when the GEMV refuses them")
    assert {path for path, _, _ in want} == {"fused_mma", "prefill_vec8"}
    assert large_decode.tokens == vec8.tokens
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
