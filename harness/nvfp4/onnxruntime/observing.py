"""One call of ONNX Runtime's op, observed: which path its kernels show, what the model predicted.

Built on the engine's observed recorder (:func:`nvfp4_harness.engine.observe.observe` and
:func:`~nvfp4_harness.engine.observe.observed_event`), adding one thing the generic recorder
cannot know: the op's launch-free outcomes. ``ComputeImpl`` returns before any path for an
empty output (shortcut ``empty``) and answers K == 0 with a memset and an optional bias add
(shortcut ``bias_only``). A call the model expects to take a shortcut, and whose kernels match
no path, is announced as that shortcut (mode ``observed``); one whose kernels do show a path is
a finding, like any disagreement between the model and what ran.

:func:`event_for` needs no GPU: it is how CPU CI replays the kernel names a GPU run recorded.
:func:`coverage_of` and :func:`verdict_of` build the coverage data of a suite and its
``all-reachable`` verdict, the same way for the live run and for a replay of its records.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

from nvfp4_harness.engine.data import CoverageData
from nvfp4_harness.engine.observe import Observation, observe, observed_event
from nvfp4_harness.model import DeviceCaps, DispatchEvent, announce
from nvfp4_harness.nvfp4.onnxruntime.model import DEFAULT_POLICY, MODEL, OrtPolicy, OrtProblem, expected_shortcut


def event_for(kernel_names: Iterable[str], problem: OrtProblem, *, device: DeviceCaps | None = None,
              policy: OrtPolicy | None = None) -> DispatchEvent:
    """The observed event of a call of ``problem`` that launched ``kernel_names``."""
    names = tuple(kernel_names)
    policy = policy or DEFAULT_POLICY
    device = device or DeviceCaps.cpu()
    event = observed_event(MODEL, names, problem, device=device, policy=policy)
    shortcut = expected_shortcut(problem)
    if shortcut is None:
        return event
    found = MODEL.classify(names)
    if found.path is None and not found.candidates:
        return DispatchEvent(MODEL.name, shortcut, (), problem, device, None, policy, False, "cuda", (), True,
                             "observed", shortcut, names, found.unmatched, None, model=MODEL)
    shown = found.path or f"several paths ({', '.join(found.candidates)})"
    return dataclasses.replace(event, predicted=shortcut,
                               finding=f"the model predicts the shortcut {shortcut!r}, the launched kernels show "
                                       f"{shown!r}")


def observe_call(fn: Callable[[], Any], problem: OrtProblem, *, device: DeviceCaps | None = None,
                 policy: OrtPolicy | None = None, publish: bool = True) -> Observation:
    """Run ``fn`` (one call of the op) once under the profiler; announce its event unless
    ``publish`` is False. The observation's ``result`` is ``fn``'s return value."""
    raw = observe(MODEL, fn, problem, device=device, policy=policy or DEFAULT_POLICY, publish=False)
    event = event_for(raw.launched, problem, device=raw.event.device, policy=policy)
    if publish:
        announce(event)
    return Observation(event, raw.launched, raw.result, raw.instrumented)


def describe(event: DispatchEvent) -> dict[str, Any]:
    """An event as the JSON results keep it (what CPU CI replays)."""
    return {"path": event.path, "shortcut": event.shortcut, "predicted": event.predicted, "finding": event.finding,
            "kernels": list(event.launched), "unmatched": list(event.unmatched), "reason": event.reason,
            "device": event.device.label}


#: what each suite's coverage data says it is (its run label)
SUITE_LABELS = {
    "full": "full suite: the forcing matrix as ONNX Runtime accepts it, and its edge cases",
    "decode": "decode-only suite: 1 <= M <= 8, block 16, K % 32 == 0",
}


def coverage_of(events: Iterable[tuple[DispatchEvent, str | None]], label: str) -> CoverageData:
    """Coverage data of the model from (event, test) pairs, labelled as a run of the command."""
    data = CoverageData()
    data.declare(MODEL)
    for event, test in events:
        data.add(event, test)
    data.runs = [{"label": f"python -m nvfp4_harness onnxruntime: {label}", "events": data.events}]
    return data


def verdict_of(data: CoverageData) -> dict[str, Any]:
    """The ``all-reachable`` requirement's verdict on ``data``."""
    from nvfp4_harness.engine.analysis import Requirement

    failures = data.analyze().failures(Requirement.parse(["all-reachable"]))
    return {"require": "all-reachable", "passed": not failures, "failures": failures}


def suite_test(record: dict[str, Any]) -> str:
    """The test id a suite call is attributed to (``full::ID`` or ``decode::ID``)."""
    return f"{'decode' if record.get('origin') == 'decode' else 'full'}::{record['id']}"
