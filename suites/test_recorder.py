"""The recorder attributes every dispatch event to the test (or label) that caused it."""

from __future__ import annotations

import sys
import threading

import numpy as np
import nvfp4_harness
import nvfp4_kernels
import pytest
from nvfp4_harness.engine.data import CoverageData
from nvfp4_harness.engine.recorder import Recorder, recording
from nvfp4_kernels import nvfp4
from nvfp4_kernels.model import Policy

#: the default's GEMV range, spelled out
GEMV_ON = Policy(gemv_max_m=8)


def _operands(m: int, k: int, block_size: int = 16, n: int = 32):
    rng = np.random.default_rng(1000 * m + k)
    b, s, g = nvfp4.quantize(rng.standard_normal((n, k)).astype(np.float32), block_size)
    a = rng.standard_normal((m, k)).astype(np.float16)
    return a, b, s, g


def _call(m: int, k: int, block_size: int = 16, policy: Policy | None = None) -> None:
    a, b, s, g = _operands(m, k, block_size)
    nvfp4_kernels.nvfp4_matmul(a, b, s, g, block_size, policy=policy)


def test_events_go_to_the_current_test_and_to_none_outside():
    recorder = Recorder().start()
    try:
        _call(1, 32, policy=GEMV_ON)
        with recorder.attribute("suite::test_a"):
            _call(1, 32, policy=GEMV_ON)
            _call(16, 64)
        _call(16, 36)
    finally:
        recorder.stop()
    assert [r.test for r in recorder.events] == [None, "suite::test_a", "suite::test_a", None]
    assert [e.path for e in recorder.events_for("suite::test_a")] == ["gemv", "prefill_vec8"]
    assert [e.path for e in recorder.events_for(None)] == ["gemv", "prefill_scalar"]
    assert len(recorder) == 4


def test_attribution_nests_and_is_restored_after_an_exception():
    recorder = Recorder(label="outer")
    with recorder.attribute("a"):
        with pytest.raises(RuntimeError):
            with recorder.attribute("b"):
                assert recorder.current_test == "b"
                raise RuntimeError("boom")
        assert recorder.current_test == "a"
    assert recorder.current_test == "outer"


def test_recording_block_labels_events_and_stops_listening_at_exit():
    with recording("smoke") as rec:
        assert rec.listening
        _call(1, 32, policy=GEMV_ON)
    _call(1, 32, policy=GEMV_ON)  # after the block: not recorded
    assert not rec.listening
    assert [(r.test, r.event.path) for r in rec.events] == [("smoke", "gemv")]
    assert nvfp4_harness.recording is recording


def test_a_stopped_recorder_hears_nothing_and_start_is_idempotent():
    recorder = Recorder()
    recorder.start()
    recorder.start()  # a second start must not register twice (events would double)
    _call(1, 32)
    recorder.stop()
    _call(1, 32)
    assert len(recorder.events) == 1


def test_coverage_snapshot_counts_what_was_recorded():
    with recording("t") as rec:
        for m, k in [(1, 32), (2, 32), (16, 64), (16, 36)]:
            _call(m, k)
    data = rec.coverage()
    paths = [r.event.path for r in rec.events]
    for name in nvfp4_kernels.PATH_NAMES:
        assert data.operator("nvfp4").paths[name].hits == paths.count(name)
    assert data == CoverageData.from_events((r.event, r.test) for r in rec.events)
    rec.clear()
    assert rec.events == [] and rec.coverage().events == 0


def test_keep_events_false_keeps_counts_only():
    recorder = Recorder("t", keep_events=False).start()
    try:
        _call(1, 32, policy=GEMV_ON)
        _call(16, 64)
    finally:
        recorder.stop()
    assert recorder.events == []
    op = recorder.coverage().operator("nvfp4")
    assert (op.paths["gemv"].hits, op.paths["prefill_vec8"].hits) == (1, 1)
    assert dict(op.paths["gemv"].tests) == {"t": 1}


def test_calls_from_threads_a_test_starts_belong_to_that_test():
    recorder = Recorder().start()
    try:
        with recorder.attribute("suite::test_threads"):
            worker = threading.Thread(target=_call, args=(16, 64))
            worker.start()
            worker.join()
    finally:
        recorder.stop()
    assert [(r.test, r.event.path) for r in recorder.events] == [("suite::test_threads", "prefill_vec8")]


def test_concurrent_listeners_lose_no_event():
    with recording("probe") as probe:
        _call(16, 64)
    event = probe.events[0].event
    recorder = Recorder("threads")
    threads, per_thread = 8, 400
    barrier = threading.Barrier(threads)

    def hammer() -> None:
        barrier.wait()
        for _ in range(per_thread):
            recorder(event)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible to provoke races
    try:
        pool = [threading.Thread(target=hammer) for _ in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
    finally:
        sys.setswitchinterval(old)
    op = recorder.coverage().operator("nvfp4")
    assert len(recorder.events) == threads * per_thread
    assert op.paths["prefill_vec8"].hits == threads * per_thread
    assert op.paths["prefill_vec8"].tests["threads"] == threads * per_thread
    assert op.sides["gemv.m_in_range=false"].count == threads * per_thread


def test_a_declared_model_shows_zero_percent_before_any_call():
    with recording("t", models=[nvfp4_kernels.MODEL]) as rec:
        pass
    analysis = rec.coverage().analyze()
    assert [o.name for o in analysis.operators] == ["nvfp4"]
    assert analysis.covered == 0 and analysis.total > 0


def test_an_event_the_data_rejects_is_kept_as_rejected_and_counts_nowhere():
    with recording("probe") as probe:
        _call(16, 64)
    event = probe.events[0].event
    broken = type(event)(**{**{f: getattr(event, f) for f in event.__dataclass_fields__}, "path": "no_such_path"})
    recorder = Recorder("t", models=[nvfp4_kernels.MODEL])
    recorder(broken)
    assert recorder.rejected and "no_such_path" in recorder.rejected[0]
    assert recorder.coverage().events == 0 and recorder.coverage().devices == {}
    assert recorder.events == []


def _distinct_events() -> list:
    """Events of three different calls (three paths), each its own object."""
    with recording("probe") as probe:
        _call(1, 32, policy=GEMV_ON)
        _call(16, 64)
        _call(16, 36)
    return [r.event for r in probe.events]


@pytest.mark.parametrize("slots", (1, 2, 256))
def test_repeated_event_objects_count_exactly_as_events_added_one_by_one(monkeypatch, slots):
    """The fast path announces one event object per call signature; the recorder counts its
    repeats without re-checking them. Whatever the interleaving of events and tests, and however
    often the repeat slots overflow, the coverage must equal adding every announcement alone."""
    monkeypatch.setattr(Recorder, "REPEAT_SLOTS", slots)
    events = _distinct_events()
    rng = np.random.default_rng(slots)
    tests = ["suite::a", "suite::b", None]
    recorder = Recorder(models=[nvfp4_kernels.MODEL]).start()
    expected = CoverageData()
    expected.declare(nvfp4_kernels.MODEL)
    try:
        for _ in range(300):
            test = tests[int(rng.integers(len(tests)))]
            event = events[int(rng.integers(len(events)))]
            with recorder.attribute(test):
                for _ in range(int(rng.integers(1, 5))):
                    nvfp4_harness.model.bus.announce(event)
                    expected.add(event, test)
            if rng.random() < 0.1:
                assert len(recorder) == expected.events  # a read in the middle flushes, and counting goes on
    finally:
        recorder.stop()
    assert recorder.coverage() == expected
    assert recorder.coverage().to_dict() == expected.to_dict()
    assert len(recorder.events) == expected.events


def test_clear_forgets_repeats_not_yet_added():
    event = _distinct_events()[0]
    recorder = Recorder("t")
    for _ in range(5):
        recorder(event)
    recorder.clear()
    recorder(event)
    assert len(recorder) == 1
    assert recorder.coverage().operator("nvfp4").paths["gemv"].hits == 1


def test_coverage_data_add_times_equals_that_many_adds():
    events = _distinct_events()
    once, many = CoverageData(), CoverageData()
    for event in events:
        for _ in range(3):
            once.add(event, "suite::t")
        many.add(event, "suite::t", times=3)
    assert once == many and once.events == 9
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="times must be a positive int"):
            many.add(events[0], "suite::t", times=bad)


def test_events_for_finds_a_label_by_value_not_by_identity():
    """A label built at run time (a test id read from a report, a name from a config) is equal
    to, not the same object as, the one the events were recorded under."""
    label = "smoke"
    with recording(label) as rec:
        _call(2, 64)
    asked = "".join(list(label))
    assert asked == label and asked is not label
    assert len(rec.events_for(asked)) == 1 and rec.events_for(asked) == rec.events_for(label)


def test_recording_takes_its_label_by_keyword_and_models_only_by_keyword():
    with recording(label="by-keyword") as rec:
        _call(2, 64)
    assert [r.test for r in rec.events] == ["by-keyword"]
    with pytest.raises(TypeError):
        with recording("label", ()):
            pass


def test_a_recorded_event_cannot_be_reattributed_by_a_reader():
    """``events`` hands out the recorder's own records (a new list, the same records): they are
    frozen, so a reader cannot move a call to another test behind the recorder's back."""
    import dataclasses

    with recording("owner") as rec:
        _call(2, 64)
    with pytest.raises(dataclasses.FrozenInstanceError):
        rec.events[0].test = "someone-else"
    assert rec.events_for("owner") and not rec.events_for("someone-else")


def test_a_repeated_event_is_checked_once_and_its_repeats_added_in_one_go(monkeypatch):
    """The point of the repeat counting is cost: one full check per (event, test), then a
    counter. Two events announced alternately 50 times each must reach the coverage data in two
    full adds plus one add per event for its repeats, and the counts must still be 50 each."""
    first, second = _distinct_events()[:2]
    recorder = Recorder("t")
    calls = []
    real_add = CoverageData.add

    def counting_add(self, event, test=None, times=1):
        calls.append(times)
        return real_add(self, event, test, times)

    monkeypatch.setattr(CoverageData, "add", counting_add)
    for _ in range(50):
        recorder(first)
        recorder(second)
    assert calls == [1, 1]  # nothing re-checked while announcing
    op = recorder.coverage().operator("nvfp4")
    assert sorted(calls) == [1, 1, 49, 49]
    assert op.paths[first.path].hits == 50 and op.paths[second.path].hits == 50


def test_the_repeat_slots_bound_what_is_held_between_reads(monkeypatch):
    """At most REPEAT_SLOTS (event, test) pairs wait to be added; the next new one flushes them."""
    monkeypatch.setattr(Recorder, "REPEAT_SLOTS", 2)
    events = _distinct_events()
    recorder = Recorder("t")
    for event in events + events:
        recorder(event)
        assert len(recorder._repeats) <= 2
    assert len(recorder) == 2 * len(events)
