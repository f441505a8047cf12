"""What one call did: :class:`DispatchEvent`, built by the instrumented and observed recorders."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nvfp4_harness.model.declare import GuardOutcome, Selection
from nvfp4_harness.model.devices import DeviceCaps


@dataclass(slots=True, eq=False)
class DispatchEvent:
    """One call of one operator: the path it took, every guard's outcome, the problem.

    ``mode`` says who decided ``path``: the operator's own dispatcher (``instrumented``), the
    profiler's kernel names (``observed``) or a test building events by hand (``simulated``).
    ``predicted`` is the path the declared model chooses for the problem; when it differs
    from ``path`` (or the observation matched no path, ``path`` None) the event carries a
    ``finding``: the declared model is wrong or the library changed. ``reason`` is built only
    when read. Treat events as read-only.
    """

    operator: str
    path: str | None
    outcomes: tuple[GuardOutcome, ...]
    problem: Any
    device: DeviceCaps
    op: str | None = None
    policy: Any = None
    forced: bool = False
    backend: str | None = None
    #: kernels (or reference functions) the path runs, as the operator declares them
    kernels: tuple[str, ...] = ()
    #: an outcome that launches nothing (``model.shortcuts``): not path coverage
    shortcut: bool = False
    mode: str = "instrumented"
    predicted: str | None = None
    #: kernel names the profiler saw (observed mode)
    launched: tuple[str, ...] = ()
    #: launched names that no pattern of the model claims
    unmatched: tuple[str, ...] = ()
    finding: str | None = None
    #: the model that declared the operator (None for events read back from JSON)
    model: Any = dataclasses.field(default=None, repr=False)
    #: the explanation stored in a JSON event (used when there is no model to explain with)
    stored_reason: str | None = dataclasses.field(default=None, repr=False)

    @property
    def reason(self) -> str:
        """Why the call took its path, in words (from the model's guards and details)."""
        if self.shortcut:
            described = self.model.shortcuts.get(self.path, "") if self.model is not None else ""
            return described or self.stored_reason or f"shortcut {self.path}"
        if self.model is None or self.path is None:
            return self.stored_reason or self.finding or ""
        try:
            return self.model.explain(Selection(self.path, self.forced, self.outcomes), self.problem,
                                      self.device, self.policy)
        except Exception as exc:  # noqa: BLE001 - an explanation must never break a report
            return f"(no explanation: {type(exc).__name__}: {exc})"

    def passed(self, path: str, guard: str) -> bool | None:
        """The outcome of ``path.guard`` in this call (None when it was not evaluated)."""
        for o in self.outcomes:
            if o.path == path and o.guard == guard:
                return o.passed
        return None

    def problem_dict(self) -> dict[str, Any]:
        """The problem as plain data (dataclass fields, a mapping's items, or its repr)."""
        return problem_to_dict(self.problem)

    def to_dict(self) -> dict[str, Any]:
        return {
            "operator": self.operator, "op": self.op, "path": self.path, "forced": self.forced,
            "guards": [{"path": o.path, "guard": o.guard, "passed": o.passed} for o in self.outcomes],
            "problem": self.problem_dict(),
            "device": {"name": self.device.name, "compute_capability":
                       list(self.device.compute_capability) if self.device.compute_capability else None,
                       "index": self.device.index, "simulated": self.device.simulated},
            "backend": self.backend, "kernels": list(self.kernels), "shortcut": self.shortcut,
            "mode": self.mode, "predicted": self.predicted, "launched": list(self.launched),
            "unmatched": list(self.unmatched), "finding": self.finding, "reason": self.reason,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DispatchEvent:
        dev = data.get("device") or {"name": "cpu"}
        cc = dev.get("compute_capability")
        device = DeviceCaps(dev["name"], tuple(cc) if cc else None, bool(dev.get("simulated", False)),
                            dev.get("index"))
        return cls(operator=data["operator"], path=data.get("path"),
                   outcomes=tuple(GuardOutcome(g["path"], g["guard"], bool(g["passed"])) for g in data["guards"]),
                   problem=dict(data.get("problem") or {}), device=device, op=data.get("op"),
                   forced=bool(data.get("forced", False)), backend=data.get("backend"),
                   kernels=tuple(data.get("kernels", ())), shortcut=bool(data.get("shortcut", False)),
                   mode=data.get("mode", "instrumented"), predicted=data.get("predicted"),
                   launched=tuple(data.get("launched", ())), unmatched=tuple(data.get("unmatched", ())),
                   finding=data.get("finding"), stored_reason=data.get("reason"))


def problem_to_dict(problem: Any) -> dict[str, Any]:
    """A problem as plain data, for JSON and messages."""
    if dataclasses.is_dataclass(problem) and not isinstance(problem, type):
        return {f.name: getattr(problem, f.name) for f in dataclasses.fields(problem)}
    if isinstance(problem, Mapping):
        return dict(problem)
    to_dict = getattr(problem, "to_dict", None)
    if callable(to_dict):
        return dict(to_dict())
    return {"repr": repr(problem)}
