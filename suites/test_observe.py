"""Observed mode without a GPU: kernel-name lists mapped to paths through a model's patterns,
the model's prediction compared, and disagreements reported as findings that fail a run.

The NVFP4 traces are the kernel names the profiler recorded on the H200 for this project's own
operator (``fixtures/gpu/gpu_check.json``, check ``observe``), replayed here as a black box,
under the policy each call was made with (:func:`recorded_policy`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from nvfp4_harness.engine.observe import observe_names, observed_event
from nvfp4_harness.engine.recorder import recording
from nvfp4_harness.model import DeviceCaps, DispatchModel, Guard, PathSpec
from nvfp4_harness.nvfp4.shapes import LARGE_LAYERS_POLICY
from nvfp4_kernels.model import MODEL, Policy, Problem, select_path

H200 = DeviceCaps("NVIDIA H200", (9, 0))
GPU_CHECK = Path(__file__).resolve().parents[1] / "fixtures" / "gpu" / "gpu_check.json"


def recorded_rows() -> list[dict]:
    return json.loads(GPU_CHECK.read_text())["checks"]["observe"]["rows"]


def recorded_traces() -> dict[str, list[str]]:
    """call name -> kernel names, from the committed H200 run."""
    return {row["call"]: row["kernels"] for row in recorded_rows()}


#: each recorded call's problem, as its name in the trace states it (harness/nvfp4/gpu_check.py,
#: check_observe, makes these calls)
PROBLEMS = {
    "matmul M=1 (gemv)": Problem("matmul", 1, 1024, 1024, 16, "bfloat16", "cuda"),
    "matmul M=1, gemv_max_weights=0 (fused_mma)": Problem("matmul", 1, 1024, 1024, 16, "bfloat16", "cuda"),
    "matmul M=32 (fused_mma)": Problem("matmul", 32, 1024, 1024, 16, "float16", "cuda"),
    "matmul M=192 (fused_wgmma)": Problem("matmul", 192, 1024, 1024, 16, "float16", "cuda"),
    "matmul M=300 (prefill_vec8)": Problem("matmul", 300, 1024, 1024, 16, "float16", "cuda"),
    "matmul block 7 (prefill_scalar)": Problem("matmul", 64, 1024, 1022, 7, "bfloat16", "cuda"),
    "dequantize (prefill_vec8)": Problem("dequantize", None, 1024, 1024, 16, "bfloat16", "cuda"),
    "dequantize block 7 (prefill_scalar)": Problem("dequantize", None, 1024, 1022, 7, "bfloat16", "cuda"),
}
#: the policy each call was made under (check_observe passes it); the default elsewhere
POLICIES = {"matmul M=1, gemv_max_weights=0 (fused_mma)": LARGE_LAYERS_POLICY}


def recorded_policy(call: str) -> Policy:
    return POLICIES.get(call, Policy())


def test_the_committed_run_observed_every_call_of_check_observe():
    """The committed gpu_check.json is a run of today's check_observe: every call above, each
    launching its path's kernel (a run recorded before the fused path would lack two of them)."""
    assert set(recorded_traces()) == set(PROBLEMS)
    fused = MODEL.path("fused_mma")
    assert any(fused.matches(name) for name in recorded_traces()["matmul M=1, gemv_max_weights=0 (fused_mma)"])


@pytest.mark.parametrize("call", sorted(PROBLEMS))
def test_recorded_h200_traces_map_to_the_path_the_model_predicts(call):
    names = recorded_traces()[call]
    problem = PROBLEMS[call]
    policy = recorded_policy(call)
    event = observed_event(MODEL, names, problem, device=H200, op=problem.op, policy=policy)
    expected = call.rsplit("(", 1)[1].rstrip(")")  # the path named in the trace's call name
    assert event.path == expected and event.predicted == expected and event.finding is None
    assert event.mode == "observed" and event.launched == tuple(names)
    assert event.unmatched == (), "cuBLAS and its reductions are shared kernels, not unexplained ones"
    assert select_path(problem, H200, policy).path == expected


def test_a_disagreement_is_a_finding():
    names = recorded_traces()["matmul M=300 (prefill_vec8)"]
    decode = Problem("matmul", 1, 1024, 1024, 16, "float16", "cuda")  # the default policy predicts the GEMV
    event = observed_event(MODEL, names, decode, device=H200, op="matmul", policy=Policy())
    assert event.path == "prefill_vec8" and event.predicted == "gemv"
    assert event.finding == "the model predicts 'gemv', the launched kernels show 'prefill_vec8'"


def test_launches_no_pattern_explains_and_ambiguous_launches_are_findings():
    problem = PROBLEMS["matmul M=1 (gemv)"]
    none = observed_event(MODEL, ["some_other_kernel", "memset_kernel"], problem, device=H200, op="matmul",
                          policy=Policy())
    assert none.path is None
    assert none.finding == ("no declared path matches the launched kernels [some_other_kernel, memset_kernel]; "
                            "the model predicts 'gemv'")  # M = 1 on a small layer: the default
    assert none.unmatched == ("some_other_kernel", "memset_kernel")
    both = observed_event(MODEL, ["nvfp4_dequant_vec8_kernel<h>", "nvfp4_dequant_scalar_kernel<h>"], problem,
                          device=H200, op="matmul", policy=Policy())
    assert both.path is None and "match several paths equally (prefill_vec8, prefill_scalar)" in both.finding


def test_the_most_specific_path_wins_and_shared_kernels_are_not_unmatched():
    model = DispatchModel("lib", [
        PathSpec("fused", guards=[Guard("small", "m <= 8", lambda p, d, pol: p <= 8)], kernels=(r"fused_",)),
        PathSpec("dequant_gemm", kernels=(r"dequant_", r"gemm")),
        PathSpec("gemm_only", kernels=(r"gemm",)),
    ], shared_kernels=(r"memcpy",))
    event = observed_event(model, ["dequant_k", "sm90_gemm", "memcpy"], 64)
    assert event.path == "dequant_gemm" and event.finding is None and event.unmatched == ()
    assert observed_event(model, ["sm90_gemm"], 64).path == "gemm_only"


def test_replayed_observations_are_recorded_and_findings_fail_the_analysis():
    traces = recorded_traces()
    calls = [(PROBLEMS[c], traces[c]) for c in ("matmul M=32 (fused_mma)", "matmul M=300 (prefill_vec8)")]
    calls.append((Problem("matmul", 2, 1024, 1024, 16, "float16", "cuda"), traces["matmul M=300 (prefill_vec8)"]))
    with recording("replay") as rec:
        observe_names(MODEL, calls, device=H200, op="matmul", policy=Policy())
    op = rec.coverage().operator("nvfp4")
    assert op.paths["fused_mma"].hits == 1 and op.paths["prefill_vec8"].hits == 2
    [(message, finding)] = op.findings.items()
    assert message == "the model predicts 'gemv', the launched kernels show 'prefill_vec8'" and finding.count == 1
    failures = rec.coverage().analyze().failures()
    assert failures == [f"finding in nvfp4: {message} (1 call; e.g. replay); the declared model is wrong or the "
                        f"code changed: fix the model or the dispatcher"]
