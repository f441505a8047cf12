"""``python -m nvfp4_harness.nvfp4.profile_once --small-m`` (the ``stalls`` phase of
scripts/gpu_session.sh) profiles what issue #10's unmet targets are about: the launches the
dispatcher makes at M = 1, 16 and 64 on both large shapes, and fused_wgmma's 64-row tile beside
them at M = 64. These checks run on the CPU; the profile itself needs the GPU."""

from __future__ import annotations

import json
import re
from pathlib import Path

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
    """fused_mma is the default policy's path on an H200 at M = 1 and 16, fused_wgmma at M = 64
    (its range starts at wgmma_min_m = 33 since the twenty-third session); the other fused path
    at M = 64 is admitted once the policy opens it, which is the comparison the profile is for."""
    kernel, m, n, k = run
    problem = Problem("matmul", m, n, k, 16, "bfloat16", "cuda")
    path = kernel.removesuffix("_tiled")
    default = select_path(problem, H200).path
    if m < 64:
        assert path == default == "fused_mma"
    else:
        assert default == "fused_wgmma" and path in ("fused_mma", "fused_wgmma")
        assert select_path(problem, H200, Policy(force_path=path, wgmma_min_m=1)).path == path


def test_an_unknown_option_is_refused() -> None:
    with pytest.raises(SystemExit):
        profile_once.runs(["--tiny-m"])



# --- the committed profile (fixtures/gpu/ncu-small-m.txt, written by `gpu_session.sh stalls`) -----

PROFILE = Path(__file__).resolve().parents[1] / "fixtures" / "gpu" / "ncu-small-m.txt"
#: the stall reasons NOTES reads each target's limit from; ncu reports each per issued instruction
STALL_REASONS = ("barrier", "long_scoreboard", "math_pipe_throttle", "mio_throttle", "not_selected", "selected",
                 "short_scoreboard", "wait", "lg_throttle", "dispatch_stall", "gmma")
#: the kernel a profile_once run launches for its matmul, as ncu names it
MATMUL_KERNELS = {"fused_mma_tiled": "nvfp4_fused_mma_kernel", "fused_wgmma_tiled": "nvfp4_fused_wgmma_kernel"}


def profiled_launches(text: str) -> list[dict]:
    """Each launch of an ncu text report: the kernel's name, its metrics by name (numbers)."""
    launches: list[dict] = []
    for line in text.splitlines():
        head = re.match(r"^  (?:void )?(?:[\w:<>]*::)?(?:<unnamed>::)?(nvfp4_\w+)", line)
        if head and "Context" in line:
            launches.append({"kernel": head.group(1), "metrics": {}})
            continue
        metric = re.match(r"^\s{4}(\S.*?)\s{2,}\S*\s+([\d.,]+)$", line)
        if metric and launches:
            launches[-1]["metrics"][metric.group(1).strip()] = float(metric.group(2).replace(",", ""))
    return launches


def test_the_committed_stall_profile_is_of_the_small_m_runs_with_every_reason() -> None:
    """The profile NOTES cites for what holds M = 1, 16 and 64 must be of the launches
    SMALL_M_RUNS names, in order (a finalize after each split fused_mma launch above M = 1, the
    activation permutation before fused_wgmma), each with its duration, issue statistics and
    every stall reason; and it says where and from what code it was taken."""
    if not PROFILE.is_file():
        pytest.skip(f"{PROFILE.name} is not committed yet: run bash scripts/gpu_session.sh stalls on the GPU")
    launches = profiled_launches(PROFILE.read_text())
    matmuls = [launch for launch in launches if launch["kernel"] in MATMUL_KERNELS.values()]
    assert [launch["kernel"] for launch in matmuls] == [MATMUL_KERNELS[kernel] for kernel, *_ in
                                                       profile_once.SMALL_M_RUNS]
    names = [launch["kernel"] for launch in launches]
    for i, name in enumerate(names):
        if name == "nvfp4_fused_wgmma_kernel":
            assert names[i - 1] == "nvfp4_wgmma_permute_act_kernel", names
        if name == "nvfp4_splitk_finalize_kernel":
            assert names[i - 1] in MATMUL_KERNELS.values(), names
    for launch, (kernel, m, n, k) in zip(matmuls, profile_once.SMALL_M_RUNS, strict=True):
        metrics = launch["metrics"]
        for reason in STALL_REASONS:
            name = f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio"
            assert name in metrics, (kernel, m, n, k, reason)
        for name in ("Duration", "Issue Slots Busy", "DRAM Throughput", "Eligible Warps Per Scheduler",
                     "Warp Cycles Per Issued Instruction", "Registers Per Thread"):
            assert name in metrics, (kernel, m, n, k, name)
        # the cycles a warp waits per issued instruction are the sum of the reasons ncu splits them into
        total = sum(v for key, v in metrics.items() if key.startswith("smsp__average_warps_issue_stalled_"))
        assert total == pytest.approx(metrics["Warp Cycles Per Issued Instruction"], rel=0.05), (kernel, m, n, k)
    provenance = json.loads(PROFILE.with_suffix(".provenance.json").read_text())
    assert {"gpu", "driver", "cuda_runtime", "torch", "date", "command", "git_commit"} <= set(provenance)
    assert "profile_once --small-m" in provenance["command"]
