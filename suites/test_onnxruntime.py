"""ONNX Runtime's own FP4 op through the harness (issue 12): the declared model, the cases, the
read-out method and the timing arithmetic on the CPU; the committed GPU results checked when
they exist; GPU tests where onnxruntime-gpu and a GPU are present.

The committed ``fixtures/gpu/onnxruntime-*`` files come from the first H200 run, which proved the
first declaration wrong (one GEMV path up to M = 32; ONNX Runtime has two GEMV kernels with
different limits). What ONNX Runtime did in that run (kernel names, read-out bits, times) is
re-judged here by the corrected model; what the old model computed into those files (path names,
predictions, coverage documents, reports) is checked only once a GPU re-run has rewritten them,
and until then those tests skip saying so. The same checks also run on a dry run of the whole
command against a simulated ONNX Runtime (kernel names from the model's own patterns, outputs
from the CPU reference), so the checks and the command's bookkeeping are tested on files written
by today's code.

Not marked ``dispatch``: nothing here announces an event of the ONNX Runtime model while the
project's coverage gate records, so the gate's ``all-reachable`` never asks for its paths.
"""

from __future__ import annotations

import ast
import json
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from nvfp4_harness.engine.analysis import Requirement
from nvfp4_harness.engine.data import CoverageData
from nvfp4_harness.engine.observe import observed_event
from nvfp4_harness.model import DeviceCaps, InvalidArgument
from nvfp4_harness.nvfp4.onnxruntime import cases, checks, readout, timing
from nvfp4_harness.nvfp4.onnxruntime.model import (
    DEFAULT_POLICY,
    GEMV_MMA_ENV,
    GEMV_MMA_KERNELS,
    GEMV_PATHS,
    GEMV_WARP_KERNELS,
    MODEL,
    NATIVE_SM120_ENV,
    OBSERVED_GEMV_MAX_M,
    OBSERVED_GEMV_MMA_MAX_M,
    OrtPolicy,
    OrtProblem,
    expected_shortcut,
    predict,
)
from nvfp4_harness.nvfp4.onnxruntime.observing import event_for
from nvfp4_kernels import reference

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures" / "gpu"
H200 = DeviceCaps("NVIDIA H200", (9, 0), index=0)
SM120 = DeviceCaps.simulated_gpu(12, 0)

# Kernel names as the H200 run's profiler printed them (fixtures/gpu/onnxruntime-crossover.json), as
# ONNX Runtime's older source declares them, and as mangled symbols: the patterns must match each.
GEMV_MMA = ("void onnxruntime::contrib::cuda::(anonymous namespace)::MatMulBlockQuantizedFp4WeightMmaGemvKernel"
            "<__nv_bfloat16, 2, 1, 4>(__nv_bfloat16*, __nv_bfloat16 const*, unsigned char const*, unsigned char "
            "const*, float const*, __nv_bfloat16 const*, int, int, int, int)")
GEMV_MMA_SOURCE = ("void onnxruntime::contrib::cuda::(anonymous namespace)::MatMulBlockQuantizedFp4WeightMmaGemvKernel"
                   "<__half, 16, 1>(__half*, __half const*, unsigned char const*, unsigned char const*, float const*, "
                   "__half const*, int, int, int, int)")
GEMV_MMA_MANGLED = ("_ZN11onnxruntime7contrib4cuda12_GLOBAL__N_142MatMulBlockQuantizedFp4WeightMmaGemvKernelI13"
                    "__nv_bfloat16Li2ELi1ELi1EEEvPT_")
GEMV_WARP = ("void onnxruntime::contrib::cuda::(anonymous namespace)::MatMulBlockQuantizedFp4WeightGemvKernel"
             "<__half, 4>(__half*, __half const*, unsigned char const*, unsigned char const*, float const*, "
             "__half const*, int, int, int, int)")
GEMV_MANGLED = "_ZN11onnxruntime7contrib4cuda12_GLOBAL__N_139MatMulBlockQuantizedFp4WeightGemvKernelI6__halfLi1EEEvPT_"
GEMV_OLD_NAMES = ("void onnxruntime::contrib::cuda::(anonymous namespace)::MatMulBlockScaledFp4MmaGemvKernel"
                  "<half, 1, 4>(...)",
                  "void onnxruntime::contrib::cuda::(anonymous namespace)::MatMulBlockScaledFp4GemvKernel"
                  "<half, 2>(...)")
VEC8 = "void onnxruntime::contrib::cuda::(anonymous namespace)::DequantizeNvFp4Vec8Kernel<__nv_bfloat16>(...)"
SCALAR = "void onnxruntime::contrib::cuda::(anonymous namespace)::DequantizeNvFp4Kernel<__half>(__half*, ...)"
SCALAR_MANGLED = "_ZN11onnxruntime7contrib4cuda12_GLOBAL__N_121DequantizeNvFp4KernelI6__halfEEvPT_PKhS6_PKfiiii"
CUBLAS = ("nvjet_hsh_128x64_64x5_2x1_v_bz_coopB_TNN",
          "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x64x64_warpgroupsize1x1x1_execute_segment_k_off_kernel",
          "void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16>(...)")
BIAS = "void onnxruntime::contrib::cuda::(anonymous namespace)::AddBiasKernel<__nv_bfloat16>(...)"
MEMSET = "Memset (Device)"


def simulated_kernels(problem: OrtProblem, device: DeviceCaps = H200, policy: OrtPolicy = DEFAULT_POLICY) -> list[str]:
    """The kernel names a call would launch if ONNX Runtime did what the model declares."""
    taken = predict(problem, device, policy)
    if taken == "empty":
        return []
    if taken == "bias_only":
        return [MEMSET] + ([BIAS] if problem.bias else [])
    if taken == "gemv_mma":
        return [GEMV_MMA]
    if taken == "gemv":
        return [GEMV_WARP]
    main = {"prefill_vec8": VEC8, "prefill_scalar": SCALAR, "native_sm120": "cutlass_sm120_kernel_Sm120"}[taken]
    return [main, CUBLAS[0]] + ([BIAS] if problem.bias else [])


# --- the declared model -------------------------------------------------------------------------


def test_the_model_is_declared_through_the_public_api_only():
    """Declared from the outside, as a user of a library they cannot edit would: the module
    imports the dispatch-model API and the standard library, nothing else of the project."""
    tree = ast.parse((ROOT / "harness" / "nvfp4" / "onnxruntime" / "model.py").read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    project = {m for m in imported if m.split(".")[0] in ("nvfp4_harness", "nvfp4_kernels")}
    assert project == {"nvfp4_harness.model"}, project
    assert not {m for m in imported if m.split(".")[0] in ("numpy", "torch", "onnxruntime", "onnx")}


@pytest.mark.parametrize("problem, expected", [
    (OrtProblem(1, 64, 128, 16), "gemv_mma"),             # K % 128 == 0: the tensor-core GEMV
    (OrtProblem(9, 64, 128, 16), "gemv_mma"),             # past the warp GEMV's M, within the Mma's
    (OrtProblem(32, 64, 256, 16, "float16", True), "gemv_mma"),
    (OrtProblem(33, 64, 128, 16), "prefill_vec8"),        # past the tensor-core GEMV's M
    (OrtProblem(1, 64, 64, 16), "gemv"),                  # K % 128 != 0, K % 32 == 0: the warp GEMV
    (OrtProblem(8, 64, 96, 16, "float16", True), "gemv"),
    (OrtProblem(9, 64, 96, 16), "prefill_vec8"),          # past the warp GEMV's M, and no Mma at K = 96
    (OrtProblem(32, 64, 96, 16), "prefill_vec8"),
    (OrtProblem(1, 64, 48, 16), "prefill_vec8"),          # K % 32 != 0: no GEMV even at M = 1
    (OrtProblem(1, 64, 128, 32), "prefill_vec8"),         # block 32: no GEMV of either kind
    (OrtProblem(8, 64, 64, 6), "prefill_vec8"),           # even block crossing 8-value chunks
    (OrtProblem(1, 64, 64, 15), "prefill_scalar"),        # odd block
    (OrtProblem(64, 64, 36, 16), "prefill_scalar"),       # K % 8 == 4
    (OrtProblem(1, 64, 2, 16), "prefill_scalar"),
    (OrtProblem(0, 64, 64, 16), "empty"),
    (OrtProblem(4, 0, 64, 16), "empty"),
    (OrtProblem(3, 8, 0, 16, "bfloat16", True), "bias_only"),
])
def test_predictions_follow_the_guards_of_its_source_and_the_observed_limits(problem, expected):
    assert predict(problem, H200) == expected


def test_the_model_has_two_gemv_paths_in_preference_order():
    assert MODEL.path_names == ("gemv_mma", "gemv", "native_sm120", "prefill_vec8", "prefill_scalar")
    assert GEMV_PATHS == ("gemv_mma", "gemv")
    guards = {p.name: [(g.name, g.description) for g in p.guards] for p in MODEL.paths[:2]}
    assert guards == {
        "gemv_mma": [("m_in_range", "1 <= M <= policy.gemv_mma_max_m (observed 32)"),
                     ("block_size_16", "block_size == 16"), ("k_mod_128", "K % 128 == 0")],
        "gemv": [("m_in_range", "1 <= M <= policy.gemv_max_m (observed 8)"), ("block_size_16", "block_size == 16"),
                 ("k_mod_32", "K % 32 == 0")]}


@pytest.mark.parametrize("name, path", [(GEMV_MMA, "gemv_mma"), (GEMV_MMA_SOURCE, "gemv_mma"),
                                        (GEMV_MMA_MANGLED, "gemv_mma"), (GEMV_OLD_NAMES[0], "gemv_mma"),
                                        (GEMV_WARP, "gemv"), (GEMV_MANGLED, "gemv"), (GEMV_OLD_NAMES[1], "gemv")])
def test_each_gemv_pattern_matches_its_own_kernel_only(name, path):
    """``MmaGemvKernel`` names never match the warp pattern and warp names never match the Mma
    pattern, demangled, mangled or under the op's pre-rename name."""
    import re

    assert bool(re.search(GEMV_MMA_KERNELS, name)) == (path == "gemv_mma")
    assert bool(re.search(GEMV_WARP_KERNELS, name)) == (path == "gemv")
    assert [p.name for p in MODEL.paths if p.kernels and p.matches(name)] == [path]
    assert MODEL.classify([name]).path == path


def test_the_gemv_limits_are_policy_values_found_by_observation():
    assert (DEFAULT_POLICY.gemv_mma_max_m, DEFAULT_POLICY.gemv_max_m) == (OBSERVED_GEMV_MMA_MAX_M,
                                                                          OBSERVED_GEMV_MAX_M) == (32, 8)
    # the limits of the source that could be read (both 8): M = 9 dequantizes at either K
    source = OrtPolicy(gemv_mma_max_m=8, gemv_max_m=8)
    assert predict(OrtProblem(8, 64, 128, 16), H200, source) == "gemv_mma"
    assert predict(OrtProblem(9, 64, 128, 16), H200, source) == "prefill_vec8"
    # each limit governs its own kernel only
    assert predict(OrtProblem(16, 64, 128, 16), H200, OrtPolicy(gemv_mma_max_m=16)) == "gemv_mma"
    assert predict(OrtProblem(17, 64, 128, 16), H200, OrtPolicy(gemv_mma_max_m=16)) == "prefill_vec8"
    assert predict(OrtProblem(4, 64, 128, 16), H200, OrtPolicy(gemv_mma_max_m=0)) == "gemv"  # Mma off
    assert predict(OrtProblem(4, 64, 96, 16), H200, OrtPolicy(gemv_max_m=0)) == "prefill_vec8"
    for bad in ({"gemv_mma_max_m": -1}, {"gemv_max_m": -1}, {"gemv_max_m": True}, {"gemv_mma_max_m": 8.0},
                {"native_sm120": 1}):
        with pytest.raises(InvalidArgument):
            OrtPolicy(**bad)
    with pytest.raises(InvalidArgument, match="even"):
        OrtProblem(1, 8, 7, 16)


def test_the_policy_round_trips_through_the_result_files_and_reads_the_environment():
    policy = OrtPolicy(gemv_mma_max_m=16, gemv_max_m=4, native_sm120=True)
    assert OrtPolicy.from_dict(policy.to_dict()) == policy
    with pytest.raises(InvalidArgument, match="two-GEMV"):
        OrtPolicy.from_dict({"gemv_max_m": 32, "native_sm120": False})  # the pre-fix run's record
    assert OrtPolicy.from_environment({}) == DEFAULT_POLICY
    assert OrtPolicy.from_environment({GEMV_MMA_ENV: "0"}).gemv_mma_max_m == 0  # Fp4GemvMmaEnabled() off
    assert OrtPolicy.from_environment({GEMV_MMA_ENV: "1"}).gemv_mma_max_m == 32
    assert OrtPolicy.from_environment({GEMV_MMA_ENV: "0"}, gemv_mma_max_m=32).gemv_mma_max_m == 32  # overrides win
    assert OrtPolicy.from_environment({NATIVE_SM120_ENV: "true"}).native_sm120


def test_the_five_calls_the_first_model_mispredicted_are_dequant_calls():
    """The H200 run's matrix cases at M = 9..32 with K % 128 != 0: the single-GEMV model said
    ``gemv``, the kernels showed vec8 + cuBLAS. The corrected model predicts what ran."""
    by_id = {c.id: c for c in cases.full_suite()}
    old_policy_cases = {c.id: c for c in cases.edge_cases(OrtPolicy(gemv_mma_max_m=32, gemv_max_m=32))}
    mispredicted = [by_id["vec8-m9"], by_id["vec8-native-disabled"], by_id["vec8-n1"],
                    old_policy_cases["ort-gemv-m-max-bias-k96"], old_policy_cases["ort-gemv-lead-3d-max"]]
    assert [(c.m, c.k) for c in mispredicted] == [(9, 64), (9, 64), (16, 32), (32, 96), (32, 64)]
    for c in mispredicted:
        assert predict(c.problem, H200) == "prefill_vec8", c.id


def test_the_native_path_needs_an_sm120_gpu_and_the_opt_in():
    assert MODEL.unreachable_paths(H200)["native_sm120"].startswith("native_sm120 needs an sm_120..129 GPU")
    assert "native_sm120" not in MODEL.unreachable_paths(SM120)
    big = OrtProblem(64, 64, 64, 16)
    assert predict(big, SM120) == "prefill_vec8"
    opted_in = OrtPolicy.from_environment({NATIVE_SM120_ENV: "1"})
    assert opted_in.native_sm120 and predict(big, SM120, opted_in) == "native_sm120"
    assert predict(OrtProblem(4, 64, 64, 16), SM120, opted_in) == "gemv"  # both GEMVs have priority
    assert predict(OrtProblem(32, 64, 128, 16), SM120, opted_in) == "gemv_mma"
    assert not OrtPolicy.from_environment({}).native_sm120


@pytest.mark.parametrize("names, problem, path", [
    ([GEMV_MMA], OrtProblem(1, 64, 128, 16), "gemv_mma"),
    ([GEMV_MMA_MANGLED], OrtProblem(32, 64, 5120, 16), "gemv_mma"),
    ([GEMV_WARP], OrtProblem(4, 64, 96, 16, "float16"), "gemv"),
    ([GEMV_MANGLED], OrtProblem(8, 64, 4064, 16, "float16"), "gemv"),
    ([VEC8, *CUBLAS, BIAS], OrtProblem(64, 64, 128, 16, "bfloat16", True), "prefill_vec8"),
    ([SCALAR, CUBLAS[1]], OrtProblem(64, 64, 128, 15, "float16"), "prefill_scalar"),
    ([SCALAR_MANGLED, CUBLAS[0]], OrtProblem(64, 64, 36, 16, "float16"), "prefill_scalar"),
])
def test_kernel_names_of_its_source_map_to_its_paths(names, problem, path):
    event = event_for(names, problem, device=H200)
    assert event.path == path and event.predicted == path and event.finding is None
    assert event.unmatched == (), "cuBLAS, the bias add and memsets are shared kernels"
    assert event.mode == "observed" and event.launched == tuple(names)


def test_a_disagreement_and_an_unexplained_launch_are_findings():
    vec8_problem = OrtProblem(64, 64, 128, 16)
    wrong = event_for([GEMV_MMA], vec8_problem, device=H200)
    assert wrong.path == "gemv_mma"
    assert wrong.finding == "the model predicts 'prefill_vec8', the launched kernels show 'gemv_mma'"
    # the other GEMV where one was predicted (e.g. a pre-SM80 GPU, or ORT_FP4_GEMV_MMA=0): a finding too
    other = event_for([GEMV_WARP], OrtProblem(4, 64, 128, 16), device=H200)
    assert other.finding == "the model predicts 'gemv_mma', the launched kernels show 'gemv'"
    nothing = event_for([CUBLAS[0]], vec8_problem, device=H200)
    assert nothing.path is None and "no declared path matches" in nothing.finding


def test_shortcuts_are_recognised_from_what_was_launched():
    k0 = OrtProblem(3, 8, 0, 16, "bfloat16", True)
    assert expected_shortcut(k0) == "bias_only"
    event = event_for([MEMSET, BIAS], k0, device=H200)
    assert event.shortcut and event.path == "bias_only" and event.finding is None and event.mode == "observed"
    empty = event_for([], OrtProblem(0, 16, 32, 16), device=H200)
    assert empty.shortcut and empty.path == "empty"
    ran_anyway = event_for([GEMV_MMA], k0, device=H200)
    assert ran_anyway.finding == "the model predicts the shortcut 'bias_only', the launched kernels show 'gemv_mma'"


# --- the cases ----------------------------------------------------------------------------------


def _simulated_coverage(selected: tuple[cases.OrtCase, ...]) -> CoverageData:
    data = CoverageData()
    data.declare(MODEL)
    for c in selected:
        data.add(event_for(simulated_kernels(c.problem), c.problem, device=H200), c.id)
    return data


def test_the_full_suite_reaches_every_path_and_guard_side_reachable_on_an_h200():
    data = _simulated_coverage(cases.full_suite())
    assert data.analyze().failures(Requirement.parse(["all-reachable"])) == []
    op = data.analyze().operator(MODEL.name)
    assert {p.name for p in op.paths if p.hits} == {"gemv_mma", "gemv", "prefill_vec8", "prefill_scalar"}
    assert data.operator(MODEL.name).shortcuts == {"empty": 1, "bias_only": 1}


def test_the_decode_only_suite_fails_all_reachable_naming_the_dequant_paths():
    decode = cases.decode_suite()
    assert decode and all(1 <= c.m <= 8 and c.k > 0 for c in decode)
    data = _simulated_coverage(decode)
    failures = data.analyze().failures(Requirement.parse(["all-reachable"]))
    for path in ("prefill_vec8", "prefill_scalar"):
        assert any(f.startswith(f"required path {MODEL.name}:{path} was never taken") for f in failures), failures
    taken = {p.name for p in data.analyze().operator(MODEL.name).paths if p.hits}
    assert taken == {"gemv_mma", "gemv"}, "decode calls take both GEMVs and never dequantize"


def test_matrix_cases_the_op_does_not_accept_are_left_out_with_the_reason():
    from nvfp4_harness.nvfp4.shapes import MATRIX

    kept = {c.id for c in cases.matrix_cases()}
    excluded = {e["id"]: e["reason"] for e in cases.excluded_matrix_cases()}
    assert kept.isdisjoint(excluded) and kept | set(excluded) == {c.id for c in MATRIX}
    for c in MATRIX:
        if c.id in excluded:
            assert c.op == "dequantize" or c.misaligned is not None, c.id
            assert ("dequantize" in excluded[c.id]) == (c.op == "dequantize")


@pytest.mark.parametrize("policy", [DEFAULT_POLICY, OrtPolicy(gemv_mma_max_m=16, gemv_max_m=4),
                                    OrtPolicy(gemv_mma_max_m=8, gemv_max_m=8)])
def test_edge_cases_sit_on_both_sides_of_both_observed_limits(policy):
    by_id = {c.id: c for c in cases.edge_cases(policy)}
    want = {
        # the tensor-core GEMV: M = t and t + 1 at K % 128 == 0
        "ort-gemv-mma-m-max": ("gemv_mma", policy.gemv_mma_max_m, True),
        "ort-gemv-mma-m-max-bias": ("gemv_mma", policy.gemv_mma_max_m, True),
        "ort-vec8-mma-m-max-plus-1": ("prefill_vec8", policy.gemv_mma_max_m + 1, True),
        # the warp GEMV: M = t and t + 1 at K % 128 != 0
        "ort-gemv-m-max-bias-k96": ("gemv", policy.gemv_max_m, False),
        "ort-vec8-m-max-plus-1-k96": ("prefill_vec8", policy.gemv_max_m + 1, False),
        "ort-scalar-m-max-plus-1": ("prefill_scalar", policy.gemv_max_m + 1, False),
    }
    for case_id, (path, m, k128) in want.items():
        case = by_id[case_id]
        assert (predict(case.problem, H200, policy), case.m, case.k % 128 == 0) == (path, m, k128), case_id
    assert predict(by_id["ort-gemv-mma-lead-3d-max"].problem, H200, policy) == "gemv_mma"
    assert predict(by_id["ort-gemv-lead-3d-max"].problem, H200, policy) == "gemv"


def test_the_default_edges_are_m_8_and_9_without_and_32_and_33_with_k_a_multiple_of_128():
    edges = {(c.m, c.k % 128 == 0): predict(c.problem, H200) for c in cases.edge_cases()}
    assert edges[(8, False)] == "gemv" and edges[(9, False)] in ("prefill_vec8", "prefill_scalar")
    assert edges[(32, True)] == "gemv_mma" and edges[(33, True)] == "prefill_vec8"
    assert edges[(32, False)] == "prefill_vec8"  # within the Mma's M, not its K


def test_the_crossover_threshold_is_the_last_m_of_an_unbroken_run_of_either_gemv():
    assert cases.crossover_threshold({m: "gemv_mma" if m <= 32 else "prefill_vec8" for m in range(1, 65)}) == 32
    assert cases.crossover_threshold({1: "gemv", 2: "prefill_vec8", 3: "gemv"}) == 1
    assert cases.crossover_threshold({1: "prefill_vec8"}) == 0
    assert cases.crossover_threshold({1: "gemv", 8: "gemv", 9: "prefill_vec8"}) == 8  # a sparse search
    assert cases.gemv_path_seen({1: "gemv_mma", 2: "gemv", 3: "prefill_vec8"}, 2) == "several"
    assert cases.gemv_path_seen({1: "prefill_vec8"}, 0) is None


def _search(name: str, n: int, k: int, paths: dict[int, str]) -> dict[str, Any]:
    return {"name": name, "n": n, "k": k, "block_size": 16, "dtype": "bfloat16", "paths": paths}


def test_two_limits_one_per_gemv_kernel_are_the_declared_expectation():
    """What the H200 run saw: the tensor-core GEMV to M = 32 at K % 128 == 0, the warp GEMV to
    M = 8 at K % 128 != 0. Two different thresholds are as declared, not a problem."""
    from nvfp4_harness.nvfp4.onnxruntime.run import crossover_problems

    seen = [_search("primary", 17408, 5120, {m: "gemv_mma" if m <= 32 else "prefill_vec8" for m in range(1, 65)}),
            _search("k-not-multiple-of-128", 4096, 4064,
                    {m: "gemv" if m <= 8 else "prefill_vec8" for m in (*range(1, 13), 16, 17, 32, 33, 64)})]
    summary = cases.crossover_summary(seen, device=H200)
    assert [(s["observed"], s["as_declared"]) for s in summary["searches"]] == [
        ({"gemv_path": "gemv_mma", "gemv_max_m": 32}, True), ({"gemv_path": "gemv", "gemv_max_m": 8}, True)]
    assert summary["observed_policy"] == summary["declared_policy"] == DEFAULT_POLICY.to_dict()
    assert summary["as_declared"] and crossover_problems(summary) == []
    # what the single-GEMV model expected at K % 128 != 0 (a GEMV to M = 32) is now a problem
    single = [seen[0], _search("k-not-multiple-of-128", 4096, 4064,
                               {m: "gemv" if m <= 32 else "prefill_vec8" for m in (1, 8, 9, 16, 32, 33)})]
    summary = cases.crossover_summary(single, device=H200)
    problems = crossover_problems(summary)
    assert not summary["as_declared"] and summary["observed_policy"]["gemv_max_m"] == 32
    assert any("k-not-multiple-of-128 (4096x4064): saw gemv up to M = 32, the model declares gemv up to M = 8" in p
               for p in problems), problems
    assert any("update OBSERVED_GEMV_MMA_MAX_M / OBSERVED_GEMV_MAX_M" in p for p in problems)


def test_the_crossover_searches_cover_both_gemv_kernels_contiguously_past_their_limits():
    by_kind = {s.k % 128 == 0: s for s in cases.CROSSOVER}
    assert set(by_kind) == {True, False}
    assert set(range(1, OBSERVED_GEMV_MMA_MAX_M + 2)) <= set(by_kind[True].ms)
    assert set(range(1, OBSERVED_GEMV_MAX_M + 2)) <= set(by_kind[False].ms)
    assert by_kind[False].k % 32 == 0


def test_case_inputs_regenerate_bit_for_bit_from_the_seed():
    case = next(c for c in cases.full_suite() if c.bias and c.block_size % 2)
    one, two = cases.host_operands(case), cases.host_operands(case)
    assert one.keys() == two.keys() == {"a", "b", "weight_scale", "weight_scale_2", "bias"}
    for key in one:
        assert one[key].tobytes() == two[key].tobytes()
    assert one["b"].shape == (case.n, case.k // 2)
    assert one["weight_scale"].shape == (case.n, math.ceil(case.k / case.block_size))
    assert one["a"].shape == case.lead + (case.k,)


# --- the ONNX graph -----------------------------------------------------------------------------


@pytest.mark.parametrize("bias, rank", [(False, 2), (True, 2), (True, 3)])
def test_the_single_node_graph_follows_the_op_schema(bias, rank):
    pytest.importorskip("onnx", reason="the `onnx` package (the [onnxruntime] extra) is not installed")
    from nvfp4_harness.nvfp4.onnxruntime import graph

    model = graph.build_model("bfloat16", 7, bias, rank)  # runs onnx.checker.check_model(full_check=True)
    [node] = model.graph.node
    assert (node.domain, node.op_type) == ("com.microsoft", "MatMulBlockQuantizedFp4Weight")
    assert [(a.name, a.i) for a in node.attribute] == [("block_size", 7)]
    assert list(node.input) == ["A", "B", "weight_scale", "weight_scale_2"] + (["", "bias"] if bias else [])
    types = {i.name: i.type.tensor_type.elem_type for i in model.graph.input}
    assert types == {"A": 16, "B": 2, "weight_scale": 2, "weight_scale_2": 1, **({"bias": 16} if bias else {})}
    assert len(model.graph.input[0].type.tensor_type.shape.dim) == rank


# --- the read-out -------------------------------------------------------------------------------


def test_readout_cases_plant_nan_scales_only_in_their_nan_row():
    for case in readout.readout_cases()[:12]:
        packed, scales, g = readout.readout_operands(case)
        again = readout.readout_operands(case)
        assert packed.tobytes() == again[0].tobytes() and scales.tobytes() == again[1].tobytes()
        nan = np.isin(scales, readout.NAN_SCALE_BYTES)
        rows = sorted(set(np.nonzero(nan)[0].tolist()))
        assert rows == ([case.nan_row] if case.nan_row is not None else []), case.id
        assert case.readout_m >= max(case.k, readout.READOUT_MIN_M)
        w = reference.dequantize(packed, scales, float(g), case.block_size, case.dtype)
        finite = np.isfinite(w.astype(np.float32))
        assert finite[[r for r in range(case.n) if r != case.nan_row]].all(), "no overflow outside the NaN row"


def test_observable_bits_drop_zero_signs_and_poison_nan_rows():
    w = np.array([[0.0, -0.0, 1.5], [-0.0, np.nan, 2.0]], dtype=np.float32).astype(np.float16)
    seen = readout.observable(w, "float16").view(np.uint16)
    assert seen[0].tolist() == [0x0000, 0x0000, np.float16(1.5).view(np.uint16)]
    assert seen[1].tolist() == [0x7FFF] * 3


@pytest.mark.parametrize("index", [0, 3, 5])
def test_a_one_hot_matmul_reads_the_observable_weights_in_any_summation_order(index):
    """The read-out's claim, on the CPU: with A = [I; 0], any fp32 accumulation order gives
    W^T on the observable bits, and A = -I gives -W; the sign of a zero never survives."""
    case = readout.readout_cases()[index]
    want = readout.expected(case)
    w = want.pop("weights").astype(np.float32)
    a = np.zeros((case.readout_m, case.k), dtype=np.float32)
    a[: case.k, : case.k] = np.eye(case.k, dtype=np.float32)
    for sign, key in ((1.0, "reference_sha256"), (-1.0, "reference_negated_sha256")):
        products = (sign * a)[: case.k, None, :] * w[None, :, :]        # [m, n, k]
        acc = np.zeros(products.shape[:2], dtype=np.float32)
        with np.errstate(invalid="ignore"):
            for kk in np.random.default_rng(index).permutation(case.k):  # any order
                acc += products[:, :, kk]
        read = acc.T.astype(reference.numpy_dtype(case.dtype))
        from nvfp4_harness.nvfp4.verify import tensor_sha256

        assert tensor_sha256(readout.observable(read, case.dtype)) == want[key]
        assert not np.any(readout._bits(read) == 0x8000), "an accumulation from +0.0 never gives -0.0"


# --- timing arithmetic --------------------------------------------------------------------------


def _timeline(calls: list[list[tuple[str, float]]], flush: bool) -> list[timing.DeviceEvent]:
    events, t = [], 0.0
    for call in calls:
        for name, dur in [("MARK", 1.0)] + ([("fill", 80.0)] if flush else []) + [("MARK", 1.0)] + call:
            events.append(timing.DeviceEvent(name, t, dur))
            t += dur + 3.0
    return events[::-1]  # the profiler's order is not the timeline's


def test_the_timeline_splits_at_the_markers_and_kernels_sort_into_kinds():
    calls = [[(VEC8, 15.0), (CUBLAS[0], 50.0), (BIAS, 2.0)], [(VEC8, 16.0), (CUBLAS[0], 52.0), (BIAS, 2.0)]]
    for flush in (False, True):
        groups = timing.split_calls(_timeline(calls, flush), "MARK", 2)
        assert [[e.name for e in g] for g in groups] == [[VEC8, CUBLAS[0], BIAS]] * 2
    summary = timing.summarize_call_groups(groups, [MODEL])
    assert summary["by_kind"] == {"bias": 2.0, "dequant_vec8": 15.5, "gemm": 51.0}
    assert summary["total"]["median_us"] == pytest.approx(68.5) and summary["reps"] == 2
    from nvfp4_kernels.model import MODEL as OURS

    assert timing.kind_of("void nvfp4_gemv_kernel<__nv_bfloat16>(...)", [OURS]) == "gemv"
    assert timing.kind_of("Memcpy DtoD (Device -> Device)", []) == "memory"
    with pytest.raises(timing.TimingError, match="expected 6 marker kernels"):
        timing.split_calls(_timeline(calls, False), "MARK", 3)


def test_an_overlapping_dependent_kernel_counts_once_and_kinds_add_up_to_the_busy_time():
    """A programmatic dependent (the split-K finalize) starts while its primary runs and waits on
    the device: its profiler interval overlaps the primary's. A call's total is the union of its
    kernels' intervals, and each kernel's share is what no earlier-starting kernel covers; worked
    by hand: split 10..40, finalize 25..45 (its last 5 us are its own), a gap, then a 3 us
    kernel at 50 -> busy 30 + 5 + 3 = 38, not the 68 the durations sum to."""
    from nvfp4_kernels.model import MODEL as OURS

    split = "void nvfp4_fused_mma_kernel<__nv_bfloat16, 1, 1, 4, false, false>(...)"
    finalize = "void nvfp4::nvfp4_splitk_finalize_kernel<__nv_bfloat16, 4>(...)"
    call = [timing.DeviceEvent(finalize, 25.0, 20.0), timing.DeviceEvent("elementwise", 50.0, 3.0),
            timing.DeviceEvent(split, 10.0, 30.0)]
    shares = timing.exclusive_busy_us(call)
    assert [(e.name, part) for e, part in shares] == [(split, 30.0), (finalize, 5.0), ("elementwise", 3.0)]
    summary = timing.summarize_call_groups([call, call], [OURS])
    assert summary["total"]["median_us"] == pytest.approx(38.0)
    assert summary["by_kind"] == {"fused_mma": 30.0, "other": 8.0}
    assert summary["kernels"] == [split, finalize, "elementwise"]
    # a kernel wholly inside an earlier one adds nothing; one that starts at the same instant as
    # a longer one adds only its own tail; kernels one after the other add their durations
    inside = [timing.DeviceEvent("a", 0.0, 10.0), timing.DeviceEvent("b", 2.0, 3.0)]
    assert [p for _, p in timing.exclusive_busy_us(inside)] == [10.0, 0.0]
    same_start = [timing.DeviceEvent("a", 0.0, 4.0), timing.DeviceEvent("b", 0.0, 6.0)]
    assert sum(p for _, p in timing.exclusive_busy_us(same_start)) == pytest.approx(6.0)
    serial = [timing.DeviceEvent("a", 0.0, 4.0), timing.DeviceEvent("b", 7.0, 6.0)]
    assert [p for _, p in timing.exclusive_busy_us(serial)] == [4.0, 6.0]


def test_every_kernel_path_of_both_models_has_a_label_and_names_the_path_it_took():
    """A timed call whose kernels belong to a path the section does not list would show no path
    ("-"): every path with kernels, of this project's model and ONNX Runtime's, must be listed."""
    from nvfp4_harness.nvfp4.onnxruntime import benchmarks_md
    from nvfp4_kernels.model import MODEL as OURS

    for model in (OURS, MODEL):
        for spec in model.paths:
            if not spec.kernels:
                continue
            kind = timing.PATH_KINDS.get(spec.name, spec.name)
            assert kind in benchmarks_md.KIND_LABELS and kind in benchmarks_md.PATH_KINDS, (model.name, spec.name)
    wgmma = {"warm": {"total": {"median_us": 55.0}, "by_kind": {"fused_wgmma": 50.0, "other": 5.0}}}
    assert timing.kind_of("void nvfp4_fused_wgmma_kernel<64, 1, true>(...)", [OURS]) == "fused_wgmma"
    assert timing.kind_of("void nvfp4_wgmma_permute_act_kernel(...)", [OURS]) == "fused_wgmma"
    assert benchmarks_md.path_of(wgmma) == "fused WGMMA"


def test_the_eager_loop_table_shows_both_contenders_and_their_ratio():
    from nvfp4_harness.nvfp4.onnxruntime import benchmarks_md

    doc = {"provenance": {"onnxruntime": "1.31.1"}, "rows": [],
           "eager_loop": {"method": "200 calls back to back", "rows": [
               {"M": 1, "N": 17408, "K": 5120, "ours_us": 31.5, "onnxruntime_us": 55.2},
               {"M": 1, "N": 4096, "K": 4096, "onnxruntime_us": 20.0}]}}
    text = benchmarks_md.render(doc)
    assert "Eager loop: 200 calls back to back" in text
    assert "| 17408 x 5120 | 1 | 31.50 | 55.20 | 1.75x |" in text  # 55.2 / 31.5, computed here
    assert "| 4096 x 4096 | 1 | - | 20.00 | - |" in text  # ours not measured: no ratio
    assert "Eager loop" not in benchmarks_md.render({**doc, "eager_loop": None})


def test_an_eager_loop_is_timed_per_call_with_one_sync_per_loop():
    from nvfp4_harness.nvfp4.onnxruntime import sections

    class FakeCuda:
        syncs = 0

        def synchronize(self):
            FakeCuda.syncs += 1

    class FakeTorch:
        cuda = FakeCuda()

    calls = []
    per_call = sections.loop_us(FakeTorch(), lambda: calls.append(1), calls=50, repeats=4)
    assert len(per_call) == 4 and all(t > 0 for t in per_call)
    assert len(calls) == 1 + 50 * 4 and FakeCuda.syncs == 1 + 4  # a warm-up call, then one sync per loop


def test_the_eager_loop_check_names_a_missing_shape_and_a_median_outside_its_range():
    from nvfp4_harness.nvfp4.onnxruntime import checks
    from nvfp4_harness.nvfp4.onnxruntime.cases import EAGER_LOOP_SHAPES

    rows = [{"M": m, "N": n, "K": k, "onnxruntime_us": 40.0, "onnxruntime_range_us": [39.0, 41.0],
             "ours_us": 30.0, "ours_range_us": [29.5, 30.5]} for m, n, k in EAGER_LOOP_SHAPES]
    assert checks.eager_loop_problems({"rows": rows}) == []
    assert checks.eager_loop_problems(None) == []  # a file from before the eager loop
    bad = [dict(r) for r in rows[1:]]
    bad[0]["ours_us"] = 31.0  # outside [29.5, 30.5]
    del bad[1]["onnxruntime_us"]
    problems = checks.eager_loop_problems({"rows": bad})
    assert len(problems) == 3, problems
    assert "expected" in problems[0] and "ours's median 31.0" in problems[1] and "no ONNX Runtime time" in problems[2]


def test_the_benchmarks_section_renders_from_a_timing_file(tmp_path):
    from nvfp4_harness.nvfp4.onnxruntime import benchmarks_md

    def contender(kinds: dict[str, float]) -> dict[str, Any]:
        total = sum(kinds.values())
        return {mode: {"total": {"median_us": total * (1.1 if mode == "cold" else 1.0)}, "by_kind": kinds}
                for mode in ("warm", "cold")}

    rows = [{"section": "ffn", "N": 17408, "K": 5120, "M": 1, "block_size": 16, "dtype": "bfloat16",
             "onnxruntime_path": {"path": "gemv", "finding": None}, "onnxruntime": contender({"gemv": 28.8}),
             "ours": contender({"gemv": 32.4}), "copy_op": contender({"memory": 14.3})},
            {"section": "sweep", "N": 17408, "K": 5120, "M": 64, "block_size": 16, "dtype": "bfloat16",
             "onnxruntime_path": {"path": "prefill_vec8", "finding": None},
             "onnxruntime": contender({"dequant_vec8": 75.2, "gemm": 54.3}),
             "ours": {"skipped": "no CUDA backend"}, "copy_op": contender({"memory": 60.0}),
             "copy_dequant": contender({"memory": 55.5})}]
    doc = {"provenance": {"gpu": "NVIDIA H200", "onnxruntime": "1.31.1", "driver": "580", "cuda": "13.0",
                          "torch": "2.11", "date": "2026-12-01", "command": "python -m nvfp4_harness onnxruntime",
                          "git_commit": "abc"}, "rows": rows, "method": "profiler kernel durations"}
    text = benchmarks_md.render(doc)
    assert "## ONNX Runtime 1.31.1 beside this project" in text
    assert "GEMV: 28.80 / 31.68" in text and "vec8 75.20 + cuBLAS 54.30" in text
    assert "no CUDA backend" in text
    source = tmp_path / "t.json"
    source.write_text(json.dumps(doc))
    assert benchmarks_md.main(str(source), str(tmp_path / "s.md")) == 0
    assert (tmp_path / "s.md").read_text() == benchmarks_md.render(doc, source_name=str(source))
    source.write_text("{}")
    assert benchmarks_md.main(str(source)) == 2


# --- the command ----------------------------------------------------------------------------------


def _gpu_with_onnxruntime() -> str | None:
    """None when a GPU and onnxruntime-gpu are here, else why not."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "needs a CUDA GPU (torch.cuda.is_available() is False)"
    try:
        from nvfp4_harness.nvfp4.onnxruntime.session import require_onnxruntime

        require_onnxruntime()
    except Exception as exc:  # noqa: BLE001
        return f"needs onnxruntime-gpu with its CUDA execution provider: {exc}"
    return None


@pytest.mark.skipif(_gpu_with_onnxruntime() is None, reason="a GPU and onnxruntime-gpu are here: the command would run")
@pytest.mark.parametrize("extra", [[], ["--smoke"]])
def test_the_command_without_a_gpu_or_onnxruntime_says_what_is_missing(tmp_path, capsys, extra):
    from nvfp4_harness.__main__ import main

    assert main(["onnxruntime", "--out", str(tmp_path), *extra]) == 2
    err = capsys.readouterr().err
    assert "needs a CUDA GPU and onnxruntime-gpu 1.31.1" in err and "pytest suites/test_onnxruntime.py" in err
    assert list(tmp_path.iterdir()) == []


# --- a dry run against a simulated ONNX Runtime ------------------------------------------------------


class _FakeCall:
    """What ``OrtRuntime.bind`` returns, computing on the CPU what the model says ONNX Runtime does."""

    launched: list[str] = []

    def __init__(self, torch: Any, key: Any, a: Any, b: Any, ws: Any, g: Any, bias: Any) -> None:
        self.torch, self.key, self.a, self.b, self.ws, self.g, self.bias = torch, key, a, b, ws, g, bias
        self.out = torch.full(tuple(a.shape[:-1]) + (int(b.shape[0]),), float("nan"), dtype=a.dtype)

    def __call__(self) -> Any:
        torch = self.torch
        n, k = int(self.b.shape[0]), 2 * int(self.b.shape[1])
        m = math.prod(self.a.shape[:-1])
        problem = OrtProblem(m, n, k, self.key.block_size, self.key.dtype, self.bias is not None)
        _FakeCall.launched = simulated_kernels(problem)
        taken = predict(problem, H200)
        if taken == "empty":
            return self.out
        if taken == "bias_only":
            self.out.copy_(self.bias.expand_as(self.out) if self.bias is not None else torch.zeros_like(self.out))
            return self.out
        from nvfp4_harness.nvfp4.verify import to_numpy

        w = reference.dequantize(to_numpy(self.b), to_numpy(self.ws), float(self.g.reshape(-1)[0]),
                                 self.key.block_size, self.key.dtype).astype(np.float32)
        y = self.a.reshape(-1, k).float() @ torch.from_numpy(w).t()
        if self.bias is not None:
            y = y + self.bias.float()
        self.out.copy_(y.reshape(self.out.shape).to(self.out.dtype))
        return self.out


class _FakeRuntime:
    version = "1.31.1"
    device_index = 0

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.device = torch.device("cpu")
        self.ort = SimpleNamespace(get_available_providers=lambda: ["CUDAExecutionProvider"])
        self.creation_s: dict[str, float] = {}

    def bind(self, a, b, ws, g, block_size, bias=None):
        from nvfp4_harness.nvfp4.onnxruntime.session import SessionKey

        key = SessionKey(str(a.dtype).removeprefix("torch."), int(block_size), bias is not None, a.dim())
        self.creation_s.setdefault(key.label, 0.0)
        return _FakeCall(self.torch, key, a, b, ws, g, bias)


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    """``python -m nvfp4_harness onnxruntime`` (all parts but the timing) against the simulated
    runtime, on small shapes: its output folder and exit status."""
    torch = pytest.importorskip("torch")
    from nvfp4_harness.engine import observe as observe_module
    from nvfp4_harness.nvfp4.onnxruntime import run as run_module

    mp = pytest.MonkeyPatch()
    out = tmp_path_factory.mktemp("onnxruntime-dry-run")
    try:
        def launched_kernels(fn):
            _FakeCall.launched = []
            result = fn()
            return result, list(_FakeCall.launched)

        mp.setattr(observe_module, "launched_kernels", launched_kernels)
        mp.setattr(observe_module, "torch_device_caps", lambda index=None: H200)
        mp.setattr(run_module, "provenance", lambda torch, runtime, argv: {
            "gpu": "NVIDIA H200 (simulated)", "driver": "-", "cuda": "-", "torch": torch.__version__,
            "onnxruntime": "1.31.1 (simulated)", "date": "2026-12-01", "command": "dry run"})
        mp.setattr(run_module.Run, "context_usable", lambda self: True)
        mp.setattr(cases, "CROSSOVER", (cases.Crossover("primary", 48, 128, tuple(range(1, 41))),
                                        cases.Crossover("k-not-multiple-of-128", 32, 96,
                                                        (*range(1, 11), 16, 32, 33))))
        mp.setattr(cases, "DECODE_EXTRA", tuple(cases._case(f"decode-256x512-m{m}", (m,), 256, 512, 16, "bfloat16",
                                                            "decode", origin="decode") for m in (1, 8)))
        mp.setattr(readout, "LARGE", ((300, 520, 10, "bfloat16"),))
        args = run_module.parse_args(["--out", str(out), "--only", "crossover,suites,probes,bits"])
        run = run_module.Run(torch, _FakeRuntime(torch), out, 600.0, ["--dry-run"])
        status = run_module.execute(run, args)
    finally:
        mp.undo()
    return out, status


def test_a_dry_run_writes_every_file_and_meets_every_expectation(dry_run):
    out, status = dry_run
    assert status == 0
    assert checks.missing(out) == ["onnxruntime-timing.json"]
    suites = checks.load(out, "suites")
    assert suites["policy"] == {"gemv_mma_max_m": 32, "gemv_max_m": 8, "native_sm120": False} and suites["excluded"]
    assert not suites["every_m_le_8"]["requirement"]["passed"]
    assert suites["provenance"]["model_fingerprint"] == MODEL.fingerprint
    cross = checks.load(out, "crossover")["crossover"]
    assert [(s["observed"]["gemv_path"], s["observed"]["gemv_max_m"]) for s in cross["searches"]] == [
        ("gemv_mma", 32), ("gemv", 8)]
    assert cross["as_declared"] and cross["conflicts"] == []
    errors = checks.load(out, "errors")
    assert errors["errors"] == [] and errors["aborted"] is None


MODEL_FREE_CHECKS = ["provenance_problems", "replay_problems", "crossover_problems", "bits_problems",
                     "coverage_problems"]
#: the timing part needs a GPU even in the dry run (profiler kernel durations)
ALL_PARTS_BUT_TIMING = [p for p in checks.RECORDED_PARTS if p != "timing"]


@pytest.mark.parametrize("check", MODEL_FREE_CHECKS)
def test_the_consistency_checks_pass_on_a_dry_run(dry_run, check):
    assert getattr(checks, check)(dry_run[0]) == []


@pytest.mark.parametrize("part", ALL_PARTS_BUT_TIMING)
def test_what_a_run_of_todays_code_computed_is_checked_and_holds(dry_run, part):
    """Files written by today's code name today's model, so nothing awaits a re-run and every
    recorded path, verdict, coverage count and report is checked (what the GPU re-run's files
    get)."""
    assert checks.awaiting_rerun(dry_run[0], part) is None
    assert checks.recorded_problems(dry_run[0], part) == []


def _copy(folder: Path, to: Path) -> Path:
    for f in folder.iterdir():
        (to / f.name).write_bytes(f.read_bytes())
    return to


def test_the_consistency_checks_catch_a_tampered_result(dry_run, tmp_path):
    out = _copy(dry_run[0], tmp_path)
    bits = checks.load(out, "bits")
    bits["cases"][0]["ort_sha256"] = "0" * 64
    checks.path(out, "bits").write_text(json.dumps(bits))
    assert any("differs from the reference" in p for p in checks.bits_problems(out))
    suites = checks.load(out, "suites")
    call = next(c for c in suites["calls"] if c["path"] == "prefill_vec8")
    call["kernels"] = [GEMV_MMA]
    checks.path(out, "suites").write_text(json.dumps(suites))
    assert any(call["id"] in p and "show 'gemv_mma'" in p for p in checks.replay_problems(out))
    assert any(call["id"] in p and "path 'prefill_vec8' recorded, 'gemv_mma'" in p
               for p in checks.recorded_problems(out, "suites"))
    assert any("does not hold the counts" in p for p in checks.recorded_problems(out, "coverage-full"))
    md = checks.path(out, "coverage-decode", ".md")
    md.write_text(md.read_text() + "edited\n")
    assert any("is not the markdown report" in p for p in checks.recorded_problems(out, "coverage-decode"))


def test_a_crossover_that_shows_one_limit_for_both_kernels_is_caught(dry_run, tmp_path):
    """The first model's world: the warp GEMV to M = 32. Replayed from the traces, it fails."""
    out = _copy(dry_run[0], tmp_path)
    doc = checks.load(out, "crossover")
    warp = doc["crossover"]["searches"][1]
    for call in warp["calls"]:
        if call["m"] <= 32:
            call["kernels"] = [GEMV_WARP]
    checks.path(out, "crossover").write_text(json.dumps(doc))
    problems = checks.crossover_problems(out)
    assert any("saw gemv up to M = 32, the model declares gemv up to M = 8" in p for p in problems), problems
    assert any("crossover: observed_policy" in p for p in checks.recorded_problems(out, "crossover"))


def test_files_of_an_unknown_model_are_a_problem_not_a_skip(dry_run, tmp_path):
    out = _copy(dry_run[0], tmp_path)
    doc = checks.load(out, "probes")
    doc["provenance"]["model_fingerprint"] = "0123456789abcdef"
    checks.path(out, "probes").write_text(json.dumps(doc))
    assert checks.awaiting_rerun(out, "probes") is None
    assert any("0123456789abcdef" in p and "re-run" in p for p in checks.recorded_problems(out, "probes"))
    del doc["provenance"]["model_fingerprint"]
    checks.path(out, "probes").write_text(json.dumps(doc))
    assert "awaiting the GPU re-run" in checks.awaiting_rerun(out, "probes")


def test_recorded_timing_kinds_are_checked_against_the_replayed_path(dry_run, tmp_path):
    """A timing file of today's code: its ONNX Runtime kernel kinds must be those of the path
    its kernels show (``gemv_mma`` for the tensor-core GEMV, not ``gemv`` as the pre-fix model
    counted it)."""
    from nvfp4_harness.nvfp4.onnxruntime.run import model_provenance

    out = _copy(dry_run[0], tmp_path)
    problem = OrtProblem(1, 17408, 5120, 16)
    event = event_for([GEMV_MMA], problem, device=H200)

    def row(kind: str) -> dict[str, Any]:
        times = {mode: {"total": {"median_us": 29.0}, "by_kind": {kind: 29.0}} for mode in ("warm", "cold")}
        return {"section": "ffn", "N": 17408, "K": 5120, "M": 1, "block_size": 16, "dtype": "bfloat16",
                "onnxruntime_path": {"path": event.path, "shortcut": False, "predicted": event.predicted,
                                     "finding": None, "kernels": [GEMV_MMA], "unmatched": [], "reason": "",
                                     "device": H200.label},
                "onnxruntime": times, "copy_op": times, "ours": {"skipped": "dry run"},
                "bytes": {"op": 50180096}}

    prov = {**checks.load(out, "suites")["provenance"], **model_provenance()}
    for kind, ok in (("gemv_mma", True), ("gemv", False)):
        doc = {"provenance": prov, "rows": [row(kind)], "policy": DEFAULT_POLICY.to_dict()}
        checks.path(out, "timing").write_text(json.dumps(doc))
        assert checks.timing_problems(out) == []
        problems = checks.recorded_problems(out, "timing")
        assert (problems == []) == ok, problems


# --- the committed GPU results: the H200 run, re-judged by the corrected model ------------------------


def _committed() -> Path:
    lacking = checks.missing(FIXTURES)
    if lacking:
        pytest.skip(f"no ONNX Runtime GPU results committed yet ({', '.join(lacking[:3])}"
                    f"{' ...' if len(lacking) > 3 else ''} missing under fixtures/gpu): run "
                    f"`{checks.RERUN}` on a GPU with onnxruntime-gpu 1.31.1 and commit the files")
    return FIXTURES


@pytest.mark.parametrize("check", MODEL_FREE_CHECKS + ["timing_problems"])
def test_the_committed_onnxruntime_results_are_consistent(check):
    """What ONNX Runtime did on the H200 (kernel names, read-out bits, times), checked with
    today's model: these hold for the committed files whichever model wrote them."""
    assert getattr(checks, check)(_committed()) == []


def test_the_h200_traces_rejudged_by_the_corrected_model_agree_call_for_call():
    """EVIDENCE FROM A REAL RUN, RE-JUDGED: every call of the committed H200 run of ONNX Runtime
    1.31.1 (suites, probes, crossover, timing and read-out calls), its recorded kernel names fed
    through the engine's ``observed_event`` with today's (two-GEMV) model and the declared
    policy. The kernel names are what ONNX Runtime launched; only the judgement is today's.
    Every call shows a declared path and the model predicted it: no finding. In the first run's
    files (before the GPU re-run) the calls the single-GEMV model had wrong are among them, and
    now agree; a run of today's code recorded no finding at all."""
    folder = _committed()
    calls = checks.recorded_calls(folder)
    assert {where.split(":")[0] for where, _, _ in calls} == set(checks.FILES)  # every part's calls
    taken: dict[str, int] = {}
    for where, problem, record in calls:
        device = checks.device_of(record["device"])
        assert device.sm is not None, where  # recorded on a GPU
        if record.get("shortcut"):
            event = event_for(record["kernels"], problem, device=device)  # empty / bias_only: no path kernel
            assert event.shortcut and event.finding is None, where
        else:
            event = observed_event(MODEL, record["kernels"], problem, device=device, policy=DEFAULT_POLICY)
            assert event.finding is None and event.path == event.predicted, (where, event.finding)
            assert event.path is not None, where
        taken[event.path] = taken.get(event.path, 0) + 1
    assert {"gemv_mma", "gemv", "prefill_vec8", "prefill_scalar", "empty", "bias_only"} <= set(taken), taken
    recorded_findings = [(where, r["finding"]) for where, _, r in calls if r.get("finding")]
    if checks.awaiting_rerun(folder, "suites"):  # the first run's files, judged then by the single-GEMV model
        was_wrong = [w for w, f in recorded_findings
                     if f == "the model predicts 'gemv', the launched kernels show 'prefill_vec8'"]
        assert len(was_wrong) == len(recorded_findings)
        assert sorted(w for w in was_wrong if w.startswith("suites:")) == [
            "suites:ort-gemv-lead-3d-max", "suites:ort-gemv-m-max-bias-k96", "suites:vec8-m9", "suites:vec8-n1",
            "suites:vec8-native-disabled"]
        assert sorted(w for w in was_wrong if w.startswith("crossover:")) == [
            f"crossover:k-not-multiple-of-128:M={m}" for m in (16, 17, 32, 9)]
    else:
        assert recorded_findings == []
    searches = checks.recomputed_crossover(folder)["searches"]
    assert [(s["name"], s["observed"]) for s in searches] == [
        ("primary", {"gemv_path": "gemv_mma", "gemv_max_m": 32}),
        ("k-not-multiple-of-128", {"gemv_path": "gemv", "gemv_max_m": 8})]


@pytest.mark.parametrize("part", checks.RECORDED_PARTS)
def test_what_the_committed_run_computed_with_its_model_is_todays(part):
    """The paths, predictions, verdicts, coverage documents and reports the run computed with
    its model. Files from before the two-GEMV fix skip, saying which file and why (the GPU
    re-run rewrites them); files written by today's code are checked in full."""
    folder = _committed()
    reason = checks.awaiting_rerun(folder, part)
    if reason:
        pytest.skip(reason)
    assert checks.recorded_problems(folder, part) == []


def test_the_benchmarks_section_is_a_pure_function_of_the_committed_timing_file(tmp_path, capsys):
    """Generated from ``onnxruntime-timing.json`` alone: the module imports nothing but the
    standard library (no model, no clock), and the same file gives the same text."""
    from nvfp4_harness.nvfp4.onnxruntime import benchmarks_md

    tree = ast.parse((ROOT / "harness" / "nvfp4" / "onnxruntime" / "benchmarks_md.py").read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert imported <= {"__future__", "json", "sys", "collections.abc", "pathlib", "typing"}, imported
    source = _committed() / "onnxruntime-timing.json"
    copy = tmp_path / "onnxruntime-timing.json"
    copy.write_bytes(source.read_bytes())
    text = benchmarks_md.render(benchmarks_md.load(source), source_name="fixtures/gpu/onnxruntime-timing.json")
    assert text == benchmarks_md.render(benchmarks_md.load(copy), source_name="fixtures/gpu/onnxruntime-timing.json")
    assert benchmarks_md.main(str(copy)) == 0
    assert capsys.readouterr().out == benchmarks_md.render(benchmarks_md.load(copy), source_name=str(copy))
    gpu = benchmarks_md.load(source)["provenance"]["gpu"]
    assert "## ONNX Runtime 1.31.1 beside this project" in text and gpu in text


# --- on a GPU with onnxruntime-gpu -------------------------------------------------------------------


@pytest.fixture(scope="module")
def ort_run():
    why = _gpu_with_onnxruntime()
    if why:
        pytest.skip(why)
    import torch
    from nvfp4_harness.nvfp4.onnxruntime.run import Run
    from nvfp4_harness.nvfp4.onnxruntime.session import OrtRuntime

    return Run(torch, OrtRuntime(torch), ROOT / "out", 600.0, [])


@pytest.mark.gpu
@pytest.mark.parametrize("expected, m, n, k, bs", [("gemv_mma", 1, 256, 256, 16), ("gemv_mma", 32, 256, 256, 16),
                                                    ("gemv", 8, 256, 96, 16), ("prefill_vec8", 9, 256, 96, 16),
                                                    ("prefill_vec8", 128, 256, 256, 16),
                                                    ("prefill_scalar", 4, 256, 36, 16),
                                                    ("prefill_scalar", 64, 96, 64, 15)])
def test_on_the_gpu_each_path_launches_what_the_model_declares(ort_run, expected, m, n, k, bs):
    from nvfp4_harness.nvfp4.onnxruntime.observing import observe_call
    from nvfp4_harness.nvfp4.onnxruntime.sections import device_operands

    case = cases.OrtCase(f"gpu-{expected}", (m,), n, k, bs, "bfloat16", False, "gpu", expected)
    dev = device_operands(ort_run, cases.host_operands(case))
    call = ort_run.runtime.bind(dev["a"], dev["b"], dev["weight_scale"], dev["weight_scale_2"], bs)
    call()
    obs = observe_call(call, case.problem, device=ort_run.device, publish=False)  # off the coverage gate's bus
    assert obs.event.path == expected and obs.event.finding is None, obs.launched


@pytest.mark.gpu
def test_on_the_gpu_a_readout_equals_the_cpu_reference(ort_run):
    from nvfp4_harness.nvfp4.onnxruntime.observing import observe_call

    def call(a, b, ws, g, problem):
        bound = ort_run.runtime.bind(a, b, ws, g, problem.block_size)
        obs = observe_call(bound, problem, device=ort_run.device, publish=False)
        return obs.result, obs.event

    case = next(c for c in readout.readout_cases() if c.block_size % 2 and c.nan_row is not None)
    record = readout.read_out(case, call, ort_run.torch, ort_run.torch_device)
    assert record["equal"] and record["negated_equal"], record
    assert record["nan_rows_read_all_nan"] is True
