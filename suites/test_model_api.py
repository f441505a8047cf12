"""The dispatch-model API on a toy model declared here: validation, selection, forcing, source
locations, instrumented recording, the event bus and the registry."""

from __future__ import annotations

import inspect
import warnings

import pytest
from nvfp4_harness.engine.recorder import recording
from nvfp4_harness.model import (
    DeviceCaps,
    DispatchError,
    DispatchModel,
    Guard,
    InvalidArgument,
    InvalidModel,
    ModelRegistry,
    PathNotAllowed,
    PathSpec,
    UnknownPathError,
    add_listener,
    clear_listener_failures,
    instrument,
    listener_failures,
    record,
    record_shortcut,
    remove_listener,
)

CPU = DeviceCaps.cpu()
HERE = inspect.getsourcefile(lambda: None)


def toy_model(name: str = "toy") -> DispatchModel:
    return DispatchModel(name, [
        PathSpec("small", "small M", guards=[
            Guard("m_small", "M <= 4", lambda p, d, pol: p["m"] <= 4, detail=lambda p, d, pol: f"M={p['m']}"),
        ], kernels=(r"small_kernel",)),
        PathSpec("wide", "K in blocks", guards=[
            Guard("k_mod_8", "K % 8 == 0", lambda p, d, pol: p["k"] % 8 == 0),
            Guard("gpu_only", "runs on a GPU", lambda p, d, pol: d.sm is not None,
                  true_unreachable=lambda d: None if d.sm else "needs a GPU"),
        ], kernels=(r"wide_dequant", r"gemm")),
        PathSpec("generic", "fallback", kernels=(r"gemm",)),
    ], shortcuts={"empty": "M == 0"}, shared_kernels=(r"memset",))


MODEL = toy_model()


def test_selection_takes_the_first_path_whose_guards_all_hold_and_evaluates_every_guard():
    gpu = DeviceCaps.simulated_gpu(9, 0)
    assert MODEL.select({"m": 2, "k": 16}, CPU).path == "small"
    assert MODEL.select({"m": 9, "k": 16}, gpu).path == "wide"
    assert MODEL.select({"m": 9, "k": 16}, CPU).path == "generic"
    outcomes = MODEL.select({"m": 2, "k": 12}, CPU).outcomes
    assert [(o.path, o.guard, o.passed) for o in outcomes] == [
        ("small", "m_small", True), ("wide", "k_mod_8", False), ("wide", "gpu_only", False)]
    explanation = MODEL.explain(MODEL.select({"m": 9, "k": 12}, CPU), {"m": 9, "k": 12}, CPU)
    assert explanation == "fallback: no guard; skipped small (m_small: M=9); wide (k_mod_8, gpu_only)"


def test_forcing_checks_the_forced_paths_guards():
    forced = MODEL.select({"m": 9, "k": 16}, CPU, force="generic")
    assert forced.path == "generic" and forced.forced
    with pytest.raises(PathNotAllowed, match=r"small.m_small \(M <= 4\) is false: M=9") as info:
        MODEL.select({"m": 9, "k": 16}, CPU, force="small")
    assert HERE.rsplit("/", 1)[-1] in str(info.value)
    with pytest.raises(UnknownPathError, match="declared: small, wide, generic"):
        MODEL.select({"m": 9, "k": 16}, CPU, force="tiny")


def test_every_declaration_remembers_the_line_it_is_written_on():
    source = open(HERE).read().splitlines()
    guard = MODEL.guard("small", "m_small")
    assert guard.source.file == HERE and 'Guard("m_small"' in source[guard.source.line - 1]
    assert 'PathSpec("wide"' in source[MODEL.path("wide").source.line - 1]
    assert MODEL.source.file == HERE


@pytest.mark.parametrize("build, message", [
    (lambda: DispatchModel("m", []), "declares no path"),
    (lambda: DispatchModel("m", [PathSpec("a"), PathSpec("a")]), "declares path 'a' twice"),
    (lambda: PathSpec("a", guards=[Guard("g", "x", bool), Guard("g", "y", bool)]), "declares guard 'g' twice"),
    (lambda: Guard("1bad", "x", bool), "must be an identifier"),
    (lambda: Guard("g", " ", bool), "needs a description"),
    (lambda: Guard("g", "x", "not callable"), "must be callable"),
    (lambda: PathSpec("a", kernels=("(",)), "not a regular expression"),
    (lambda: DispatchModel("m", [PathSpec("a", ops=("run",))]), "declares none"),
    (lambda: DispatchModel("m", [PathSpec("a", ops=("run",))], ops=("call",)), "ops \\['run'\\]"),
    (lambda: DispatchModel("m", [PathSpec("a")], shortcuts={"a": "x"}), "both a path and a shortcut"),
])
def test_contradictory_declarations_are_refused(build, message):
    with pytest.raises(InvalidModel, match=message):
        build()


def test_a_model_without_a_fallback_reports_problems_no_path_takes():
    model = DispatchModel("strict", [PathSpec("only", guards=[Guard("even", "M even", lambda p, d, pol: p % 2 == 0)])])
    with pytest.raises(DispatchError, match="declare a last path without guards"):
        model.select(3, CPU)


def test_selections_are_cached_for_hashable_problems_and_guards_are_pure():
    calls = []

    def positive(p, d, pol):
        calls.append(p)
        return (p["x"] if isinstance(p, dict) else p) > 0

    model = DispatchModel("counted", [PathSpec("a", guards=[Guard("g", "x > 0", positive)]), PathSpec("b")])
    for _ in range(5):
        assert model.select(1, CPU).path == "a"
    assert calls == [1]
    for _ in range(2):  # a dict cannot key the cache: decided each time, same answer
        assert model.select({"x": -1}, CPU).path == "b"
    assert calls == [1, {"x": -1}, {"x": -1}]


def test_fingerprint_follows_meaning_not_lines():
    assert toy_model().fingerprint == MODEL.fingerprint
    changed = DispatchModel("toy", [PathSpec("small", guards=[Guard("m_small", "M <= 8", bool)]),
                                    PathSpec("generic")])
    assert changed.fingerprint != MODEL.fingerprint


def test_unreachable_paths_and_sides_per_device():
    assert MODEL.unreachable_paths(CPU) == {"wide": "needs a GPU"}
    assert MODEL.unreachable_sides(CPU) == {"wide.k_mod_8=true": "needs a GPU", "wide.k_mod_8=false": "needs a GPU",
                                            "wide.gpu_only=true": "needs a GPU", "wide.gpu_only=false": "needs a GPU"}
    assert MODEL.unreachable_paths(DeviceCaps.simulated_gpu(9, 0)) == {}


def test_record_evaluates_the_model_and_marks_a_disagreement_as_a_finding():
    with recording("t") as rec:
        record(MODEL, "small", {"m": 2, "k": 16})
        record(MODEL, "generic", {"m": 2, "k": 16})            # the model says small
        record(MODEL, "small", {"m": 9, "k": 16}, forced=True)  # forced past a false guard
        record_shortcut(MODEL, "empty", {"m": 0, "k": 16})
    events = [r.event for r in rec.events]
    assert [e.path for e in events] == ["small", "generic", "small", "empty"]
    assert events[0].finding is None and events[0].predicted == "small"
    assert events[1].finding == "the model predicts 'small', the call took 'generic'"
    assert events[2].forced and "guards ['m_small'] are false" in events[2].finding
    assert events[3].shortcut and events[3].reason == "M == 0"
    op = rec.coverage().operator("toy")
    assert op.paths["small"].hits == 2 and op.shortcuts["empty"] == 1
    assert sorted(op.findings) == sorted([events[1].finding, events[2].finding])
    failures = rec.coverage().analyze().failures()
    assert len(failures) == 2 and all(f.startswith("finding in toy:") for f in failures)


def test_record_is_free_when_nothing_listens():
    assert record(MODEL, "no_such_path", {"m": 1, "k": 1}) is None  # not even validated: nothing listens


def test_record_and_listeners_never_raise_into_the_operator_call():
    clear_listener_failures()

    def broken(event):
        raise RuntimeError("listener bug")

    seen = []
    add_listener(broken)
    add_listener(seen.append)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert record(MODEL, "small", {"m": 2, "k": 16}) is not None
            assert record(MODEL, "smal", {"m": 2, "k": 16}) is None  # a typo in the instrumentation
    finally:
        remove_listener(broken)
        remove_listener(seen.append)
    assert [e.path for e in seen] == ["small"], "a failing listener must not starve the ones after it"
    failures = listener_failures()
    assert "RuntimeError: listener bug" in failures[0].traceback
    assert "declares no path 'smal'" in failures[1].traceback
    assert any("listener bug" in str(w.message) for w in caught)
    clear_listener_failures()
    assert listener_failures() == []


def test_the_instrument_decorator_records_each_call():
    @instrument(MODEL, "small", problem=lambda a: {"m": len(a), "k": 16})
    def small_impl(a):
        return sum(a)

    with recording("t") as rec:
        assert small_impl([1, 2]) == 3
    assert [(r.event.path, r.event.problem) for r in rec.events] == [("small", {"m": 2, "k": 16})]
    with pytest.raises(UnknownPathError):
        instrument(MODEL, "nope", problem=lambda: None)


def test_registry_loads_modules_and_refuses_two_models_under_one_name(tmp_path, monkeypatch):
    (tmp_path / "my_models.py").write_text(
        "from nvfp4_harness.model import DispatchModel, PathSpec\n"
        "A = DispatchModel('a_op', [PathSpec('only')])\n")
    (tmp_path / "with_init.py").write_text(
        "from nvfp4_harness.model import DispatchModel, PathSpec\n"
        "def dispatch_init(reg):\n    reg.add_model(DispatchModel('b_op', [PathSpec('x'), PathSpec('y')]))\n")
    (tmp_path / "empty_mod.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = ModelRegistry()
    assert [m.name for m in reg.load("my_models")] == ["a_op"]
    assert [m.name for m in reg.load("with_init")] == ["b_op"]
    assert "a_op" in reg and len(reg) == 2
    with pytest.raises(InvalidArgument, match="declares no dispatch model"):
        reg.load("empty_mod")
    with pytest.raises(InvalidArgument, match="cannot import dispatch model module 'nowhere_mod'"):
        reg.load("nowhere_mod")
    with pytest.raises(InvalidModel, match="two different models are named 'a_op'"):
        reg.add_model(DispatchModel("a_op", [PathSpec("other")]))
