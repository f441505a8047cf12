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
