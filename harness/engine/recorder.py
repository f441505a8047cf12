"""The recorder: a dispatch listener that files every event under the test that caused it.

Operators announce a :class:`~nvfp4_harness.model.DispatchEvent` per call (instrumented, or
observed through the profiler) and know nothing of tests. A :class:`Recorder` registered as a
listener pairs each event with the *current test*
(a pytest node id set by the plugin, or a label you choose) and keeps a running
:class:`~nvfp4_harness.engine.coverage.CoverageData`, so path coverage is available at any moment without
storing every event.

The current test is one value per recorder rather than per thread on purpose: a test that
spawns threads (a data loader, a thread pool around the operator) still owns their calls.
Only one thread, the one driving the tests, should change it. Appends are serialised by a
lock, so listeners called from many threads at once lose nothing.

Recording must stay cheap next to a kernel launch (an eager decode step is a few tens of
microseconds). An operator that announces the *same* event object for every call of one
signature (nvfp4_kernels' fast path does) is counted in full only the first time per test;
later announcements of it only bump a counter, which is added to the coverage data whenever
anything reads it. The counts are the same as adding every event one by one.

Outside pytest use :func:`recording`::

    with nvfp4_harness.recording("smoke") as rec:
        nvfp4_kernels.nvfp4_matmul(a, b, scale, g)
    rec.events            # [Recorded(event=DispatchEvent(...), test='smoke')]
    rec.coverage()        # CoverageData of the block

Pass ``models=`` to declare operators up front, so one that is never called shows 0% instead
of being absent.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from nvfp4_harness.engine.data import CoverageData
from nvfp4_harness.model import DataError, DispatchEvent, DispatchModel, add_listener, remove_listener


@dataclass(frozen=True)
class Recorded:
    """One event and the test it is attributed to (None: outside any test)."""

    event: DispatchEvent
    test: str | None


class Recorder:
    """A thread-safe dispatch listener; call :meth:`start` to listen, :meth:`stop` to stop.

    ``label`` is the attribution used outside :meth:`attribute` blocks (None by default).
    ``keep_events=False`` keeps only the aggregated coverage, for long sessions (the pytest
    plugin) where holding every event would cost memory for nothing.
    """

    def __init__(self, label: str | None = None, *, keep_events: bool = True,
                 models: Iterable[DispatchModel] = ()) -> None:
        self._lock = threading.Lock()
        self._current: str | None = label
        self._keep = keep_events
        self._events: list[Recorded] = []
        self._models = tuple(models)
        self._data = self._fresh_data()
        #: (id(event), test) -> [event, announcements not yet added to _data]; the entry holds the
        #: event, so its id cannot be reused by another object while the entry exists
        self._repeats: dict[tuple[int, str | None], list] = {}
        self._listening = False
        #: events the coverage data refused (DataError), with the reason; they count nowhere
        self.rejected: list[str] = []

    def _fresh_data(self) -> CoverageData:
        data = CoverageData()
        for model in self._models:
            data.declare(model)
        return data

    def declare(self, model: DispatchModel) -> None:
        """Include ``model``'s operator in the coverage even if it is never called."""
        with self._lock:
            self._models += (model,)
            self._data.declare(model)

    #: distinct (event, test) pairs whose repeats are counted before they are added to the data
    REPEAT_SLOTS = 256

    def __call__(self, event: DispatchEvent) -> None:
        test = self._current
        key = (id(event), test)
        with self._lock:
            repeat = self._repeats.get(key)
            if repeat is not None and repeat[0] is event:
                repeat[1] += 1  # checked and counted in full when first seen under this test
            else:
                try:
                    self._data.add(event, test)  # checks everything before counting anything
                except DataError as exc:
                    self.rejected.append(f"{exc} (test {test})")
                    return
                if len(self._repeats) >= self.REPEAT_SLOTS:
                    self._flush_repeats()
                self._repeats[key] = [event, 0]
            if self._keep:
                self._events.append(Recorded(event, test))

    def _flush_repeats(self) -> None:
        """Add the counted repeats to the data and forget them (call with the lock held)."""
        for (_, test), (event, times) in self._repeats.items():
            if times:
                self._data.add(event, test, times)
        self._repeats.clear()

    # --- lifecycle ------------------------------------------------------------------------

    def start(self) -> Recorder:
        """Register with the dispatcher (idempotent); returns the recorder."""
        with self._lock:
            if self._listening:
                return self
            self._listening = True
        add_listener(self)
        return self

    def stop(self) -> None:
        """Unregister; what was recorded stays available."""
        with self._lock:
            self._listening = False
        remove_listener(self)

    @property
    def listening(self) -> bool:
        return self._listening

    # --- attribution ----------------------------------------------------------------------

    @property
    def current_test(self) -> str | None:
        return self._current

    @contextmanager
    def attribute(self, test: str | None) -> Iterator[None]:
        """Attribute events inside the block to ``test`` (None: to no test); nests, restores."""
        previous = self._current
        self._current = test
        try:
            yield
        finally:
            self._current = previous

    # --- results --------------------------------------------------------------------------

    @property
    def events(self) -> list[Recorded]:
        """A snapshot of the recorded events, in arrival order (empty with keep_events=False)."""
        with self._lock:
            return list(self._events)

    def events_for(self, test: str | None) -> list[DispatchEvent]:
        """The events attributed to ``test``."""
        return [r.event for r in self.events if r.test == test]

    def coverage(self) -> CoverageData:
        """A snapshot of the coverage of everything recorded so far."""
        with self._lock:
            self._flush_repeats()
            return self._data.copy()

    def clear(self) -> None:
        with self._lock:
            self._events.clear()
            self._repeats.clear()
            self._data = self._fresh_data()

    def __len__(self) -> int:
        with self._lock:
            self._flush_repeats()
            return self._data.events


@contextmanager
def recording(label: str | None = None, *, models: Iterable[DispatchModel] = ()) -> Iterator[Recorder]:
    """Record every dispatch inside the block, attributed to ``label``.

    Yields a started :class:`Recorder`; it stops listening when the block ends, and its
    ``events`` and ``coverage()`` remain readable afterwards.
    """
    recorder = Recorder(label, models=models).start()
    try:
        yield recorder
    finally:
        recorder.stop()
