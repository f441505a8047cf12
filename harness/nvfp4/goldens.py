"""Golden SHA-256 hashes of whole tensors, as a pytest plugin (entry point ``nvfp4_goldens``).

A test asks the ``golden`` fixture to compare a tensor with the hash stored for it::

    def test_my_kernel(golden):
        golden.check("my_kernel/out", y)                                     # key "default"
        golden.check("operator/fp16-bs16/dequant", w, key=golden.PORTABLE)   # machine independent
        golden.check("operator/fp16-bs16/gemv", y, key=golden.key_for("cuda"))  # this GPU stack

Keys say where a golden's bits are expected to hold. :data:`DEFAULT_KEY` is for a user's own
tensors: recorded and refreshed with ``--golden-update`` after an intended change.
:data:`PORTABLE_KEY` is for bits a contract fixes on every machine (a dequantized NVFP4 weight,
docs/contract.md): a different hash there is a bug, never a golden to refresh. A GEMM output
depends on who summed it: the CPU reference sums in a fixed k order with IEEE fp32 operations,
so its results are keyed :data:`CPU_KEY` on every machine; a GPU result depends on the
architecture, the CUDA and cuBLAS libraries and torch, and its key names all four
(:func:`environment_key`).

Rules that keep goldens honest:

* a missing golden FAILS, with the command that records it (``--golden-update``);
* ``--golden-update`` writes missing or changed goldens and still fails each test that wrote
  one, so a CI run can never regenerate its own expectations silently;
* a stored :data:`PORTABLE_KEY` golden is never rewritten: those bits are machine independent,
  so a different hash is a bug in the backend that produced it (delete the file to re-record
  it on purpose). Hence a GPU run with ``--golden-update`` rewrites GPU-keyed (and default-keyed)
  files, and portable or CPU goldens only when they are missing;
* goldens stored under a key this run used, but checked by no test, are listed in the terminal
  summary (delete them after a full run); keys of other environments are left alone (``-v``
  lists them);
* one JSON file per golden, ``<golden-dir>/<key>/<name>.json``, written to a temporary file
  and moved into place with :func:`os.replace`, so pytest-xdist workers never see half files.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from nvfp4_harness.engine.data import write_atomic
from nvfp4_harness.nvfp4.verify import tensor_sha256, to_numpy

DEFAULT_KEY = "default"
PORTABLE_KEY = "portable"
CPU_KEY = "cpu"
SCHEMA = 1
#: Plain characters only: golden files travel through tools (archives, artifact uploads, copy
#: tools) that drop or mangle names with characters such as '+'.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*$")
_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_WORKER_OUTPUT = "nvfp4_goldens"


# --- environment keys -------------------------------------------------------------------------


def cublas_version() -> str:
    """The cuBLAS library version torch loaded, e.g. ``"12.8.4"`` (``"unknown"`` if not found)."""
    import ctypes

    import torch

    torch.zeros(1, device="cuda")  # a CUDA context first, then the handle makes torch load cuBLAS
    torch.cuda.current_blas_handle()
    libs = []
    try:
        with open("/proc/self/maps") as maps:
            libs = sorted({line.split()[-1] for line in maps if "libcublas.so" in line})
    except OSError:
        pass
    for lib in libs:
        try:
            handle = ctypes.CDLL(lib)
            parts = []
            for prop in (0, 1, 2):  # MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
                value = ctypes.c_int()
                if handle.cublasGetProperty(prop, ctypes.byref(value)) != 0:
                    raise OSError("cublasGetProperty failed")
                parts.append(str(value.value))
            return ".".join(parts)
        except (OSError, AttributeError):
            continue
    from importlib import metadata

    for dist in ("nvidia-cublas", "nvidia-cublas-cu13", "nvidia-cublas-cu12"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return "unknown"


def environment_key(backend: str = "cpu", device: Any = None) -> str:
    """The golden key for GEMM outputs computed by ``backend`` (``"cpu"`` or ``"cuda"``).

    ``cpu`` for the CPU reference (machine independent); for CUDA
    ``sm_<arch>-<multiprocessors>sm-cuda<version>-cublas<version>-torch<version>``, any character
    other than letters, digits, ``.``, ``_`` and ``-`` replaced by ``_`` (``2.11.0+cu130`` ->
    ``2.11.0_cu130``). The multiprocessor count is part of it because the split-K kernels choose
    their split count from it (nvfp4_kernels.tiling), and the split count sets the summation
    order: an H100 PCIe (sm_90, 114 SMs) sums some shapes in another order than an H200 (sm_90,
    132 SMs), so their bits may differ without either being wrong.
    """
    if backend == "cpu":
        return CPU_KEY
    if backend != "cuda":
        raise ValueError(f"backend must be 'cpu' or 'cuda', got {backend!r}")
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("a CUDA golden key needs a CUDA GPU; use key 'cpu' for the CPU backend")
    major, minor = torch.cuda.get_device_capability(device)
    props = torch.cuda.get_device_properties(device if device is not None else torch.cuda.current_device())
    key = (f"sm_{major}{minor}-{props.multi_processor_count}sm-cuda{torch.version.cuda}-cublas{cublas_version()}"
           f"-torch{torch.__version__}")
    return re.sub(r"[^A-Za-z0-9._-]", "_", key)


# --- the store --------------------------------------------------------------------------------


@dataclass(frozen=True)
class GoldenRecord:
    """What a golden file holds: the hash and, for messages, what was hashed."""

    sha256: str
    dtype: str
    shape: tuple[int, ...]
    test: str = ""

    def describe(self) -> str:
        return f"{self.sha256} ({self.dtype} {list(self.shape)})"


class GoldenStore:
    """One JSON file per golden under ``root/<key>/<name>.json``; writes are atomic."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def path(self, key: str, name: str) -> Path:
        if not _KEY.match(key):
            raise ValueError(f"golden key {key!r} may only hold letters, digits and . _ -")
        if not _NAME.match(name):
            raise ValueError(f"golden name {name!r}: use letters, digits, . _ - and '/' between parts "
                             f"(e.g. 'operator/fp16-bs16/dequant')")
        return self.root / key / f"{name}.json"

    def read(self, key: str, name: str) -> GoldenRecord | None:
        path = self.path(key, name)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except ValueError as exc:
            raise ValueError(f"golden file {path} is not valid JSON ({exc}); delete it and re-record it "
                             f"with --golden-update") from exc
        return GoldenRecord(data["sha256"], data["dtype"], tuple(data["shape"]), data.get("test", ""))

    def write(self, key: str, name: str, record: GoldenRecord) -> Path:
        """Write atomically: a temporary file in the same folder, then :func:`os.replace`."""
        path = self.path(key, name)
        payload = json.dumps({"schema": SCHEMA, "key": key, "name": name, "sha256": record.sha256,
                              "dtype": record.dtype, "shape": list(record.shape), "test": record.test},
                             indent=2, sort_keys=True) + "\n"
        write_atomic(path, payload)
        return path

    def stored(self) -> set[tuple[str, str]]:
        """Every (key, name) with a golden file."""
        found = set()
        if not self.root.is_dir():
            return found
        for path in self.root.rglob("*.json"):
            if path.name.startswith("."):
                continue
            rel = path.relative_to(self.root)
            if len(rel.parts) >= 2:
                found.add((rel.parts[0], str(Path(*rel.parts[1:]).with_suffix("")).replace(os.sep, "/")))
        return found


# --- the pytest side --------------------------------------------------------------------------


@dataclass
class _SessionState:
    store: GoldenStore
    update: bool
    #: (key, name) -> (digest, nodeid) of every golden checked in this process
    checked: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    written: list[str] = field(default_factory=list)


_STATE = pytest.StashKey[_SessionState]()
_PENDING = pytest.StashKey[list]()


class GoldenChecker:
    """The ``golden`` fixture: compares tensors with their stored hashes for one test."""

    DEFAULT = DEFAULT_KEY
    PORTABLE = PORTABLE_KEY

    def __init__(self, state: _SessionState, item: pytest.Item) -> None:
        self._state, self._item = state, item

    @staticmethod
    def key_for(backend: str, device: Any = None) -> str:
        """The key for GEMM outputs of ``backend``; see :func:`environment_key`."""
        return environment_key(backend, device)

    def check(self, name: str, tensor: Any, key: str = DEFAULT_KEY) -> str:
        """Fail unless ``tensor``'s SHA-256 equals the golden ``key/name``; returns the hash."""
        state, nodeid = self._state, self._item.nodeid
        arr = to_numpy(tensor)
        record = GoldenRecord(tensor_sha256(arr), arr.dtype.name, tuple(arr.shape), nodeid)
        path = state.store.path(key, name)
        seen = state.checked.get((key, name))
        if seen is not None and seen[0] != record.sha256:
            pytest.fail(f"golden {key}/{name} was checked twice in this run with different tensors "
                        f"(first by {seen[1]}); give each golden its own name", pytrace=False)
        state.checked[(key, name)] = (record.sha256, nodeid)
        stored = state.store.read(key, name)
        if stored is not None and stored.sha256 == record.sha256:
            return record.sha256
        if stored is None and not state.update:
            pytest.fail(f"golden {key}/{name} is missing (expected {path}).\n"
                        f"Record it with: pytest {nodeid} --golden-update  (that run fails on purpose; "
                        f"review and commit the new file)", pytrace=False)
        if stored is not None and (not state.update or key == PORTABLE_KEY):
            why = ("a portable golden is machine independent, so this is a bug in the backend that "
                   "produced the tensor, not a golden to refresh (delete the file to re-record it on "
                   "purpose)" if state.update else "if the change is intended, re-record with --golden-update")
            pytest.fail(f"golden {key}/{name} does not match ({path}):\n"
                        f"  stored:   {stored.describe()}\n  computed: {record.describe()}\n{why}",
                        pytrace=False)
        state.store.write(key, name, record)
        state.written.append(str(path))
        self._item.stash.setdefault(_PENDING, []).append(
            f"{'re-recorded' if stored else 'recorded'} golden {key}/{name} -> {path}")
        return record.sha256


@pytest.fixture
def golden(request: pytest.FixtureRequest) -> GoldenChecker:
    """Compare tensors with stored SHA-256 goldens (see :mod:`nvfp4_harness.nvfp4.goldens`)."""
    return GoldenChecker(request.config.stash[_STATE], request.node)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("nvfp4-goldens", "golden tensor hashes")
    group.addoption("--golden-update", action="store_true", default=False,
                    help="record missing or changed goldens (portable ones are never rewritten); "
                         "each test that records one still fails")
    group.addoption("--golden-dir", default=None, metavar="DIR",
                    help="where goldens live (default: <rootdir>/fixtures/goldens)")


def pytest_configure(config: pytest.Config) -> None:
    root = config.getoption("--golden-dir", None) or Path(str(config.rootpath)) / "fixtures" / "goldens"
    config.stash[_STATE] = _SessionState(GoldenStore(Path(root).resolve()),
                                         bool(config.getoption("--golden-update", False)))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    report = yield
    pending = item.stash.get(_PENDING, None)
    if report.when == "call" and pending and report.passed:
        report.outcome = "failed"
        report.longrepr = ("\n".join(pending) + "\n--golden-update fails every test that records a golden, "
                           "so no run passes on expectations it wrote itself; rerun without it.")
    return report


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    if hasattr(config, "workeroutput"):  # an xdist worker: hand the controller what it saw
        state = config.stash[_STATE]
        config.workeroutput[_WORKER_OUTPUT] = json.dumps({
            "checked": [[k, n, d, t] for (k, n), (d, t) in state.checked.items()],
            "written": state.written})


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    data = getattr(node, "workeroutput", {}).get(_WORKER_OUTPUT)
    if not data:
        return
    state = node.config.stash[_STATE]
    payload = json.loads(data)
    for key, name, digest, test in payload["checked"]:
        state.checked.setdefault((key, name), (digest, test))
    state.written.extend(payload["written"])


def unused_goldens(state: _SessionState) -> tuple[list[tuple[str, str]], dict[str, int]]:
    """Stored goldens under a key this run used but that no test checked, and per other key
    (another environment's) how many goldens it holds."""
    used_keys = {key for key, _ in state.checked}
    unused, others = [], {}
    for key, name in sorted(state.store.stored()):
        if key in used_keys:
            if (key, name) not in state.checked:
                unused.append((key, name))
        else:
            others[key] = others.get(key, 0) + 1
    return unused, others


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return
    state = config.stash[_STATE]
    if not state.checked and not state.written:
        return
    tr = terminalreporter
    unused, others = unused_goldens(state)
    if state.written:
        tr.write_sep("-", f"goldens recorded: {len(state.written)} (review, then commit)")
        for path in state.written:
            tr.write_line(f"  {path}")
    if unused:
        tr.write_sep("-", f"unused goldens: {len(unused)}")
        tr.write_line("stored under a key this run used, but checked by no test "
                      "(after a full run, delete them):")
        for key, name in unused:
            tr.write_line(f"  {state.store.path(key, name)}")
    if others and tr.verbosity > 0:
        listing = ", ".join(f"{key} ({count})" for key, count in sorted(others.items()))
        tr.write_line(f"goldens recorded on other machines or stacks (not comparable here, left alone): {listing}")
