"""The event bus: listeners receive every :class:`DispatchEvent`; a failing one never breaks
the operator call that announced it.

A listener that raises is kept registered (one bad event should not end a recording); its
failure, with the traceback, is collected here and warned about once. The pytest plugin fails
the run at the end when any was collected; scripts read :func:`listener_failures`.
"""

from __future__ import annotations

import threading
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Listener = Callable[[Any], None]

#: how many failures are kept with their traceback (later ones are only counted)
KEPT_FAILURES = 20

_lock = threading.Lock()
#: copy-on-write: announcing reads it without taking the lock
_listeners: tuple[Listener, ...] = ()
_failures: list[ListenerFailure] = []
_failure_count = 0
_warned: set[str] = set()


@dataclass(frozen=True)
class ListenerFailure:
    """A listener (or the instrumentation building an event) raised."""

    where: str
    event: str
    traceback: str

    def __str__(self) -> str:
        return f"{self.where} raised while handling {self.event}:\n{self.traceback}"


def add_listener(listener: Listener) -> Listener:
    """Register a callable that receives every event; returns it."""
    global _listeners
    with _lock:
        _listeners = _listeners + (listener,)
    return listener


def remove_listener(listener: Listener) -> None:
    """Unregister a listener (no error when it is not registered)."""
    global _listeners
    with _lock:
        _listeners = tuple(x for x in _listeners if x is not listener and x != listener)


def listening() -> bool:
    """True when some listener is registered: instrumentation skips building events otherwise."""
    return bool(_listeners)


def announce(event: Any) -> None:
    """Hand ``event`` to every listener; a listener that raises is recorded, not propagated."""
    for listener in _listeners:
        try:
            listener(event)
        except Exception as exc:  # noqa: BLE001 - nothing may escape into the operator's call
            report_failure(_name(listener), event, exc)


def report_failure(where: str, event: Any, exc: BaseException) -> None:
    """Record a failure of a listener or of the instrumentation (with its traceback)."""
    global _failure_count
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    summary = _describe(event)
    with _lock:
        _failure_count += 1
        if len(_failures) < KEPT_FAILURES:
            _failures.append(ListenerFailure(where, summary, text))
        first = where not in _warned
        _warned.add(where)
    if first:
        warnings.warn(f"{where} raised {type(exc).__name__}: {exc} while handling {summary}; the operator "
                      f"call went on, and the failure is kept (nvfp4_harness.model.listener_failures(); "
                      f"a pytest run fails at its end)", RuntimeWarning, stacklevel=3)


def listener_failures() -> list[ListenerFailure]:
    """The failures kept so far (at most :data:`KEPT_FAILURES`)."""
    with _lock:
        return list(_failures)


def failure_count() -> int:
    """How many failures happened, kept or not."""
    return _failure_count


def clear_listener_failures() -> None:
    global _failure_count
    with _lock:
        _failures.clear()
        _warned.clear()
        _failure_count = 0


def _name(listener: Any) -> str:
    name = getattr(listener, "__qualname__", None) or type(listener).__qualname__
    module = getattr(listener, "__module__", None) or type(listener).__module__
    return f"dispatch listener {module}.{name}"


def _describe(event: Any) -> str:
    operator = getattr(event, "operator", None)
    path = getattr(event, "path", None)
    return f"an event of {operator}:{path}" if operator else repr(event)[:200]
