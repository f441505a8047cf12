"""Dispatch path coverage: what a run reached, what it could have reached, what it missed.

This is the engine under the pytest plugin, the report formats and ``python -m nvfp4_harness combine``.
It knows nothing of pytest or of output formats, so a CPU CI job, a GPU job and a script using
:func:`harness.recording` all produce the same :class:`CoverageData`, which can be written to
JSON, read back and combined with data from other machines.

Two layers:

* :class:`CoverageData` holds counts only (additive, so combining runs is a sum): per path its
  hits and the tests that hit it; per guard side (``True`` / ``False``) how often it was seen and
  a few example tests; launch-free shortcut outcomes; the devices the events ran on.
* :meth:`CoverageData.analyze` turns counts into an :class:`Analysis` against the declarations
  in :mod:`nvfp4_kernels.paths`: which paths and guard sides are *reachable* on the devices seen, which
  of those were reached, and the coverage percentage.

Coverage percentage (the denominator is deliberately small and explicit)::

    covered = reachable paths that were taken + reachable guard sides that were seen
    total   = reachable paths + reachable guard sides

A path is reachable when some device seen in the run can take it (``PathSpec.unreachable_reason``
is None for that device); with no events at all the CPU is assumed. A guard side is reachable when
its path is reachable on some device and ``Guard.side_unreachable`` does not rule the side out on
that device. Guards of an unreachable path (``native_fp4`` on a CPU or Hopper run) are still
counted when evaluated, but they are neither required nor part of the denominator; reports show
them with the path's reason. Shortcut outcomes (``empty``, ``bias_only``) launch nothing and are
counted apart from path coverage. Combining runs from several devices makes reachability the
union over all of their devices.
"""

from __future__ import annotations

import copy
import json
import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from nvfp4_kernels.dispatch import DispatchEvent
from nvfp4_kernels.paths import GUARDS, GUARDS_BY_NAME, PATH_ORDER, PATHS, DeviceCaps, Policy, Problem, select_path

#: ``format`` field of the JSON document; a file without it is not dispatch-coverage data.
FORMAT_NAME = "nvfp4-dispatch-coverage"
#: Bumped whenever a reader of the previous version would misread a document.
SCHEMA_VERSION = 1
#: How many example test ids a guard side keeps: the lexicographically smallest, so that a
#: serial run, an xdist run and a combined run keep the same examples.
EXAMPLES_PER_SIDE = 3
#: The ``--dispatch-require`` / ``--require`` value that asks for every reachable item.
ALL_REACHABLE = "all-reachable"


def _side_key(passed: bool) -> str:
    return "true" if passed else "false"


@dataclass
class PathTally:
    """Counts for one path: hits, forced hits, hits outside any test, hits per test and device."""

    hits: int = 0
    forced: int = 0
    unattributed: int = 0
    tests: Counter = field(default_factory=Counter)
    devices: Counter = field(default_factory=Counter)

    def update(self, other: PathTally) -> None:
        self.hits += other.hits
        self.forced += other.forced
        self.unattributed += other.unattributed
        self.tests.update(other.tests)
        self.devices.update(other.devices)


@dataclass
class SideTally:
    """How often one side of one guard was seen, and a few tests that saw it."""

    count: int = 0
    examples: list[str] = field(default_factory=list)

    def note(self, count: int, tests: Iterable[str]) -> None:
        self.count += count
        merged = set(self.examples).union(t for t in tests if t)
        self.examples = sorted(merged)[:EXAMPLES_PER_SIDE]


@dataclass
class DeviceTally:
    """A device the run's events ran on (the CPU backend is the device ``cpu``)."""

    name: str
    compute_capability: tuple[int, int] | None
    events: int = 0

    @property
    def caps(self) -> DeviceCaps:
        return DeviceCaps(name=self.name, compute_capability=self.compute_capability)

    @property
    def label(self) -> str:
        return self.caps.label


class CoverageFileError(ValueError):
    """A coverage JSON document that cannot be read; the message says what to do."""


class UnknownPathError(ValueError):
    """A requirement names a path that :mod:`nvfp4_kernels.paths` does not declare."""


class CoverageData:
    """Additive dispatch-coverage counts for one run, or for several runs combined.

    Build it with :meth:`add` (one event at a time, as the recorder does), :meth:`from_events`,
    :meth:`read` or :meth:`from_dict`; merge another run with :meth:`update`.
    """

    def __init__(self) -> None:
        self.paths: dict[str, PathTally] = {p: PathTally() for p in PATH_ORDER}
        self.guards: dict[str, dict[bool, SideTally]] = {
            g.name: {True: SideTally(), False: SideTally()} for g in GUARDS
        }
        self.shortcuts: Counter = Counter()
        self.devices: dict[str, DeviceTally] = {}
        #: provenance, one entry per run: ``{"label": str, "events": int}``
        self.runs: list[dict[str, Any]] = []

    # --- building -------------------------------------------------------------------------

    @classmethod
    def from_events(cls, events: Iterable[DispatchEvent | tuple[DispatchEvent, str | None]]) -> CoverageData:
        """Aggregate events, each either bare or paired with the test id it belongs to."""
        data = cls()
        for item in events:
            event, test = item if isinstance(item, tuple) else (item, None)
            data.add(event, test)
        return data

    def add(self, event: DispatchEvent, test: str | None = None) -> None:
        """Count one dispatch event, attributed to ``test`` (a node id) or to no test."""
        device = self._device(event.device, event.compute_capability)
        device.events += 1
        if event.shortcut:
            self.shortcuts[event.path] += 1
            return
        if event.path not in self.paths:
            raise ValueError(f"event reports path {event.path!r}, which nvfp4_kernels.paths does not declare "
                             f"(declared: {', '.join(PATH_ORDER)})")
        tally = self.paths[event.path]
        tally.hits += 1
        tally.forced += int(event.forced)
        tally.devices[device.label] += 1
        if test:
            tally.tests[test] += 1
        else:
            tally.unattributed += 1
        for outcome in event.guards:
            sides = self.guards.get(outcome.name)
            if sides is None:
                raise ValueError(f"event reports guard {outcome.name!r}, which nvfp4_kernels.paths does not "
                                 f"declare; the harness and kernels are out of step")
            sides[bool(outcome.passed)].note(1, (test,) if test else ())

    def _device(self, name: str, compute_capability: Any) -> DeviceTally:
        cc = tuple(compute_capability) if compute_capability else None
        tally = DeviceTally(name, cc)  # type: ignore[arg-type]
        return self.devices.setdefault(tally.label, tally)

    def update(self, other: CoverageData) -> None:
        """Add another run's counts to this one (combining is a sum; examples stay the smallest)."""
        for name, tally in other.paths.items():
            self.paths[name].update(tally)
        for name, sides in other.guards.items():
            for passed, side in sides.items():
                self.guards[name][passed].note(side.count, side.examples)
        self.shortcuts.update(other.shortcuts)
        for device in other.devices.values():
            self._device(device.name, device.compute_capability).events += device.events
        self.runs.extend(copy.deepcopy(other.runs))

    def copy(self) -> CoverageData:
        return copy.deepcopy(self)

    # --- questions ------------------------------------------------------------------------

    @property
    def events(self) -> int:
        """Every event counted, shortcuts included."""
        return sum(t.hits for t in self.paths.values()) + sum(self.shortcuts.values())

    def device_caps(self) -> tuple[DeviceCaps, ...]:
        """The devices reachability is judged on: those seen, or the CPU when none was."""
        if not self.devices:
            return (DeviceCaps.cpu(),)
        return tuple(self.devices[label].caps for label in sorted(self.devices))

    def analyze(self) -> Analysis:
        """Judge the counts against :mod:`nvfp4_kernels.paths` on the devices seen."""
        devices = self.device_caps()
        path_status = []
        path_reachable: dict[str, list[DeviceCaps]] = {}
        for name in PATH_ORDER:
            spec = PATHS[name]
            blocked = {d.label: spec.unreachable_reason(d) for d in devices}
            reachable_on = [d for d in devices if not blocked[d.label]]
            path_reachable[name] = reachable_on
            reasons = list(dict.fromkeys(r for r in blocked.values() if r))
            tally = self.paths[name]
            path_status.append(PathStatus(
                name=name, hits=tally.hits, tests=len(tally.tests), forced=tally.forced,
                reachable=bool(reachable_on),
                reason=None if reachable_on else "; ".join(reasons),
                unreachable_on={label: r for label, r in blocked.items() if r},
            ))
        sides = []
        for guard in GUARDS:
            reachable_on = path_reachable[guard.path]
            for passed in (True, False):
                tally = self.guards[guard.name][passed]
                if not reachable_on:
                    reason = next(p.reason for p in path_status if p.name == guard.path)
                    required = False
                else:
                    why = [guard.side_unreachable(passed, d) for d in reachable_on]
                    required = any(w is None for w in why)
                    reason = None if required else "; ".join(dict.fromkeys(w for w in why if w))
                sides.append(SideStatus(guard=guard.name, path=guard.path, passed=passed,
                                        condition=guard.condition, line=guard.line, count=tally.count,
                                        examples=tuple(tally.examples), required=required, reason=reason))
        return Analysis(devices=devices, paths=tuple(path_status), sides=tuple(sides),
                        shortcuts=dict(sorted(self.shortcuts.items())), events=self.events)

    # --- serialisation --------------------------------------------------------------------

    def to_dict(self, summary: bool = True) -> dict[str, Any]:
        """The JSON document of :mod:`nvfp4_harness.engine.report` (schema version :data:`SCHEMA_VERSION`)."""
        doc: dict[str, Any] = {
            "format": FORMAT_NAME,
            "version": SCHEMA_VERSION,
            "runs": copy.deepcopy(self.runs),
            "devices": [
                {"name": d.name, "compute_capability": list(d.compute_capability) if d.compute_capability
                 else None, "events": d.events}
                for _, d in sorted(self.devices.items())
            ],
            "paths": {
                name: {"hits": t.hits, "forced": t.forced, "unattributed": t.unattributed,
                       "tests": dict(sorted(t.tests.items())), "devices": dict(sorted(t.devices.items()))}
                for name, t in self.paths.items()
            },
            "guards": {
                g.name: {"path": g.path, "condition": g.condition, "line": g.line,
                         **{_side_key(p): {"count": self.guards[g.name][p].count,
                                           "examples": list(self.guards[g.name][p].examples)}
                            for p in (True, False)}}
                for g in GUARDS
            },
            "shortcuts": dict(sorted(self.shortcuts.items())),
        }
        if summary:
            doc["summary"] = self.analyze().summary_dict()
        return doc

    @classmethod
    def from_dict(cls, doc: Any, origin: str = "the document") -> CoverageData:
        """Read a JSON document (``summary`` and per-guard metadata are derived and ignored)."""
        if not isinstance(doc, dict) or doc.get("format") != FORMAT_NAME:
            raise CoverageFileError(f"{origin} is not dispatch-coverage data (its \"format\" is not "
                                    f"{FORMAT_NAME!r}); write one with --dispatch-report=json:PATH")
        version = doc.get("version")
        if version != SCHEMA_VERSION:
            newer = isinstance(version, int) and version > SCHEMA_VERSION
            raise CoverageFileError(
                f"{origin} has schema version {version!r}, this harness reads version {SCHEMA_VERSION}; "
                + ("upgrade the harness that reads it" if newer else "regenerate it with this harness"))
        data = cls()
        try:
            data.runs = [dict(r) for r in doc.get("runs", [])]
            for d in doc.get("devices", []):
                data._device(d["name"], d.get("compute_capability")).events += int(d["events"])
            for name, p in doc.get("paths", {}).items():
                if name not in data.paths:
                    raise CoverageFileError(f"{origin} records path {name!r}, which nvfp4_kernels.paths does not "
                                            f"declare (declared: {', '.join(PATH_ORDER)}); regenerate it "
                                            f"with the current kernels")
                data.paths[name].update(PathTally(
                    hits=int(p["hits"]), forced=int(p.get("forced", 0)),
                    unattributed=int(p.get("unattributed", 0)),
                    tests=Counter({str(t): int(c) for t, c in p.get("tests", {}).items()}),
                    devices=Counter({str(k): int(c) for k, c in p.get("devices", {}).items()})))
            for name, g in doc.get("guards", {}).items():
                if name not in GUARDS_BY_NAME:
                    raise CoverageFileError(f"{origin} records guard {name!r}, which nvfp4_kernels.paths does not "
                                            f"declare; regenerate it with the current kernels")
                for passed in (True, False):
                    side = g.get(_side_key(passed), {})
                    data.guards[name][passed].note(int(side.get("count", 0)),
                                                   [str(t) for t in side.get("examples", [])])
            data.shortcuts.update({str(k): int(v) for k, v in doc.get("shortcuts", {}).items()})
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            if isinstance(exc, CoverageFileError):
                raise
            raise CoverageFileError(f"{origin} does not follow schema version {SCHEMA_VERSION} "
                                    f"({type(exc).__name__}: {exc}); see docs/coverage.md") from exc
        return data

    def dumps(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False) + "\n"

    @classmethod
    def loads(cls, text: str, origin: str = "the document") -> CoverageData:
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise CoverageFileError(f"{origin} is not valid JSON ({exc})") from exc
        return cls.from_dict(doc, origin)

    def write(self, path: str | os.PathLike[str]) -> None:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(self.dumps())

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> CoverageData:
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except OSError as exc:
            raise CoverageFileError(f"cannot read {os.fspath(path)!r}: {exc.strerror or exc}") from exc
        return cls.loads(text, origin=repr(os.fspath(path)))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CoverageData):
            return NotImplemented
        return self.to_dict(summary=False) == other.to_dict(summary=False)

    def __repr__(self) -> str:
        hits = ", ".join(f"{n}={t.hits}" for n, t in self.paths.items())
        return f"<CoverageData {self.events} events: {hits}>"


# --- analysis ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class PathStatus:
    name: str
    hits: int
    tests: int
    forced: int
    reachable: bool
    #: why no device seen can take the path (None when one can)
    reason: str | None
    #: device label -> reason, for the devices seen that cannot take it
    unreachable_on: dict[str, str]

    @property
    def missed(self) -> bool:
        return self.reachable and self.hits == 0


@dataclass(frozen=True)
class SideStatus:
    guard: str
    path: str
    passed: bool
    condition: str
    line: int
    count: int
    examples: tuple[str, ...]
    required: bool
    #: why the side is not required (None when it is)
    reason: str | None

    @property
    def label(self) -> str:
        return f"{self.guard}={self.passed}"

    @property
    def missed(self) -> bool:
        return self.required and self.count == 0


@dataclass(frozen=True)
class Requirement:
    """What a run must reach: named paths, and/or every reachable path and guard side.

    Naming paths requires those paths to be taken; ``all-reachable`` requires every reachable
    path and both reachable sides of every guard of a reachable path.
    """

    paths: tuple[str, ...] = ()
    all_reachable: bool = False

    @property
    def active(self) -> bool:
        return self.all_reachable or bool(self.paths)

    @classmethod
    def parse(cls, values: Iterable[str]) -> Requirement:
        """Parse option values such as ``["gemv,prefill_vec8", "all-reachable"]``."""
        paths: list[str] = []
        all_reachable = False
        unknown = []
        for value in values:
            for name in (v.strip() for v in value.split(",")):
                if not name:
                    continue
                if name == ALL_REACHABLE:
                    all_reachable = True
                elif name in PATHS:
                    if name not in paths:
                        paths.append(name)
                else:
                    unknown.append(name)
        if unknown:
            raise UnknownPathError(
                f"unknown dispatch path {', '.join(map(repr, unknown))}; valid names: "
                f"{', '.join(PATH_ORDER)}, or {ALL_REACHABLE} (comma-separate several)")
        return cls(tuple(paths), all_reachable)


def _path_hint(name: str) -> str:
    spec = PATHS[name]
    if spec.guards:
        return "it is taken when " + " and ".join(g.condition for g in spec.guards) + \
            " (and no earlier path in " + " > ".join(PATH_ORDER) + " applies)"
    return "it is the fallback, taken when every other path has a false guard"


@dataclass(frozen=True)
class Analysis:
    """Coverage judged on the devices of a run: statuses, totals and failure messages."""

    devices: tuple[DeviceCaps, ...]
    paths: tuple[PathStatus, ...]
    sides: tuple[SideStatus, ...]
    shortcuts: dict[str, int]
    events: int

    def path(self, name: str) -> PathStatus:
        return next(p for p in self.paths if p.name == name)

    def sides_of(self, path: str) -> tuple[SideStatus, ...]:
        return tuple(s for s in self.sides if s.path == path)

    @property
    def paths_reachable(self) -> int:
        return sum(p.reachable for p in self.paths)

    @property
    def paths_hit(self) -> int:
        return sum(p.reachable and p.hits > 0 for p in self.paths)

    @property
    def sides_reachable(self) -> int:
        return sum(s.required for s in self.sides)

    @property
    def sides_hit(self) -> int:
        return sum(s.required and s.count > 0 for s in self.sides)

    @property
    def covered(self) -> int:
        return self.paths_hit + self.sides_hit

    @property
    def total(self) -> int:
        return self.paths_reachable + self.sides_reachable

    @property
    def percent(self) -> float:
        return 100.0 * self.covered / self.total if self.total else 100.0

    @property
    def missed_paths(self) -> tuple[PathStatus, ...]:
        return tuple(p for p in self.paths if p.missed)

    @property
    def missed_sides(self) -> tuple[SideStatus, ...]:
        return tuple(s for s in self.sides if s.missed)

    @property
    def unreachable_paths(self) -> tuple[PathStatus, ...]:
        return tuple(p for p in self.paths if not p.reachable)

    def failures(self, requirement: Requirement | None = None, fail_under: float | None = None) -> list[str]:
        """One message per unmet requirement, each naming the path or guard side and what to do."""
        messages = []
        requirement = requirement or Requirement()
        wanted = list(requirement.paths)
        if requirement.all_reachable:
            wanted += [p.name for p in self.paths if p.reachable and p.name not in wanted]
        for name in wanted:
            status = self.path(name)
            if status.hits:
                continue
            if not status.reachable:
                messages.append(f"required path {name} was never taken: no device in this run can take it "
                                f"({status.reason}); run the suite where it is reachable and combine the "
                                f"JSON results with `python -m nvfp4_harness combine`")
            else:
                messages.append(f"required path {name} was never taken; {_path_hint(name)}")
        if requirement.all_reachable:
            for side in self.missed_sides:
                messages.append(f"guard side {side.guard} == {side.passed} was never taken "
                                f"(kernels/paths.py:{side.line}, {side.condition}); add a case where it is "
                                f"{str(side.passed).lower()}")
        if fail_under is not None and self.percent < fail_under:
            messages.append(f"dispatch coverage {self.percent:.1f}% ({self.covered}/{self.total} reachable paths "
                            f"and guard sides) is under the required {fail_under:g}%")
        return messages

    def summary_dict(self) -> dict[str, Any]:
        """The derived ``summary`` block of the JSON document."""
        return {
            "devices": [d.label for d in self.devices],
            "paths_reachable": self.paths_reachable,
            "paths_hit": self.paths_hit,
            "guard_sides_reachable": self.sides_reachable,
            "guard_sides_hit": self.sides_hit,
            "covered": self.covered,
            "total": self.total,
            "percent": round(self.percent, 2),
            "unreachable_paths": {p.name: p.reason for p in self.unreachable_paths},
            "missed_paths": [p.name for p in self.missed_paths],
            "missed_guard_sides": [s.label for s in self.missed_sides],
        }


def simulated_event(m: int | None, k: int, block_size: int = 16, *, n: int = 32,
                    caps: DeviceCaps | None = None, aligned: bool = True, op: str = "matmul",
                    dtype: str = "bfloat16", policy: Policy | None = None) -> DispatchEvent:
    """The event a call would announce on ``caps`` (CPU by default), built from the paths'
    own selection without running anything: for coverage data of devices that are not here
    (a simulated sm_120, a GPU job merged with ``combine``) and for testing reports."""
    caps = caps or DeviceCaps.cpu()
    backend = "cpu" if caps.sm is None else "cuda"
    problem = Problem(op, m, n, k, block_size, dtype, backend, aligned, "simulated")
    sel = select_path(problem, caps, policy or Policy())
    return DispatchEvent(op=op, path=sel.path, reason=sel.reason, guards=sel.guards, m=m, n=n, k=k,
                         block_size=block_size, dtype=dtype, backend=backend, device=caps.name,
                         compute_capability=caps.compute_capability, forced=sel.forced, kernels=(),
                         shortcut=False)
