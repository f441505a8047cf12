"""Model-based tests of the dispatcher: over generated problems, buffers and devices, its choice,
its event and its shortcuts must follow an independent statement of the rules.

The statement is written here, not read from :mod:`nvfp4_kernels.model`: the paths in their
preference order, each guard as a formula (``harness.nvfp4.shapes.expected_guards``, itself a
restatement of docs/paths.md), the shortcuts (M or N empty, K empty), and the alignment rule
(B 4-byte and a caller's output 16-byte aligned). Buffers are placed at every offset from 0 to
31 bytes past a 64-byte boundary; devices range over sm_80 to sm_130 for selection.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from nvfp4_harness.engine.recorder import recording
from nvfp4_harness.model import DeviceCaps
from nvfp4_harness.nvfp4.shapes import expected_guards, matmul_error_bound, oracle_dequantize, place
from nvfp4_kernels import nvfp4_matmul
from nvfp4_kernels.dispatch import dequantize
from nvfp4_kernels.model import Policy, Problem, select_path

pytestmark = pytest.mark.dispatch

ORDER = ("gemv", "native_fp4", "fused_wgmma", "fused_mma", "prefill_vec8", "prefill_scalar")
NP_DTYPES = {"float16": np.dtype(np.float16), "bfloat16": np.dtype(ml_dtypes.bfloat16)}
POLICIES = (Policy(), Policy(gemv_max_m=0), Policy(gemv_max_m=1), Policy(native_fp4_enabled=False),
            Policy(fused_max_m=0), Policy(gemv_max_m=0, fused_max_m=3), Policy(fused_max_m=0, wgmma_max_m=5),
            Policy(wgmma_max_m=0), Policy(wgmma_min_m=4), Policy(wgmma_min_m=1, wgmma_max_m=6),
            Policy(gemv_max_m=0, fused_max_m=5, wgmma_min_m=9))


def expected_path(guards: dict[str, bool]) -> str:
    for path in ORDER:
        mine = [ok for name, ok in guards.items() if name.startswith(path + ".")]
        if mine and all(mine):
            return path
    return "prefill_scalar"


def expected_shortcut(op: str, m: int | None, n: int, k: int) -> str | None:
    if op == "matmul":
        if m == 0 or n == 0:
            return "empty"
        return "bias_only" if k == 0 else None
    return "empty" if n == 0 or k == 0 else None


@st.composite
def calls(draw):
    op = draw(st.sampled_from(["matmul", "dequantize"]))
    n = draw(st.integers(0, 24))
    k = draw(st.one_of(st.integers(0, 40).map(lambda x: 2 * x), st.sampled_from([128, 256])))
    block_size = draw(st.one_of(st.integers(1, 40), st.sampled_from([16, 32, 2**20])))
    m = draw(st.integers(0, 12)) if op == "matmul" else None
    lead = (m,) if m is None or m < 4 or draw(st.booleans()) else (2, m // 2) if m % 2 == 0 else (m,)
    return {
        "op": op, "n": n, "k": k, "block_size": block_size, "m": m, "lead": lead,
        "dtype": draw(st.sampled_from(sorted(NP_DTYPES))), "bias": op == "matmul" and draw(st.booleans()),
        "b_offset": draw(st.integers(0, 31)),
        "out_offset": draw(st.none() | st.integers(0, 31)) if op == "dequantize" else None,
        "policy": draw(st.sampled_from(POLICIES)), "container": draw(st.sampled_from(["numpy", "torch"])),
        "seed": draw(st.integers(0, 2**32 - 1)),
    }


def build(call):
    rng = np.random.default_rng(call["seed"])
    n, k, bs = call["n"], call["k"], call["block_size"]
    as_torch = call["container"] == "torch"
    packed = rng.integers(0, 256, (n, k // 2), dtype=np.uint8)
    scales = rng.integers(0x28, 0x48, (n, -(-k // bs)), dtype=np.uint8)
    b = place(packed, as_torch=as_torch, offset=call["b_offset"])
    s = place(scales, as_torch=as_torch)
    np_dtype = NP_DTYPES[call["dtype"]]
    a = place(rng.uniform(-2, 2, call["lead"] + (k,)).astype(np_dtype), as_torch=as_torch) if call["m"] is not None \
        else None
    bias = place(rng.uniform(-1, 1, n).astype(np_dtype), as_torch=as_torch) if call["bias"] else None
    out = None
    if call["out_offset"] is not None:
        out = place(np.zeros((n, k), np_dtype), as_torch=as_torch, offset=2 * (call["out_offset"] // 2))
    return a, b, s, np.float32(0.0123), bias, out


def host(x):
    if isinstance(x, torch.Tensor):
        return x.view(torch.int16).numpy().view(ml_dtypes.bfloat16) if x.dtype == torch.bfloat16 else x.numpy()
    return x


@settings(max_examples=150, deadline=None)
@given(calls())
def test_the_dispatcher_follows_the_rules_on_the_cpu(call):
    a, b, s, g, bias, out = build(call)
    with recording("rules") as rec:
        if call["op"] == "matmul":
            result = nvfp4_matmul(a, b, s, g, call["block_size"], bias, policy=call["policy"])
        else:
            result = dequantize(b, s, g, call["block_size"], call["dtype"], policy=call["policy"], out=out)
    [recorded] = rec.events
    event = recorded.event
    m, n, k = call["m"], call["n"], call["k"]
    shortcut = expected_shortcut(call["op"], m, n, k)
    if shortcut is not None:
        assert (event.path, event.shortcut, event.outcomes) == (shortcut, True, ())
    else:
        aligned = call["b_offset"] % 4 == 0 and (out is None or (2 * (call["out_offset"] // 2)) % 16 == 0)
        guards = expected_guards(call["op"], m, n, k, call["block_size"], aligned, None, call["policy"])
        assert {o.key: o.passed for o in event.outcomes} == guards
        assert event.path == expected_path(guards) and not event.shortcut and not event.forced
    assert event.op == call["op"] and event.backend == "cpu" and event.device == DeviceCaps.cpu()
    # the result: the caller's container, shape and dtype, and right
    assert type(result) is type(b)
    got = host(result)
    if call["op"] == "dequantize":
        assert got.shape == (n, k) and (out is None or result is out)
        if n and k:
            want = oracle_dequantize(b, s, g, call["block_size"], call["dtype"])
            assert np.array_equal(got.view(np.uint16), want.view(np.uint16))
        return
    assert got.shape == call["lead"] + (n,) and got.dtype == NP_DTYPES[call["dtype"]]
    if m and n:
        bias_host = None if bias is None else host(bias)
        if k == 0:
            want = np.zeros((m, n)) if bias_host is None else np.broadcast_to(bias_host.astype(np.float64), (m, n))
            assert np.array_equal(got.reshape(m, n).astype(np.float64), want)
            return
        w = oracle_dequantize(b, s, g, call["block_size"], call["dtype"])
        y64, bound = matmul_error_bound(host(a).reshape(m, k), w, bias_host, call["dtype"],
                                        roundings=1 if event.path in ("gemv", "fused_mma", "fused_wgmma") else 2)
        assert np.all(np.abs(got.reshape(m, n).astype(np.float64) - y64) <= bound)


@settings(max_examples=300, deadline=None)
@given(op=st.sampled_from(["matmul", "dequantize"]), m=st.integers(1, 300), n=st.integers(1, 5000),
       k=st.integers(1, 3000).map(lambda x: 2 * x), block_size=st.integers(1, 70), aligned=st.booleans(),
       sm=st.integers(80, 130), policy=st.sampled_from(POLICIES))
def test_selection_follows_the_rules_on_simulated_gpus_sm80_to_sm130(op, m, n, k, block_size, aligned, sm, policy):
    device = DeviceCaps.simulated_gpu(sm // 10, sm % 10)
    problem = Problem(op, m if op == "matmul" else None, n, k, block_size, "bfloat16", "cuda", aligned)
    selection = select_path(problem, device, policy)
    guards = expected_guards(op, problem.m, n, k, block_size, aligned, sm, policy)
    assert {o.key: o.passed for o in selection.outcomes} == guards
    assert selection.path == expected_path(guards) and not selection.forced
