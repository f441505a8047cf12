"""The pytest plugin (entry point ``pytest11: nvfp4_dispatch``): the ``dispatch`` marker and
dispatch path coverage.

A thin layer over :mod:`nvfp4_harness.engine.recorder` (who caused each event), :mod:`nvfp4_harness.engine.coverage`
(what was reached) and :mod:`nvfp4_harness.engine.report` (how to show it). It

* registers the ``dispatch`` marker, so ``pytest -m dispatch`` selects the dispatch suites;
* records every dispatch event from configuration on, so calls made at collection time or in
  session-wide fixtures count too, attributed to no test; calls inside a test's setup, call
  and teardown are attributed to its node id;
* under pytest-xdist, sends each worker's counts to the controller through ``workeroutput``
  and merges them there, so the controller's report covers every worker;
* at the end writes the ``--dispatch-report`` reports and fails the run (exit status 1) when
  ``--dispatch-require`` or ``--dispatch-fail-under`` is not met, naming every missed path and
  guard side.

With none of its options given it only records (one locked append of counts per call).
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import pytest
from nvfp4_harness.engine.coverage import CoverageData, Requirement, UnknownPathError
from nvfp4_harness.engine.recorder import Recorder

PLUGIN_NAME = "nvfp4-dispatch-coverage"
#: key of the worker's counts in xdist's ``workeroutput``
WORKEROUTPUT_KEY = "nvfp4_dispatch_coverage"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("nvfp4-dispatch", "NVFP4 dispatch path coverage")
    group.addoption("--dispatch-report", action="append", default=[], metavar="TYPE[:DEST]",
                    help="dispatch-coverage report, repeatable: term, term-missing, json[:PATH], "
                         "markdown[:PATH], lcov[:PATH] (file defaults: dispatch-coverage.json/.md/.lcov)")
    group.addoption("--dispatch-require", action="append", default=[], metavar="PATH[,PATH...]",
                    help="fail unless these dispatch paths were taken; 'all-reachable' requires every "
                         "path and guard side reachable on the devices of the run")
    group.addoption("--dispatch-fail-under", type=float, default=None, metavar="PCT",
                    help="fail when dispatch coverage (reachable paths + reachable guard sides) is under PCT")


@dataclass(frozen=True)
class Settings:
    """The plugin's options, validated."""

    reports: tuple[tuple[str, str | None], ...]
    requirement: Requirement
    fail_under: float | None

    @property
    def active(self) -> bool:
        return bool(self.reports) or self.requirement.active or self.fail_under is not None


def parse_settings(config: pytest.Config) -> Settings:
    """Validate the options; a mistake is a usage error that lists what is valid."""
    from nvfp4_harness.engine.report import parse_report_spec

    try:
        reports = tuple(parse_report_spec(spec) for spec in config.getoption("dispatch_report"))
        requirement = Requirement.parse(config.getoption("dispatch_require"))
    except (ValueError, UnknownPathError) as exc:
        raise pytest.UsageError(str(exc)) from exc
    fail_under = config.getoption("dispatch_fail_under")
    if fail_under is not None and not 0 <= fail_under <= 100:
        raise pytest.UsageError(f"--dispatch-fail-under must be a percentage between 0 and 100, "
                                f"got {fail_under:g}")
    return Settings(reports, requirement, fail_under)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "dispatch: a dispatch suite (selected by pytest -m dispatch)")
    config.pluginmanager.register(DispatchCoverage(config, parse_settings(config)), PLUGIN_NAME)


class DispatchCoverage:
    """Per-session state: the recorder, counts from xdist workers, and the verdict."""

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        self.recorder = Recorder(keep_events=False).start()
        self.from_workers = CoverageData()
        self.data: CoverageData | None = None
        self.failures: list[str] = []
        self.terminal_reports: list[str] = []
        self.written: list[tuple[str, str]] = []
        self.write_errors: list[str] = []

    @property
    def is_worker(self) -> bool:
        return hasattr(self.config, "workerinput")

    # --- attribution ----------------------------------------------------------------------

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, Any, None]:
        with self.recorder.attribute(item.nodeid):
            yield

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(self, fixturedef: Any, request: Any) -> Generator[None, Any, None]:
        # A module- or session-wide fixture is set up inside whichever test first asks for it;
        # its calls belong to no single test.
        if fixturedef.scope == "function":
            yield
        else:
            with self.recorder.attribute(None):
                yield

    # --- xdist ----------------------------------------------------------------------------

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        output = getattr(node, "workeroutput", None) or {}
        doc = output.get(WORKEROUTPUT_KEY)
        if doc is not None:
            self.from_workers.update(CoverageData.from_dict(doc, origin="an xdist worker's coverage"))

    # --- verdict and reports --------------------------------------------------------------

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if not self.settings.active:
            return
        data = self.recorder.coverage()
        if self.is_worker:
            self.config.workeroutput[WORKEROUTPUT_KEY] = data.to_dict(summary=False)
            return
        data.update(self.from_workers)
        data.runs = [{"label": self._run_label(), "events": data.events}]
        self.data = data
        self._write_reports(data)
        if self.config.getoption("collectonly"):
            return
        self.failures = data.analyze().failures(self.settings.requirement, self.settings.fail_under)
        if (self.failures or self.write_errors) and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def _run_label(self) -> str:
        args = " ".join(self.config.invocation_params.args)
        label = f"pytest {args}".strip()
        return label if len(label) <= 200 else label[:197] + "..."

    def _write_reports(self, data: CoverageData) -> None:
        from nvfp4_harness.engine.report import write_report

        for kind, dest in self.settings.reports:
            try:
                text = write_report(data, kind, dest)
            except OSError as exc:
                self.write_errors.append(f"cannot write the {kind} report to {dest!r}: {exc.strerror or exc}")
                continue
            if dest in (None, "-"):
                self.terminal_reports.append(text)
            else:
                self.written.append((kind, dest))

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.data is None:
            return
        tr = terminalreporter
        for text in self.terminal_reports:
            tr.write_sep("-", "dispatch path coverage")
            tr.write(text)
        for kind, dest in self.written:
            tr.write_line(f"dispatch coverage {kind} report written to {dest}")
        problems = self.write_errors + self.failures
        if problems:
            tr.write_sep("=", "dispatch coverage FAILED", red=True, bold=True)
            for message in problems:
                tr.write_line(f"FAIL: {message}", red=True)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.recorder.stop()
