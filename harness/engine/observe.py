"""Observed recording: a library you cannot edit runs under the CUDA profiler, and the kernel
names it launched say which path it took.

:func:`observe` runs a callable once under ``torch.profiler`` (CUDA activity), maps the
launched kernel names to a path through the model's kernel patterns
(:meth:`~nvfp4_harness.model.DispatchModel.classify`), asks the model which path it predicts
for the problem, and announces an ``observed`` event. A disagreement (or launches no pattern
explains) is a *finding*: the declared model of that library is wrong, or the library changed;
coverage reports list it and the pytest plugin fails the run on it, like a missed requirement.

:func:`observed_event` does the same from a recorded list of kernel names, with no GPU: that
is how CPU CI tests a model's mapping and the disagreement reports.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from nvfp4_harness.model import (
    DeviceCaps,
    DispatchError,
    DispatchEvent,
    DispatchModel,
    add_listener,
    announce,
    remove_listener,
)


def observed_event(model: DispatchModel, kernel_names: Iterable[str], problem: Any, *,
                   device: DeviceCaps | None = None, op: str | None = None, policy: Any = None) -> DispatchEvent:
    """The event of a call that launched ``kernel_names``: the path they show, the guards
    evaluated from the model, the model's prediction, and a finding when the two differ."""
    device = device or DeviceCaps.cpu()
    names = tuple(kernel_names)
    found = model.classify(names, op=op)
    outcomes = model.evaluate(problem, device, policy, op)
    try:
        predicted: str | None = model.select(problem, device, policy, op=op).path
    except DispatchError:
        predicted = None
    finding = None
    if found.path is None:
        if found.candidates:
            finding = f"the launched kernels match several paths equally ({', '.join(found.candidates)})"
        else:
            shown = ", ".join(names[:6]) + (" ..." if len(names) > 6 else "") if names else "no kernel"
            finding = f"no declared path matches the launched kernels [{shown}]"
        if predicted is not None:
            finding += f"; the model predicts {predicted!r}"
    elif predicted != found.path:
        finding = f"the model predicts {predicted!r}, the launched kernels show {found.path!r}"
    return DispatchEvent(model.name, found.path, outcomes, problem, device, op, policy, False, "cuda", (), False,
                         "observed", predicted, names, found.unmatched, finding, model=model)


@dataclass
class Observation:
    """One observed call: its event, the launched kernel names, the callable's result, and the
    events the callable announced itself (an instrumented operator observed as a black box)."""

    event: DispatchEvent
    launched: list[str]
    result: Any = None
    instrumented: list[DispatchEvent] = field(default_factory=list)

    def agreement(self) -> list[str]:
        """Differences between the observed path and the instrumented events of the same call
        (empty when they agree call for call)."""
        own = [e for e in self.instrumented if not e.shortcut and e.operator == self.event.operator]
        if len(own) != 1:
            return [f"expected one instrumented event of {self.event.operator} in the call, got {len(own)}"]
        if own[0].path != self.event.path:
            return [f"instrumented path {own[0].path!r}, observed path {self.event.path!r} "
                    f"(kernels: {', '.join(self.launched)})"]
        return []


def launched_kernels(fn: Callable[[], Any]) -> tuple[Any, list[str]]:
    """Run ``fn`` once under the torch profiler; its result and the CUDA kernel names, in order."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        result = fn()
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type.name == "CUDA"]
    return result, names


def torch_device_caps(index: int | None = None) -> DeviceCaps:
    """The current (or ``index``) CUDA device as the guards see it."""
    import torch

    index = torch.cuda.current_device() if index is None else index
    major, minor = torch.cuda.get_device_capability(index)
    return DeviceCaps(torch.cuda.get_device_name(index), (major, minor), index=index)


def observe(model: DispatchModel, fn: Callable[[], Any], problem: Any, *, device: DeviceCaps | None = None,
            op: str | None = None, policy: Any = None, publish: bool = True) -> Observation:
    """Run ``fn`` once under the profiler and record which of ``model``'s paths it took.

    ``publish=False`` keeps the observed event off the bus (to compare it with the events an
    instrumented operator announces itself without counting the call twice).
    """
    instrumented: list[DispatchEvent] = []
    listener = add_listener(instrumented.append)
    try:
        result, names = launched_kernels(fn)
    finally:
        remove_listener(listener)
    event = observed_event(model, names, problem, device=device or torch_device_caps(), op=op, policy=policy)
    if publish:
        announce(event)
    return Observation(event, names, result, instrumented)


def observe_names(model: DispatchModel, calls: Sequence[tuple[Any, Iterable[str]]], *,
                  device: DeviceCaps | None = None, op: str | None = None, policy: Any = None) -> list[DispatchEvent]:
    """Announce an observed event for each ``(problem, kernel names)`` pair: replaying a
    recorded trace (for example one captured on a GPU) without the GPU."""
    events = []
    for problem, names in calls:
        event = observed_event(model, names, problem, device=device, op=op, policy=policy)
        announce(event)
        events.append(event)
    return events
