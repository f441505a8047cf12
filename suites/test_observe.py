"""Observed mode without a GPU: kernel-name lists mapped to paths through a model's patterns,
the model's prediction compared, and disagreements reported as findings that fail a run.

The NVFP4 traces are the kernel names the profiler recorded on the H200 for this project's own
operator (``fixtures/gpu/gpu_check.json``, check ``observe``), replayed here as a black box,
under the policy the dispatcher of the time had in effect (:func:`recorded_policy`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from nvfp4_harness.engine.observe import observe_names, observed_event
from nvfp4_harness.engine.recorder import recording
from nvfp4_harness.model import DeviceCaps, DispatchModel, Guard, PathSpec
from nvfp4_kernels.model import MODEL, Policy, Problem, select_path

H200 = DeviceCaps("NVIDIA H200", (9, 0))
GPU_CHECK = Path(__file__).resolve().parents[1] / "fixtures" / "gpu" / "gpu_check.json"


def recorded_rows() -> list[dict]:
    return json.loads(GPU_CHECK.read_text())["checks"]["observe"]["rows"]


def recorded_traces() -> dict[str, list[str]]:
    """call name -> kernel names, from the committed H200 run."""
    return {row["call"]: row["kernels"] for row in recorded_rows()}


def recorded_policy() -> Policy:
    """The policy to replay the committed traces under: the one in effect when they were recorded.

    A trace file in which no call was observed or instrumented on the fused_mma path, and no
    launched kernel matches that path's kernel patterns, was recorded before the path existed
    (gpu_check.json holds no model declaration to ask). That dispatcher chose among the other
    four paths exactly as today's model does with the fused path switched off, fused_max_m = 0
    (its m_in_range guard then fails for every M), and with the GEMV at its default of the time,
    gemv_max_m = 8 (today's default, 0, turns the GEMV off; the trace's "matmul M=1 (gemv)"
    shows it on): so such traces are replayed under Policy(gemv_max_m=8, fused_max_m=0). Traces
    that show the fused path were recorded with it, under today's default Policy().
    """
    fused = MODEL.path("fused_mma")
    rows = recorded_rows()
    shows_fused = any(row.get("observed") == "fused_mma" or "fused_mma" in row.get("instrumented", [])
                      or any(fused.matches(name) for name in row["kernels"]) for row in rows)
    return Policy() if shows_fused else Policy(gemv_max_m=8, fused_max_m=0)


#: each recorded call's problem, as its name in the trace states it
PROBLEMS = {
    "matmul M=1 (gemv)": Problem("matmul", 1, 1024, 1024, 16, "bfloat16", "cuda"),
    "matmul M=64 (prefill_vec8)": Problem("matmul", 64, 1024, 1024, 16, "float16", "cuda"),
    "matmul block 7 (prefill_scalar)": Problem("matmul", 64, 1024, 1022, 7, "bfloat16", "cuda"),
    "dequantize (prefill_vec8)": Problem("dequantize", None, 1024, 1024, 16, "bfloat16", "cuda"),
    "dequantize block 7 (prefill_scalar)": Problem("dequantize", None, 1024, 1022, 7, "bfloat16", "cuda"),
}


def test_the_committed_traces_predate_the_fused_path_and_replay_with_it_switched_off():
    """The committed H200 run (gpu_check.json) launched no fused kernel: M = 64 went to
    vec8 + cuBLAS and M = 1 to the GEMV, where today's default sends both to fused_mma. Replace
    this test when a GPU run recorded with the fused path is committed."""
    assert recorded_policy() == Policy(gemv_max_m=8, fused_max_m=0), (
        "gpu_check.json now shows the fused path: name its calls after the paths they take today "
        "(harness/nvfp4/gpu_check.py, check_observe), update PROBLEMS and drop this test")
    m64 = PROBLEMS["matmul M=64 (prefill_vec8)"]
    assert select_path(m64, H200, Policy()).path == "fused_mma"
    assert select_path(m64, H200, recorded_policy()).path == "prefill_vec8"
    m1 = PROBLEMS["matmul M=1 (gemv)"]
    assert select_path(m1, H200, Policy()).path == "fused_mma"
    assert select_path(m1, H200, recorded_policy()).path == "gemv"


@pytest.mark.parametrize("call", sorted(PROBLEMS))
def test_recorded_h200_traces_map_to_the_path_the_model_predicts(call):
    names = recorded_traces()[call]
    problem = PROBLEMS[call]
    policy = recorded_policy()
    event = observed_event(MODEL, names, problem, device=H200, op=problem.op, policy=policy)
    expected = call.rsplit("(", 1)[1].rstrip(")")  # the path named in the trace's call name
    assert event.path == expected and event.predicted == expected and event.finding is None
    assert event.mode == "observed" and event.launched == tuple(names)
    assert event.unmatched == (), "cuBLAS and its reductions are shared kernels, not unexplained ones"
    # the replay policy only switches the fused path off (and gives the GEMV back the M range it then
    # had, where today's default runs fused_mma): it may not explain away any other choice
    assert select_path(problem, H200, Policy()).path in (expected, "fused_mma")


def test_a_disagreement_is_a_finding():
    names = recorded_traces()["matmul M=64 (prefill_vec8)"]
    decode = Problem("matmul", 1, 1024, 1024, 16, "float16", "cuda")  # the default policy predicts fused_mma
    event = observed_event(MODEL, names, decode, device=H200, op="matmul", policy=Policy())
    assert event.path == "prefill_vec8" and event.predicted == "fused_mma"
    assert event.finding == "the model predicts 'fused_mma', the launched kernels show 'prefill_vec8'"


def test_launches_no_pattern_explains_and_ambiguous_launches_are_findings():
    problem = PROBLEMS["matmul M=1 (gemv)"]
    none = observed_event(MODEL, ["some_other_kernel", "memset_kernel"], problem, device=H200, op="matmul",
                          policy=Policy())
    assert none.path is None
    assert none.finding == ("no declared path matches the launched kernels [some_other_kernel, memset_kernel]; "
                            "the model predicts 'fused_mma'")  # M = 1, K % 128 == 0: the default
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
    calls = [(PROBLEMS[c], traces[c]) for c in ("matmul M=1 (gemv)", "matmul M=64 (prefill_vec8)")]
    calls.append((Problem("matmul", 2, 1024, 1024, 16, "float16", "cuda"), traces["matmul M=64 (prefill_vec8)"]))
    with recording("replay") as rec:
        observe_names(MODEL, calls, device=H200, op="matmul", policy=recorded_policy())
    op = rec.coverage().operator("nvfp4")
    assert op.paths["gemv"].hits == 1 and op.paths["prefill_vec8"].hits == 2
    [(message, finding)] = op.findings.items()
    assert message == "the model predicts 'gemv', the launched kernels show 'prefill_vec8'" and finding.count == 1
    failures = rec.coverage().analyze().failures()
    assert failures == [f"finding in nvfp4: {message} (1 call; e.g. replay); the declared model is wrong or the "
                        f"code changed: fix the model or the dispatcher"]
