"""``python -m nvfp4_harness.nvfp4.profile_once --small-m`` (the ``stalls`` phase of
scripts/gpu_session.sh) profiles what issue #10's unmet targets are about: the launches the
dispatcher makes at M = 1, 16 and 64 on both large shapes, and fused_wgmma's 64-row tile beside
them at M = 64. These checks run on the CPU; the profile itself needs the GPU."""

from __future__ import annotations

import pytest
from nvfp4_harness.model import DeviceCaps
from nvfp4_harness.nvfp4.bench_metrics import LARGE_SHAPES
from nvfp4_kernels.model import Policy, Problem, select_path

profile_once = pytest.importorskip("nvfp4_harness.nvfp4.profile_once")

H200 = DeviceCaps.simulated_gpu(9, 0)


def test_without_options_every_headline_launch_runs() -> None:
    assert profile_once.runs([]) == profile_once.RUNS


def test_small_m_runs_cover_the_unmet_targets_on_both_large_shapes() -> None:
    runs = profile_once.runs(["--small-m"])
    assert runs == profile_once.SMALL_M_RUNS
    assert {(m, n, k) for _kernel, m, n, k in runs} == {(m, n, k) for n, k in LARGE_SHAPES for m in (1, 16, 64)}
    assert {kernel for kernel, *_ in runs} <= set(profile_once.MATMULS)


@pytest.mark.parametrize("run", profile_once.SMALL_M_RUNS, ids=lambda r: f"{r[0]}-M{r[1]}-{r[2]}x{r[3]}")
def test_each_small_m_launch_is_the_dispatchers_or_one_its_policy_admits(run: tuple[str, int, int, int]) -> None:
    """fused_mma is the default policy's path on an H200 at these M; fused_wgmma at M = 64 is
    not (its range starts at wgmma_min_m = 65) but is admitted once the policy opens it, which
    is the comparison the profile is for."""
    kernel, m, n, k = run
    problem = Problem("matmul", m, n, k, 16, "bfloat16", "cuda")
    path = kernel.removesuffix("_tiled")
    if path == "fused_mma":
        assert select_path(problem, H200).path == "fused_mma"
    else:
        assert path == "fused_wgmma" and m == 64
        assert select_path(problem, H200).path != "fused_wgmma"
        assert select_path(problem, H200, Policy(force_path="fused_wgmma", wgmma_min_m=1)).path == "fused_wgmma"


def test_an_unknown_option_is_refused() -> None:
    with pytest.raises(SystemExit):
        profile_once.runs(["--tiny-m"])
