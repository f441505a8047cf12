"""One pytest-xdist worker per GPU (entry point ``pytest11: nvfp4_gpu_workers``).

Without it, ``pytest -n 8`` on a machine with several GPUs runs every worker on GPU 0 while the
others idle. Under xdist each worker now pins itself to one visible GPU before any CUDA work, by
narrowing ``CUDA_VISIBLE_DEVICES`` to it in its own process during ``pytest_configure`` (before
test modules are imported, so before torch creates a CUDA context). Workers take the GPUs round
robin (worker ``gwN`` takes GPU ``N mod count``); ``--worker-gpus=2,3`` takes that list round
robin instead, ``--worker-gpus=none`` turns pinning off. A run without xdist, or with at most
one visible GPU, is left exactly as it was.

Events name a GPU by the index it has on the host
(:func:`nvfp4_harness.model.physical_gpu_index`), so the workers' GPUs stay apart in the
reports although each worker sees its own as GPU 0.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

_WORKER = re.compile(r"^gw(\d+)$")


def worker_index(worker_id: str) -> int | None:
    """``gw3`` -> 3; None for a name that is not an xdist worker id."""
    found = _WORKER.match(worker_id or "")
    return int(found.group(1)) if found else None


def visible_gpus(environ: dict[str, str] | None = None, smi: str | None = None) -> list[str]:
    """The GPUs this process may use, as ``CUDA_VISIBLE_DEVICES`` entries.

    ``CUDA_VISIBLE_DEVICES`` when it is set (an empty value means none); otherwise the GPUs
    ``nvidia-smi -L`` lists (``smi`` is its output, for tests); none when there is no
    nvidia-smi. Nothing here initialises CUDA.
    """
    environ = os.environ if environ is None else environ
    if "CUDA_VISIBLE_DEVICES" in environ:
        return [g.strip() for g in environ["CUDA_VISIBLE_DEVICES"].split(",") if g.strip()]
    if smi is None:
        tool = shutil.which("nvidia-smi")
        if tool is None:
            return []
        try:
            smi = subprocess.run([tool, "-L"], capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.SubprocessError):
            return []
    return re.findall(r"^GPU (\d+):", smi, re.M)


def parse_mapping(text: str) -> list[str] | None:
    """``round-robin`` -> [] (all visible GPUs), ``none`` -> None, ``2,3`` -> ["2", "3"]."""
    text = text.strip()
    if text == "round-robin":
        return []
    if text == "none":
        return None
    gpus = [g.strip() for g in text.split(",") if g.strip()]
    if not gpus:
        raise ValueError(f"--worker-gpus takes round-robin, none or a comma-separated list of GPUs, got {text!r}")
    return gpus


def assign(worker: int, gpus: list[str], mapping: list[str] | None) -> str | None:
    """The GPU worker ``worker`` keeps, or None to leave the worker as it is (pinning off, or
    at most one GPU to choose from)."""
    if mapping is None:
        return None
    choices = mapping or gpus
    if len(choices) <= 1 and not mapping:
        return None
    return choices[worker % len(choices)]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dispatch")
    group.addoption("--worker-gpus", default="round-robin", metavar="round-robin|none|I,J,...",
                    help="under pytest-xdist, pin each worker to one GPU: round-robin over the visible GPUs "
                         "(default), over the listed ones, or none")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None:
        return
    try:
        mapping = parse_mapping(config.getoption("worker_gpus"))
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from exc
    worker = worker_index(workerinput.get("workerid", ""))
    if worker is None:
        return
    gpu = assign(worker, visible_gpus(), mapping)
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
