"""Instrumented recording: an operator's own dispatcher says which path a call took.

One call per operator call::

    from nvfp4_harness.model import record

    def matmul(a, b):
        problem = {"m": a.shape[0], "k": a.shape[1]}
        path = "small_m" if problem["m"] <= 4 else "generic"
        result = KERNELS[path](a, b)
        record(MODEL, path, problem)       # the harness evaluates the guards from MODEL
        return result

or the :func:`instrument` decorator on each path's implementation. When nothing listens (no
recorder, no pytest plugin active) ``record`` returns at once. It never raises into the
operator's call: a mistake in the instrumentation (a path the model does not declare, a guard
that raises) is kept like a listener failure and fails the test run at its end.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from nvfp4_harness.model import bus
from nvfp4_harness.model.declare import DispatchModel, Selection
from nvfp4_harness.model.devices import DeviceCaps
from nvfp4_harness.model.errors import DispatchError, InvalidArgument
from nvfp4_harness.model.events import DispatchEvent

CPU = DeviceCaps.cpu()
_F = TypeVar("_F", bound=Callable[..., Any])


def build_event(model: DispatchModel, path: str, problem: Any, *, device: DeviceCaps | None = None,
                op: str | None = None, policy: Any = None, forced: bool = False, backend: str | None = None,
                kernels: tuple[str, ...] = (), mode: str = "instrumented",
                selection: Selection | None = None) -> DispatchEvent:
    """The event of a call that took ``path``, with guard outcomes evaluated from ``model``.

    ``selection``: the model's own selection when the caller already has it (the dispatcher
    that chose the path through ``model.select``), so nothing is evaluated twice.
    """
    device = device or CPU
    model.path(path)  # an undeclared path is a mistake in the instrumentation
    finding = None
    if selection is None:
        try:
            selection = model.select(problem, device, policy, op=op)
        except DispatchError as exc:
            return DispatchEvent(model.name, path, model.evaluate(problem, device, policy, op), problem, device,
                                 op, policy, forced, backend, kernels, False, mode, None, finding=str(exc),
                                 model=model)
    predicted = selection.path if not selection.forced else None
    if forced:
        failed = [o.guard for o in selection.outcomes if o.path == path and not o.passed]
        if failed:
            finding = f"forced path {path!r} taken although its guards {failed} are false"
    elif predicted != path:
        finding = f"the model predicts {predicted!r}, the call took {path!r}"
    return DispatchEvent(model.name, path, selection.outcomes, problem, device, op, policy, forced or selection.forced,
                         backend, kernels, False, mode, predicted, finding=finding, model=model)


def record(model: DispatchModel, path: str, problem: Any, *, device: DeviceCaps | None = None,
           op: str | None = None, policy: Any = None, forced: bool = False, backend: str | None = None,
           kernels: tuple[str, ...] = ()) -> DispatchEvent | None:
    """Announce that a call of ``model``'s operator took ``path`` for ``problem``.

    ``device`` defaults to the CPU; ``forced`` marks a path chosen by an A/B override rather
    than by the guards. Returns the event (None when nothing listens or the event could not
    be built; the failure is then kept, see :mod:`nvfp4_harness.model.bus`).
    """
    if not bus.listening():
        return None
    try:
        event = build_event(model, path, problem, device=device, op=op, policy=policy, forced=forced,
                            backend=backend, kernels=tuple(kernels))
    except Exception as exc:  # noqa: BLE001 - instrumentation never breaks the operator call
        bus.report_failure(f"nvfp4_harness.model.record({model.name!r}, {path!r})", problem, exc)
        return None
    bus.announce(event)
    return event


def record_shortcut(model: DispatchModel, name: str, problem: Any, *, device: DeviceCaps | None = None,
                    op: str | None = None, backend: str | None = None) -> DispatchEvent | None:
    """Announce a launch-free outcome declared in ``model.shortcuts`` (an empty output)."""
    if not bus.listening():
        return None
    if name not in model.shortcuts:
        bus.report_failure(f"nvfp4_harness.model.record_shortcut({model.name!r}, {name!r})", problem,
                           InvalidArgument(f"model {model.name!r} declares no shortcut {name!r}; declared: "
                                           f"{sorted(model.shortcuts)}"))
        return None
    event = DispatchEvent(model.name, name, (), problem, device or CPU, op, None, False, backend, (), True,
                          model=model)
    bus.announce(event)
    return event


def instrument(model: DispatchModel, path: str, problem: Callable[..., Any], *,
               device: Callable[..., DeviceCaps] | None = None, op: str | None = None) -> Callable[[_F], _F]:
    """Decorate one path's implementation: after each call, record that it took ``path``.

    ``problem(*args, **kwargs)`` builds the problem from the call's arguments (and
    ``device(*args, **kwargs)`` its device, CPU by default)::

        @instrument(MODEL, "small_m", problem=lambda a, b: {"m": a.shape[0], "k": a.shape[1]})
        def small_m_matmul(a, b): ...
    """
    model.path(path)  # fail at import time on a typo, not at the first call

    def decorate(fn: _F) -> _F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            result = fn(*args, **kwargs)
            if bus.listening():
                try:
                    prob = problem(*args, **kwargs)
                    dev = device(*args, **kwargs) if device is not None else None
                except Exception as exc:  # noqa: BLE001
                    bus.report_failure(f"the problem function of {model.name}:{path}", None, exc)
                    return result
                record(model, path, prob, device=dev, op=op)
            return result

        return wrapper  # type: ignore[return-value]

    return decorate


def simulate(model: DispatchModel, problem: Any, device: DeviceCaps | None = None, policy: Any = None,
             op: str | None = None, force: str | None = None) -> DispatchEvent:
    """The event a call would announce on ``device``, from the model's own selection, without
    running anything: coverage data for devices that are not here, and report tests."""
    device = device or CPU
    selection = model.select(problem, device, policy, op=op, force=force)
    return DispatchEvent(model.name, selection.path, selection.outcomes, problem, device, op, policy,
                         selection.forced, None, (), False, "simulated", selection.path, model=model)
