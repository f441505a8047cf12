"""The pytest plugin (entry point ``pytest11: nvfp4_dispatch``): dispatch path coverage.

It does nothing unless asked: importing it loads neither numpy nor any operator, and without
one of its options it registers no listener. Asked (``--dispatch``, ``--dispatch-report``,
``--dispatch-require`` or ``--dispatch-fail-under``; ``--no-dispatch`` wins over all), it

* registers the dispatch models named in the ``dispatch_models`` ini option and by
  ``--dispatch-model=pkg.module`` (each module's ``dispatch_init(reg)``), so an operator that
  is never called shows 0% instead of being absent;
* records every dispatch event from configuration on; calls inside a test's setup, call and
  teardown are attributed to its node id, calls in module- or session-wide fixtures to none;
* under pytest-xdist, sends each worker's counts to the controller through ``workeroutput``,
  merges them there and names the workers that sent nothing;
* at the end writes the ``--dispatch-report`` reports and fails the run (exit status 1) when a
  requirement is unmet, coverage is under ``--dispatch-fail-under``, the declared model and
  what ran disagree (a finding), or a dispatch listener raised (with its traceback).

The ``dispatch`` marker selects the dispatch suites (``pytest -m dispatch``); the
``dispatch_recorder`` fixture records the events of one test.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import pytest

PLUGIN_NAME = "nvfp4-dispatch-coverage"
#: key of the worker's counts in xdist's ``workeroutput``
WORKEROUTPUT_KEY = "nvfp4_dispatch_coverage"
WORKEROUTPUT_FAILURES = "nvfp4_dispatch_listener_failures"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dispatch", "dispatch path coverage (nvfp4-harness)")
    group.addoption("--dispatch", action="store_true", default=False,
                    help="record dispatch path coverage and print the term report")
    group.addoption("--no-dispatch", action="store_true", default=False,
                    help="disable dispatch coverage even when other --dispatch-* options are given")
    group.addoption("--dispatch-report", action="append", default=[], metavar="TYPE[:DEST]",
                    help="dispatch-coverage report, repeatable: term, term-missing, json[:PATH], "
                         "markdown[:PATH], lcov[:PATH] (file defaults: dispatch-coverage.json/.md/.lcov)")
    group.addoption("--dispatch-require", action="append", default=[], metavar="[OPERATOR:]PATH",
                    help="fail unless these dispatch paths were taken (OPERATOR:PATH, or a PATH one operator "
                         "declares); 'all-reachable' (or OPERATOR:all-reachable) requires every path and "
                         "guard side reachable on the devices of the run")
    group.addoption("--dispatch-append", action="store_true", default=False,
                    help="merge this run's data into an existing json report instead of replacing it (a json "
                         "report that another run wrote while this one ran is always merged, never lost)")
    group.addoption("--dispatch-fail-under", type=float, default=None, metavar="PCT",
                    help="fail when dispatch coverage (reachable paths + reachable guard sides) is under PCT")
    group.addoption("--dispatch-model", action="append", default=[], metavar="PKG.MODULE",
                    help="register the dispatch models of this module (its dispatch_init(reg)); adds to the "
                         "dispatch_models ini option")
    parser.addini("dispatch_models", type="linelist", default=[],
                  help="modules whose dispatch_init(reg) registers dispatch models (one per line)")


@dataclass(frozen=True)
class Settings:
    """The plugin's options, validated."""

    reports: tuple[tuple[str, str | None], ...]
    requirement: Any
    fail_under: float | None
    models: tuple[str, ...]
    append: bool = False

    @property
    def active(self) -> bool:
        return bool(self.reports) or self.requirement.active or self.fail_under is not None


def _wants_coverage(config: pytest.Config) -> bool:
    if config.getoption("no_dispatch"):
        return False
    return bool(config.getoption("dispatch") or config.getoption("dispatch_report")
                or config.getoption("dispatch_require") or config.getoption("dispatch_fail_under") is not None)


def parse_settings(config: pytest.Config) -> Settings:
    """Validate the options; a mistake is a usage error that lists what is valid."""
    from nvfp4_harness.engine.analysis import Requirement
    from nvfp4_harness.engine.reports import parse_report_spec
    from nvfp4_harness.model import DispatchError

    try:
        specs = list(config.getoption("dispatch_report"))
        if config.getoption("dispatch") and not specs:
            specs = ["term"]
        reports = tuple(parse_report_spec(spec) for spec in specs)
        requirement = Requirement.parse(config.getoption("dispatch_require"))
    except DispatchError as exc:
        raise pytest.UsageError(str(exc)) from exc
    fail_under = config.getoption("dispatch_fail_under")
    if fail_under is not None and not 0 <= fail_under <= 100:
        raise pytest.UsageError(f"--dispatch-fail-under must be a percentage between 0 and 100, got {fail_under:g}")
    models = tuple(config.getini("dispatch_models")) + tuple(config.getoption("dispatch_model"))
    return Settings(reports, requirement, fail_under, tuple(dict.fromkeys(models)),
                    bool(config.getoption("dispatch_append")))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "dispatch: a dispatch suite (selected by pytest -m dispatch)")
    if _wants_coverage(config):
        config.pluginmanager.register(DispatchPlugin(config, parse_settings(config)), PLUGIN_NAME)


@pytest.fixture
def dispatch_recorder() -> Generator[Any, None, None]:
    """A started :class:`~nvfp4_harness.engine.recorder.Recorder` for the events of this test."""
    from nvfp4_harness.engine.recorder import Recorder

    recorder = Recorder("dispatch_recorder").start()
    try:
        yield recorder
    finally:
        recorder.stop()


class DispatchPlugin:
    """Per-session state: registry, recorder, counts from xdist workers, and the verdict."""

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        from nvfp4_harness.engine.data import CoverageData
        from nvfp4_harness.engine.recorder import Recorder
        from nvfp4_harness.model import DispatchError, ModelRegistry, clear_listener_failures

        self.config = config
        self.settings = settings
        self.registry = ModelRegistry()
        try:
            for module in settings.models:
                self.registry.load(module)
            if self.registry.models:
                settings.requirement.resolve({m.name: m.path_names for m in self.registry.models})
        except DispatchError as exc:
            raise pytest.UsageError(str(exc)) from exc
        clear_listener_failures()
        self.recorder = Recorder(keep_events=False, models=self.registry.models).start()
        self.from_workers = CoverageData()
        self.workers_reported: set[str] = set()
        self.workers_silent: list[str] = []
        self.worker_failures: list[str] = []
        self.data: Any = None
        self.failures: list[str] = []
        self.terminal_reports: list[str] = []
        self.written: list[tuple[str, str]] = []
        self.write_errors: list[str] = []
        from nvfp4_harness.engine.store import file_state

        #: each json report's file as this run found it: a change by the end means another run wrote it
        self.merged: list[str] = []
        self.json_states = {dest: file_state(dest) for kind, dest in settings.reports
                            if kind == "json" and dest not in (None, "-")}

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
        from nvfp4_harness.engine.data import CoverageData

        output = getattr(node, "workeroutput", None) or {}
        worker = output.get("workerid") or getattr(getattr(node, "gateway", None), "id", "?")
        doc = output.get(WORKEROUTPUT_KEY)
        if doc is None:
            self.workers_silent.append(str(worker))
            return
        self.workers_reported.add(str(worker))
        self.from_workers.update(CoverageData.from_dict(doc, origin=f"xdist worker {worker}'s coverage"))
        self.worker_failures += list(output.get(WORKEROUTPUT_FAILURES, []))

    # --- verdict and reports --------------------------------------------------------------

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        from nvfp4_harness.model import failure_count, listener_failures

        data = self.recorder.coverage()
        failures = [str(f) for f in listener_failures()]
        hidden = failure_count() - len(failures)
        if hidden > 0:
            failures.append(f"... and {hidden} more listener failures")
        if self.is_worker:
            self.config.workeroutput[WORKEROUTPUT_KEY] = data.to_dict(summary=False)
            self.config.workeroutput[WORKEROUTPUT_FAILURES] = failures
            return
        data.update(self.from_workers)
        data.runs = [{"label": self._run_label(), "events": data.events}]
        self.data = data
        self._write_reports(data)
        if self.config.getoption("collectonly"):
            return
        self.failures = [f"a dispatch listener failed (the operator calls went on):\n{f}"
                         for f in failures + self.worker_failures]
        self.failures += [f"{len(self.recorder.rejected)} events were rejected by the coverage data: "
                          f"{self.recorder.rejected[0]}"] if self.recorder.rejected else []
        if self.workers_silent:
            self.failures.append(f"xdist workers {', '.join(sorted(self.workers_silent))} sent no dispatch "
                                 f"coverage (crashed?); their tests' calls are missing from the report")
        self.failures += data.analyze().failures(self.settings.requirement, self.settings.fail_under)
        if (self.failures or self.write_errors) and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def _run_label(self) -> str:
        args = " ".join(self.config.invocation_params.args)
        label = f"pytest {args}".strip()
        return label if len(label) <= 200 else label[:197] + "..."

    def _write_reports(self, data: Any) -> None:
        from nvfp4_harness.engine.reports import write_report
        from nvfp4_harness.engine.store import save
        from nvfp4_harness.model import DataError

        for kind, dest in self.settings.reports:
            try:
                if kind == "json" and dest not in (None, "-"):
                    _, merged = save(data, dest, self.json_states[dest], append=self.settings.append)
                    if merged:
                        self.merged.append(dest)
                    text = ""
                else:
                    text = write_report(data, kind, dest)
            except (OSError, DataError) as exc:
                self.write_errors.append(f"cannot write the {kind} report to {dest!r}: "
                                         f"{getattr(exc, 'strerror', None) or exc}")
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
            merged = " (merged with the data another run wrote there meanwhile)" if dest in self.merged else ""
            if dest in self.merged and self.settings.append:
                merged = " (merged into the data already there: --dispatch-append)"
            tr.write_line(f"dispatch coverage {kind} report written to {dest}{merged}")
        problems = self.write_errors + self.failures
        if problems:
            tr.write_sep("=", "dispatch coverage FAILED", red=True, bold=True)
            for message in problems:
                tr.write_line(f"FAIL: {message}", red=True)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.recorder.stop()
