"""The documents and configuration say what the code does: the real-output blocks are a fresh
run's, tox's GPU environment writes the committed GPU coverage file, report files are ignored
by git, `-n 2` runs print no benchmark warning, and the set-up text matches the pin."""

from __future__ import annotations

import configparser
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_real_output_blocks_are_a_fresh_runs():
    done = subprocess.run([sys.executable, "scripts/refresh_real_output.py", "--check"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr


def test_tox_gpu_environment_writes_the_committed_gpu_coverage_file():
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / "tox.ini")
    written = re.findall(r"json:\{toxinidir\}/(\S+)", tox["testenv:gpu"]["commands"])
    assert written == ["fixtures/gpu/coverage-gpu.json"]
    assert (ROOT / written[0]).is_file()


@pytest.mark.parametrize("name", ["dispatch-coverage.json", "dispatch-coverage.lcov", "out/cov.json.lock"])
def test_report_files_are_ignored_by_git(name):
    done = subprocess.run(["git", "check-ignore", "-q", name], cwd=ROOT)
    if done.returncode == 128:
        pytest.skip("not a git checkout")
    assert done.returncode == 0, f"{name} is not ignored"


@pytest.mark.slow
def test_an_xdist_run_prints_no_benchmark_warning():
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_XDIST_WORKER"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "-q", "-p", "no:cacheprovider",
                           "suites/test_bench_cpu.py"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-2000:]
    assert "PytestBenchmarkWarning" not in done.stdout + done.stderr


def test_the_set_up_text_matches_the_pin():
    pins = [line for line in (ROOT / ".ci" / "constraints-cpu.txt").read_text().splitlines()
            if line and not line.startswith("#")]
    assert len(pins) == 1 and pins[0].startswith("torch==")
    version = pins[0].split("==")[1]
    readme = (ROOT / "README.md").read_text()
    assert f"pins `torch=={version}`" in readme and f"`{version}+cpu`" in readme
    assert "only pins the small CPU build" not in readme, "the pin does not choose the build on every machine"


#: the README's decode-only example: four decode-sized cases on small layers (M, K), block 16
README_DECODE_ONLY = [(1, 32), (4, 64), (8, 32), (2, 96)]


def test_the_readmes_decode_only_report_is_todays_output():
    """The README's term-missing example is real output that no script rewrites: every nvfp4
    path it names must point at the line kernels/model.py declares that path on today, and its
    TOTAL line must be what a run of its four cases records now (recounted here from simulated
    events of the same calls). A guard added to the model moves both."""
    from nvfp4_harness.engine.data import CoverageData
    from nvfp4_harness.nvfp4.shapes import simulated_event
    from nvfp4_kernels.model import MODEL

    text = (ROOT / "README.md").read_text()
    start = text.index("Dispatch path coverage, missing only, devices: cpu (4 events)")
    block = text[start:text.index("```", start)]
    named = re.findall(r"nvfp4:(\w+)\b[^\n]*?kernels/model\.py:(\d+)", block)
    assert len(named) >= 6, block
    for path, line in named:
        assert int(line) == MODEL.path(path).source.line, f"the README points nvfp4:{path} at line {line}"
    analysis = CoverageData.from_events(
        [(simulated_event(m, k, 16, dtype="float16"), f"t{i}") for i, (m, k) in enumerate(README_DECODE_ONLY)]
    ).analyze()
    op = analysis.operator("nvfp4")
    paths = sum(1 for p in op.paths if p.reachable and p.hits)
    reachable_paths = sum(1 for p in op.paths if p.reachable)
    sides = sum(1 for s in op.sides if s.required and s.count)
    reachable_sides = sum(1 for s in op.sides if s.required)
    total = (f"TOTAL nvfp4: {paths}/{reachable_paths} reachable paths taken, {sides}/{reachable_sides} reachable "
             f"guard sides seen: {analysis.covered}/{analysis.total} = {100 * analysis.covered / analysis.total:.1f}%")
    assert total in block, f"the README's TOTAL line should read: {total}"
