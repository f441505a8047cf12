"""Kernel observation: which CUDA kernels a dispatch really launched, per the profiler.

A dispatch event says which path the dispatcher chose; the profiler says which kernels ran.
:func:`observe_call` runs one call under both and :func:`check_observation` compares them:
every kernel fragment the path declares (``nvfp4_kernels.paths.PATHS[path].cuda_kernels``) must be
among the launched kernel names, and no fragment of another path may be.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import nvfp4_kernels
from nvfp4_kernels.paths import PATHS


@dataclass
class Observation:
    """One call: the dispatch events it announced and the CUDA kernels the profiler saw."""

    events: list[nvfp4_kernels.DispatchEvent] = field(default_factory=list)
    launched: list[str] = field(default_factory=list)
    result: Any = None


def observe_call(fn: Callable[[], Any]) -> Observation:
    """Run ``fn`` once with a dispatch listener and the torch profiler (CUDA activity)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    observation = Observation()
    nvfp4_kernels.add_listener(observation.events.append)
    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            observation.result = fn()
            torch.cuda.synchronize()
    finally:
        nvfp4_kernels.remove_listener(observation.events.append)
    observation.launched = [e.name for e in prof.events() if e.device_type.name == "CUDA"]
    return observation


def check_observation(observation: Observation) -> list[str]:
    """Mismatches between recorded paths and launched kernels (empty when they agree)."""
    problems = []
    launched = " | ".join(observation.launched)
    for event in observation.events:
        if event.shortcut or event.backend != "cuda":
            continue
        for fragment in PATHS[event.path].cuda_kernels:
            if fragment not in launched:
                problems.append(f"{event.path}: expected a kernel named like {fragment!r}, "
                                f"profiler saw [{launched}]")
        for other, spec in PATHS.items():
            if other == event.path:
                continue
            for fragment in spec.cuda_kernels:
                if fragment in launched and fragment not in PATHS[event.path].cuda_kernels:
                    problems.append(f"{event.path}: kernel {fragment!r} of path {other!r} also ran")
    if not [e for e in observation.events if not e.shortcut]:
        problems.append("no dispatch event was recorded for the call")
    return problems
