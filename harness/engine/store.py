"""Coverage data files on disk: written atomically, and never lost to a concurrent run.

Two pytest runs given the same ``--dispatch-report=json:PATH`` at once used to keep only the
last writer's data. Now every write holds an exclusive lock on ``PATH.lock`` while it reads and
replaces PATH, and the rule is:

* PATH is unchanged since this run started (or absent): the run replaces it, as a rerun should;
* PATH changed while this run was going (another run wrote it): the run merges its data into
  what is there, so both runs' data stay;
* ``--dispatch-append``: the run always merges into an existing PATH.

The file itself is replaced in one step (:func:`~nvfp4_harness.engine.data.write_atomic`), so a
reader never sees half a document. A PATH that holds something other than coverage data is
never merged into or overwritten silently: the write fails and says so.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass

from nvfp4_harness.engine.data import CoverageData, write_atomic
from nvfp4_harness.model import DataError

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: writes stay atomic, concurrent merges unlocked
    fcntl = None  # type: ignore[assignment]


@dataclass(frozen=True)
class FileState:
    """What identifies one version of a file: inode, size and modification time (ns)."""

    inode: int
    size: int
    mtime_ns: int


def file_state(path: str | os.PathLike[str]) -> FileState | None:
    """The file's current state, None when it does not exist."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return FileState(st.st_ino, st.st_size, st.st_mtime_ns)


@contextlib.contextmanager
def locked(path: str | os.PathLike[str]) -> Iterator[None]:
    """An exclusive lock on ``PATH.lock`` for the block (other writers of PATH wait)."""
    lock_path = os.fspath(path) + ".lock"
    os.makedirs(os.path.dirname(os.path.abspath(lock_path)), exist_ok=True)
    with open(lock_path, "a") as handle:
        if fcntl is not None:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def save(data: CoverageData, path: str | os.PathLike[str], seen_at_start: FileState | None,
         append: bool = False) -> tuple[CoverageData, bool]:
    """Write ``data`` to ``path`` under the rules of this module; returns what was written and
    whether it was merged with data already there."""
    with locked(path):
        now = file_state(path)
        merge = now is not None and (append or now != seen_at_start)
        written = data
        if merge:
            try:
                existing = CoverageData.read(path)
            except DataError as exc:
                raise DataError(f"{os.fspath(path)!r} changed during this run but does not hold coverage data "
                                f"({exc}); write the report to another path") from exc
            written = existing.copy()
            written.update(data)
        write_atomic(path, written.dumps())
    return written, merge
