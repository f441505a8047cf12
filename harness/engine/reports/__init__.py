"""Dispatch-coverage reports: one small module per format, all over one analysis.

Formats (``--dispatch-report=TYPE[:DEST]`` in pytest, ``--format TYPE -o DEST`` in
``python -m nvfp4_harness report``):

``term``          per operator and path: hits, tests, each guard's True/False counts, what is
                  missing; unreachable paths with the reason; findings; TOTAL lines.
``term-missing``  only what was not reached, and findings.
``json``          the coverage data document itself (docs/coverage.md), with a derived
                  ``summary``; the input of ``combine`` and ``report``.
``markdown``      a table per operator for CI step summaries (``markdown:$GITHUB_STEP_SUMMARY``).
``lcov``          each guard as two branch records (True, False) on the line it is declared on.
``coverage``      a coverage.py data file: kernel source lines the paths reached on a GPU ran,
                  guard sides as branch arcs (:mod:`nvfp4_harness.engine.coveragepy`).

Every renderer takes a :class:`~nvfp4_harness.engine.data.CoverageData` and returns text;
none computes coverage itself, so all formats agree.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable

from nvfp4_harness.engine.data import CoverageData, write_atomic
from nvfp4_harness.engine.reports.lcov import render_lcov
from nvfp4_harness.engine.reports.markdown import render_markdown
from nvfp4_harness.engine.reports.term import render_term, render_term_missing
from nvfp4_harness.model import InvalidArgument

Renderer = Callable[[CoverageData], str]


def render_json(data: CoverageData) -> str:
    """The data document (schema in docs/coverage.md)."""
    return data.dumps()


RENDERERS: dict[str, Renderer] = {
    "term": render_term,
    "term-missing": render_term_missing,
    "json": render_json,
    "markdown": render_markdown,
    "lcov": render_lcov,
}


def _write_coveragepy(data: CoverageData, dest: str) -> None:
    from nvfp4_harness.engine import coveragepy

    coveragepy.write(data, dest)


#: formats that are files of another tool rather than text: written, never printed
FILE_WRITERS: dict[str, Callable[[CoverageData, str], None]] = {"coverage": _write_coveragepy}
#: every report type
KINDS: tuple[str, ...] = (*RENDERERS, *FILE_WRITERS)
#: Where a file format goes when no DEST is given; terminal formats print instead.
DEFAULT_DEST: dict[str, str | None] = {
    "term": None,
    "term-missing": None,
    "json": "dispatch-coverage.json",
    "markdown": "dispatch-coverage.md",
    "lcov": "dispatch-coverage.lcov",
    "coverage": ".coverage.dispatch",
}


def parse_report_spec(spec: str) -> tuple[str, str | None]:
    """``"TYPE[:DEST]"`` -> ``(TYPE, DEST or its default)``; InvalidArgument names the valid types."""
    kind, sep, dest = spec.partition(":")
    kind = kind.strip()
    if kind not in KINDS:
        raise InvalidArgument(f"unknown dispatch report type {kind!r} in {spec!r}; valid types: "
                              f"{', '.join(KINDS)} (file formats take :DEST, e.g. json:coverage.json)")
    if sep and not dest:
        raise InvalidArgument(f"report {spec!r} has an empty destination; write {kind}:PATH or just {kind}")
    return kind, (dest if sep else DEFAULT_DEST[kind])


def write_report(data: CoverageData, kind: str, dest: str | None) -> str:
    """Render ``kind``; write it atomically to ``dest`` (``-`` or None: only return it).

    A report that fails to render leaves no file behind; one that renders replaces ``dest``
    in one step, so a concurrent reader sees the old report or the new one.
    """
    if kind in FILE_WRITERS:
        if dest in (None, "-"):
            raise InvalidArgument(f"the {kind} report is a file of another tool; give it a path ({kind}:PATH)")
        FILE_WRITERS[kind](data, dest)
        return ""
    text = RENDERERS[kind](data)
    if dest not in (None, "-"):
        try:
            write_atomic(dest, text)
        except BaseException:
            with contextlib.suppress(OSError):
                if os.path.exists(dest) and os.path.getsize(dest) == 0:
                    os.unlink(dest)
            raise
    return text
