"""CPU-CI tests of nvfp4_kernels.build: nvcc compiles every kernel, the cache key tracks sources, flags
and compiler, a missing nvcc gives an error that says what to do, and the library exports every
launcher (loading it needs no GPU: the CUDA runtime is linked statically)."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from nvfp4_kernels import build

try:
    NVCC = build.find_nvcc()
except build.NvccNotFound:
    NVCC = None

needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not installed (set CUDA_HOME or put "
                                                     "the CUDA toolkit's bin/ on PATH)")


@pytest.fixture(scope="session")
def library(tmp_path_factory) -> Path:
    if NVCC is None:
        pytest.skip("nvcc is not installed (set CUDA_HOME or put the CUDA toolkit's bin/ on PATH)")
    return build.build_library()


@needs_nvcc
def test_library_builds_and_is_cached(library: Path) -> None:
    assert library.is_file() and library.stat().st_size > 0
    assert build.build_library() == library  # second call: the cached file, no rebuild


#: a kernel small enough to build in a second (the cleanup tests need a build of their own: in the
#: shared cache another pytest-xdist worker may be building the library at the same moment, and its
#: temporary file is legitimately there)
TINY_KERNEL = "__global__ void tiny(int* x) { *x = 1; }\n"


def one_source(tmp_path: Path, name: str, text: str) -> tuple[Path, Path]:
    """A source folder holding one .cu file, and an empty cache folder beside it."""
    src = tmp_path / "src"
    src.mkdir()
    (src / name).write_text(text)
    return src, tmp_path / "cache"


@needs_nvcc
def test_a_build_leaves_no_temporary_files(tmp_path: Path) -> None:
    src, cache = one_source(tmp_path, "tiny.cu", TINY_KERNEL)
    built = build.build_library(source_dir=src, cache_dir=cache)
    assert built.is_file() and built.parent == cache
    assert build.build_library(source_dir=src, cache_dir=cache) == built  # cached
    assert [p.name for p in cache.iterdir()] == [built.name], "temporary build files left behind"


@needs_nvcc
def test_a_failed_build_raises_and_leaves_nothing(tmp_path: Path) -> None:
    src, cache = one_source(tmp_path, "broken.cu", "__global__ void broken( { }\n")
    with pytest.raises(build.BuildError, match="nvcc failed building the shared library"):
        build.build_library(source_dir=src, cache_dir=cache)
    assert list(cache.iterdir()) == [], "a failed build left files behind"


@needs_nvcc
def test_library_exports_every_launcher(library: Path) -> None:
    lib = ctypes.CDLL(str(library))  # must load without a GPU or driver
    for name in build.LIBRARY_EXPORTS:
        assert hasattr(lib, name), f"{name} is not exported by {library.name}"
    nm = shutil.which("nm")
    if nm:
        symbols = subprocess.run([nm, "-D", "--defined-only", str(library)], capture_output=True,
                                 text=True, check=True).stdout
        for name in build.LIBRARY_EXPORTS:
            assert f" T {name}" in symbols
        assert "cudaGetErrorString" not in symbols.replace("nvfp4_error_string", ""), \
            "libcudart should be linked statically, not exported"


@needs_nvcc
def test_error_string_comes_from_the_static_runtime(library: Path) -> None:
    lib = ctypes.CDLL(str(library))
    lib.nvfp4_error_string.restype = ctypes.c_char_p
    lib.nvfp4_error_string.argtypes = [ctypes.c_int]
    assert b"invalid argument" in lib.nvfp4_error_string(1)


@needs_nvcc
def test_the_fused_kernels_block_width_rule_is_mirrored_by_tiling(library: Path) -> None:
    """nvfp4_kernels.tiling.fused_block_warps says what fused_mma.cu's block_warps does, for every
    tile configuration on both sides of the one-block-per-SM limit (the library runs on the CPU)."""
    from nvfp4_kernels.tiling import fused_block_warps

    lib = ctypes.CDLL(str(library))
    lib.nvfp4_fused_block_warps.restype = ctypes.c_int
    lib.nvfp4_fused_block_warps.argtypes = [ctypes.c_int32, ctypes.c_int64, ctypes.c_int32, ctypes.c_int32]
    seen = set()
    for m in (1, 8, 9, 16, 17, 32, 33, 64, 65, 128, 129, 200, 256):
        for n in (1, 127, 128, 129, 1000, 4096, 16895, 16896, 16897, 17408):
            for splits in (1, 2, 3, 7, 16):
                for sms in (1, 114, 132):
                    want = fused_block_warps(m, n, splits, sms)
                    assert lib.nvfp4_fused_block_warps(m, n, splits, sms) == want, (m, n, splits, sms)
                    seen.add(want)
    assert seen == {4, 8}
    assert lib.nvfp4_fused_block_warps(0, 64, 1, 132) == 0 and lib.nvfp4_fused_block_warps(17, 64, 1, 0) == 0
    for bad in ((17, 64, 0, 132), (17, 64, 1, 0), (17, 0, 1, 132)):
        with pytest.raises(ValueError, match="must be >= 1"):
            fused_block_warps(*bad)


@needs_nvcc
def test_fused_wgmma_takes_the_narrowest_activation_tile_and_checks_its_arguments_on_the_host(
        library: Path) -> None:
    """The K-order launch's activation tile is the narrowest of 64, 128, 192 and 256 rows that holds
    M: its workspace (nvfp4_fused_wgmma_act_rows, which cuda_backend allocates) is M rounded up to a
    multiple of 64, for every M the kernel takes. Arguments it cannot take are refused with
    cudaErrorInvalidValue before anything reaches CUDA (the library runs on the CPU here)."""
    lib = ctypes.CDLL(str(library))
    lib.nvfp4_fused_wgmma_act_rows.restype = ctypes.c_int64
    lib.nvfp4_fused_wgmma_act_rows.argtypes = [ctypes.c_int32]
    assert [lib.nvfp4_fused_wgmma_act_rows(m) for m in range(-1, 257)] == \
        [0, 0] + [-(-m // 64) * 64 for m in range(1, 257)]
    launch = lib.nvfp4_launch_fused_wgmma_mma_order
    launch.restype = ctypes.c_int
    launch.argtypes = [ctypes.c_void_p] * 8 + [ctypes.c_int32, ctypes.c_int64, ctypes.c_int64] + \
        [ctypes.c_int32] * 4 + [ctypes.c_void_p]
    a, act, packed, scales, g, out, ws = (0x10000 * i for i in range(1, 8))  # aligned, never dereferenced

    def status(m: int, act_ws: int | None = act, k: int = 1024, splits: int = 1) -> int:
        return launch(a, act_ws, packed, scales, g, None, out, ws, m, 200, k, 1, 0, splits, 1, None)

    invalid = 1  # cudaErrorInvalidValue
    for m in (0, -3, 257):
        assert status(m) == invalid, m
    assert status(4, act_ws=None) == invalid and status(4, act_ws=act + 8) == invalid
    assert status(4, k=1000) == invalid and status(4, splits=9) == invalid


@needs_nvcc
def test_fused_wgmma_keeps_the_ring_of_weight_steps_that_measured_fastest_at_each_tile(library: Path) -> None:
    """On either layout the launch keeps 4 steps of weights a thread in flight in its 64-, 128- and
    192-row tiles (M = 1..192) and 2 in its 256-row tile (M = 193..256, as many as its shared memory
    holds), where the dev variants measured faster at the library's plans (benchmarks/NOTES.md,
    twenty-first, twenty-third and twenty-fourth sessions); outside 1..256 there is no launch (0)."""
    lib = ctypes.CDLL(str(library))
    lib.nvfp4_fused_wgmma_ring_steps.restype = ctypes.c_int32
    lib.nvfp4_fused_wgmma_ring_steps.argtypes = [ctypes.c_int32, ctypes.c_int32]
    for tiled in (0, 1):
        rings = [lib.nvfp4_fused_wgmma_ring_steps(m, tiled) for m in range(-1, 259)]
        want = [4 if 1 <= m <= 192 else 2 if 193 <= m <= 256 else 0 for m in range(-1, 259)]
        assert rings == want, tiled


@needs_nvcc
def test_every_source_compiles_to_a_cubin() -> None:
    """Through the build cache that the SASS contracts' cubins share (build.compile_objects keyed by
    the sources, flags and nvcc), so that a CI run compiles each source once for both."""
    objects = build.compile_objects("cubin", "sm_90")
    stems = {p.stem for p in build.source_files() if p.suffix == ".cu"}
    assert set(objects) == stems and stems >= {"dequant", "gemv", "fp4_probe"}
    for path in objects.values():
        assert path.stat().st_size > 0


def _sources(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    shutil.copytree(build.CUDA_SOURCE_DIR, src)
    return src


def test_cache_key_tracks_sources_flags_and_compiler(tmp_path: Path) -> None:
    src = _sources(tmp_path)
    files = build.source_files(src)
    flags = build.library_flags(("sm_90",))
    key = build.cache_key(files, flags, "nvcc 13.0")
    assert key == build.cache_key(build.source_files(src), flags, "nvcc 13.0")
    assert key != build.cache_key(files, build.library_flags(("sm_90", "sm_120")), "nvcc 13.0")
    assert key != build.cache_key(files, flags, "nvcc 13.1")
    header = src / "nvfp4_common.cuh"
    header.write_text(header.read_text() + "\n// edited\n")
    assert key != build.cache_key(build.source_files(src), flags, "nvcc 13.0")


def test_archs_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NVFP4_CUDA_ARCHS", "sm_90, sm_100,sm_120")
    assert build.resolve_archs() == ("sm_90", "sm_100", "sm_120")
    flags = build.gencode_flags(build.resolve_archs())
    assert "-gencode=arch=compute_120,code=sm_120" in flags
    monkeypatch.delenv("NVFP4_CUDA_ARCHS")
    assert build.resolve_archs() == ("sm_90",)
    with pytest.raises(ValueError, match="sm_XY"):
        build.resolve_archs(["hopper"])


def test_no_fast_math_in_flags() -> None:
    flags = build.library_flags(("sm_90",))
    assert "--use_fast_math" not in flags and "-use_fast_math" not in flags
    assert "-ftz=true" not in flags and "-ftz=false" in flags
    assert flags[-2:] == ["-cudart", "static"]


def test_missing_nvcc_error_says_what_to_do(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "no-toolkit"))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setattr(build, "Path", _PathWithoutDefaultToolkit)
    with pytest.raises(build.NvccNotFound) as info:
        build.build_library(cache_dir=tmp_path)
    text = str(info.value)
    assert "nvcc" in text and "CUDA_HOME" in text and "PATH" in text and "install" in text.lower()


class _PathWithoutDefaultToolkit(type(Path())):
    """A Path whose /usr/local/cuda fallback does not exist (simulates a machine without CUDA)."""

    def is_file(self) -> bool:  # type: ignore[override]
        return False if str(self).startswith("/usr/local/cuda") else super().is_file()


def test_launch_args_words_match_the_struct_layout() -> None:
    """The fast path writes LaunchArgs as 14 uint64 words by index; the bytes must equal the
    ctypes Structure's (whose size the library checks against launch_args.h at load)."""
    import ctypes
    import random

    from nvfp4_kernels import cuda_backend as cb

    rng = random.Random(3)
    values = {name: rng.getrandbits(47) * 8 for name in ("a", "packed", "scales", "g", "bias", "out", "workspace",
                                                          "stream", "counters")}
    ints = {"n": rng.getrandbits(40), "k": rng.getrandbits(40), "m": 255, "block_size": 16, "out_bf16": 1,
            "splits": 7, "scale_bytes": 0x7E01, "whole_tiles": 132}
    struct = cb.LaunchArgs(**values, **ints)
    words = (ctypes.c_uint64 * cb.ARG_WORDS)()
    for name, index in (("a", cb.ARG_A), ("packed", cb.ARG_PACKED), ("scales", cb.ARG_SCALES), ("g", cb.ARG_G),
                        ("bias", cb.ARG_BIAS), ("out", cb.ARG_OUT), ("workspace", cb.ARG_WORKSPACE),
                        ("stream", cb.ARG_STREAM), ("counters", cb.ARG_COUNTERS)):
        words[index] = values[name]
    words[cb.ARG_N], words[cb.ARG_K] = ints["n"], ints["k"]
    words[cb.ARG_M_BLOCK] = cb.pack_int32_pair(ints["m"], ints["block_size"])
    words[cb.ARG_BF16_SPLITS] = cb.pack_int32_pair(ints["out_bf16"], ints["splits"])
    words[cb.ARG_SCALE_BYTES] = cb.pack_int32_pair(ints["scale_bytes"], ints["whole_tiles"])
    assert ctypes.sizeof(struct) == ctypes.sizeof(words) == 8 * cb.ARG_WORDS
    assert bytes(struct) == bytes(words)


def test_split_k_counters_are_left_out_inside_a_cuda_graph_capture(monkeypatch) -> None:
    """Eager single-row calls sum their K splits in the launch (counters given); inside a CUDA
    graph capture the counters' address is 0, so the library runs the finalize kernel instead
    (a replay has no per-launch host time to save, and needs no zeroed counters in the graph)."""
    from nvfp4_kernels import cuda_backend as cb

    class Buffer:
        def __init__(self, address: int) -> None:
            self.address = address

        def data_ptr(self) -> int:
            return self.address

    asked = []
    monkeypatch.setattr(cb, "gemv_workspace", lambda device, stream, floats: Buffer(4096))
    monkeypatch.setattr(cb, "splitk_counters", lambda device, stream, count: asked.append(count) or Buffer(8192))
    capturing = [False]
    monkeypatch.setattr(cb, "capture_checker", lambda: (lambda: capturing[0]))
    assert cb.splitk_buffers(0, 1, 100, 7) == (4096, 8192) and asked == [7]
    assert cb.splitk_buffers(0, 1, 100, 0) == (4096, 0) and asked == [7]
    capturing[0] = True
    assert cb.splitk_buffers(0, 1, 100, 7) == (4096, 0) and asked == [7]


def test_the_fused_kernel_sums_the_splits_of_single_row_calls_in_its_launch() -> None:
    from nvfp4_kernels import cuda_backend as cb

    assert cb.fused_reduction(1, 1) == "none"  # nothing to sum
    assert [cb.fused_reduction(7, m) for m in (1, cb.LAST_BLOCK_MAX_M, cb.LAST_BLOCK_MAX_M + 1, 64)] == [
        "last_block", "last_block", "finalize", "finalize"]


@needs_nvcc
def test_the_weight_stream_probe_builds_against_the_kernel_headers(tmp_path: Path) -> None:
    """scripts/ring_stream_probe.cu (the twenty-ninth session's weight-stream probe,
    benchmarks/NOTES.md) uses kernels/cuda/hopper_async.cuh's barriers and bulk copies; a change
    there must not leave it unbuildable. Its driver's four entries are exported, and the shared
    memory each mode asks for is what its layout needs: the ring's 40 bytes a thread a step, the
    bulk stages of 9 KB a step, nothing for the register prefetch (modes 2 and 9), modes 4 and
    5's ring plus three 16 KB activation stages, and modes 6 to 8's ring (one scale word a thread
    in the same slots; the same ring over a balanced grid; on a step-major layout)."""
    repo = Path(__file__).resolve().parents[1]
    out = tmp_path / "libringprobe.so"
    done = subprocess.run([str(NVCC), "-O3", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a", "-shared",
                           "-Xcompiler", "-fPIC", "-o", str(out), str(repo / "scripts" / "ring_stream_probe.cu")],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    lib = ctypes.CDLL(str(out))
    assert all(hasattr(lib, name) for name in ("ring_probe_launch", "ring_probe_min_smem", "ring_probe_read_floor",
                                               "ring_probe_read_chunks"))
    smem = {mode: lib.ring_probe_min_smem(mode, 4) for mode in range(11)}
    handshake = 4 * 256 * 40 + 1024 + 3 * (16384 + 16) + 1024
    assert smem == {0: 4 * 256 * 40, 1: 4 * 256 * 40, 2: 0, 3: 4 * 9216 + 64 + 1024, 4: handshake, 5: handshake,
                    6: 4 * 256 * 40, 7: 4 * 256 * 40,
                    8: 4 * 256 * 40, 9: 0, 10: -1}, smem


@needs_nvcc
def test_the_floor_probe_builds_against_the_kernel_headers(tmp_path: Path) -> None:
    """scripts/l2_floor_probe.cu (the ninth session's M = 1 floor and the thirty-second session's
    warp-specialized mimic, benchmarks/NOTES.md) launches through kernels/cuda/streamed_launch.cuh
    and uses hopper_async.cuh's barriers and bulk copies; a change to those headers must not leave
    the probe unbuildable for the next measurement. It exports the entry points its three drivers
    (l2_floor_probe.py, ws_mimic_probe.py, mimic_walk_probe.py) call, and the dynamic walk refuses,
    before touching the device, a grid of no blocks and units shorter than its stage count (its
    next unit is read a barrier after it is taken only when units have at least that many steps)."""
    repo = Path(__file__).resolve().parents[1]
    out = tmp_path / "libl2probe.so"
    done = subprocess.run([str(NVCC), "-O3", "-arch=sm_90", "-shared", "-Xcompiler", "-fPIC", "-o", str(out),
                           str(repo / "scripts" / "l2_floor_probe.cu")], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    pytest.importorskip("torch")
    sys.path.insert(0, str(repo / "scripts"))
    try:
        import l2_floor_probe  # the drivers' loader, which declares the shared entry points' argument types
    finally:
        sys.path.pop(0)
    lib = l2_floor_probe.load_probe_library(str(out))
    assert all(hasattr(lib, name) for name in ("probe_read", "probe_mimic", "probe_mimic_occupancy",
                                               "probe_mimic_dynamic", "probe_ws_mimic", "probe_ws_mimic_occupancy"))

    def dynamic(total_steps: int, splits: int, stages: int, blocks: int = 8) -> int:
        return lib.probe_mimic_dynamic(None, None, None, 1, total_steps, splits, 0, stages, blocks, None, None, None, 0)

    assert dynamic(4, 2, 3) == -1  # two steps a unit, three stages
    assert dynamic(13, 3, 4) == -1  # five steps a unit, but the last split's are 13 - 10 = 3
    assert dynamic(9, 3, 4) == -1  # three steps a unit, four stages
    assert dynamic(40, 7, 3, blocks=0) == -1


def _build_dev_kernel(tmp_path: Path, source: str, flags: tuple[str, ...], kernels: int) -> Path:
    """nvcc-build scripts/ws_dev/<source> as the dev scripts do (sm_90a, against kernels/cuda's
    headers) and check that ptxas reported `kernels` entry functions, none of them spilling."""
    repo = Path(__file__).resolve().parents[1]
    lib = tmp_path / f"{Path(source).stem}.so"
    done = subprocess.run([str(NVCC), "-O3", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a", "-shared",
                           "-Xcompiler", "-fPIC", "-cudart", "static", "-Xptxas", "-v", *flags,
                           f"-I{repo / 'kernels' / 'cuda'}", f"-I{repo / 'scripts' / 'ws_dev'}",
                           "-o", str(lib), str(repo / "scripts" / "ws_dev" / source)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    reports = [line for line in done.stderr.splitlines() if "spill stores" in line]
    assert len(reports) == kernels, done.stderr[-2000:]
    assert all(" 0 bytes spill stores, 0 bytes spill loads" in line for line in reports), reports
    return lib


@needs_nvcc
@pytest.mark.parametrize(("flags", "instantiations", "tiles_above_128"),
                         [((), 12, [0, 1, 1, 1]), (("-DWS_SS",), 16, [0, 1, 1, 0])],
                         ids=["mma_sync_order", "shared_memory_a"])
def test_the_warp_specialized_dev_kernel_builds_against_the_kernel_headers_without_spills(
        tmp_path: Path, flags: tuple[str, ...], instantiations: int, tiles_above_128: list[int]) -> None:
    """scripts/ws_dev/fused_ws.cu (the warp-specialized kernel of the twelfth and thirteenth
    sessions, not merged; benchmarks/NOTES.md), in both of its builds, decodes with
    kernels/cuda/mma_decode.cuh: a change to that header must not leave it unbuildable, and its
    register split (setmaxnreg) must keep every instantiation free of spills, which the committed
    timings assume. The library answers which tile widths it has (the dev script asks before
    launching), without a GPU: 128, 136 and 160 rows up to M = 128; above that the register-A
    build takes several 128-row activation tiles (the same widths) and the shared-memory build one
    256-row tile (128 or 136 weight rows: a 160-row tile's stages would not fit)."""
    # and the finalize kernels: two types at two vector widths
    lib = _build_dev_kernel(tmp_path, "fused_ws.cu", flags, instantiations + 4)
    has_tile = ctypes.CDLL(str(lib)).nvfp4ws_has_tile
    widths = (72, 128, 136, 160)
    assert [has_tile(nt, m) for m in (64, 65, 128) for nt in widths] == [0, 1, 1, 1] * 3
    assert [has_tile(nt, m) for m in (129, 256) for nt in widths] == tiles_above_128 * 2


@needs_nvcc
def test_the_register_a_dev_kernel_builds_without_spills(tmp_path: Path) -> None:
    """scripts/ws_dev/fused_ra.cu is the library's fused_wgmma kernel in a dev library of its own
    (benchmarks/NOTES.md, fourteenth to nineteenth sessions): a change to kernels/cuda/fused_wgmma.cu
    must keep both layouts, the narrow activation tiles and the staged weights building without
    spills (the 128 accumulators of the 256-row tile leave little room, the launch bounds of two and
    three blocks an SM less) and the dev entries that scripts/ws_dev/mma_order_dev.py calls."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts" / "ws_dev"))
    try:
        from mma_order_dev import VARIANTS
        from ra_dev import bind
    finally:
        sys.path.pop(0)
    # bf16 and fp16 kernels of the dev variants (some with staged weights) and of the library's
    # (each layout at 64, 128, 192 and 256 activation rows, one block an SM, four activation stages
    # at 64 and 128 rows), the finalize
    # kernels (two types at two vector widths) and the permutation
    # fused_wgmma.cu's library_stages and library_ring
    library = {(tiled, nact, 1, 4 if nact in (64, 128) else 3, False, 4 if nact in (64, 128, 192) else 2)
               for tiled in (True, False) for nact in (64, 128, 192, 256)}
    kernels = 2 * len(set(VARIANTS) | library) + 4 + 1
    lib = bind(ctypes.CDLL(str(_build_dev_kernel(tmp_path, "fused_ra.cu", (), kernels))))
    assert all(hasattr(lib, name) for name in ("nvfp4ra_launch_mma_order", "nvfp4ra_permute_act",
                                               "nvfp4ra_permuted_rows"))
    # the script's variants are the ones built: without a GPU a built variant gets as far as CUDA
    # and fails there, one not built is refused as an invalid value (1) before
    entry = lib.nvfp4ra_launch_mma_order
    fake = ctypes.c_void_p(1 << 20)  # aligned, never dereferenced: nothing reaches a kernel here

    def answer(tiled: bool, nact: int, minb: int, stages: int, staged: bool, ring: int) -> int:
        return entry(fake, fake, fake, fake, fake, None, fake, fake, 1, 128, 128, 1, 1, 1, nact, minb, stages,
                     int(staged), int(tiled), ring, None)

    assert all(answer(*variant) not in (0, 1) for variant in VARIANTS), [answer(*v) for v in VARIANTS]
    for not_built in ((True, 96, 1, 3, False, 0), (False, 64, 2, 3, False, 0), (True, 64, 2, 5, True, 0),
                      (False, 256, 1, 3, True, 0), (True, 64, 1, 3, False, 3), (True, 256, 1, 3, False, 4)):
        assert answer(*not_built) == 1, not_built


def test_the_dev_scripts_identity_readout_passes_exact_weights_and_names_a_wrong_one() -> None:
    """scripts/ws_dev/ws_dev.py's identity_readout (both dev scripts read their kernels' weights back
    through it on the GPU), run on the CPU with a stand-in kernel that multiplies by the oracle's
    decoded weight: every launch reads back exactly at 64 and 256 rows; a stand-in that reads one
    K column to the left is caught, launch by launch."""
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts" / "ws_dev"))
    try:
        import ws_dev
    finally:
        sys.path.pop(0)
    from nvfp4_harness.nvfp4.shapes import oracle_dequantize

    def prepare(packed: np.ndarray, scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return packed, scales

    def stand_in(shift: int):
        def launches(a, weight, g, splits):
            name = "bfloat16" if a.dtype == torch.bfloat16 else "float16"
            w = oracle_dequantize(*weight, np.float32(g.item()), 16, name).astype(np.float64)
            w = np.roll(w, shift, axis=1)
            yield "stand-in", torch.from_numpy(a.double().numpy() @ w.T).to(a.dtype)
        return launches

    rows, failures = ws_dev.identity_readout(prepare, stand_in(0), (64, 256), device="cpu")
    assert failures == []
    assert [(r["dtype"], r["rows"], r["launches"], r["differing"]) for r in rows] == [
        ("bfloat16", 64, 32, 0), ("bfloat16", 256, 8, 0), ("float16", 64, 32, 0), ("float16", 256, 8, 0)]
    rows, failures = ws_dev.identity_readout(prepare, stand_in(1), (256,), device="cpu")
    assert len(failures) == 16 and all(r["differing"] > 0 for r in rows), failures[:2]


def test_the_dev_kernels_wgmma_wrappers_are_the_generators_output() -> None:
    """scripts/ws_dev/wgmma_rs.cuh is generated (each wrapper lists its accumulators by hand):
    the committed file must be what scripts/ws_dev/gen_wgmma_rs.py prints."""
    repo = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, str(repo / "scripts" / "ws_dev" / "gen_wgmma_rs.py")],
                          capture_output=True, text=True, check=True)
    assert done.stdout == (repo / "scripts" / "ws_dev" / "wgmma_rs.cuh").read_text()


def test_the_library_wgmma_wrappers_are_the_generators_output() -> None:
    """kernels/cuda/wgmma_rs256.cuh (fused_wgmma.cu's wrappers, one per activation width) is
    generated too: the committed file must be what ``gen_wgmma_rs.py --library`` prints."""
    repo = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, str(repo / "scripts" / "ws_dev" / "gen_wgmma_rs.py"), "--library"],
                          capture_output=True, text=True, check=True)
    assert done.stdout == (repo / "kernels" / "cuda" / "wgmma_rs256.cuh").read_text()


@needs_nvcc
@pytest.mark.parametrize("flags", [(), ("-DNVFP4_WALK_STATIC",)], ids=["counter", "static"])
def test_the_walk_dev_kernel_builds_without_spills_and_refuses_units_it_cannot_walk(tmp_path: Path,
                                                                                    flags: tuple[str, ...]) -> None:
    """scripts/ws_dev/fused_walk.cu (the thirty-sixth session's dynamic walk, benchmarks/NOTES.md) is
    the whole of kernels/cuda/fused_mma.cu plus a walk kernel that reuses its loader, K step and
    partial store: a change there must keep it building, the walk held to 64 registers without
    spills (8 blocks an SM, as the library's M <= 8 launch), and its entry refusing, before touching
    the device, what it cannot walk: splits that leave units of unequal or fewer than three steps
    (its next unit is read a barrier after it is published only then), M above 8, a single weight
    tile (its unit's tile comes from a multiply by ceil(2^32 / tiles), which must fit 32 bits), no
    workspace or unit counter, an ill-formed scale-byte range. Without a GPU an accepted launch gets as far as
    CUDA and fails there; a refused one is an invalid value (1) first. Both builds: the walk from
    the counter, and -DNVFP4_WALK_STATIC, its ablation without one (thirty-seventh session)."""
    # the library's kernels, its finalize kernels and the walk's two types
    lib = ctypes.CDLL(str(_build_dev_kernel(tmp_path, "fused_walk.cu", flags, 78)))
    entry = lib.nvfp4_dev_launch_fused_walk
    p, i32, i64 = ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64
    entry.argtypes = [p, p, p, p, p, p, p, p, i32, i64, i64, i32, i32, p, i32, i32, ctypes.POINTER(i32)]
    fake = ctypes.c_void_p(1 << 20)  # aligned, never dereferenced: nothing reaches a kernel here

    def answer(m: int = 1, n: int = 5120, k: int = 17408, splits: int = 8, workspace: object = fake,
               take: object = fake, scale_bytes: int = 0) -> int:
        return entry(fake, fake, fake, fake, None, fake, workspace, take, m, n, k, 1, splits, None, scale_bytes,
                     0, None)

    accepted = [answer(), answer(splits=34), answer(m=8, k=5120, splits=10), answer(scale_bytes=0x4030),
                answer(n=65)]
    assert all(code not in (0, 1) for code in accepted), accepted
    refused = [answer(splits=7), answer(splits=68), answer(k=5120, splits=20), answer(splits=1), answer(m=9),
               answer(m=0), answer(workspace=None), answer(take=None), answer(scale_bytes=0x7F01),
               answer(scale_bytes=0x2040), answer(k=17400), answer(n=64), answer(n=1)]
    assert refused == [1] * len(refused), refused
