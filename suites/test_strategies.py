"""Property tests over the constructive strategies: every drawn problem takes the path it was
drawn for, with the guard outcomes of the table, and its result agrees with the oracle."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from nvfp4_harness.nvfp4 import shapes
from nvfp4_harness.nvfp4.strategies import DEQUANT_PATHS, MATMUL_PATHS, Nvfp4Problem, nvfp4_problems
from nvfp4_harness.nvfp4.verify import assert_bitwise_equal
from nvfp4_kernels.model import Policy

pytestmark = pytest.mark.dispatch

pytest_plugins = ["pytester"]


def _run_and_check(problem: Nvfp4Problem) -> str:
    with shapes.dispatch_events() as events:
        result = problem.run()
    assert len(events) == 1
    event, case = events[0], problem.case
    assert event.path == case.path, f"drawn for {case.path} ({problem.reason}), dispatcher took {event.path}"
    assert {g.key: g.passed for g in event.outcomes} == case.guards()
    shapes.check_against_oracle(case, problem.operands, result, event.path)
    return event.path


@pytest.mark.parametrize("path", MATMUL_PATHS)
@given(data=st.data())
def test_matmul_problems_take_the_requested_path(path: str, data: st.DataObject) -> None:
    _run_and_check(data.draw(nvfp4_problems(path=path)))


@pytest.mark.parametrize("path", DEQUANT_PATHS)
@given(data=st.data())
def test_dequantize_problems_take_the_requested_path(path: str, data: st.DataObject) -> None:
    _run_and_check(data.draw(nvfp4_problems(path=path, op="dequantize")))


@given(nvfp4_problems(path="prefill_vec8", op="dequantize", max_k=96, allow_misaligned=False))
def test_vec8_and_scalar_dequantize_give_the_same_bits(problem: Nvfp4Problem) -> None:
    """Forced side by side on the same operands: the two kernels are interchangeable."""
    vec8 = problem.run(Policy(force_path="prefill_vec8"))
    scalar = problem.run(Policy(force_path="prefill_scalar"))
    assert_bitwise_equal(vec8, scalar, "vec8 vs scalar dequantize")


@given(nvfp4_problems(path="gemv", max_k=128, allow_misaligned=False))
def test_gemv_shapes_forced_through_both_prefills_agree_with_each_other(problem: Nvfp4Problem) -> None:
    """Prefill vec8 and prefill scalar must be bitwise equal (same scratch, same matmul); the
    GEMV differs from them only within the float64 bound, checked by the oracle."""
    _run_and_check(problem)
    vec8 = problem.run(Policy(force_path="prefill_vec8"))
    scalar = problem.run(Policy(force_path="prefill_scalar"))
    assert_bitwise_equal(vec8, scalar, "prefill vec8 vs prefill scalar")
    shapes.check_against_oracle(problem.case, problem.operands, vec8, "prefill_vec8")


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(nvfp4_problems())
def test_any_path_problems_take_the_path_they_were_drawn_for(problem: Nvfp4Problem) -> None:
    _run_and_check(problem)


@pytest.mark.parametrize("kwargs, match", [
    ({"path": "gemv", "block_size": 7}, "block_size 16"),
    ({"path": "prefill_vec8", "block_size": 7}, "even block_size"),
    ({"path": "gemv", "op": "dequantize"}, "has no GEMV"),
    ({"path": "native_fp4"}, "sm_120"),
    ({"path": "fastest"}, "path must be"),
    ({"dtype": "float32"}, "dtype must be"),
    ({"op": "conv"}, "op must be"),
    ({"backend": "tpu"}, "backend must be"),
    ({"block_size": 0}, "positive int"),
    ({"path": "gemv", "max_k": 16}, "max_k >= 32"),
    ({"path": "fused_mma", "max_k": 120}, "max_k >= 128"),
    ({"path": "fused_mma", "block_size": 32}, "block_size 16"),
    ({"path": "fused_mma", "op": "dequantize"}, "path must be"),
    ({"path": "prefill_vec8", "block_size": 16, "max_m": 8, "max_k": 4}, "refuse the GEMV"),
    ({"path": "prefill_scalar", "block_size": 16, "max_k": 1}, "max_k >= 2"),
])
def test_impossible_requests_raise_invalid_argument(kwargs: dict, match: str) -> None:
    with pytest.raises(InvalidArgument, match=match):
        nvfp4_problems(**kwargs)


@given(nvfp4_problems(path="prefill_scalar", block_size=16, max_k=2, max_m=1))
def test_the_smallest_scalar_problem_is_still_constructible(problem: Nvfp4Problem) -> None:
    """K = 2 with block 16: only K % 8 != 0 can refuse vec8, and it does."""
    assert problem.case.k == 2 and problem.reason == "K % 8 != 0"
    _run_and_check(problem)


def test_statistics_show_the_paths(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_stats="""
        from hypothesis import given, settings
        from nvfp4_harness.nvfp4.strategies import nvfp4_problems

        @settings(max_examples=40, derandomize=True, deadline=None)
        @given(nvfp4_problems(max_k=128, max_n=4))  # K = 128: the smallest the fused path takes
        def test_draw(problem):
            problem.run()
    """)
    result = pytester.runpytest_inprocess("--hypothesis-show-statistics", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    for path in MATMUL_PATHS:
        assert f"path: {path}" in out, f"{path} missing from the statistics:\n{out}"
