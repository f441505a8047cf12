"""No run is ever lost: two real pytest processes writing one json report at once both keep
their data, a rerun replaces the file, and a reader never sees half a document."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

SUITE = textwrap.dedent('''
    import os, time
    from pathlib import Path
    from nvfp4_harness.model import DispatchModel, Guard, PathSpec, record

    MODEL = DispatchModel("conc", [PathSpec("small", guards=[Guard("m_small", "M <= 4",
                                                                   lambda p, d, pol: p["m"] <= 4)]),
                                   PathSpec("big")])
    BARRIER = Path(os.environ["BARRIER_DIR"])


    def test_calls():
        (BARRIER / str(os.getpid())).touch()
        deadline = time.time() + 60
        while len(list(BARRIER.iterdir())) < int(os.environ["BARRIER_PARTIES"]) and time.time() < deadline:
            time.sleep(0.01)          # both runs are inside their session before either finishes
        for m in range(int(os.environ["CALLS"])):
            record(MODEL, "small" if m <= 4 else "big", {"m": m})
''')


def start_run(where: Path, report: Path, calls: int, barrier: Path, parties: int, *extra: str) -> subprocess.Popen:
    env = {"BARRIER_DIR": str(barrier), "BARRIER_PARTIES": str(parties), "CALLS": str(calls),
           "PATH": "/usr/bin:/bin"}
    return subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_conc.py",
                             f"--dispatch-report=json:{report}", *extra], cwd=where, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def hits(report: Path) -> tuple[int, int, int]:
    doc = json.loads(report.read_text())
    paths = doc["operators"]["conc"]["paths"]
    return paths["small"]["hits"], paths["big"]["hits"], len(doc["runs"])


def test_two_concurrent_runs_keep_both_runs_data_and_a_rerun_replaces(tmp_path: Path) -> None:
    (tmp_path / "test_conc.py").write_text(SUITE)
    report = tmp_path / "out" / "cov.json"
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    runs = [start_run(tmp_path, report, calls, barrier, 2) for calls in (7, 12)]
    outputs = [r.communicate(timeout=120)[0] for r in runs]
    assert [r.returncode for r in runs] == [0, 0], outputs
    assert hits(report) == (5 + 5, 2 + 7, 2), "both runs' calls are in the file"
    assert any("merged with the data another run wrote there meanwhile" in out for out in outputs), outputs
    # a rerun alone replaces the file; --dispatch-append adds to it
    for child in barrier.iterdir():
        child.unlink()
    rerun = start_run(tmp_path, report, 3, barrier, 1)
    assert rerun.wait(timeout=120) == 0
    assert hits(report) == (3, 0, 1)
    for child in barrier.iterdir():
        child.unlink()
    appended = start_run(tmp_path, report, 6, barrier, 1, "--dispatch-append")
    out = appended.communicate(timeout=120)[0]
    assert appended.returncode == 0 and "--dispatch-append" in out
    assert hits(report) == (3 + 5, 1, 2)


WRITER = textwrap.dedent('''
    import sys
    from nvfp4_harness.engine.data import write_atomic
    path, tag = sys.argv[1], sys.argv[2]
    for i in range(300):
        write_atomic(path, '{"writer": "%s", "i": %d, "pad": "%s"}' % (tag, i, "x" * (1000 + 37 * i)))
''')


def test_a_reader_never_sees_half_a_document_while_two_processes_write(tmp_path: Path) -> None:
    target = tmp_path / "doc.json"
    target.write_text('{"writer": "none"}')
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(target), tag]) for tag in ("a", "b")]
    seen = set()
    while any(w.poll() is None for w in writers):
        seen.add(json.loads(target.read_text())["writer"])  # raises on a torn or interleaved file
        time.sleep(0.0005)
    assert [w.returncode for w in writers] == [0, 0]
    assert json.loads(target.read_text())["i"] == 299
    assert seen & {"a", "b"}
