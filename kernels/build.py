"""Build the CUDA kernels (kernels/cuda/*.cu) with plain nvcc into one cached shared library.

Why plain nvcc and not torch's cpp_extension: a cold ``load_inline`` took 24 s against 2.3 s for
nvcc on a small file (docs/anchors.md), and the library needs no Python C API at all: it
exports ``extern "C"`` launchers that :mod:`nvfp4_kernels.cuda_backend` calls through ctypes.

The library is cached under ``$NVFP4_BUILD_DIR`` (default ``~/.cache/nvfp4-harness/``), named by
a SHA-256 of the sources, the flags and ``nvcc --version``, so any change rebuilds and parallel
pytest-xdist workers never see a half-written file (build to a temporary name, then
``os.replace``). The CUDA runtime is linked statically (``-cudart static``) so the library loads
on a machine without a GPU driver, which lets CPU CI check its exported symbols.

Extra targets (e.g. Blackwell): set ``NVFP4_CUDA_ARCHS="sm_90,sm_100,sm_120"`` or pass
``archs=`` to :func:`build_library`. The default is ``sm_90`` (H100/H200).
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import sysconfig
import tempfile
from pathlib import Path

CUDA_SOURCE_DIR = Path(__file__).resolve().parent / "cuda"
#: the C source of the fast path's launch call (a CPython extension; see build_launch_call)
LAUNCH_CALL_SOURCE = Path(__file__).resolve().parent / "host" / "launch_call.c"
#: the extension's module name (its PyInit_ function is named after it)
LAUNCH_CALL_MODULE = "_nvfp4_launch_call"
#: no -Werror here: a newer compiler's new warning must not send a user's calls to ctypes (CPU CI
#: compiles the source with -Werror, suites/test_launch_call.py)
LAUNCH_CALL_FLAGS: tuple[str, ...] = ("-O2", "-shared", "-fPIC", "-Wall")
DEFAULT_ARCHS: tuple[str, ...] = ("sm_90",)
#: Sources whose kernels need an architecture-specific target (wgmma, setmaxnreg: sm_90a code runs
#: on compute capability 9.0 only): where the build targets sm_90 they are compiled apart, with
#: sm_90a machine code in place of sm_90 (and no PTX, which would not serve another GPU), and linked
#: into the same library. Built for other targets only, their kernels trap, and the dispatcher's
#: guards never send a call to them there.
ARCH_SPECIFIC_SOURCES: dict[str, str] = {"fused_wgmma.cu": "sm_90a"}
#: Never --use_fast_math / -ftz=true: the exact decode depends on fp32 subnormals (docs/contract.md).
BASE_FLAGS: tuple[str, ...] = ("-O3", "-std=c++17", "-lineinfo", "-Xcompiler", "-fPIC",
                               "-ftz=false", "-prec-div=true", "-prec-sqrt=true", "-fmad=true")
LIBRARY_EXPORTS: tuple[str, ...] = (
    "nvfp4_launch_dequant_scalar",
    "nvfp4_launch_dequant_vec8",
    "nvfp4_launch_gemv",
    "nvfp4_gemv_splits",
    "nvfp4_launch_fused",
    "nvfp4_launch_fused_tiled",
    "nvfp4_fused_tiles",
    "nvfp4_fused_tile",
    "nvfp4_fused_block_warps",
    "nvfp4_fused_occupancy",
    "nvfp4_fused_launch_occupancy",
    "nvfp4_launch_fused_wgmma_mma_order",
    "nvfp4_fused_wgmma_act_rows",
    "nvfp4_fused_wgmma_ring_steps",
    "nvfp4_fused_wgmma_tile_rows",
    "nvfp4_launch_fp4_probe",
    "nvfp4_launch_packed",
    "nvfp4_launch_args_size",
    "nvfp4_error_string",
)


class NvccNotFound(RuntimeError):
    """nvcc is not installed or not on the PATH / under CUDA_HOME."""


class BuildError(RuntimeError):
    """nvcc (or the C compiler) failed; the message carries its command line and output."""


def find_nvcc() -> str:
    """Path of nvcc: ``$CUDA_HOME/bin/nvcc`` (or ``$CUDA_PATH``), then the PATH, then /usr/local/cuda."""
    for env in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(env)
        if root:
            candidate = Path(root) / "bin" / "nvcc"
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
    found = shutil.which("nvcc")
    if found:
        return found
    fallback = Path("/usr/local/cuda/bin/nvcc")
    if fallback.is_file() and os.access(fallback, os.X_OK):
        return str(fallback)
    raise NvccNotFound(
        "nvcc (the CUDA compiler) was not found. Install the CUDA toolkit 12.8 or newer "
        "(e.g. `apt-get install cuda-nvcc-13-0`, or the `nvidia-cuda-nvcc` wheel), then put its "
        "bin/ directory on PATH or set CUDA_HOME to the toolkit root (the directory holding bin/nvcc)."
    )


def nvcc_version(nvcc: str | None = None) -> str:
    """The full ``nvcc --version`` text (part of the cache key)."""
    nvcc = nvcc or find_nvcc()
    result = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise BuildError(f"`{nvcc} --version` failed ({result.returncode}): {result.stderr.strip()}")
    return result.stdout.strip()


def source_files(source_dir: Path | None = None) -> list[Path]:
    """The .cu and .cuh files that make up the library, in a stable order."""
    root = Path(source_dir) if source_dir is not None else CUDA_SOURCE_DIR
    files = sorted(list(root.glob("*.cu")) + list(root.glob("*.cuh")) + list(root.glob("*.h")))
    if not any(f.suffix == ".cu" for f in files):
        raise BuildError(f"no .cu sources found in {root}; the package data kernels/cuda/*.cu is missing")
    return files


def resolve_archs(archs: tuple[str, ...] | list[str] | None = None) -> tuple[str, ...]:
    """Targets from the argument, else ``$NVFP4_CUDA_ARCHS`` (comma separated), else sm_90."""
    if archs is None:
        env = os.environ.get("NVFP4_CUDA_ARCHS", "").strip()
        archs = tuple(a.strip() for a in env.split(",") if a.strip()) or DEFAULT_ARCHS
    out = []
    for arch in archs:
        if not arch.startswith("sm_") or not arch[3:].rstrip("af").isdigit():
            raise ValueError(f"CUDA target {arch!r} is not of the form sm_XY (e.g. sm_90, sm_100, sm_120)")
        out.append(arch)
    return tuple(out)


def gencode_flags(archs: tuple[str, ...]) -> list[str]:
    """-gencode flags: machine code for every target plus PTX of the first (for newer GPUs)."""
    flags = []
    for arch in archs:
        num = arch[3:]
        flags.append(f"-gencode=arch=compute_{num},code={arch}")
    first = archs[0][3:]
    flags.append(f"-gencode=arch=compute_{first},code=compute_{first}")
    return flags


def library_flags(archs: tuple[str, ...]) -> list[str]:
    """Every nvcc flag used for the shared library (part of the cache key)."""
    return [*BASE_FLAGS, *gencode_flags(archs), "-shared", "-cudart", "static"]


def arch_specific_flags(source: str, archs: tuple[str, ...]) -> list[str] | None:
    """nvcc flags of one source of :data:`ARCH_SPECIFIC_SOURCES` compiled apart to an object, or
    None where the build does not target its base architecture (it is then compiled with the
    others): its specific target's machine code in place of the base's, the other targets as
    usual, no PTX."""
    specific = ARCH_SPECIFIC_SOURCES.get(source)
    if specific is None or specific.rstrip("a") not in archs:
        return None
    targets = [specific if arch == specific.rstrip("a") else arch for arch in archs]
    return [*BASE_FLAGS, *(f"-gencode=arch=compute_{a[3:]},code={a}" for a in targets), "-c"]


def cache_key(sources: list[Path], flags: list[str], version: str) -> str:
    """SHA-256 over the source names and bytes, the flags and the nvcc version text."""
    digest = hashlib.sha256()
    for path in sources:
        digest.update(path.name.encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    digest.update("\0".join(flags).encode() + b"\0")
    digest.update(version.encode())
    return digest.hexdigest()


def build_dir() -> Path:
    """The cache directory: ``$NVFP4_BUILD_DIR`` or ``~/.cache/nvfp4-harness``."""
    return Path(os.environ.get("NVFP4_BUILD_DIR") or Path.home() / ".cache" / "nvfp4-harness")


def _run_nvcc(cmd: list[str], what: str) -> str:
    """Run nvcc; its output (ptxas's report where -Xptxas -v asks for one), or BuildError."""
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise BuildError(f"nvcc failed building {what} (exit {result.returncode}).\n"
                         f"command: {' '.join(cmd)}\n{result.stdout}{result.stderr}")
    return result.stdout + result.stderr


def build_library(archs: tuple[str, ...] | list[str] | None = None, *,
                  source_dir: Path | None = None, cache_dir: Path | None = None) -> Path:
    """Compile every .cu into one shared library (cached); returns its path.

    Raises :class:`NvccNotFound` when nvcc is missing and :class:`BuildError` when it fails.
    """
    nvcc = find_nvcc()
    targets = resolve_archs(archs)
    sources = source_files(source_dir)
    flags = library_flags(targets)
    apart = {s.name: f for s in sources if (f := arch_specific_flags(s.name, targets)) is not None}
    key = cache_key(sources, [*flags, *(x for name in sorted(apart) for x in (name, *apart[name]))],
                    nvcc_version(nvcc))
    out_dir = Path(cache_dir) if cache_dir is not None else build_dir()
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"libnvfp4_{key[:24]}.so"
    if target.is_file():
        return target
    cu_files = [str(s) for s in sources if s.suffix == ".cu" and s.name not in apart]
    include = str(sources[0].parent)
    fd, tmp_name = tempfile.mkstemp(prefix=target.name + ".", suffix=".tmp", dir=out_dir)
    os.close(fd)
    objects = []
    try:
        with tempfile.TemporaryDirectory(dir=out_dir) as obj_dir:
            for name, source_flags in sorted(apart.items()):
                obj = str(Path(obj_dir) / f"{Path(name).stem}.o")
                _run_nvcc([nvcc, *source_flags, f"-I{include}", "-o", obj, str(Path(include) / name)], name)
                objects.append(obj)
            _run_nvcc([nvcc, *flags, f"-I{include}", "-o", tmp_name, *cu_files, *objects], "the shared library")
        os.replace(tmp_name, target)
    finally:
        if os.path.exists(tmp_name):
            os.unlink(tmp_name)
    return target


_PTXAS_REPORT = ("-Xptxas", "-v")


def ptxas_report(obj: Path) -> Path:
    """Where :func:`compile_objects` keeps ptxas's report of the object ``obj``."""
    return obj.with_name(obj.name + ".ptxas.txt")


def compile_objects(kind: str = "cubin", arch: str = "sm_90", *, source_dir: Path | None = None,
                    out_dir: Path | None = None) -> dict[str, Path]:
    """Compile each .cu separately to a cubin (or a relocatable object, kind="obj") for one
    target, for SASS inspection with ``cuobjdump --dump-sass``; a source of
    :data:`ARCH_SPECIFIC_SOURCES` gets its specific target where ``arch`` is its base (the code
    the library runs). ptxas's report of each (registers, spills, its warnings) is kept beside
    the object as ``<object>.ptxas.txt`` (:func:`ptxas_report`). Returns {source stem: path}."""
    if kind not in ("cubin", "obj"):
        raise ValueError(f"kind must be 'cubin' or 'obj', got {kind!r}")
    nvcc = find_nvcc()
    (target,) = resolve_archs([arch])
    sources = source_files(source_dir)
    flags = [*BASE_FLAGS, f"-arch={target}"]
    key = cache_key(sources, [*flags, kind, *_PTXAS_REPORT], nvcc_version(nvcc))
    root = Path(out_dir) if out_dir is not None else build_dir() / f"objects_{key[:24]}"
    root.mkdir(parents=True, exist_ok=True)
    include = str(sources[0].parent)
    results = {}
    for src in sources:
        if src.suffix != ".cu":
            continue
        dest = root / f"{src.stem}.{'cubin' if kind == 'cubin' else 'o'}"
        if not dest.is_file():
            # Each file appears whole or not at all (a temporary name, then os.replace), the report
            # before its object, so that processes sharing the cache (pytest-xdist workers) never
            # read a half-written one: one that finds the object finds its report.
            fd, tmp_name = tempfile.mkstemp(prefix=dest.name + ".", suffix=".tmp", dir=root)
            os.close(fd)
            report_tmp = tmp_name + ".ptxas.txt"
            mode = ["-cubin"] if kind == "cubin" else ["-c"]
            specific = ARCH_SPECIFIC_SOURCES.get(src.name)
            src_flags = [*BASE_FLAGS, f"-arch={specific}"] if specific and specific.rstrip("a") == target else flags
            try:
                report = _run_nvcc([nvcc, *src_flags, *mode, *_PTXAS_REPORT, f"-I{include}", "-o", tmp_name,
                                    str(src)], src.name)
                Path(report_tmp).write_text(report)
                os.replace(report_tmp, ptxas_report(dest))
                os.replace(tmp_name, dest)
            finally:
                for leftover in (tmp_name, report_tmp):
                    if os.path.exists(leftover):
                        os.unlink(leftover)
        results[src.stem] = dest
    return results


def find_c_compiler() -> list[str]:
    """The host C compiler as a command: ``$CC``, else the one Python was built with, else
    ``cc`` or ``gcc`` on the PATH (nvcc needs one of them anyway)."""
    for candidate in (os.environ.get("CC"), sysconfig.get_config_var("CC")):
        if candidate:
            command = shlex.split(candidate)
            if command and shutil.which(command[0]):
                return command
    for name in ("cc", "gcc"):
        found = shutil.which(name)
        if found:
            return [found]
    raise BuildError("no C compiler found for the launch-call extension (tried $CC, Python's CC, cc and gcc): "
                     "install gcc, or set CC to a C compiler")


def python_include_dir() -> Path:
    """The directory holding this Python's ``Python.h``; BuildError when the headers are not
    installed (the fast path then launches through ctypes)."""
    include = Path(sysconfig.get_paths()["include"])
    if not (include / "Python.h").is_file():
        raise BuildError(f"Python's C headers are not installed ({include / 'Python.h'} is missing), so the "
                         "launch-call extension cannot be built and the fast path launches through ctypes "
                         "(0.5-1.7 us more per call): install them, e.g. `apt-get install python3-dev` or "
                         "python3.X-dev for this Python")
    return include


def build_launch_call(*, cache_dir: Path | None = None, source: Path | None = None) -> Path:
    """Compile ``kernels/host/launch_call.c`` into a CPython extension module (cached, like the
    library, by a SHA-256 of the source, the compiler's version, the flags and this Python's
    headers and ABI); returns its path. Load it with :func:`importlib.util.spec_from_file_location`
    under the name :data:`LAUNCH_CALL_MODULE`.

    Raises :class:`BuildError` when there is no C compiler, no ``Python.h``, or the compile fails.
    """
    src = Path(source) if source is not None else LAUNCH_CALL_SOURCE
    if not src.is_file():
        raise BuildError(f"the launch-call source {src} is missing; the package data kernels/host/*.c was not "
                         "installed")
    compiler = find_c_compiler()
    include = python_include_dir()
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    version = subprocess.run([*compiler, "--version"], capture_output=True, text=True, check=False).stdout
    digest = hashlib.sha256()
    for part in (src.read_bytes(), version.encode(), " ".join(LAUNCH_CALL_FLAGS).encode(), str(include).encode(),
                 suffix.encode()):
        digest.update(part + b"\0")
    out_dir = Path(cache_dir) if cache_dir is not None else build_dir()
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{LAUNCH_CALL_MODULE}_{digest.hexdigest()[:24]}{suffix}"
    if target.is_file():
        return target
    fd, tmp_name = tempfile.mkstemp(prefix=target.name + ".", suffix=".tmp", dir=out_dir)
    os.close(fd)
    try:
        cmd = [*compiler, *LAUNCH_CALL_FLAGS, f"-I{include}", str(src), "-o", tmp_name]
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise BuildError(f"the C compiler failed building the launch-call extension (exit {result.returncode}).\n"
                             f"command: {' '.join(cmd)}\n{result.stdout}{result.stderr}")
        os.replace(tmp_name, target)
    finally:
        if os.path.exists(tmp_name):
            os.unlink(tmp_name)
    return target
