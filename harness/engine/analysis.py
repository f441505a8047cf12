"""Judging coverage data: what each operator could reach on the devices of the run, what it
reached, what it missed, and the messages that fail a run.

Coverage percentage of an operator (the denominator is deliberately small and explicit)::

    covered = reachable paths taken + reachable guard sides seen
    total   = reachable paths + reachable guard sides

A path is reachable when some device the run judged can take it; a guard side is required
when its path is reachable on a device where that side can occur. The paths and sides of an
unreachable path (``native_fp4`` on a CPU or Hopper run) are shown with the reason but are
neither required nor counted. Shortcut outcomes launch nothing and are counted apart.
Findings (calls where the declared model and what ran disagree) fail a run like a missed
requirement. The run's total is the sum over its operators.

Requirements (``--dispatch-require``, ``report --require``), comma-separated or repeated:

    all-reachable          every reachable path and guard side of every operator
    OPERATOR:all-reachable the same, for one operator
    OPERATOR:PATH          that operator's path must be taken
    PATH                   a path name that exactly one operator declares
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nvfp4_harness.engine.data import CoverageData, OperatorData
from nvfp4_harness.model import UnknownPathError, side_key

#: The requirement that asks for every reachable item.
ALL_REACHABLE = "all-reachable"


@dataclass(frozen=True)
class PathStatus:
    operator: str
    name: str
    hits: int
    tests: int
    forced: int
    reachable: bool
    #: why no judged device can take the path (None when one can)
    reason: str | None
    #: device label -> reason, for the judged devices that cannot take it
    unreachable_on: dict[str, str]
    source: str | None
    summary: str = ""

    @property
    def missed(self) -> bool:
        return self.reachable and self.hits == 0

    @property
    def label(self) -> str:
        return f"{self.operator}:{self.name}"


@dataclass(frozen=True)
class SideStatus:
    operator: str
    path: str
    guard: str
    passed: bool
    description: str
    source: str | None
    count: int
    examples: tuple[str, ...]
    required: bool
    #: why the side is not required (None when it is)
    reason: str | None

    @property
    def label(self) -> str:
        return f"{self.operator}:{self.path}.{self.guard}={self.passed}"

    @property
    def missed(self) -> bool:
        return self.required and self.count == 0


@dataclass(frozen=True)
class FindingStatus:
    """Calls where the declared model and what ran disagree (one message, how many calls)."""

    operator: str
    message: str
    count: int
    examples: tuple[str, ...]


class CoverageTotals:
    """covered / total / percent from the four counts a subclass provides."""

    paths_reachable: int
    paths_hit: int
    sides_reachable: int
    sides_hit: int

    @property
    def covered(self) -> int:
        return self.paths_hit + self.sides_hit

    @property
    def total(self) -> int:
        return self.paths_reachable + self.sides_reachable

    @property
    def percent(self) -> float:
        return 100.0 * self.covered / self.total if self.total else 100.0


@dataclass(frozen=True)
class DeviceCoverage(CoverageTotals):
    """One device's share of a run: what was reachable there and what its own events reached."""

    label: str
    paths_reachable: int
    paths_hit: int
    sides_reachable: int
    sides_hit: int

    def __add__(self, other: DeviceCoverage) -> DeviceCoverage:
        return DeviceCoverage(self.label, self.paths_reachable + other.paths_reachable,
                              self.paths_hit + other.paths_hit, self.sides_reachable + other.sides_reachable,
                              self.sides_hit + other.sides_hit)


@dataclass(frozen=True)
class OperatorAnalysis(CoverageTotals):
    """One operator judged on the devices the run recorded facts for."""

    name: str
    summary: str
    source: str | None
    order: tuple[str, ...]
    devices: tuple[str, ...]
    paths: tuple[PathStatus, ...]
    sides: tuple[SideStatus, ...]
    shortcuts: dict[str, int]
    findings: tuple[FindingStatus, ...]
    events: int
    #: per judged device, its own coverage (its events, its reachability)
    per_device: tuple[DeviceCoverage, ...] = ()
    #: path -> device label -> hits there
    hits_by_device: dict[str, dict[str, int]] = field(default_factory=dict)

    def path(self, name: str) -> PathStatus:
        return next(p for p in self.paths if p.name == name)

    def sides_of(self, path: str, guard: str | None = None) -> tuple[SideStatus, ...]:
        return tuple(s for s in self.sides if s.path == path and (guard is None or s.guard == guard))

    def guards_of(self, path: str) -> list[str]:
        return list(dict.fromkeys(s.guard for s in self.sides if s.path == path))

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
    def missed_paths(self) -> tuple[PathStatus, ...]:
        return tuple(p for p in self.paths if p.missed)

    @property
    def missed_sides(self) -> tuple[SideStatus, ...]:
        return tuple(s for s in self.sides if s.missed)

    @property
    def unreachable_paths(self) -> tuple[PathStatus, ...]:
        return tuple(p for p in self.paths if not p.reachable)

    def path_hint(self, name: str) -> str:
        """When a path is taken, in words, for 'never taken' messages."""
        guards = [s for s in self.sides_of(name) if s.passed]
        if guards:
            return ("it is taken when " + " and ".join(f"{s.guard} ({s.description})" for s in guards)
                    + " and no earlier path in " + " > ".join(self.order) + " applies")
        return "it is the fallback, taken when every earlier path has a false guard"


@dataclass(frozen=True)
class Analysis(CoverageTotals):
    """Coverage of every operator of a run, with totals and failure messages."""

    devices: tuple[str, ...]
    operators: tuple[OperatorAnalysis, ...]
    events: int

    def operator(self, name: str) -> OperatorAnalysis:
        for op in self.operators:
            if op.name == name:
                return op
        raise UnknownPathError(f"no operator {name!r} in this data; recorded: "
                               f"{', '.join(o.name for o in self.operators) or 'none'}")

    @property
    def paths_reachable(self) -> int:
        return sum(o.paths_reachable for o in self.operators)

    @property
    def paths_hit(self) -> int:
        return sum(o.paths_hit for o in self.operators)

    @property
    def sides_reachable(self) -> int:
        return sum(o.sides_reachable for o in self.operators)

    @property
    def sides_hit(self) -> int:
        return sum(o.sides_hit for o in self.operators)

    @property
    def missed_paths(self) -> tuple[PathStatus, ...]:
        return tuple(p for o in self.operators for p in o.missed_paths)

    @property
    def missed_sides(self) -> tuple[SideStatus, ...]:
        return tuple(s for o in self.operators for s in o.missed_sides)

    @property
    def findings(self) -> tuple[FindingStatus, ...]:
        return tuple(f for o in self.operators for f in o.findings)

    @property
    def per_device(self) -> tuple[DeviceCoverage, ...]:
        """Each device's coverage summed over the operators."""
        merged: dict[str, DeviceCoverage] = {}
        for op in self.operators:
            for dev in op.per_device:
                merged[dev.label] = merged[dev.label] + dev if dev.label in merged else dev
        return tuple(merged[label] for label in sorted(merged))

    def known_paths(self) -> dict[str, tuple[str, ...]]:
        return {o.name: tuple(p.name for p in o.paths) for o in self.operators}

    def failures(self, requirement: Requirement | None = None, fail_under: float | None = None) -> list[str]:
        """One message per unmet requirement and per finding, each saying what to do."""
        messages = []
        requirement = requirement or Requirement()
        try:
            resolved = requirement.resolve(self.known_paths())
        except UnknownPathError as exc:
            messages.append(str(exc))
            resolved = Requirement()
        wanted: list[tuple[str, str]] = []
        for operator, path in resolved.items:
            targets = [o.name for o in self.operators] if operator is None else [operator]
            for name in targets:
                if path == ALL_REACHABLE:
                    wanted += [(name, p.name) for p in self.operator(name).paths if p.reachable]
                else:
                    wanted.append((name, path))
        for operator, path in dict.fromkeys(wanted):
            op = self.operator(operator)
            status = op.path(path)
            if status.hits:
                continue
            if not status.reachable:
                messages.append(f"required path {status.label} was never taken: no device in this run can take it "
                                f"({status.reason}); run the suite where it is reachable and combine the results "
                                f"with `python -m nvfp4_harness combine`")
            else:
                messages.append(f"required path {status.label} was never taken; {op.path_hint(path)}"
                                + (f" [{status.source}]" if status.source else ""))
        for operator in resolved.all_reachable_operators([o.name for o in self.operators]):
            for side in self.operator(operator).missed_sides:
                where = f"{side.source}, " if side.source else ""
                messages.append(f"guard side {side.operator}:{side.path}.{side.guard} == {side.passed} was never "
                                f"taken ({where}{side.description}); add a case where it is {str(side.passed).lower()}")
        for finding in self.findings:
            examples = f"; e.g. {', '.join(finding.examples)}" if finding.examples else ""
            messages.append(f"finding in {finding.operator}: {finding.message} ({finding.count} "
                            f"call{'s' if finding.count != 1 else ''}{examples}); the declared model is wrong or the "
                            f"code changed: fix the model or the dispatcher")
        if fail_under is not None and self.percent < fail_under:
            messages.append(f"dispatch coverage {self.percent:.1f}% ({self.covered}/{self.total} reachable paths "
                            f"and guard sides) is under the required {fail_under:g}%")
        return messages

    def summary_dict(self) -> dict[str, Any]:
        """The derived ``summary`` block of the JSON document."""
        return {
            "devices": list(self.devices),
            "covered": self.covered, "total": self.total, "percent": round(self.percent, 2),
            "per_device": {d.label: {"covered": d.covered, "total": d.total, "percent": round(d.percent, 2)}
                           for d in self.per_device},
            "operators": {o.name: {
                "paths_reachable": o.paths_reachable, "paths_hit": o.paths_hit,
                "guard_sides_reachable": o.sides_reachable, "guard_sides_hit": o.sides_hit,
                "covered": o.covered, "total": o.total, "percent": round(o.percent, 2),
                "unreachable_paths": {p.name: p.reason for p in o.unreachable_paths},
                "missed_paths": [p.name for p in o.missed_paths],
                "missed_guard_sides": [f"{s.path}.{s.guard}={s.passed}" for s in o.missed_sides],
                "findings": {f.message: f.count for f in o.findings},
                "paths_by_device": {p.name: {"reached_on": o.hits_by_device.get(p.name, {}),
                                             "unreachable_on": p.unreachable_on} for p in o.paths},
            } for o in self.operators},
        }


@dataclass(frozen=True)
class Requirement:
    """What a run must reach: ``(operator or None, path or 'all-reachable')`` items."""

    items: tuple[tuple[str | None, str], ...] = ()

    @property
    def active(self) -> bool:
        return bool(self.items)

    @property
    def all_reachable(self) -> bool:
        return any(path == ALL_REACHABLE for _, path in self.items)

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(p if o is None else f"{o}:{p}" for o, p in self.items if p != ALL_REACHABLE)

    def all_reachable_operators(self, operators: Sequence[str]) -> list[str]:
        out: list[str] = []
        for operator, path in self.items:
            if path == ALL_REACHABLE:
                out += list(operators) if operator is None else [operator]
        return list(dict.fromkeys(out))

    @classmethod
    def parse(cls, values: Iterable[str]) -> Requirement:
        """Parse option values such as ``["gemv,nvfp4:prefill_vec8", "all-reachable"]`` (syntax
        only; :meth:`resolve` checks the names against the models)."""
        items: list[tuple[str | None, str]] = []
        for value in values:
            for raw in (v.strip() for v in str(value).split(",")):
                if not raw:
                    continue
                operator, sep, path = raw.rpartition(":")
                if sep and (not operator or not path):
                    raise UnknownPathError(f"requirement {raw!r}: write OPERATOR:PATH, OPERATOR:{ALL_REACHABLE}, "
                                           f"PATH or {ALL_REACHABLE}")
                item = (operator or None, path)
                if item not in items:
                    items.append(item)
        return cls(tuple(items))

    def resolve(self, known: Mapping[str, Sequence[str]]) -> Requirement:
        """Qualify bare path names with the one operator declaring them; UnknownPathError
        names what is unknown or ambiguous and lists what is valid."""
        out: list[tuple[str | None, str]] = []
        for operator, path in self.items:
            if operator is None and path == ALL_REACHABLE:
                out.append((None, path))
                continue
            if operator is not None:
                if operator not in known:
                    raise UnknownPathError(f"unknown operator {operator!r} in requirement {operator}:{path}; known: "
                                           f"{', '.join(known) or 'none (register its model with --dispatch-model)'}")
                if path != ALL_REACHABLE and path not in known[operator]:
                    raise UnknownPathError(f"unknown dispatch path {path!r} of operator {operator!r}; valid names: "
                                           f"{', '.join(known[operator])}, or {ALL_REACHABLE}")
                out.append((operator, path))
                continue
            owners = [name for name, paths in known.items() if path in paths]
            if len(owners) == 1:
                out.append((owners[0], path))
            elif owners:
                raise UnknownPathError(f"dispatch path {path!r} is declared by several operators "
                                       f"({', '.join(owners)}); write OPERATOR:{path}")
            else:
                valid = "; ".join(f"{name}: {', '.join(paths)}" for name, paths in known.items())
                raise UnknownPathError(f"unknown dispatch path {path!r}; valid names: {valid or 'none'} "
                                       f"(OPERATOR:PATH or a path one operator declares), or {ALL_REACHABLE}; "
                                       f"register a model with --dispatch-model=pkg.module")
        return Requirement(tuple(out))


def analyze(data: CoverageData) -> Analysis:
    """Judge every operator of ``data``."""
    operators = tuple(_analyze_operator(op) for _, op in sorted(data.operators.items()))
    labels = tuple(sorted(data.devices)) or ("cpu",)
    return Analysis(devices=labels, operators=operators, events=data.events)


def _analyze_operator(op: OperatorData) -> OperatorAnalysis:
    judged = op.unreachable
    decl = op.declaration
    path_status = []
    reachable_on: dict[str, list[str]] = {}
    for p in decl["paths"]:
        name = p["name"]
        blocked = {label: facts["paths"][name] for label, facts in judged.items() if name in facts["paths"]}
        reachable_on[name] = [label for label in judged if label not in blocked] if judged else ["(any)"]
        tally = op.paths[name]
        reachable = bool(reachable_on[name])
        path_status.append(PathStatus(
            operator=op.name, name=name, hits=tally.hits, tests=len(tally.tests), forced=tally.forced,
            reachable=reachable, reason=None if reachable else "; ".join(dict.fromkeys(blocked.values())),
            unreachable_on=blocked, source=p.get("source"), summary=p.get("summary", "")))
    sides = []
    for p, g in op.iter_guards():
        for passed in (True, False):
            key = side_key(p["name"], g["name"], passed)
            tally = op.sides[key]
            on = reachable_on[p["name"]]
            if not on:
                required, reason = False, next(s.reason for s in path_status if s.name == p["name"])
            else:
                why = [judged[label]["sides"].get(key) if label in judged else None for label in on]
                required = any(w is None for w in why)
                reason = None if required else "; ".join(dict.fromkeys(w for w in why if w))
            sides.append(SideStatus(operator=op.name, path=p["name"], guard=g["name"], passed=passed,
                                    description=g["description"], source=g.get("source"), count=tally.count,
                                    examples=tuple(tally.examples), required=required, reason=reason))
    findings = tuple(FindingStatus(op.name, message, f.count, tuple(f.examples))
                     for message, f in sorted(op.findings.items()))
    per_device = []
    for label in sorted(judged):
        facts = judged[label]
        paths_on = [p["name"] for p in decl["paths"] if p["name"] not in facts["paths"]]
        sides_on = [side_key(p["name"], g["name"], passed) for p, g in op.iter_guards() for passed in (True, False)
                    if p["name"] in paths_on and side_key(p["name"], g["name"], passed) not in facts["sides"]]
        per_device.append(DeviceCoverage(
            label, len(paths_on), sum(op.paths[name].devices.get(label, 0) > 0 for name in paths_on),
            len(sides_on), sum(op.sides[key].devices.get(label, 0) > 0 for key in sides_on)))
    hits_by_device = {name: dict(sorted(t.devices.items())) for name, t in op.paths.items()}
    return OperatorAnalysis(name=op.name, summary=decl.get("summary", ""), source=decl.get("source"),
                            order=tuple(p["name"] for p in decl["paths"]), devices=tuple(sorted(judged)),
                            paths=tuple(path_status), sides=tuple(sides),
                            shortcuts=dict(sorted(op.shortcuts.items())), findings=findings, events=op.events,
                            per_device=tuple(per_device), hits_by_device=hits_by_device)
