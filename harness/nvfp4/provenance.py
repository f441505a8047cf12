"""Provenance of results captured on a GPU: which machine, driver, toolkit and code made them."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def _run(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30, cwd=REPO).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def cublas_version() -> str:
    """cuBLAS version of the library torch loaded (e.g. '13.0.2'), or '' if unknown."""
    try:
        import ctypes

        import torch

        torch.zeros(1, device="cuda") @ torch.zeros(1, device="cuda")  # makes torch load cuBLAS
        for name in ("libcublas.so.13", "libcublas.so.12", "libcublas.so"):
            try:
                lib = ctypes.CDLL(name)
            except OSError:
                continue
            version = ctypes.c_int()
            if lib.cublasGetVersion_v2(None, ctypes.byref(version)) == 0:
                v = version.value
                return f"{v // 10000}.{(v % 10000) // 100}.{v % 100}"
    except Exception:  # noqa: BLE001 - provenance must never break a run
        return ""
    return ""


def gpu_provenance(command: list[str] | None = None) -> dict[str, Any]:
    """GPU, driver, CUDA, cuBLAS, torch, nvcc, date, command and git commit of this run."""
    import torch

    smi = _run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"])
    name, _, driver = smi.partition(", ")
    props = torch.cuda.get_device_properties(0)
    nvcc = _run(["nvcc", "--version"]).splitlines()
    return {
        "gpu": name or torch.cuda.get_device_name(0),
        "compute_capability": f"{props.major}.{props.minor}",
        "multiprocessors": props.multi_processor_count,
        "driver": driver,
        "cuda_runtime": torch.version.cuda,
        "cublas": cublas_version(),
        "torch": torch.__version__,
        "nvcc": nvcc[-1] if nvcc else "",
        "python": platform.python_version(),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join(command if command is not None else [Path(sys.executable).name] + sys.argv),
        # the device machine gets a copy of the tree without .git: the caller passes the commit
        "git_commit": os.environ.get("NVFP4_GIT_COMMIT") or _run(["git", "rev-parse", "HEAD"]) or "unknown",
    }
