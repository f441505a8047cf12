"""Coverage data: what runs reached, per operator, as additive counts that merge by summing.

The data holds measured facts only. Per operator: a snapshot of its declared model (paths,
guards, their descriptions and source lines, with a fingerprint), the hits of every path, how
often each side of each guard was seen (and a few example tests), launch-free shortcut
outcomes, findings (calls where the declared model and what ran disagree), and, per device
the run saw, which paths and guard sides cannot occur there and why (evaluated from the model
while it was in the process). Judging the counts is :mod:`nvfp4_harness.engine.analysis`'s
job; writing and reading the JSON document is here (schema: docs/coverage.md).

Because the declarations travel with the counts, ``python -m nvfp4_harness report`` and
``combine`` work on any operator's data without importing its model; two documents that
record the same operator under different declarations (different fingerprints) refuse to
merge, naming both.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from nvfp4_harness.model import DataError, DeviceCaps, DispatchEvent, DispatchModel, ModelConflict, side_key

#: ``format`` field of the JSON document
FORMAT_NAME = "dispatch-coverage"
#: Bumped whenever a reader of the previous version would misread a document.
SCHEMA_VERSION = 2
#: the first schema: one NVFP4 operator, written by nvfp4-harness 0.1
V1_FORMAT_NAME = "nvfp4-dispatch-coverage"
#: How many example test ids a guard side or finding keeps: the lexicographically smallest,
#: so that serial, xdist and combined runs keep the same examples.
EXAMPLES_PER_SIDE = 3


@dataclass
class PathTally:
    """One path: hits, forced hits, hits outside any test, hits per test and per device."""

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
    """How often one side of one guard (or one finding) was seen, on which devices, and a few
    tests that saw it."""

    count: int = 0
    examples: list[str] = field(default_factory=list)
    devices: Counter = field(default_factory=Counter)

    def note(self, count: int, tests: Iterable[str | None], devices: Counter | None = None) -> None:
        self.count += count
        merged = set(self.examples).union(t for t in tests if t)
        self.examples = sorted(merged)[:EXAMPLES_PER_SIDE]
        if devices:
            self.devices.update(devices)

    def note_one(self, test: str | None, device: str, times: int = 1) -> None:
        """:meth:`note` for one event (seen ``times`` times), cheap when the test changes nothing
        (the recorder's case)."""
        self.count += times
        self.devices[device] += times
        examples = self.examples
        if not test or test in examples or (len(examples) >= EXAMPLES_PER_SIDE and test > examples[-1]):
            return
        self.examples = sorted(examples + [test])[:EXAMPLES_PER_SIDE]


@dataclass
class DeviceTally:
    """A device the run's events ran on (a CPU backend is the device ``cpu``)."""

    name: str
    compute_capability: tuple[int, int] | None
    events: int = 0
    simulated: bool = False
    index: int | None = None

    @property
    def caps(self) -> DeviceCaps:
        return DeviceCaps(self.name, self.compute_capability, self.simulated, self.index)

    @property
    def label(self) -> str:
        return self.caps.label


class OperatorData:
    """The counts of one operator, next to the snapshot of its declarations."""

    def __init__(self, declaration: Mapping[str, Any]) -> None:
        self.declaration: dict[str, Any] = copy.deepcopy(dict(declaration))
        self.paths: dict[str, PathTally] = {p["name"]: PathTally() for p in self.declaration["paths"]}
        self.sides: dict[str, SideTally] = {
            side_key(p["name"], g["name"], passed): SideTally()
            for p in self.declaration["paths"] for g in p["guards"] for passed in (True, False)}
        self.shortcuts: Counter = Counter()
        self.findings: dict[str, SideTally] = {}
        #: device label -> {"paths": {path: reason}, "sides": {side key: reason}}
        self.unreachable: dict[str, dict[str, dict[str, str]]] = {}
        #: labels judged only because the run had no device yet (the CPU); dropped at the first event
        self.assumed: set[str] = set()
        #: id(outcomes) -> (outcomes, their side keys): events of one cached selection share the tuple
        self._keys: dict[int, tuple[tuple, list[str]]] = {}

    def side_keys(self, outcomes: tuple) -> list[str]:
        """The side keys of a tuple of guard outcomes (computed once per tuple object)."""
        cached = self._keys.get(id(outcomes))
        if cached is not None and cached[0] is outcomes:
            return cached[1]
        keys = [side_key(o.path, o.guard, o.passed) for o in outcomes]
        if len(self._keys) >= 4096:
            self._keys.clear()
        self._keys[id(outcomes)] = (outcomes, keys)
        return keys

    @classmethod
    def from_model(cls, model: DispatchModel) -> OperatorData:
        return cls(model.declaration())

    @property
    def name(self) -> str:
        return self.declaration["name"]

    @property
    def fingerprint(self) -> str:
        return self.declaration["fingerprint"]

    @property
    def events(self) -> int:
        """Path hits and shortcut outcomes (observed calls that matched no path are findings)."""
        return sum(t.hits for t in self.paths.values()) + sum(self.shortcuts.values())

    def judge(self, model: DispatchModel, device: DeviceCaps) -> None:
        """Record which paths and guard sides cannot occur on ``device`` (once per device)."""
        if device.label not in self.unreachable:
            self.unreachable[device.label] = {"paths": model.unreachable_paths(device),
                                              "sides": model.unreachable_sides(device)}

    def update(self, other: OperatorData) -> None:
        if other.fingerprint != self.fingerprint:
            raise ModelConflict(f"operator {self.name!r} is recorded under two different declarations "
                                f"(fingerprints {self.fingerprint} and {other.fingerprint}); combine only data "
                                f"written with the same model, or regenerate the older file")
        for name, tally in other.paths.items():
            self.paths[name].update(tally)
        for key, side in other.sides.items():
            self.sides[key].note(side.count, side.examples, side.devices)
        self.shortcuts.update(other.shortcuts)
        for key, finding in other.findings.items():
            self.findings.setdefault(key, SideTally()).note(finding.count, finding.examples, finding.devices)
        for label, unreachable in other.unreachable.items():
            self.unreachable.setdefault(label, copy.deepcopy(unreachable))

    def iter_guards(self) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
        """(path declaration, guard declaration) pairs, in declaration order."""
        for p in self.declaration["paths"]:
            for g in p["guards"]:
                yield p, g


class CoverageData:
    """Additive dispatch-coverage counts of one run, or of several runs combined.

    Build it with :meth:`add` (one event at a time, as the recorder does), :meth:`declare`
    (an operator that may never be called, so it shows 0%), :meth:`read` or
    :meth:`from_dict`; merge another run with :meth:`update`.
    """

    def __init__(self) -> None:
        self.operators: dict[str, OperatorData] = {}
        self.devices: dict[str, DeviceTally] = {}
        #: provenance, one entry per run: ``{"label": str, "events": int}``
        self.runs: list[dict[str, Any]] = []
        #: models seen in this process, to judge devices added later (not serialised)
        self._models: dict[str, DispatchModel] = {}

    # --- building -------------------------------------------------------------------------

    @classmethod
    def from_events(cls, events: Iterable[DispatchEvent | tuple[DispatchEvent, str | None]]) -> CoverageData:
        """Aggregate events, each either bare or paired with the test id it belongs to."""
        data = cls()
        for item in events:
            event, test = item if isinstance(item, tuple) else (item, None)
            data.add(event, test)
        return data

    def declare(self, model: DispatchModel) -> OperatorData:
        """The operator's data, created with zero counts when new; its model judges every
        device of the run."""
        op = self.operators.get(model.name)
        if op is None:
            op = self.operators[model.name] = OperatorData.from_model(model)
        elif op.fingerprint != model.fingerprint:
            raise ModelConflict(f"operator {model.name!r} is recorded under another declaration (fingerprint "
                                f"{op.fingerprint}) than the model declared at {model.source} ({model.fingerprint})")
        self._models[model.name] = model
        for device in self.devices.values():
            op.judge(model, device.caps)
        if not self.devices and not op.unreachable:  # nothing ran yet: judge on the CPU until something does
            op.judge(model, DeviceCaps.cpu())
            op.assumed.add(DeviceCaps.cpu().label)
        return op

    def add(self, event: DispatchEvent, test: str | None = None, times: int = 1) -> None:
        """Count one event (``times`` times: the same event announced again and again), attributed
        to ``test`` (a node id) or to no test.

        Everything about the event is checked before anything is counted: an event the data
        rejects (DataError) leaves no trace, not even in its device's event total.
        """
        if type(times) is not int or times < 1:
            raise ValueError(f"times must be a positive int, got {times!r}")
        model = event.model
        op = self.operators.get(event.operator)
        if op is None:
            if model is None:
                raise DataError(f"an event of operator {event.operator!r} arrived without its model and no data "
                                f"declares it; announce events through nvfp4_harness.model.record()")
            op = self.declare(model)
        elif model is not None and model.name not in self._models:
            self.declare(model)
        if event.shortcut:
            if event.path not in op.declaration["shortcuts"]:
                raise DataError(f"operator {op.name!r} declares no shortcut {event.path!r}")
        elif event.path is not None and event.path not in op.paths:
            raise DataError(f"operator {op.name!r} declares no path {event.path!r} (declared: "
                            f"{', '.join(op.paths)})")
        sides = op.sides
        keys = op.side_keys(event.outcomes)
        for key in keys:
            if key not in sides:
                raise DataError(f"operator {op.name!r} declares no guard {key.rsplit('=', 1)[0]!r}; the event "
                                f"and the model are out of step")
        label = event.device.label
        device = self.devices.get(label)
        if device is None:
            for other in self.operators.values():
                for assumed in other.assumed:
                    other.unreachable.pop(assumed, None)
                other.assumed.clear()
            device = self._device(event.device)
            for known in self._models.values():
                self.operators[known.name].judge(known, event.device)
        device.events += times
        if label not in op.unreachable and model is not None:
            op.judge(model, event.device)
        if event.finding:
            op.findings.setdefault(event.finding, SideTally()).note_one(test, label, times)
        if event.shortcut:
            op.shortcuts[event.path] += times
            return
        if event.path is not None:
            tally = op.paths[event.path]
            tally.hits += times
            if event.forced:
                tally.forced += times
            tally.devices[label] += times
            if test:
                tally.tests[test] += times
            else:
                tally.unattributed += times
        for key in keys:
            sides[key].note_one(test, label, times)

    def _device(self, caps: DeviceCaps) -> DeviceTally:
        tally = self.devices.get(caps.label)
        if tally is None:
            tally = self.devices[caps.label] = DeviceTally(caps.name, caps.compute_capability,
                                                           simulated=caps.simulated, index=caps.index)
        return tally

    def update(self, other: CoverageData) -> None:
        """Add another run's counts to this one (combining is a sum; examples stay the smallest).

        ModelConflict when both record one operator under different declarations."""
        for name, op in other.operators.items():
            mine = self.operators.get(name)
            if mine is None:
                mine = self.operators[name] = OperatorData(op.declaration)
            mine.update(op)
        for device in other.devices.values():
            tally = self.devices.get(device.label)
            if tally is None:
                tally = self.devices[device.label] = DeviceTally(device.name, device.compute_capability,
                                                                 simulated=device.simulated, index=device.index)
            tally.events += device.events
        for name, model in other._models.items():
            self._models.setdefault(name, model)
        for model in self._models.values():
            for device in self.devices.values():
                self.operators[model.name].judge(model, device.caps)
        self.runs.extend(copy.deepcopy(other.runs))

    def copy(self) -> CoverageData:
        clone = CoverageData()
        clone.update(self)
        clone.runs = copy.deepcopy(self.runs)
        return clone

    # --- questions ------------------------------------------------------------------------

    @property
    def events(self) -> int:
        """Every event counted (device totals: path hits, shortcuts and pathless findings)."""
        return sum(d.events for d in self.devices.values())

    def operator(self, name: str) -> OperatorData:
        try:
            return self.operators[name]
        except KeyError:
            raise DataError(f"no data for operator {name!r}; recorded: {', '.join(self.operators) or 'none'}") \
                from None

    def analyze(self):  # noqa: ANN201 - see nvfp4_harness.engine.analysis.Analysis
        """Judge the counts (reachability from the recorded per-device facts)."""
        from nvfp4_harness.engine.analysis import analyze

        return analyze(self)

    # --- serialisation --------------------------------------------------------------------

    def to_dict(self, summary: bool = True) -> dict[str, Any]:
        """The JSON document (schema version :data:`SCHEMA_VERSION`, docs/coverage.md)."""
        doc: dict[str, Any] = {
            "format": FORMAT_NAME,
            "version": SCHEMA_VERSION,
            "runs": copy.deepcopy(self.runs),
            "devices": [
                {"name": d.name, "compute_capability": list(d.compute_capability) if d.compute_capability else None,
                 "events": d.events, **({"simulated": True} if d.simulated else {}),
                 **({"index": d.index} if d.index is not None else {})}
                for _, d in sorted(self.devices.items())
            ],
            "operators": {name: _operator_doc(op) for name, op in sorted(self.operators.items())},
        }
        if summary:
            doc["summary"] = self.analyze().summary_dict()
        return doc

    @classmethod
    def from_dict(cls, doc: Any, origin: str = "the document") -> CoverageData:
        """Read a JSON document of this schema or of version 1 (``summary`` is ignored)."""
        if isinstance(doc, dict) and doc.get("format") == V1_FORMAT_NAME and doc.get("version") == 1:
            from nvfp4_harness.engine.legacy import upgrade_v1

            doc = upgrade_v1(doc, origin)
        if not isinstance(doc, dict) or doc.get("format") != FORMAT_NAME:
            raise DataError(f"{origin} is not dispatch-coverage data (its \"format\" is not {FORMAT_NAME!r}); "
                            f"write one with --dispatch-report=json:PATH")
        version = doc.get("version")
        if version != SCHEMA_VERSION:
            newer = isinstance(version, int) and version > SCHEMA_VERSION
            raise DataError(f"{origin} has schema version {version!r}, this harness reads versions 1 and "
                            f"{SCHEMA_VERSION}; " + ("upgrade the harness that reads it" if newer
                                                     else "regenerate it with this harness"))
        data = cls()
        try:
            data.runs = [dict(r) for r in doc.get("runs", [])]
            for d in doc.get("devices", []):
                cc = d.get("compute_capability")
                tally = data._device(DeviceCaps(str(d["name"]), tuple(cc) if cc else None,
                                                bool(d.get("simulated", False)), d.get("index")))
                tally.events += int(d["events"])
            for name, o in doc.get("operators", {}).items():
                data.operators[name] = _operator_from_doc(name, o)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            if isinstance(exc, DataError):
                raise
            raise DataError(f"{origin} does not follow schema version {SCHEMA_VERSION} ({type(exc).__name__}: "
                            f"{exc}); see docs/coverage.md") from exc
        return data

    def dumps(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    @classmethod
    def loads(cls, text: str, origin: str = "the document") -> CoverageData:
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DataError(f"{origin} is not valid JSON ({exc})") from exc
        return cls.from_dict(doc, origin)

    def write(self, path: str | os.PathLike[str]) -> None:
        """Write the document atomically: readers see the old file or the new one, never half."""
        write_atomic(path, self.dumps())

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> CoverageData:
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except OSError as exc:
            raise DataError(f"cannot read {os.fspath(path)!r}: {exc.strerror or exc}") from exc
        return cls.loads(text, origin=repr(os.fspath(path)))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CoverageData):
            return NotImplemented
        return self.to_dict(summary=False) == other.to_dict(summary=False)

    def __repr__(self) -> str:
        parts = [f"{n}: " + ", ".join(f"{p}={t.hits}" for p, t in op.paths.items()) for n, op in self.operators.items()]
        return f"<CoverageData {self.events} events; {'; '.join(parts)}>"


def _operator_doc(op: OperatorData) -> dict[str, Any]:
    return {
        "model": copy.deepcopy(op.declaration),
        "paths": {name: {"hits": t.hits, "forced": t.forced, "unattributed": t.unattributed,
                         "tests": dict(sorted(t.tests.items())), "devices": dict(sorted(t.devices.items()))}
                  for name, t in op.paths.items()},
        "guard_sides": {key: _tally_doc(s) for key, s in op.sides.items()},
        "shortcuts": dict(sorted(op.shortcuts.items())),
        "findings": {key: _tally_doc(f) for key, f in sorted(op.findings.items())},
        "unreachable": copy.deepcopy(op.unreachable),
    }


def _tally_doc(tally: SideTally) -> dict[str, Any]:
    return {"count": tally.count, "examples": list(tally.examples), "devices": dict(sorted(tally.devices.items()))}


def _operator_from_doc(name: str, doc: Mapping[str, Any]) -> OperatorData:
    op = OperatorData(doc["model"])
    if op.name != name:
        raise DataError(f"operator {name!r} holds the model of {op.name!r}")
    for path, p in doc.get("paths", {}).items():
        if path not in op.paths:
            raise DataError(f"operator {name!r} records path {path!r} that its model does not declare")
        op.paths[path].update(PathTally(
            hits=int(p["hits"]), forced=int(p.get("forced", 0)), unattributed=int(p.get("unattributed", 0)),
            tests=Counter({str(t): int(c) for t, c in p.get("tests", {}).items()}),
            devices=Counter({str(k): int(c) for k, c in p.get("devices", {}).items()})))
    for key, s in doc.get("guard_sides", {}).items():
        if key not in op.sides:
            raise DataError(f"operator {name!r} records guard side {key!r} that its model does not declare")
        op.sides[key].note(int(s.get("count", 0)), [str(t) for t in s.get("examples", [])],
                           Counter({str(d): int(c) for d, c in s.get("devices", {}).items()}))
    op.shortcuts.update({str(k): int(v) for k, v in doc.get("shortcuts", {}).items()})
    for key, f in doc.get("findings", {}).items():
        op.findings.setdefault(str(key), SideTally()).note(
            int(f.get("count", 0)), [str(t) for t in f.get("examples", [])],
            Counter({str(d): int(c) for d, c in f.get("devices", {}).items()}))
    for label, u in doc.get("unreachable", {}).items():
        op.unreachable[str(label)] = {"paths": {str(k): str(v) for k, v in u.get("paths", {}).items()},
                                      "sides": {str(k): str(v) for k, v in u.get("sides", {}).items()}}
    return op


def write_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and
    :func:`os.replace`, so a concurrent reader never sees a half-written file."""
    target = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(target))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
