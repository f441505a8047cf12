"""A tiny causal language model whose linear layers are NVFP4 linears (level 3 of docs/contract.md).

Plain torch, no download, no ``transformers``: byte-level vocabulary (256), learned positions,
``layers`` pre-norm blocks of RMSNorm, causal multi-head attention with a KV cache and a SwiGLU
MLP, then a final RMSNorm and an NVFP4 ``lm_head``. Every weight comes from :class:`StableRng`
and is quantized once with :func:`nvfp4_kernels.nvfp4.quantize`; every linear calls
:func:`nvfp4_kernels.nvfp4_matmul` through the dispatcher, on CPU tensors or CUDA tensors alike.

Why the shapes: hidden 64 and intermediate 128 keep K % 32 == 0 with block size 16, so the
decode steps (M = 1) take the GEMV under the default policy (every layer is far below its 2^24
weights). When a policy refuses the GEMV (``Policy(gemv_max_weights=0)``) they take fused_mma
where K % 128 == 0 (the ``down`` projection, K = 128) and prefill_vec8 elsewhere (K = 64). The
prompt (28 tokens) is prefilled with M = 28 through the fused path or prefill_vec8, or through
prefill_vec8 / prefill_scalar when a policy forces it.

Why float64 around the linears: the NVFP4 linears are the operator under test and run in the
model dtype; everything else (norms, attention, softmax, SiLU, residuals) runs in float64 and
is rounded to the model dtype only at a linear's input. Differences between CPUs' vectorized
float kernels then sit some 40 bits below the bf16 rounding, so the greedy token ids depend on
the NVFP4 operator alone and the CPU golden (key ``cpu``) holds on every machine.
"""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import nvfp4_kernels
from nvfp4_harness.nvfp4.shapes import StableRng
from nvfp4_kernels.model import Policy
from nvfp4_kernels.nvfp4 import quantize

#: The fixed prompt of the level-3 test: 28 byte tokens, so prefill has M = 28 > 8.
PROMPT: bytes = b"NVFP4 prefill must be tested"


@dataclass(frozen=True)
class ModelConfig:
    """Sizes of the tiny model; every K a linear sees is a multiple of 32."""

    vocab: int = 256
    hidden: int = 64
    heads: int = 4
    layers: int = 2
    intermediate: int = 128
    max_positions: int = 128
    block_size: int = 16
    dtype: str = "bfloat16"
    seed: int = 20_260_401

    def __post_init__(self) -> None:
        if self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be a multiple of heads ({self.heads})")
        for k in (self.hidden, self.intermediate):
            if k % 32 or self.block_size != 16:
                raise ValueError(f"decode must be able to reach the GEMV: every K (got {k}) must be a multiple of 32 "
                                 f"and block_size 16 (got {self.block_size})")


class NVFP4Linear:
    """``y = x @ W^T + b`` with W stored as NVFP4 (quantized once) and run by the dispatcher."""

    def __init__(self, weight: np.ndarray, bias: np.ndarray | None, block_size: int, dtype: str,
                 device: str) -> None:
        import torch

        packed, scales, g = quantize(weight.astype(np.float32), block_size)
        self.out_features, self.in_features = weight.shape
        self.block_size = block_size
        self.packed = torch.from_numpy(packed).to(device)
        self.scales = torch.from_numpy(scales).to(device)
        self.global_scale = torch.tensor([float(g)], dtype=torch.float32, device=device)
        self.dtype = getattr(torch, dtype)
        self.bias = None if bias is None else torch.from_numpy(bias).to(device=device, dtype=self.dtype)

    def __call__(self, x: Any) -> Any:
        """``x`` float64 [..., K] -> float64 [..., N]; the operator runs in the model dtype."""
        y = nvfp4_kernels.nvfp4_matmul(x.to(self.dtype).contiguous(), self.packed, self.scales, self.global_scale,
                                 self.block_size, self.bias)
        return y.double()


class TinyCausalLM:
    """The model. ``forward(ids, cache)`` appends to the KV cache and returns float64 logits."""

    def __init__(self, config: ModelConfig = ModelConfig(), device: str = "cpu") -> None:
        import torch

        self.config, self.device = config, device
        c = config
        rng = StableRng(c.seed)

        def dense(n: int, k: int) -> np.ndarray:
            return rng.uniform(-1.0, 1.0, (n, k)) * np.sqrt(3.0 / k)  # unit-variance outputs

        def linear(n: int, k: int, bias: bool = False) -> NVFP4Linear:
            b = rng.uniform(-0.1, 0.1, (n,)) if bias else None
            return NVFP4Linear(dense(n, k), b, c.block_size, c.dtype, device)

        def table(rows: int, cols: int, scale: float) -> Any:
            return torch.from_numpy(rng.uniform(-scale, scale, (rows, cols))).to(device)

        self.embed = table(c.vocab, c.hidden, 1.0)
        self.positions = table(c.max_positions, c.hidden, 0.3)
        self.blocks = []
        for _ in range(c.layers):
            self.blocks.append({
                "attn_norm": 1.0 + table(1, c.hidden, 0.1)[0], "mlp_norm": 1.0 + table(1, c.hidden, 0.1)[0],
                "q": linear(c.hidden, c.hidden, True), "k": linear(c.hidden, c.hidden, True),
                "v": linear(c.hidden, c.hidden, True), "o": linear(c.hidden, c.hidden),
                "gate": linear(c.intermediate, c.hidden), "up": linear(c.intermediate, c.hidden),
                "down": linear(c.hidden, c.intermediate),
            })
        self.final_norm = 1.0 + table(1, c.hidden, 0.1)[0]
        self.lm_head = linear(c.vocab, c.hidden)

    def linears(self) -> Iterator[NVFP4Linear]:
        for block in self.blocks:
            yield from (block[name] for name in ("q", "k", "v", "o", "gate", "up", "down"))
        yield self.lm_head

    @staticmethod
    def _rms_norm(x: Any, weight: Any) -> Any:
        return x * (x.pow(2).mean(-1, keepdim=True) + 1e-6).rsqrt() * weight

    def forward(self, ids: Sequence[int], cache: list[dict[str, Any]]) -> Any:
        """Run ``ids`` (the next tokens) after the cached ones; returns logits [len(ids), vocab]."""
        import torch

        c = self.config
        start = cache[0]["k"].shape[1] if cache else 0
        if start + len(ids) > c.max_positions:
            raise ValueError(f"sequence longer than max_positions={c.max_positions}")
        if not cache:
            cache.extend({"k": None, "v": None} for _ in self.blocks)
        tokens = torch.tensor(list(ids), dtype=torch.long, device=self.device)
        x = self.embed[tokens] + self.positions[start:start + len(ids)]
        heads, dim = c.heads, c.hidden // c.heads
        for block, kv in zip(self.blocks, cache, strict=True):
            h = self._rms_norm(x, block["attn_norm"])
            q, k, v = (block[name](h).view(len(ids), heads, dim).transpose(0, 1) for name in ("q", "k", "v"))
            kv["k"] = k if kv["k"] is None else torch.cat([kv["k"], k], dim=1)
            kv["v"] = v if kv["v"] is None else torch.cat([kv["v"], v], dim=1)
            scores = q @ kv["k"].transpose(1, 2) / dim**0.5
            total = kv["k"].shape[1]
            rows = start + torch.arange(len(ids), device=self.device)
            causal = torch.arange(total, device=self.device)[None, :] > rows[:, None]
            scores = scores.masked_fill(causal, float("-inf"))
            attn = torch.softmax(scores, dim=-1) @ kv["v"]
            x = x + block["o"](attn.transpose(0, 1).reshape(len(ids), c.hidden))
            h = self._rms_norm(x, block["mlp_norm"])
            gate = block["gate"](h)
            x = x + block["down"](torch.nn.functional.silu(gate) * block["up"](h))
        return self.lm_head(self._rms_norm(x, self.final_norm))


@dataclass
class Generation:
    """Greedy generation's result: the new token ids and the prompt's last-position logits."""

    tokens: list[int]
    prefill_logits: Any


def generate(model: TinyCausalLM, prompt: bytes | Sequence[int] = PROMPT, steps: int = 32,
             prefill_policy: Policy | None = None) -> Generation:
    """Greedy decoding of ``steps`` tokens. ``prefill_policy`` (e.g. a forced path) applies to the
    prompt's forward pass only; the decode steps (M = 1) run under the ambient policy."""
    import torch

    cache: list[dict[str, Any]] = []
    scope = nvfp4_kernels.policy_scope(prefill_policy) if prefill_policy else contextlib.nullcontext()
    with scope:
        logits = model.forward(list(prompt), cache)
    prefill_logits = logits[-1].clone()
    tokens = [int(torch.argmax(logits[-1]))]
    for _ in range(steps - 1):
        logits = model.forward([tokens[-1]], cache)
        tokens.append(int(torch.argmax(logits[-1])))
    return Generation(tokens, prefill_logits)


def model_fingerprint(config: ModelConfig) -> str:
    """A short tag of the configuration, for golden names."""
    digest = zlib.crc32(repr(config).encode())
    return f"{config.layers}l-h{config.hidden}-i{config.intermediate}-{config.dtype}-{digest:08x}"
