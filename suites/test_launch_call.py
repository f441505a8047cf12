"""CPU-CI tests of the fast path's launch call (kernels/host/launch_call.c and its ctypes
fallback in nvfp4_kernels.cuda_backend): both write the same six per-call words of the launch
struct and make the same library call with the same result; the extension refuses bad calls
with errors that say what is wrong; its build is cached and says what to install when it cannot
run; ``$NVFP4_LAUNCH_CALL`` chooses between them.

No GPU is needed: the library entry is replaced by a ctypes callback that records what it was
given, and the real library's entry (loadable without a driver) answers an unknown kernel number
with cudaErrorInvalidValue before touching any device.
"""

from __future__ import annotations

import ctypes
import shutil
from pathlib import Path

import pytest
from nvfp4_kernels import build, cuda_backend

WORDS = cuda_backend.ARG_WORDS
#: the library entry's C type: int nvfp4_launch_packed(int32_t kernel, const Nvfp4LaunchArgs*)
ENTRY = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int32, ctypes.c_void_p)
#: cudaErrorInvalidValue, what the library answers for a kernel number it does not know
INVALID_VALUE = 1


@pytest.fixture(scope="module")
def extension_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        return build.build_launch_call(cache_dir=tmp_path_factory.mktemp("launch_call"))
    except build.BuildError as exc:
        pytest.skip(f"the launch-call extension cannot be built here: {exc}")


def fresh_module(path: Path, tmp_path: Path):
    """The extension loaded from a copy of its file: its own, unbound, C state."""
    copy = tmp_path / f"copy_{len(list(tmp_path.iterdir()))}{path.suffix}"
    shutil.copy(path, copy)
    return cuda_backend.load_launch_call_module(copy)


class Recorder:
    """A stand-in for nvfp4_launch_packed that records the kernel number and the struct's words."""

    def __init__(self, result: int = 0) -> None:
        self.calls: list[tuple[int, list[int]]] = []
        self.result = result
        self.entry = ENTRY(self._called)

    def _called(self, kernel: int, address: int) -> int:
        self.calls.append((kernel, list((ctypes.c_uint64 * WORDS).from_address(address))))
        return self.result

    @property
    def address(self) -> int:
        return ctypes.cast(self.entry, ctypes.c_void_p).value


def template_words():
    """Argument words prefilled the way a plan fills them: every word distinct, so a write to
    the wrong word shows."""
    words = (ctypes.c_uint64 * WORDS)(*(1000 + i for i in range(WORDS)))
    return words, ctypes.addressof(words)


def expected_words(a: int, out: int, workspace: int, counters: int, stream: int, g: int) -> list[int]:
    expected = [1000 + i for i in range(WORDS)]
    for index, value in zip(cuda_backend.LAUNCH_CALL_WORDS, (a, out, workspace, counters, stream, g), strict=True):
        expected[index] = value
    return expected


#: per-call pointers: ordinary, zero (no workspace or counters, the dequant's unused A) and the
#: largest address
CALLS = [
    (3, (0x7F0000001000, 0x7F0000200000, 0x7F0000400000, 0x7F0000600000, 0x55AA00, 0x7F0000000200)),
    (1, (0, 0x7F0000200000, 0, 0, 0, 0x7F0000000200)),
    (0, (2**64 - 16, 2**63 + 512, 2**64 - 1, 2**64 - 3, 2**64 - 2, 2**32)),
]


@pytest.mark.parametrize("kernel,pointers", CALLS)
def test_extension_and_ctypes_write_the_same_words_and_return_the_entry_result(extension_path, tmp_path, kernel,
                                                                                pointers) -> None:
    ext, fallback = Recorder(result=42), Recorder(result=42)
    module = fresh_module(extension_path, tmp_path)
    module.bind(ext.address, cuda_backend.LAUNCH_CALL_WORDS, WORDS)
    for recorder, launch in ((ext, module.launch), (fallback, cuda_backend.ctypes_launch_call(fallback.entry))):
        words, address = template_words()
        assert launch(kernel, words, address, *pointers) == 42
        assert recorder.calls == [(kernel, expected_words(*pointers))]
        assert list(words) == expected_words(*pointers)  # written in place: the plan's words keep them


def test_extension_uses_the_word_indices_it_was_bound_with(extension_path, tmp_path) -> None:
    recorder = Recorder()
    module = fresh_module(extension_path, tmp_path)
    order = (11, 0, 4, 9, 7, 2)
    module.bind(recorder.address, order, WORDS)
    words, address = template_words()
    module.launch(2, words, address, 11, 22, 33, 44, 55, 66)
    written = recorder.calls[0][1]
    assert [written[i] for i in order] == [11, 22, 33, 44, 55, 66]
    assert [w for i, w in enumerate(written) if i not in order] == [1000 + i for i in range(WORDS) if i not in order]


def test_extension_refuses_a_call_before_bind(extension_path, tmp_path) -> None:
    module = fresh_module(extension_path, tmp_path)
    words, address = template_words()
    with pytest.raises(RuntimeError, match="bind"):
        module.launch(0, words, address, 1, 2, 3, 4, 5, 6)


@pytest.mark.parametrize("args,error,match", [
    ((0, None, 0, 1, 2, 3, 4, 5, 6), ValueError, "address is 0"),
    ((0, None, 64, 1, 2, 3, 4, 5), TypeError, "takes 9 arguments, got 8"),
    ((0, None, 64, -1, 2, 3, 4, 5, 6), OverflowError, "negative"),
    ((0, None, 64, 1, 2, 2**64, 4, 5, 6), OverflowError, "too big"),
    ((0, None, 64, 1, "2", 3, 4, 5, 6), TypeError, "integer"),
])
def test_extension_refuses_bad_arguments_without_calling_the_library(extension_path, tmp_path, args, error,
                                                                      match) -> None:
    recorder = Recorder()
    module = fresh_module(extension_path, tmp_path)
    module.bind(recorder.address, cuda_backend.LAUNCH_CALL_WORDS, WORDS)
    words, address = template_words()
    args = tuple(address if x == 64 else x for x in args)
    with pytest.raises(error, match=match):
        module.launch(*args)
    assert recorder.calls == []
    assert list(words) == [1000 + i for i in range(WORDS)]


@pytest.mark.parametrize("args,error,match", [
    ((0, (0, 5, 6, 12, 7, 3), WORDS), ValueError, "function address is 0"),
    ((None, (0, 5, 6, 7, 3), WORDS), ValueError, "needs 6 entries"),
    ((None, (0, 5, 6, 12, 7, WORDS), WORDS), ValueError, "outside the"),
    ((None, (0, 5, 6, 12, 7, -1), WORDS), ValueError, "outside the"),
    ((None, 5, WORDS), TypeError, "sequence of 6 ints"),
    ((None, (0, 5, 6, 12, 7, 3)), TypeError, "takes 3 arguments"),
])
def test_bind_refuses_bad_arguments(extension_path, tmp_path, args, error, match) -> None:
    recorder = Recorder()
    module = fresh_module(extension_path, tmp_path)
    args = tuple(recorder.address if x is None else x for x in args)
    with pytest.raises(error, match=match):
        module.bind(*args)
    words, address = template_words()
    with pytest.raises(RuntimeError, match="bind"):  # a refused bind binds nothing
        module.launch(0, words, address, 1, 2, 3, 4, 5, 6)


def test_build_is_cached_and_tracks_the_source(extension_path, tmp_path) -> None:
    assert build.build_launch_call(cache_dir=extension_path.parent) == extension_path
    changed = tmp_path / "launch_call.c"
    changed.write_text(build.LAUNCH_CALL_SOURCE.read_text() + "\n/* changed */\n")
    other = build.build_launch_call(cache_dir=tmp_path / "cache", source=changed)
    assert other != extension_path and other.name.startswith(build.LAUNCH_CALL_MODULE)
    assert not list(other.parent.glob("*.tmp")), "temporary build files left behind"


def test_the_source_compiles_without_a_warning(extension_path, tmp_path) -> None:
    import subprocess

    cmd = [*build.find_c_compiler(), *build.LAUNCH_CALL_FLAGS, "-Wextra", "-Werror", f"-I{build.python_include_dir()}",
           str(build.LAUNCH_CALL_SOURCE), "-o", str(tmp_path / "strict.so")]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_build_failure_names_the_command_and_the_compiler_output(tmp_path) -> None:
    broken = tmp_path / "launch_call.c"
    broken.write_text("#include <Python.h>\nthis is not C;\n")
    with pytest.raises(build.BuildError, match="launch-call extension") as err:
        build.build_launch_call(cache_dir=tmp_path / "cache", source=broken)
    assert str(broken) in str(err.value) and "error" in str(err.value)
    assert not list((tmp_path / "cache").glob("*"))


def test_missing_python_headers_say_what_to_install(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(build.sysconfig, "get_paths", lambda: {"include": str(tmp_path)})
    with pytest.raises(build.BuildError, match="python3-dev"):
        build.build_launch_call(cache_dir=tmp_path / "cache")


def test_missing_c_compiler_says_what_to_install(monkeypatch) -> None:
    monkeypatch.setenv("CC", "no-such-compiler-here")
    monkeypatch.setattr(build.sysconfig, "get_config_var", lambda name: None)
    monkeypatch.setattr(build.shutil, "which", lambda name: None)
    with pytest.raises(build.BuildError, match="install gcc"):
        build.find_c_compiler()


# -- the choice in cuda_backend (the real kernel library: it loads without a GPU) ----------------

@pytest.fixture
def unchosen(monkeypatch):
    try:
        cuda_backend.load_library()
    except build.NvccNotFound as exc:
        pytest.skip(f"the kernel library needs nvcc: {exc}")
    monkeypatch.setattr(cuda_backend, "_launch_call", None)
    return monkeypatch


def test_auto_takes_the_extension_and_it_reaches_the_real_library(unchosen) -> None:
    try:
        build.build_launch_call()
    except build.BuildError as exc:
        pytest.skip(f"the launch-call extension cannot be built here: {exc}")
    unchosen.setenv(cuda_backend.LAUNCH_CALL_ENV, "auto")
    launch = cuda_backend.launch_call()
    kind, where = cuda_backend.launch_call_kind()
    assert kind == "extension" and Path(where).is_file()
    words, address = template_words()
    # an unknown kernel number: the library's switch refuses it before any CUDA call
    assert launch(99, words, address, 1, 2, 3, 4, 5, 6) == INVALID_VALUE
    assert [words[i] for i in cuda_backend.LAUNCH_CALL_WORDS] == [1, 2, 3, 4, 5, 6]


def test_ctypes_mode_reaches_the_real_library_the_same_way(unchosen) -> None:
    unchosen.setenv(cuda_backend.LAUNCH_CALL_ENV, "ctypes")
    launch = cuda_backend.launch_call()
    assert cuda_backend.launch_call_kind() == ("ctypes", "NVFP4_LAUNCH_CALL=ctypes")
    words, address = template_words()
    assert launch(99, words, address, 1, 2, 3, 4, 5, 6) == INVALID_VALUE
    assert [words[i] for i in cuda_backend.LAUNCH_CALL_WORDS] == [1, 2, 3, 4, 5, 6]


def _no_extension(**_: object) -> Path:
    raise build.BuildError("Python's C headers are not installed (test)")


def test_auto_falls_back_to_ctypes_and_says_why(unchosen) -> None:
    unchosen.delenv(cuda_backend.LAUNCH_CALL_ENV, raising=False)
    unchosen.setattr(build, "build_launch_call", _no_extension)
    cuda_backend.launch_call()
    kind, why = cuda_backend.launch_call_kind()
    assert kind == "ctypes" and "C headers are not installed" in why


def test_extension_mode_fails_loudly_when_it_cannot_build(unchosen) -> None:
    unchosen.setenv(cuda_backend.LAUNCH_CALL_ENV, "extension")
    unchosen.setattr(build, "build_launch_call", _no_extension)
    with pytest.raises(RuntimeError, match="NVFP4_LAUNCH_CALL=extension.*C headers"):
        cuda_backend.launch_call()


def test_unknown_mode_is_refused(unchosen) -> None:
    unchosen.setenv(cuda_backend.LAUNCH_CALL_ENV, "fast")
    with pytest.raises(ValueError, match="'fast' is not one of"):
        cuda_backend.launch_call()


# -- the packed entry's fused_wgmma kernels read their plan from the struct -------------------------

def _gpu_present() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


@pytest.mark.skipif(_gpu_present(), reason="with a GPU the accepted calls would launch on made-up addresses; the GPU "
                                           "suites (test_fast_path.py) launch these kernels on real tensors")
@pytest.mark.parametrize("kernel", [cuda_backend.PACKED_KERNEL["fused_wgmma"], cuda_backend.FUSED_WGMMA_TILED_KERNEL],
                         ids=["row-major", "tiled"])
def test_the_packed_fused_wgmma_launch_reads_its_plan_from_the_words(kernel: int) -> None:
    """The fast path writes fused_wgmma's plan as the split count (beside out_bf16) and the whole
    tiles (beside the scale-byte range), and the permuted activations' workspace in the counters'
    word. Without a GPU the library's own argument checks show
    what reached the launcher: a plan it refuses answers cudaErrorInvalidValue before any CUDA
    call, a plan it takes goes on to the CUDA runtime, which answers that there is no driver or
    device. Each refusal below differs from an accepted plan in one field only."""
    from nvfp4_kernels.tiling import WGMMA_TILE_ROWS

    try:
        lib = cuda_backend.load_library()
    except build.NvccNotFound as exc:
        pytest.skip(f"the kernel library needs nvcc: {exc}")
    tiles, steps = 8, 16
    n, k, m = tiles * WGMMA_TILE_ROWS - 24, 16 * 128, 200

    assert kernel in cuda_backend.ACT_WORKSPACE_KERNELS
    act_ws = 0x70000

    def result(whole: int, splits: int, workspace: int, act: int | None = None) -> int:
        words = (ctypes.c_uint64 * WORDS)()
        words[cuda_backend.ARG_COUNTERS] = act_ws if act is None else act
        for index, address in ((cuda_backend.ARG_A, 0x10000), (cuda_backend.ARG_PACKED, 0x20000),
                               (cuda_backend.ARG_SCALES, 0x30000), (cuda_backend.ARG_G, 0x40000),
                               (cuda_backend.ARG_OUT, 0x50000), (cuda_backend.ARG_WORKSPACE, workspace)):
            words[index] = address
        words[cuda_backend.ARG_N], words[cuda_backend.ARG_K] = n, k
        words[cuda_backend.ARG_M_BLOCK] = cuda_backend.pack_int32_pair(m, 16)
        words[cuda_backend.ARG_BF16_SPLITS] = cuda_backend.pack_int32_pair(1, splits)
        words[cuda_backend.ARG_SCALE_BYTES] = cuda_backend.pack_int32_pair(0, whole)
        return lib.nvfp4_launch_packed(kernel, ctypes.addressof(words))

    def accepted(code: int) -> bool:
        return code not in (0, INVALID_VALUE)  # past the checks, refused by the runtime for want of a GPU

    assert steps == k // 128
    assert accepted(result(0, 2, 0x60000))  # every tile split in two: partials in the workspace
    assert result(0, 2, 0) == INVALID_VALUE  # ... which a split plan must have
    assert accepted(result(tiles, 2, 0))  # every tile whole: nothing to sum, no workspace needed
    assert result(tiles + 1, 2, 0x60000) == INVALID_VALUE  # more whole tiles than the weight has
    assert accepted(result(0, 4, 0x60000)) and result(0, 5, 0x60000) == INVALID_VALUE  # 16 steps: 4 ranges, not 5
    assert accepted(result(0, steps, 0x60000)) and result(0, steps + 1, 0x60000) == INVALID_VALUE
    # the permuted activations' workspace: required, and 16-byte aligned
    assert result(0, 2, 0x60000, act=0) == INVALID_VALUE
    assert result(0, 2, 0x60000, act=act_ws + 8) == INVALID_VALUE


@pytest.mark.parametrize("kernel", [*cuda_backend.RETIRED_PACKED_KERNELS, 10, -1])
def test_the_packed_entry_refuses_retired_and_unknown_kernel_numbers(kernel: int) -> None:
    """Kernels 6 and 7 (the natural-order fused_wgmma launches, retired in the nineteenth session)
    and numbers that never were kernels are refused with cudaErrorInvalidValue before any CUDA
    call, even with a struct another kernel would take (so this runs with or without a GPU)."""
    try:
        lib = cuda_backend.load_library()
    except build.NvccNotFound as exc:
        pytest.skip(f"the kernel library needs nvcc: {exc}")
    words = (ctypes.c_uint64 * WORDS)()
    for index, address in ((cuda_backend.ARG_A, 0x10000), (cuda_backend.ARG_PACKED, 0x20000),
                           (cuda_backend.ARG_SCALES, 0x30000), (cuda_backend.ARG_G, 0x40000),
                           (cuda_backend.ARG_OUT, 0x50000), (cuda_backend.ARG_WORKSPACE, 0x60000),
                           (cuda_backend.ARG_COUNTERS, 0x70000)):
        words[index] = address
    words[cuda_backend.ARG_N], words[cuda_backend.ARG_K] = 1000, 2048
    words[cuda_backend.ARG_M_BLOCK] = cuda_backend.pack_int32_pair(200, 16)
    words[cuda_backend.ARG_BF16_SPLITS] = cuda_backend.pack_int32_pair(1, 2)
    assert lib.nvfp4_launch_packed(kernel, ctypes.addressof(words)) == INVALID_VALUE
