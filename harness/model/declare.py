"""Declaring an operator's dispatch: :class:`DispatchModel`, :class:`PathSpec`, :class:`Guard`.

A dispatch model is data: the operator's paths in preference order, each with the guards that
must all hold for a call to take it (a predicate over the call's problem, device and policy, a
sentence a human reads, and the source line it is declared on), the operations that may take
it, the kernel-name patterns it launches (for observing a library that cannot be edited), and
why it is unreachable on a device. Everything else in the harness reads these declarations;
nothing reads an operator's code.

Declaring one (numpy-free, torch-free: any problem object the predicates understand will do)::

    MODEL = DispatchModel("toy_matmul", [
        PathSpec("small_m", "one row at a time", guards=[
            Guard("m_small", "M <= 4", lambda p, dev, pol: p["m"] <= 4),
        ]),
        PathSpec("blocked", "tiles of 8", guards=[
            Guard("k_mod_8", "K % 8 == 0", lambda p, dev, pol: p["k"] % 8 == 0),
        ]),
        PathSpec("generic", "the fallback"),
    ])

Each ``Guard(...)`` and ``PathSpec(...)`` records the file and line it is written on, so a
report can say "guard side toy_matmul:blocked.k_mod_8 == False was never taken
(kernels/model.py:12)".
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from nvfp4_harness.model.devices import DeviceCaps
from nvfp4_harness.model.errors import DispatchError, InvalidArgument, InvalidModel, PathNotAllowed, UnknownPathError

Predicate = Callable[[Any, DeviceCaps, Any], bool]
Detail = Callable[[Any, DeviceCaps, Any], str]
DeviceReason = Callable[[DeviceCaps], "str | None"]

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MODEL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
_THIS_FILE = os.path.normcase(os.path.realpath(__file__))


# --- where a declaration is written ---------------------------------------------------------


@dataclass(frozen=True)
class SourceLocation:
    """A file and line; ``str()`` gives ``file:line`` relative to the working directory when
    the file lies under it (as editors and CI annotations expect), else absolute."""

    file: str
    line: int

    @classmethod
    def of_caller(cls) -> SourceLocation | None:
        """The first frame outside this module and outside generated code (dataclass __init__)."""
        frame = sys._getframe(1)
        while frame is not None:
            name = frame.f_code.co_filename
            real = os.path.realpath(name)  # a package imported through a link names its real file
            if not name.startswith("<") and os.path.normcase(real) != _THIS_FILE:
                return cls(real, frame.f_lineno)
            frame = frame.f_back
        return None

    @property
    def display_file(self) -> str:
        relative = os.path.relpath(self.file)
        return self.file if relative.startswith("..") else relative.replace(os.sep, "/")

    def __str__(self) -> str:
        return f"{self.display_file}:{self.line}"


def _set_source(obj: Any) -> None:
    if obj.source is None:
        object.__setattr__(obj, "source", SourceLocation.of_caller())


def _check_name(kind: str, name: Any, pattern: re.Pattern[str] = _IDENTIFIER) -> None:
    if not isinstance(name, str) or not pattern.match(name):
        raise InvalidModel(f"{kind} name {name!r} must be an identifier (letters, digits and _, "
                           f"not starting with a digit)")


# --- guards and paths -----------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Guard:
    """One condition a path needs.

    ``check(problem, device, policy)`` decides it; ``description`` is what reports print
    (``"K % 8 == 0"``); ``detail(problem, device, policy)``, optional, explains one call
    (``"K=36, K % 8 = 4"``) and runs only when someone reads the explanation.
    ``true_unreachable(device)`` returns why the guard can never hold on ``device`` (None
    when it can): a path that needs an sm_120 GPU declares it on its architecture guard, and
    reports then neither require nor count that side on other devices.
    ``false_unreachable(device)`` is the other side: why the guard always holds on ``device``
    (a guard that only another GPU generation fails), so reports neither require nor count its
    False side there.
    """

    name: str
    description: str
    check: Predicate = field(repr=False)
    detail: Detail | None = field(default=None, repr=False)
    true_unreachable: DeviceReason | None = field(default=None, repr=False)
    false_unreachable: DeviceReason | None = field(default=None, repr=False)
    source: SourceLocation | None = None

    def __post_init__(self) -> None:
        _check_name("guard", self.name)
        if not isinstance(self.description, str) or not self.description.strip():
            raise InvalidModel(f"guard {self.name!r} needs a description a human reads, e.g. 'K % 8 == 0'")
        if not callable(self.check):
            raise InvalidModel(f"guard {self.name!r}: check must be callable(problem, device, policy) -> bool")
        _set_source(self)

    def side_unreachable(self, passed: bool, device: DeviceCaps) -> str | None:
        """Why this side of the guard cannot occur on ``device`` (None when it can)."""
        if passed and self.true_unreachable is not None:
            return self.true_unreachable(device)
        if not passed and self.false_unreachable is not None:
            return self.false_unreachable(device)
        return None

    def explain(self, problem: Any, device: DeviceCaps, policy: Any) -> str:
        """This guard's detail for one call ('' without a detail function)."""
        return self.detail(problem, device, policy) if self.detail is not None else ""


@dataclass(frozen=True, eq=False)
class PathSpec:
    """One dispatch path: its guards (all must hold), the operations that may take it
    (None: every operation of the model), the regex patterns of the kernel names it launches
    (each must match a launched kernel for a profiled call to count as this path), and
    ``unreachable(device)``: why no call can take it on a device, beyond its guards."""

    name: str
    summary: str = ""
    guards: Sequence[Guard] = ()
    ops: Sequence[str] | None = None
    kernels: Sequence[str] = ()
    unreachable: DeviceReason | None = field(default=None, repr=False)
    source: SourceLocation | None = None

    def __post_init__(self) -> None:
        _check_name("path", self.name)
        guards = tuple(self.guards)
        for g in guards:
            if not isinstance(g, Guard):
                raise InvalidModel(f"path {self.name!r}: guards must be Guard objects, got {type(g).__name__}")
        seen: set[str] = set()
        for g in guards:
            if g.name in seen:
                raise InvalidModel(f"path {self.name!r} declares guard {g.name!r} twice ({g.source})")
            seen.add(g.name)
        object.__setattr__(self, "guards", guards)
        if self.ops is not None:
            if isinstance(self.ops, str):
                raise InvalidModel(f"path {self.name!r}: ops must be a sequence of names, e.g. ({self.ops!r},)")
            object.__setattr__(self, "ops", tuple(self.ops))
        kernels = (self.kernels,) if isinstance(self.kernels, str) else tuple(self.kernels)
        compiled = []
        for pattern in kernels:
            try:
                compiled.append(re.compile(pattern))
            except (re.error, TypeError) as exc:
                raise InvalidModel(f"path {self.name!r}: kernel pattern {pattern!r} is not a regular "
                                   f"expression ({exc})") from exc
        object.__setattr__(self, "kernels", kernels)
        object.__setattr__(self, "_patterns", tuple(compiled))
        _set_source(self)

    def unreachable_reason(self, device: DeviceCaps) -> str | None:
        """Why no call can take this path on ``device`` (None when some call can)."""
        if self.unreachable is not None:
            reason = self.unreachable(device)
            if reason:
                return reason
        for g in self.guards:
            reason = g.side_unreachable(True, device)
            if reason:
                return reason
        return None

    def matches(self, kernel_name: str) -> bool:
        """True when one of this path's kernel patterns matches ``kernel_name``."""
        return any(p.search(kernel_name) for p in self._patterns)  # type: ignore[attr-defined]


class GuardOutcome(NamedTuple):
    """One guard evaluated for one call."""

    path: str
    guard: str
    passed: bool

    @property
    def key(self) -> str:
        """``path.guard``, how reports name the guard."""
        return f"{self.path}.{self.guard}"


class Selection(NamedTuple):
    """The path a model chose (or was told to take) for one call, and every guard's outcome."""

    path: str
    forced: bool
    outcomes: tuple[GuardOutcome, ...]


class Classification(NamedTuple):
    """Which path a list of launched kernel names shows.

    ``path`` is None when no path, or more than one equally specific path, matched;
    ``candidates`` lists every path whose patterns all matched; ``unmatched`` the launched
    names no pattern of the model claims (library GEMMs, fills, copies)."""

    path: str | None
    candidates: tuple[str, ...]
    unmatched: tuple[str, ...]


# --- the model ------------------------------------------------------------------------------


class DispatchModel:
    """An operator's paths in preference order, validated when constructed.

    ``ops`` names the operator's entry points (``("matmul", "dequantize")``); leave it None
    for an operator with one. ``shortcuts`` names outcomes that launch nothing (an empty
    output) and are counted apart from path coverage. ``shared_kernels`` are regex patterns
    of kernels that several paths launch (a library GEMM): observed calls do not list them as
    unmatched.
    """

    _CACHE_LIMIT = 4096

    def __init__(self, name: str, paths: Iterable[PathSpec], *, ops: Sequence[str] | None = None,
                 shortcuts: Mapping[str, str] | None = None, summary: str = "",
                 shared_kernels: Sequence[str] = (), kernel_sources: Sequence[str] = ()) -> None:
        _check_name("model", name, _MODEL_NAME)
        self.name = name
        self.summary = summary
        self.source = SourceLocation.of_caller()
        self.paths: tuple[PathSpec, ...] = tuple(paths)
        if not self.paths:
            raise InvalidModel(f"model {name!r} declares no path")
        if isinstance(ops, str):
            raise InvalidModel(f"model {name!r}: ops must be a sequence of names, e.g. ({ops!r},)")
        self.ops: tuple[str, ...] | None = tuple(ops) if ops is not None else None
        self.shortcuts: dict[str, str] = dict(shortcuts or {})
        self._by_name: dict[str, PathSpec] = {}
        for spec in self.paths:
            if not isinstance(spec, PathSpec):
                raise InvalidModel(f"model {name!r}: paths must be PathSpec objects, got {type(spec).__name__}")
            if spec.name in self._by_name:
                raise InvalidModel(f"model {name!r} declares path {spec.name!r} twice ({spec.source})")
            self._by_name[spec.name] = spec
            if spec.ops is not None:
                if self.ops is None:
                    raise InvalidModel(f"model {name!r}: path {spec.name!r} names ops {spec.ops} but the model "
                                       f"declares none; pass ops=(...) to DispatchModel")
                unknown = [o for o in spec.ops if o not in self.ops]
                if unknown:
                    raise InvalidModel(f"model {name!r}: path {spec.name!r} names ops {unknown} the model does "
                                       f"not declare (declared: {list(self.ops)})")
        for shortcut in self.shortcuts:
            _check_name("shortcut", shortcut)
            if shortcut in self._by_name:
                raise InvalidModel(f"model {name!r}: {shortcut!r} is both a path and a shortcut")
        try:
            self._shared = tuple(re.compile(p) for p in shared_kernels)
        except (re.error, TypeError) as exc:
            raise InvalidModel(f"model {name!r}: a shared kernel pattern is not a regular expression ({exc})") from exc
        self.shared_kernels = tuple(shared_kernels)
        if isinstance(kernel_sources, str):
            raise InvalidModel(f"model {name!r}: kernel_sources must be a sequence of paths, "
                               f"e.g. ({kernel_sources!r},)")
        #: the kernel source files (glob patterns, relative to the file declaring the model): what
        #: coverage.py's view of a run reports as executed for the paths a GPU took
        self.kernel_sources = tuple(kernel_sources)
        op_names: tuple[str | None, ...] = (None,) + (self.ops or ())
        self._candidates: dict[str | None, tuple[PathSpec, ...]] = {
            op: tuple(p for p in self.paths if op is None or p.ops is None or op in p.ops) for op in op_names}
        self._cache: dict[Any, Selection] = {}
        self._fingerprint: str | None = None

    # --- names -----------------------------------------------------------------------------

    def __repr__(self) -> str:
        return f"<DispatchModel {self.name}: {' > '.join(self.path_names)}>"

    @property
    def path_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.paths)

    def path(self, name: str) -> PathSpec:
        """The path called ``name``; UnknownPathError lists the declared ones."""
        try:
            return self._by_name[name]
        except (KeyError, TypeError):
            raise UnknownPathError(f"model {self.name!r} declares no path {name!r}; declared: "
                                   f"{', '.join(self.path_names)}") from None

    def candidates(self, op: str | None = None) -> tuple[PathSpec, ...]:
        """The paths ``op`` may take, in preference order (every path when op is None)."""
        try:
            return self._candidates[op]
        except KeyError:
            raise InvalidArgument(f"model {self.name!r} has no operation {op!r}; its operations: "
                                  f"{list(self.ops or ())}") from None

    # --- deciding --------------------------------------------------------------------------

    def evaluate(self, problem: Any, device: DeviceCaps, policy: Any = None,
                 op: str | None = None) -> tuple[GuardOutcome, ...]:
        """Every guard of every path ``op`` may take, in order, without short-circuit: the
        coverage of a guard's sides must not depend on which earlier guard failed."""
        return tuple(GuardOutcome(spec.name, g.name, bool(g.check(problem, device, policy)))
                     for spec in self.candidates(op) for g in spec.guards)

    def select(self, problem: Any, device: DeviceCaps, policy: Any = None, *, op: str | None = None,
               force: str | None = None) -> Selection:
        """The first path in preference order whose guards all hold, or the ``force``d one.

        A forced path must be one ``op`` may take and its guards must hold, otherwise
        :class:`PathNotAllowed` says which guard fails; a kernel is never run outside its
        domain. Selections of hashable problems are cached (guards are pure functions).
        """
        key = (problem, device, policy, op, force)
        try:
            return self._cache[key]
        except KeyError:
            pass
        except TypeError:  # an unhashable problem (a dict): decide without the cache
            return self._select(problem, device, policy, op, force)
        selection = self._select(problem, device, policy, op, force)
        if len(self._cache) >= self._CACHE_LIMIT:
            self._cache.clear()
        self._cache[key] = selection
        return selection

    def _select(self, problem: Any, device: DeviceCaps, policy: Any, op: str | None,
                force: str | None) -> Selection:
        outcomes = self.evaluate(problem, device, policy, op)
        failed = {o.path for o in outcomes if not o.passed}
        candidates = self.candidates(op)
        if force is not None:
            spec = self.path(force)
            if spec not in candidates:
                raise PathNotAllowed(f"{self.name}: operation {op!r} cannot take the forced path {force!r}; "
                                     f"choose one of {[p.name for p in candidates]}")
            if force in failed:
                why = "; ".join(self._why_false(o, problem, device, policy) for o in outcomes
                                if o.path == force and not o.passed)
                raise PathNotAllowed(f"{self.name}: the forced path {force!r} has guards that do not hold: {why}. "
                                     f"Force a path whose guards hold, or stop forcing one.")
            return Selection(force, True, outcomes)
        for spec in candidates:
            if spec.name not in failed:
                return Selection(spec.name, False, outcomes)
        raise DispatchError(f"no path of {self.name!r} takes this problem ({problem!r}); declare a last "
                            f"path without guards as the fallback")

    def _why_false(self, outcome: GuardOutcome, problem: Any, device: DeviceCaps, policy: Any) -> str:
        guard = self.guard(outcome.path, outcome.guard)
        detail = guard.explain(problem, device, policy)
        return f"{outcome.key} ({guard.description}) is false" + (f": {detail}" if detail else "") + \
            f" [{guard.source}]"

    def guard(self, path: str, name: str) -> Guard:
        """The guard ``name`` of ``path``."""
        for g in self.path(path).guards:
            if g.name == name:
                return g
        raise UnknownPathError(f"path {self.name}:{path} declares no guard {name!r}; declared: "
                               f"{', '.join(g.name for g in self.path(path).guards) or 'none'}")

    def explain(self, selection: Selection, problem: Any, device: DeviceCaps, policy: Any = None) -> str:
        """Why the call took its path, in words: built only when someone reads it."""
        if selection.forced:
            return f"forced ({selection.path!r})"
        skipped = []
        for spec in self.paths:
            if spec.name == selection.path:
                break
            misses = [o for o in selection.outcomes if o.path == spec.name and not o.passed]
            if misses:
                parts = []
                for o in misses:
                    detail = self.guard(o.path, o.guard).explain(problem, device, policy)
                    parts.append(o.guard + (f": {detail}" if detail else ""))
                skipped.append(f"{spec.name} ({', '.join(parts)})")
        reason = "all guards hold" if self.path(selection.path).guards else "fallback: no guard"
        return reason + ("; skipped " + "; ".join(skipped) if skipped else "")

    # --- devices ---------------------------------------------------------------------------

    def unreachable_paths(self, device: DeviceCaps) -> dict[str, str]:
        """path -> why no call can take it on ``device``, for the paths that are unreachable."""
        out = {}
        for spec in self.paths:
            reason = spec.unreachable_reason(device)
            if reason:
                out[spec.name] = reason
        return out

    def unreachable_sides(self, device: DeviceCaps) -> dict[str, str]:
        """``path.guard=true|false`` -> why that side cannot occur on ``device`` (the sides of
        an unreachable path included, with the path's reason)."""
        paths = self.unreachable_paths(device)
        out = {}
        for spec in self.paths:
            for g in spec.guards:
                for passed in (True, False):
                    reason = paths.get(spec.name) or g.side_unreachable(passed, device)
                    if reason:
                        out[side_key(spec.name, g.name, passed)] = reason
        return out

    # --- observing -------------------------------------------------------------------------

    def classify(self, kernel_names: Iterable[str], op: str | None = None) -> Classification:
        """The path whose kernel patterns all match among ``kernel_names``.

        Paths without patterns are never observed. When several paths match, the one with
        the most patterns wins (dequant + GEMM beats GEMM alone); a tie leaves ``path`` None.
        """
        names = tuple(kernel_names)
        matched: list[PathSpec] = []
        claimed: set[str] = set()
        for spec in self.candidates(op):
            if not spec.kernels:
                continue
            hits = [n for n in names if spec.matches(n)]
            claimed.update(hits)
            if all(any(p.search(n) for n in names) for p in spec._patterns):  # type: ignore[attr-defined]
                matched.append(spec)
        unmatched = tuple(n for n in names if n not in claimed and not any(p.search(n) for p in self._shared))
        if not matched:
            return Classification(None, (), unmatched)
        most = max(len(s.kernels) for s in matched)
        best = [s for s in matched if len(s.kernels) == most]
        return Classification(best[0].name if len(best) == 1 else None, tuple(s.name for s in matched), unmatched)

    # --- describing ------------------------------------------------------------------------

    def declaration(self) -> dict[str, Any]:
        """The declarations as plain data: what coverage files store next to their counts,
        so a report needs no import of the model."""
        return {
            "name": self.name,
            "summary": self.summary,
            "source": str(self.source) if self.source else None,
            "ops": list(self.ops) if self.ops is not None else None,
            "shortcuts": dict(self.shortcuts),
            "kernel_sources": self._kernel_source_files(),
            "fingerprint": self.fingerprint,
            "paths": [{
                "name": p.name, "summary": p.summary, "source": str(p.source) if p.source else None,
                "ops": list(p.ops) if p.ops is not None else None, "kernels": list(p.kernels),
                "guards": [{"name": g.name, "description": g.description,
                            "source": str(g.source) if g.source else None} for g in p.guards],
            } for p in self.paths],
        }

    def _kernel_source_files(self) -> list[str]:
        """The kernel source files, resolved next to the model's file, as reports name files."""
        base = os.path.dirname(self.source.file) if self.source else os.getcwd()
        files: list[str] = []
        for pattern in self.kernel_sources:
            full = pattern if os.path.isabs(pattern) else os.path.join(base, pattern)
            files += sorted(glob.glob(full))
        return [SourceLocation(os.path.abspath(f), 0).display_file for f in dict.fromkeys(files)]

    @property
    def fingerprint(self) -> str:
        """SHA-256 (16 hex digits) of what gives the counts their meaning: the names, the guard
        descriptions and the operations. Not of source lines, summaries or kernel patterns, so
        moving a declaration or widening a pattern keeps old data mergeable."""
        if self._fingerprint is None:
            self._fingerprint = declaration_fingerprint(self.name, self.ops, self.shortcuts, [
                (p.name, p.ops, [(g.name, g.description) for g in p.guards]) for p in self.paths])
        return self._fingerprint


def side_key(path: str, guard: str, passed: bool) -> str:
    """``path.guard=true``: how data files and reports name one side of one guard."""
    return f"{path}.{guard}={'true' if passed else 'false'}"


def declaration_fingerprint(name: str, ops: Sequence[str] | None, shortcuts: Iterable[str],
                            paths: Sequence[tuple[str, Sequence[str] | None, Sequence[tuple[str, str]]]]) -> str:
    """The fingerprint of a declaration given as plain values (see DispatchModel.fingerprint):
    the model name, its operations, its shortcut names, and per path its name, operations and
    (guard name, description) pairs."""
    payload = json.dumps([name, list(ops) if ops is not None else None, sorted(shortcuts),
                          [[p, list(o) if o is not None else None, [list(g) for g in gs]]
                           for p, o, gs in paths]], separators=(",", ":"))
    return hashlib.sha256(payload.encode()).hexdigest()[:16]
