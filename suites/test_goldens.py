"""The golden plugin's contract, run through pytester: missing fails, --golden-update records
and still fails, mismatches show both hashes, unused goldens are reported, writes are atomic."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from nvfp4_harness.nvfp4 import goldens
from nvfp4_harness.nvfp4.goldens import GoldenRecord, GoldenStore
from nvfp4_harness.nvfp4.verify import tensor_sha256

pytest_plugins = ["pytester"]


def _plugin_args() -> list[str]:
    """Load the plugin explicitly where the package is not installed (only on PYTHONPATH), since
    then its pytest11 entry point is absent; an installed one is loaded by the entry point."""
    from importlib.metadata import entry_points

    installed = any(ep.value == "nvfp4_harness.nvfp4.goldens" for ep in entry_points(group="pytest11"))
    return [] if installed else ["-p", "nvfp4_harness.nvfp4.goldens"]

TWO_GOLDENS = """
import numpy as np

def test_first(golden):
    golden.check("demo/first", np.arange(6, dtype=np.float16).reshape(2, 3), key=golden.PORTABLE)

def test_second(golden):
    golden.check("demo/second", np.full(4, VALUE, dtype=np.float32), key="cpu")
"""


def _write_suite(pytester: pytest.Pytester, value: float = 1.5) -> None:
    pytester.makepyfile(test_demo=TWO_GOLDENS.replace("VALUE", repr(value)))


def _golden_file(pytester: pytest.Pytester, key: str, name: str) -> Path:
    return pytester.path / "fixtures" / "goldens" / key / f"{name}.json"


def test_missing_golden_fails_and_says_how_to_record_it(pytester: pytest.Pytester) -> None:
    _write_suite(pytester)
    result = pytester.runpytest_inprocess(*_plugin_args())
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*golden portable/demo/first is missing*", "*--golden-update*"])
    assert not (pytester.path / "fixtures").exists(), "a plain run must never write goldens"


def test_update_records_goldens_fails_the_run_then_a_plain_run_passes(pytester: pytest.Pytester) -> None:
    _write_suite(pytester)
    update = pytester.runpytest_inprocess(*_plugin_args(), "--golden-update")
    update.assert_outcomes(failed=2)
    update.stdout.fnmatch_lines(["*recorded golden portable/demo/first*", "*goldens recorded: 2*"])
    first = json.loads(_golden_file(pytester, "portable", "demo/first").read_text())
    assert first["sha256"] == tensor_sha256(np.arange(6, dtype=np.float16).reshape(2, 3))
    assert first["dtype"] == "float16" and first["shape"] == [2, 3]
    second = json.loads(_golden_file(pytester, "cpu", "demo/second").read_text())
    assert second["sha256"] == tensor_sha256(np.full(4, 1.5, dtype=np.float32))
    pytester.runpytest_inprocess(*_plugin_args()).assert_outcomes(passed=2)
    again = pytester.runpytest_inprocess(*_plugin_args(), "--golden-update")  # nothing to record: passes
    again.assert_outcomes(passed=2)


def test_mismatch_fails_with_both_hashes(pytester: pytest.Pytester) -> None:
    _write_suite(pytester, 1.5)
    pytester.runpytest_inprocess(*_plugin_args(), "--golden-update")
    _write_suite(pytester, 2.5)
    result = pytester.runpytest_inprocess(*_plugin_args())
    result.assert_outcomes(passed=1, failed=1)
    stored = tensor_sha256(np.full(4, 1.5, dtype=np.float32))
    computed = tensor_sha256(np.full(4, 2.5, dtype=np.float32))
    result.stdout.fnmatch_lines([f"*stored:   {stored}*", f"*computed: {computed}*"])


def test_update_rewrites_environment_goldens_but_never_portable_ones(pytester: pytest.Pytester) -> None:
    _write_suite(pytester, 1.5)
    pytester.runpytest_inprocess(*_plugin_args(), "--golden-update")
    portable = _golden_file(pytester, "portable", "demo/first")
    before = portable.read_text()
    pytester.makepyfile(test_demo=TWO_GOLDENS.replace("VALUE", "2.5").replace(
        "np.arange(6, dtype=np.float16).reshape", "(np.arange(6, dtype=np.float16) + 1).reshape"))
    result = pytester.runpytest_inprocess(*_plugin_args(), "--golden-update")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*portable golden is machine independent*", "*re-recorded golden cpu/demo/second*"])
    assert portable.read_text() == before
    cpu = json.loads(_golden_file(pytester, "cpu", "demo/second").read_text())
    assert cpu["sha256"] == tensor_sha256(np.full(4, 2.5, dtype=np.float32))


def test_unused_goldens_are_reported_and_other_environments_are_not(pytester: pytest.Pytester) -> None:
    _write_suite(pytester)
    pytester.runpytest_inprocess(*_plugin_args(), "--golden-update")
    store = GoldenStore(pytester.path / "fixtures" / "goldens")
    store.write("portable", "demo/stale", GoldenRecord("0" * 64, "float16", (1,)))
    store.write("sm_90-cuda13.0-cublas13.1.0-torch2.11.0", "demo/second", GoldenRecord("1" * 64, "float32", (4,)))
    result = pytester.runpytest_inprocess(*_plugin_args())
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*unused goldens: 1*", "*portable/demo/stale.json"])
    assert "demo/second.json" not in "\n".join(line for line in result.stdout.lines if "unused" in line)
    result.stdout.no_fnmatch_line("*other machines*")  # a plain run does not mention other stacks' goldens
    verbose = pytester.runpytest_inprocess(*_plugin_args(), "-v")
    verbose.stdout.fnmatch_lines(["*goldens recorded on other machines or stacks (not comparable here, left alone): "
                                  "sm_90-cuda13.0-cublas13.1.0-torch2.11.0 (1)*"])


def test_golden_dir_option(pytester: pytest.Pytester, tmp_path: Path) -> None:
    _write_suite(pytester)
    elsewhere = tmp_path / "elsewhere"
    pytester.runpytest_inprocess(*_plugin_args(), "--golden-update", f"--golden-dir={elsewhere}")
    assert (elsewhere / "portable" / "demo" / "first.json").is_file()
    assert not (pytester.path / "fixtures").exists()
    pytester.runpytest_inprocess(*_plugin_args(), f"--golden-dir={elsewhere}").assert_outcomes(passed=2)


def test_same_name_with_different_tensors_in_one_run_fails(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_clash="""
        import numpy as np
        def test_a(golden):
            golden.check("clash", np.zeros(2, dtype=np.float16))
        def test_b(golden):
            golden.check("clash", np.ones(2, dtype=np.float16))
    """)
    result = pytester.runpytest_inprocess(*_plugin_args(), "--golden-update")
    result.stdout.fnmatch_lines(["*checked twice in this run with different tensors*"])


def test_xdist_workers_record_and_the_controller_merges(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    pytester.makepyfile(test_many="""
        import numpy as np
        import pytest
        @pytest.mark.parametrize("i", range(6))
        def test_one(golden, i):
            golden.check(f"many/g{i}", np.full(3, i, dtype=np.float32), key="cpu")
    """)
    update = pytester.runpytest_subprocess(*_plugin_args(), "-n", "2", "--golden-update")
    update.assert_outcomes(failed=6)
    update.stdout.fnmatch_lines(["*goldens recorded: 6*"])
    folder = pytester.path / "fixtures" / "goldens" / "cpu" / "many"
    assert sorted(p.name for p in folder.iterdir()) == [f"g{i}.json" for i in range(6)]
    GoldenStore(pytester.path / "fixtures" / "goldens").write("cpu", "many/g9", GoldenRecord("2" * 64, "float32", (3,)))
    checked = pytester.runpytest_subprocess(*_plugin_args(), "-n", "2")
    checked.assert_outcomes(passed=6)
    checked.stdout.fnmatch_lines(["*unused goldens: 1*", "*cpu/many/g9.json"])


def test_atomic_write_leaves_the_old_golden_when_replacing_fails(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    store = GoldenStore(tmp_path)
    old = GoldenRecord("a" * 64, "float16", (2,))
    path = store.write("cpu", "x/y", old)
    assert store.read("cpu", "x/y") == old

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(goldens.os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        store.write("cpu", "x/y", GoldenRecord("b" * 64, "float16", (2,)))
    monkeypatch.undo()
    assert store.read("cpu", "x/y") == old, "a failed write must leave the stored golden intact"
    assert os.listdir(path.parent) == ["y.json"], "the temporary file must be cleaned up"
    assert store.stored() == {("cpu", "x/y")}


def test_bad_names_and_keys_say_what_is_allowed(tmp_path: Path) -> None:
    store = GoldenStore(tmp_path)
    for bad in ("../escape", "/abs", "with space", "a//b", "", "torch2.11+cu130"):
        with pytest.raises(ValueError, match="golden name"):
            store.path("cpu", bad)
    with pytest.raises(ValueError, match="golden key"):
        store.path("a/b", "ok")


def test_environment_keys() -> None:
    assert goldens.environment_key("cpu") == goldens.CPU_KEY
    with pytest.raises(ValueError, match="'cpu' or 'cuda'"):
        goldens.environment_key("tpu")


def test_cuda_keys_of_one_architecture_differ_by_multiprocessor_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a GPU: an H200 (132 SMs) and an H100 PCIe (114 SMs) are both sm_90, but the split-K
    kernels pick their split (and so their summation order) from the SM count, so their CUDA
    goldens must not share a key."""
    torch = pytest.importorskip("torch")
    from types import SimpleNamespace

    sms = {"count": 132}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device: SimpleNamespace(multi_processor_count=sms["count"]))
    monkeypatch.setattr(goldens, "cublas_version", lambda: "13.1.0")
    h200 = goldens.environment_key("cuda")
    sms["count"] = 114
    h100_pcie = goldens.environment_key("cuda")
    assert h200.startswith("sm_90-132sm-cuda") and h100_pcie.startswith("sm_90-114sm-cuda")
    assert h200 != h100_pcie


@pytest.mark.gpu
def test_cuda_environment_key_names_arch_multiprocessors_cuda_cublas_and_torch() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU (torch.cuda.is_available() is False)")
    key = goldens.environment_key("cuda")
    major, minor = torch.cuda.get_device_capability()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    assert key.startswith(f"sm_{major}{minor}-{sms}sm-cuda{torch.version.cuda}-cublas")
    assert "-cublasunknown-" not in key, f"cuBLAS version not found: {key}"
    assert key.endswith("-torch" + torch.__version__.replace("+", "_"))
    assert goldens.GoldenStore("/tmp").path(key, "x").parent.name == key, "the key must be a valid folder name"


USER_GOLDEN = """
import numpy as np

def test_mine(golden):
    golden.check("mine/out", np.full(3, VALUE, dtype=np.float32))
"""


def test_a_users_tensor_is_keyed_default_and_refreshed_by_golden_update(pytester: pytest.Pytester) -> None:
    """The default key is for a user's own kernels: an intended change is re-recorded with
    --golden-update (and that run fails), then a plain run passes."""
    pytester.makepyfile(test_user=USER_GOLDEN.replace("VALUE", "1.0"))
    assert pytester.runpytest_inprocess(*_plugin_args(), "--golden-update").ret == pytest.ExitCode.TESTS_FAILED
    assert _golden_file(pytester, "default", "mine/out").is_file()
    pytester.makepyfile(test_user=USER_GOLDEN.replace("VALUE", "2.0"))  # the kernel changed on purpose
    plain = pytester.runpytest_inprocess(*_plugin_args())
    plain.assert_outcomes(failed=1)
    plain.stdout.fnmatch_lines(["*golden default/mine/out does not match*", "*re-record with --golden-update*"])
    update = pytester.runpytest_inprocess(*_plugin_args(), "--golden-update")
    update.assert_outcomes(failed=1)
    update.stdout.fnmatch_lines(["*re-recorded golden default/mine/out*"])
    update.stdout.no_fnmatch_line("*bug in the backend*")
    assert pytester.runpytest_inprocess(*_plugin_args()).ret == pytest.ExitCode.OK
