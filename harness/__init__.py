"""nvfp4-harness: dispatch-path coverage, bit-exact verification and kernel benchmarks.

Three layers, one folder each (``harness/`` installs as ``nvfp4_harness``):

* :mod:`nvfp4_harness.model`: the dispatch-model API. How any operator declares its paths and
  guards and announces (or is observed) taking one. No numpy, no torch.
* :mod:`nvfp4_harness.engine`: the generic engine over it: recorder, observation through the
  profiler, coverage data, reports, combine, the pytest plugin.
* :mod:`nvfp4_harness.nvfp4`: the NVFP4 verification and measurement built on both.

The names below are imported on first use, so ``import nvfp4_harness`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "recording": "nvfp4_harness.engine.recorder",
    "Recorder": "nvfp4_harness.engine.recorder",
    "Recorded": "nvfp4_harness.engine.recorder",
    "CoverageData": "nvfp4_harness.engine.data",
    "Requirement": "nvfp4_harness.engine.analysis",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'nvfp4_harness' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
