"""``python -m nvfp4_harness mutate``: plant typical kernel bugs one at a time, expect the suites to fail.

A green suite proves little until it has been seen going red for the bugs it is meant to
catch. This command copies the project into a temporary folder (the working tree is never
touched), runs the dispatch suites there once unmutated (they must pass), then for each
mutation below rewrites one file of the copy, runs

    python -m pytest -m dispatch -x -q -p no:cacheprovider

with ``PYTHONPATH`` pointing at the copy (so the mutated kernels are the ones imported), and
restores the file. A mutant is *caught* when that run fails. It prints a table and the score
(caught / planted) and exits 0 only when every mutant was caught.

Each mutation is a literal search/replace on a named file that must match exactly once. When a
refactor moves the code, the mutation is reported as STALE (an error, never "caught"): update
its search text. ``suites/test_mutation.py`` checks cheaply that every mutation still applies.

The Python modules are mutated by a tool instead, cosmic-ray (``scripts/mutation_tool.sh``,
docs/mutation-testing.md), which makes every mutant its operators can make and needs no search
text that a legitimate edit breaks. The table keeps Python entries only for a module whose
cosmic-ray session has not been run and reviewed yet: ``kernels/reference.py`` (the ``numerics``
session, about 1,300 mutants, 1.5 to 3 hours on one core). ``suites/test_mutation.py`` fails when
the table names a module the reviewed sessions cover. No Python tool mutates CUDA, so the
:data:`GPU_MUTATIONS` stay hand-written.

GPU mutants (``--gpu``, on a machine with a CUDA GPU): bugs planted in the CUDA sources
(:data:`GPU_MUTATIONS`: a dropped tail tile, a dropped partial K step, a scale-index slip, a lost
negative zero, a dropped overflow path, changed reduction orders). Every mutant's library is
built first, in parallel, into the copy's own build cache (``NVFP4_BUILD_DIR``); then the GPU
suites that pin kernel bits (:data:`GPU_PYTEST_COMMAND`) run once per mutant. ``--out FILE``
writes the outcomes with the GPU's provenance (committed as fixtures/gpu/mutation-gpu.json).

Usage::

    python -m nvfp4_harness mutate                 # all mutations (slow: one suite run each)
    python -m nvfp4_harness mutate --gpu --out fixtures/gpu/mutation-gpu.json   # the CUDA mutants
    python -m nvfp4_harness mutate --list          # what would be planted
    python -m nvfp4_harness mutate --only gemv-bias-after-rounding,negative-zero-lost
    python -m nvfp4_harness mutate --pytest-args="-n 2"   # extra pytest arguments (e.g. xdist)
    python -m nvfp4_harness mutate --gpu --part 1/2 --out a.json   # half the table (a time limit)
    python -m nvfp4_harness mutate --join a.json b.json --out fixtures/gpu/mutation-gpu.json
    python -m nvfp4_harness mutate --join fixtures/gpu/mutation-gpu.json wgmma.json --rerun \\
        --note "only fused_wgmma.cu changed" --out fixtures/gpu/mutation-gpu.json   # one file's mutants again

``--out`` is rewritten after the baseline and after every mutant (``"complete": false`` until
the last), so a run cut off by a time limit keeps the outcomes it has.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
PYTEST_COMMAND = ("-m", "pytest", "-m", "dispatch", "-x", "-q", "-p", "no:cacheprovider")
#: the GPU suites that pin the CUDA kernels' bits and bounds (GPU mutants run these)
GPU_PYTEST_COMMAND = ("-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-m", "gpu",
                      "suites/test_fused_paths_bits.py", "suites/test_cuda_kernels.py",
                      "suites/test_operator_hashes.py", "suites/test_layout_gpu.py",
                      "suites/test_fused_wgmma_kernel.py")
#: where a copy's mutant libraries are built (NVFP4_BUILD_DIR of its suite runs)
GPU_BUILD_DIR = "_gpu_build"
_IGNORED = (".git", ".venv", "venv", "__pycache__", ".hypothesis", ".pytest_cache", "*.egg-info",
            ".benchmarks", ".ruff_cache", "_build", ".tox", "*.pyc")


@dataclass(frozen=True)
class Mutation:
    """One planted bug: replace ``search`` (which must occur exactly once) in ``file``."""

    name: str
    file: str
    bug: str
    search: str
    replace: str

    def apply_to(self, source: str) -> str:
        """The mutated source; :class:`StaleMutation` unless ``search`` occurs exactly once."""
        count = source.count(self.search)
        if count != 1:
            raise StaleMutation(f"{self.name}: the search text occurs {count} times in {self.file} "
                                f"(must be exactly once); update the mutation to the current source")
        return source.replace(self.search, self.replace)


class StaleMutation(ValueError):
    """A mutation whose search text no longer matches its file exactly once."""


#: Bugs planted in the CPU backend, kernels/reference.py: the one Python module whose cosmic-ray
#: session (``numerics``) has not been run and reviewed yet (see the module doc).
MUTATIONS: tuple[Mutation, ...] = (
    Mutation(
        "nibble-swap-scalar", "kernels/reference.py",
        "scalar dequant reads the high nibble as the even element",
        "        out[2 * idx] = round_fp32_to(E2M1_TABLE[byte & 0x0F] * scale_lo, dtype)\n"
        "        out[2 * idx + 1] = round_fp32_to(E2M1_TABLE[byte >> 4] * scale_hi, dtype)\n",
        "        out[2 * idx] = round_fp32_to(E2M1_TABLE[byte >> 4] * scale_lo, dtype)\n"
        "        out[2 * idx + 1] = round_fp32_to(E2M1_TABLE[byte & 0x0F] * scale_hi, dtype)\n"),
    Mutation(
        "nibble-swap-vec8", "kernels/reference.py",
        "vec8 dequant reads the high nibble as the even element",
        "round_fp32_to(E2M1_TABLE[byte & 0x0F] * scale, dtype)\n"
        "            out[r0:r0 + w.shape[0], :, 2 * pair + 1] = round_fp32_to(E2M1_TABLE[byte >> 4] * scale",
        "round_fp32_to(E2M1_TABLE[byte >> 4] * scale, dtype)\n"
        "            out[r0:r0 + w.shape[0], :, 2 * pair + 1] = round_fp32_to(E2M1_TABLE[byte & 0x0F] * scale"),
    Mutation(
        "nibble-swap-gemv", "kernels/reference.py",
        "GEMV decodes the nibbles of each byte in the wrong order",
        # the decode itself (_decoded_rows_t) is shared with fused_mma: swap the nibbles of the
        # GEMV's own bytes, so the bug is the GEMV's alone, as before the decode was shared
        '    _check_fused_operands(a, packed, weight_scale, block_size, 32, "gemv")\n',
        '    _check_fused_operands(a, packed, weight_scale, block_size, 32, "gemv")\n'
        "    packed = (packed >> 4) | ((packed & 0x0F) << 4)\n"),
    Mutation(
        "scale-index-off-by-one-scalar", "kernels/reference.py",
        "scalar dequant: a high nibble that starts a new block reads the previous block's scale",
        "flat_scales[row * nsc + (k_even + 1) // block_size]",
        "flat_scales[row * nsc + k_even // block_size]"),
    Mutation(
        "scale-index-off-by-one-vec8", "kernels/reference.py",
        "vec8 dequant: the pairs-left counter is one too large, so the scale advances one pair late",
        "remaining = (block_size * (block + 1) - k_start) // 2",
        "remaining = (block_size * (block + 1) - k_start) // 2 + 1"),
    Mutation(
        "mid-chunk-advance-dropped", "kernels/reference.py",
        "vec8 dequant only sets the scale at the start of a chunk (block sizes 2..12 cross chunks)",
        "            block += advance\n",
        "            block += advance * (pair == 3)\n"),
    Mutation(
        "negative-zero-lost", "kernels/reference.py",
        "rounding to fp16/bf16 turns -0.0 (code 0x8) into +0.0",
        "out = np.asarray(values, dtype=np.float32).astype(target)",
        "out = (np.asarray(values, dtype=np.float32) + np.float32(0.0)).astype(target)"),
    Mutation(
        "gemv-fp16-accumulation", "kernels/reference.py",
        "GEMV keeps its running sum in fp16 instead of fp32",
        "        acc[:, r0:r0 + w_t.shape[1]] = accumulate_fp32(a32, w_t)\n",
        "        part = np.zeros((a32.shape[0], w_t.shape[1]), dtype=np.float16)\n"
        "        for kk in range(w_t.shape[0]):\n"
        "            part += (a32[:, kk:kk + 1] * w_t[kk]).astype(np.float16)\n"
        "        acc[:, r0:r0 + w_t.shape[1]] = part\n"),
    Mutation(
        "gemv-bias-after-rounding", "kernels/reference.py",
        "GEMV rounds the dot product before adding the bias (two roundings instead of one)",
        # fused_mma adds its bias with the same line: the GEMV's is the one after its accumulation
        "accumulate_fp32(a32, w_t)\n    if bias is not None:\n        acc = acc + np.asarray(bias).astype(np.float32)",
        "accumulate_fp32(a32, w_t)\n    if bias is not None:\n"
        "        acc = round_fp32_to(acc, dtype).astype(np.float32) + np.asarray(bias).astype(np.float32)"),
)


#: Bugs planted in the CUDA sources, for ``--gpu``. Each names the GPU test meant to catch it.
GPU_MUTATIONS: tuple[Mutation, ...] = (
    Mutation(
        "wgmma-tail-tile-dropped", "kernels/cuda/fused_wgmma.cu",
        "fused_wgmma: the row-tile count rounds down, so the last partial 128-row tile of N is never computed",
        "  const int64_t tiles = (n + kWgRows - 1) / kWgRows;\n",
        "  const int64_t tiles = n / kWgRows > 0 ? n / kWgRows : 1;\n"),
    Mutation(
        "wgmma-partial-step-dropped", "kernels/cuda/fused_wgmma.cu",
        "fused_wgmma: a split block's step count stops one short of K, dropping the last 128 values",
        "    steps = max(0, min(step0 + plan.per_split, total_steps) - step0);\n",
        "    steps = max(0, min(step0 + plan.per_split, total_steps - 1) - step0);\n"),
    Mutation(
        "wgmma-scale-index-slip", "kernels/cuda/fused_wgmma.cu",
        "fused_wgmma (fused_mma's K order): row g of a lane decodes each half step with the other half's scale block",
        "  const float s0 = (h ? b0.y : b0.x) * gs, s1 = (h ? b1.y : b1.x) * gs;\n",
        "  const float s0 = (h ? b0.x : b0.y) * gs, s1 = (h ? b1.y : b1.x) * gs;\n"),
    Mutation(
        "wgmma-row-table-swapped", "kernels/cuda/fused_wgmma.cu",
        "fused_wgmma (fused_mma's K order, row-major weights): row g + 8 of a lane is decoded through row g's "
        "table, so it takes the other row's scale",
        "        decode_word_table(wr1[qq], t1, f[qq][1]);\n",
        "        decode_word_table(wr1[qq], t0, f[qq][1]);\n"),
    Mutation(
        "wgmma-overflow-path-dropped", "kernels/cuda/fused_wgmma.cu",
        "fused_wgmma (fused_mma's K order): the exact two-multiply form is never taken (s * 2^14 overflowing fp32 "
        "gives inf)",
        "  if (fabsf(big) == __uint_as_float(0x7F800000u) && fabsf(s) != __uint_as_float(0x7F800000u)) {",
        "  if (false) {"),
    Mutation(
        "wgmma-act-permutation-slip", "kernels/cuda/fused_wgmma.cu",
        "fused_wgmma's activation permutation reads each 4-byte pair from the next 16-byte chunk's column, so "
        "the MMAs multiply the weights by the wrong activations",
        "  const uint32_t* src = a + ((i >> 4) << 6) + (i & 15);\n",
        "  const uint32_t* src = a + ((i >> 4) << 6) + ((i + 1) & 15);\n"),
    Mutation(
        "wgmma-split-columns-shifted", "kernels/cuda/fused_wgmma.cu",
        "fused_wgmma: a split tile's partials are written at the whole output's columns instead of the "
        "split tiles' own, so the finalize kernel sums other rows' partials",
        "      col0 = plan.whole_tiles * kWgRows;\n",
        "      col0 = 0;\n"),
    Mutation(
        "wgmma-ring-slot-slip", "kernels/cuda/fused_wgmma.cu",
        "fused_wgmma's ring of weight steps (either layout, M = 1..128 and 193..256): a thread reads "
        "step s from the next step's slot, so it decodes bytes copied for another step or not yet landed "
        "(test_layout_gpu: its launches at M = 1, 17, 33, 64, 65, 100, 128, 193 and 256)",
        "    const uint32_t i = slot(s, tid), scale = ring + 32 * kSlots + 8 * i + 2 * (t & 1);\n",
        "    const uint32_t i = slot(s + 1, tid), scale = ring + 32 * kSlots + 8 * i + 2 * (t & 1);\n"),
    Mutation(
        "fused-tail-tile-dropped", "kernels/cuda/fused_mma.cu",
        "fused_mma: the row-tile count rounds down, so the last partial tile of N is never computed",
        "  const int n_tiles = (n + TL::kRows - 1) / TL::kRows;\n",
        "  const int n_tiles = n / TL::kRows > 0 ? n / TL::kRows : 1;\n"),
    Mutation(
        "fused-partial-split-dropped", "kernels/cuda/fused_mma.cu",
        "fused_mma: steps per split round down, so an uneven split count drops the last K steps",
        "  const int steps_per_split = (total_steps + splits - 1) / splits;\n",
        "  const int steps_per_split = total_steps / splits;\n"),
    Mutation(
        "fused-tiled-step-slip", "kernels/cuda/fused_mma.cu",
        "fused_mma on tile-contiguous weights advances half a step's 4 KB per K step, so from the "
        "second step on it reads the wrong rows' bytes (test_layout_gpu)",
        "  static constexpr int64_t kWStep = 64 * 64;  // bytes a step advances the sources",
        "  static constexpr int64_t kWStep = 64 * 32;  // bytes a step advances the sources"),
    Mutation(
        "gemv-scale-index-slip", "kernels/cuda/gemv.cu",
        "GEMV: words 1 and 3 of a row read the next half-row's scale",
        "    decode_word<T, FAST>(word_of(s.w0, q), sc[q >> 1], r0);\n",
        "    decode_word<T, FAST>(word_of(s.w0, q), sc[(q + 1) >> 1], r0);\n"),
    Mutation(
        "scalar-negative-zero-lost", "kernels/cuda/nvfp4_common.cuh",
        "the scalar kernel's code decode drops the sign of code 0x8 (-0.0 becomes +0.0)",
        "  const uint32_t bits = ((code & 8u) << 28) | ((code & 7u) << 22);\n",
        "  const uint32_t bits = ((code & 7u) ? ((code & 8u) << 28) : 0u) | ((code & 7u) << 22);\n"),
    Mutation(
        "fused-overflow-path-dropped", "kernels/cuda/fused_mma.cu",
        "fused_mma: the exact two-multiply form is never taken (s * 2^14 overflowing fp32 gives inf)",
        "  slow = __any_sync(0xFFFFFFFFu, slow);\n",
        "  slow = false;\n"),
    Mutation(
        "fused-table-sign-lost", "kernels/cuda/mma_decode.cuh",
        "fused_mma's table decode drops the sign of codes 0..3 of every word",
        "hi03 = prmt(tb.hi03, tb.hi47, mag) ^ sign03;",
        "hi03 = prmt(tb.hi03, tb.hi47, mag);"),
    Mutation(
        "fused-placed-sign-lost", "kernels/cuda/mma_decode.cuh",
        "fused_mma's decode of tile-contiguous words drops the placed signs of codes 4..7 "
        "(test_layout_gpu: the tiled bits no longer equal the row-major ones)",
        "  const uint32_t hi47 = prmt(tb.hi03, tb.hi47, mag47) ^ ((w << 4) & 0x80808080u);",
        "  const uint32_t hi47 = prmt(tb.hi03, tb.hi47, mag47);"),
    Mutation(
        "fused-scale-range-unchecked", "kernels/cuda/fused_mma.cu",
        "fused_mma on a tiled weight with a scale-byte range skips the per-step range test without "
        "checking the range's ends against the table for the global scale (test_layout_gpu)",
        "  return table_ok<T>(ends.x * gs) && table_ok<T>(ends.y * gs);",
        "  return ends.x == ends.x;"),
    Mutation(
        "fused-placed-multiply-unrestored", "kernels/cuda/fused_mma.cu",
        "fused_mma's multiply decode reads tile-contiguous words without putting their signs back "
        "(test_layout_gpu: blocks outside the table's range)",
        "      const uint32_t w0 = PLACED ? unplace_signs(word_of(w[r][0], q)) : word_of(w[r][0], q);",
        "      const uint32_t w0 = word_of(w[r][0], q);"),
    Mutation(
        "fused-table-range-widened", "kernels/cuda/mma_decode.cuh",
        "fused_mma's bf16 table takes scales down to 2^-126, where 0.5 s is a bf16 subnormal",
        "  static constexpr uint32_t kLo = 0x01000000u;",
        "  static constexpr uint32_t kLo = 0x00800000u;"),
    Mutation(
        "fused-table-binade-slip", "kernels/cuda/mma_decode.cuh",
        "fused_mma's table builds 4 t1 and 4 t15 one binade short (as 2 t1, 2 t15)",
        "  const uint32_t q2 = p + 2u * (u | (u << 16));",
        "  const uint32_t q2 = p + (u | (u << 16));"),
    Mutation(
        "splitk-order-reversed", "kernels/cuda/mma_decode.cuh",
        "the split-K finalize kernel (GEMV, fused_mma, fused_wgmma's split tiles) adds each chunk of up to "
        "eight splits' partials last split first (so all of them, at up to eight splits)",
        "    for (int c = 0; c < kFinalizeChunk; ++c)\n      if (s0 + c < splits) {\n",
        "    for (int c = kFinalizeChunk - 1; c >= 0; --c)\n      if (s0 + c < splits) {\n"),
    Mutation(
        "finalize-wait-dropped", "kernels/cuda/mma_decode.cuh",
        "the split-K finalize kernel, launched as its split kernel's programmatic dependent, reads the "
        "partials without waiting for that kernel to complete (a race: it may sum partials not yet written)",
        "  wait_for_prerequisite_grid();\n  splitk_finalize_thread",
        "  splitk_finalize_thread"),
    Mutation(
        "last-block-order-reversed", "kernels/cuda/fused_mma.cu",
        "fused_mma's in-launch last-block sum adds the splits' partials last split first",
        "    for (int s = 0; s < splits; ++s) sum += __ldcg(p + s * plane);\n",
        "    for (int s = splits - 1; s >= 0; --s) sum += __ldcg(p + s * plane);\n"),
    Mutation(
        "last-block-counter-not-reset", "kernels/cuda/fused_mma.cu",
        "fused_mma's last-block sum leaves its tile counters set, so the next launch on the stream "
        "never finds its last block",
        "  if (threadIdx.x == 0) *counter = 0;\n",
        "\n"),
    Mutation(
        "gemv-table-rows-swapped", "kernels/cuda/gemv.cu",
        "GEMV: the table decode decodes row g + 8 of a tile with row g's scale table",
        "      decode_word_table(word_of(s.w1, q), t1, r1);\n",
        "      decode_word_table(word_of(s.w1, q), t0, r1);\n"),
    Mutation(
        "gemv-partial-step-overread", "kernels/cuda/gemv.cu",
        "GEMV: a partial last K step (K % 128 != 0) is loaded whole, so its missing values come "
        "from the next weight and activation row",
        "    k_left = k - 32 * t;\n",
        "    k_left = k;\n"),
    Mutation(
        "gemv-last-block-order-reversed", "kernels/cuda/gemv.cu",
        "GEMV's in-launch last-block sum adds the splits' partials last split first",
        "    for (int s = 0; s < splits; ++s) sum += __ldcg(p + s * plane);\n",
        "    for (int s = splits - 1; s >= 0; --s) sum += __ldcg(p + s * plane);\n"),
    Mutation(
        "gemv-warp-order-reversed", "kernels/cuda/gemv.cu",
        "GEMV: the block's 8 warp partials are summed last warp first",
        "    for (int w = 0; w < kWarps; ++w) sum += red[w][src_i][src_lane];\n",
        "    for (int w = kWarps - 1; w >= 0; --w) sum += red[w][src_i][src_lane];\n"),
)


@dataclass
class Outcome:
    """What happened to one mutant (or to the unmutated baseline)."""

    name: str
    status: str  # "caught", "SURVIVED", "STALE", "TIMEOUT", "ERROR", "passed" (baseline)
    seconds: float
    detail: str

    @property
    def caught(self) -> bool:
        return self.status == "caught"


def check_definitions(root: Path = PROJECT_ROOT,
                      mutations: Sequence[Mutation] = MUTATIONS) -> list[str]:
    """Problems with the mutation table against the sources under ``root`` (empty: all apply)."""
    problems, seen = [], set()
    for mutation in mutations:
        if mutation.name in seen:
            problems.append(f"{mutation.name}: duplicate name")
        seen.add(mutation.name)
        path = root / mutation.file
        if not path.is_file():
            problems.append(f"{mutation.name}: {mutation.file} does not exist")
            continue
        try:
            mutated = mutation.apply_to(path.read_text())
        except StaleMutation as exc:
            problems.append(str(exc))
            continue
        if path.suffix != ".py":
            continue  # CUDA sources: compile_cuda_mutant builds them (nvcc)
        try:
            compile(mutated, str(path), "exec")
        except SyntaxError as exc:
            problems.append(f"{mutation.name}: the mutated {mutation.file} does not compile ({exc})")
    return problems


def mutated_cuda_sources(mutation: Mutation, dest: Path, root: Path = PROJECT_ROOT) -> Path:
    """A copy of kernels/cuda in ``dest`` with ``mutation`` applied (its file must be there)."""
    src = root / "kernels" / "cuda"
    shutil.copytree(src, dest)
    target = dest / Path(mutation.file).name
    target.write_text(mutation.apply_to(target.read_text()))
    return dest


def build_gpu_mutants(mutations: Sequence[Mutation], root: Path, cache_dir: Path, log=print) -> dict[str, str]:
    """Build every mutant's library into ``cache_dir`` in parallel (nvcc per mutant); returns
    name -> "" when built, else the error. The suite runs then find them by source hash."""
    from concurrent.futures import ThreadPoolExecutor

    from nvfp4_kernels import build

    scratch = Path(tempfile.mkdtemp(prefix="nvfp4-gpu-mutant-src-"))

    def one(mutation: Mutation) -> tuple[str, str]:
        try:
            sources = mutated_cuda_sources(mutation, scratch / mutation.name, root)
            build.build_library(source_dir=sources, cache_dir=cache_dir)
            return mutation.name, ""
        except Exception as exc:  # noqa: BLE001 - reported per mutant
            return mutation.name, f"{type(exc).__name__}: {str(exc)[:400]}"

    try:
        with ThreadPoolExecutor(max(1, min(len(mutations), os.cpu_count() or 1))) as pool:
            results = dict(pool.map(one, mutations))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    log(f"built {sum(not v for v in results.values())} of {len(mutations)} mutant libraries")
    return results


#: folder of the copy holding one link per renamed import name; first on the copy's PYTHONPATH
IMPORT_ROOT = ".import"


def import_names(root: Path) -> dict[str, str]:
    """Top-level import name -> folder, for the packages of the project at ``root``.

    pyproject.toml's ``[tool.setuptools] package-dir`` maps names to folders (this project
    installs ``harness/`` as ``nvfp4_harness``); a top-level folder with an ``__init__.py``
    that no mapping names imports under its own name.
    """
    names: dict[str, str] = {}
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        try:
            import tomllib
        except ImportError:  # Python 3.10
            tomllib = None  # type: ignore[assignment]
        if tomllib is not None:
            config = tomllib.loads(pyproject.read_text(encoding="utf-8"))
            mapping = config.get("tool", {}).get("setuptools", {}).get("package-dir", {})
            names.update({k: v for k, v in mapping.items() if k and "." not in k})
    mapped = set(names.values())
    for folder in sorted(p.name for p in root.iterdir() if (p / "__init__.py").is_file()):
        if folder not in mapped:
            names[folder] = folder
    return names


def copy_project(root: Path, dest: Path) -> Path:
    """Copy the project (without VCS, virtualenvs and caches) to ``dest``, with links that
    make its renamed import names (``nvfp4_harness`` ...) resolve to the copy's folders."""
    shutil.copytree(root, dest, ignore=shutil.ignore_patterns(*_IGNORED), symlinks=True)
    links = dest / IMPORT_ROOT
    links.mkdir(exist_ok=True)
    for name, folder in import_names(dest).items():
        if name != folder:
            (links / name).symlink_to(Path("..") / folder, target_is_directory=True)
    return dest


def _environment(copy: Path) -> dict[str, str]:
    env = dict(os.environ)
    first = [str(copy / IMPORT_ROOT), str(copy)]
    env["PYTHONPATH"] = os.pathsep.join(first + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # a same-size mutation in the same second must not reuse a .pyc
    env.setdefault("HYPOTHESIS_PROFILE", "ci")
    return env


def _first_failure(output: str) -> str:
    for line in output.splitlines():
        if line.startswith(("FAILED ", "ERROR ")):
            return line[:160]
    tail = [line for line in output.splitlines() if line.strip()]
    return tail[-1][:160] if tail else ""


def run_suite(copy: Path, pytest_args: Sequence[str], timeout: float, gpu: bool = False
              ) -> tuple[int | None, str, float]:
    """Run the dispatch suites (or, ``gpu``, the GPU suites with the copy's own kernel build
    cache) in ``copy``: (exit code or None on timeout, output, seconds)."""
    start = time.monotonic()
    env = _environment(copy)
    if gpu:
        env["NVFP4_BUILD_DIR"] = str(copy / GPU_BUILD_DIR)
    command = GPU_PYTEST_COMMAND if gpu else PYTEST_COMMAND
    try:
        proc = subprocess.run([sys.executable, *command, *pytest_args], cwd=copy, env=env,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return None, out, time.monotonic() - start
    return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - start


def imports_from(copy: Path) -> str | None:
    """None when every import name of the project (``nvfp4_kernels``, ``nvfp4_harness``)
    imports from the copy rather than from an installed (e.g. editable) version; else what
    python imported."""
    packages = sorted(import_names(copy))
    if not packages:
        return None
    probe = "; ".join(f"import {name}; print({name}.__file__)" for name in packages)
    proc = subprocess.run([sys.executable, "-c", probe], cwd=copy, env=_environment(copy),
                          capture_output=True, text=True)
    paths = proc.stdout.split()
    if proc.returncode or len(paths) != len(packages) or not all(
            Path(p).resolve().is_relative_to(copy.resolve()) for p in paths):
        return proc.stdout + proc.stderr
    return None


def run(mutations: Sequence[Mutation], root: Path = PROJECT_ROOT, pytest_args: Sequence[str] = (),
        timeout: float = 1800.0, baseline: bool = True, keep: bool = False,
        log=print, gpu: bool = False,
        progress: Callable[[Outcome | None, list[Outcome]], None] | None = None
        ) -> tuple[Outcome | None, list[Outcome]]:
    """Plant each mutation in a temporary copy of ``root`` and run the suites; see the module doc.
    ``progress(baseline, outcomes so far)`` is called after the baseline and after every mutant,
    so that a run cut off by a time limit still leaves what it measured."""
    workdir = Path(tempfile.mkdtemp(prefix="nvfp4-mutants-"))
    try:
        copy = copy_project(root, workdir / root.name)
        where = imports_from(copy)
        if where is not None:
            raise RuntimeError(f"the copy's packages do not shadow the installed ones; python imported:\n{where}")
        build_errors: dict[str, str] = {}
        if gpu:
            from nvfp4_kernels import build

            build.build_library(source_dir=copy / "kernels" / "cuda", cache_dir=copy / GPU_BUILD_DIR)
            build_errors = build_gpu_mutants(mutations, root, copy / GPU_BUILD_DIR, log)
        base = None
        if baseline:
            log("baseline: running the unmutated suites ...")
            rc, out, secs = run_suite(copy, pytest_args, timeout, gpu)
            base = Outcome("(none: baseline)", "passed" if rc == 0 else "ERROR", secs,
                           "" if rc == 0 else f"exit {rc}: {_first_failure(out)}")
            if progress is not None:
                progress(base, [])
            if rc != 0:
                return base, []
        outcomes: list[Outcome] = []
        for mutation in mutations:
            target = copy / mutation.file
            original = target.read_text() if target.is_file() else None
            try:
                if original is None:
                    raise StaleMutation(f"{mutation.file} does not exist")
                target.write_text(mutation.apply_to(original))
            except StaleMutation as exc:
                outcomes.append(Outcome(mutation.name, "STALE", 0.0, str(exc)))
                log(f"{mutation.name}: STALE")
                continue
            if build_errors.get(mutation.name):
                target.write_text(original)
                outcomes.append(Outcome(mutation.name, "ERROR", 0.0, f"the mutant did not build: "
                                                                    f"{build_errors[mutation.name]}"))
                log(f"{mutation.name}: ERROR (build)")
                continue
            try:
                rc, out, secs = run_suite(copy, pytest_args, timeout, gpu)
            finally:
                target.write_text(original)
            if rc is None:
                status, detail = "TIMEOUT", f"no verdict within {timeout:.0f} s"
            elif rc in (1, 2):  # tests failed, or collection/import failed: the suite went red
                status, detail = "caught", _first_failure(out)
            elif rc == 0:
                status, detail = "SURVIVED", f"every {'GPU' if gpu else 'dispatch'} test passed with the bug planted"
            else:
                status, detail = "ERROR", f"pytest exit {rc}: {_first_failure(out)}"
            outcomes.append(Outcome(mutation.name, status, secs, detail))
            log(f"{mutation.name}: {status} ({secs:.1f} s)")
            if progress is not None:
                progress(base, outcomes)
        return base, outcomes
    finally:
        if keep:
            log(f"kept the copy in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def format_table(outcomes: Sequence[Outcome], mutations: Sequence[Mutation]) -> str:
    bugs = {m.name: m for m in mutations}
    rows = [("mutant", "file", "result", "time", "caught by / why")]
    for o in outcomes:
        rows.append((o.name, bugs[o.name].file if o.name in bugs else "", o.status, f"{o.seconds:.1f}s", o.detail))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(widths[i]) if i < 4 else cell for i, cell in enumerate(row)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths) + "  " + "-" * 15)
    caught = sum(o.caught for o in outcomes)
    lines.append(f"\nscore: {caught} / {len(outcomes)} mutants caught")
    return "\n".join(lines)


def write_outcomes(path: Path, outcomes: Sequence[Outcome], mutations: Sequence[Mutation], base: Outcome | None,
                   gpu: bool, argv: Sequence[str], complete: bool = True,
                   provenance: dict | None = None) -> None:
    """The run's outcomes as JSON, with the machine's provenance (GPU, driver, CUDA, torch:
    ``provenance``, or read now); ``complete`` False while mutants of the run are still to come."""
    import datetime as _dt

    bugs = {m.name: m for m in mutations}
    record: dict = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                    "command": "python -m nvfp4_harness mutate " + " ".join(argv),
                    "suite": list(GPU_PYTEST_COMMAND if gpu else PYTEST_COMMAND),
                    "baseline": None if base is None else {"status": base.status, "seconds": round(base.seconds, 1)},
                    "mutants": [{"name": o.name, "file": bugs[o.name].file, "bug": bugs[o.name].bug,
                                 "status": o.status, "seconds": round(o.seconds, 1), "detail": o.detail}
                                for o in outcomes],
                    "complete": complete, "planned": [m.name for m in mutations]}
    if gpu:
        from nvfp4_harness.nvfp4.provenance import gpu_provenance

        record["provenance"] = provenance if provenance is not None else gpu_provenance()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


def table_part(mutations: Sequence[Mutation], part: str) -> list[Mutation]:
    """The K-th of N consecutive, near-equal slices of ``mutations`` (``part`` = "K/N"): the N
    parts cover the table once, in order, so N runs that each fit a time limit plant every
    mutant exactly once."""
    try:
        k, n = (int(x) for x in part.split("/"))
    except ValueError:
        raise ValueError(f"--part must be K/N with integers 1 <= K <= N, got {part!r}") from None
    if not 1 <= k <= n:
        raise ValueError(f"--part must be K/N with integers 1 <= K <= N, got {part!r}")
    return list(mutations[(k - 1) * len(mutations) // n:k * len(mutations) // n])


def _ran_at(record: dict) -> str | None:
    """When a record's mutants last ran, as an ISO date to the second: a joined record's latest
    part, else the run's provenance date (when its machine was read), else the record's date."""
    if record.get("parts"):
        dates = [part.get("date") for part in record["parts"]]
        return None if None in dates else max(str(d)[:19] for d in dates)
    when = (record.get("provenance") or {}).get("date") or record.get("date")
    return None if when is None else str(when)[:19]


class PartsDoNotJoin(ValueError):
    """The ``--out`` files of ``--part`` runs cannot stand for one run (see :func:`join_parts`)."""


def join_parts(records: Sequence[dict], argv: Sequence[str], note: str | None = None,
               rerun: bool = False) -> dict:
    """One record from the ``--out`` records of runs that each planted a slice of the table
    (``--part K/N`` in separate device calls, because one call has a time limit).

    They must be runs of the same code on the same kind of machine, or the joined record would
    claim a run that never happened: every part complete, the same GPU (when they carry
    provenance), no mutant planted twice, and at least one baseline, all of them passed. Parts of
    different commits join only with a ``note`` saying why their outcomes still stand together
    (say, only the mutants of a changed file were run again); it is kept in the provenance. The
    joined record keeps each part's date, command, commit and baseline under ``parts``.

    ``rerun``: a mutant planted in more than one part takes the outcome of the last part that
    planted it, which must have run later (its provenance date). This is how a record is brought
    up to date after one file changed: join the committed record (itself joined or not) with a
    run of that file's mutants. The outcomes replaced are kept under ``superseded``, nothing is
    dropped silently, and the parts of an already joined record are listed as its own parts."""
    import datetime as _dt

    if len(records) < 2:
        raise PartsDoNotJoin("--join needs the --out files of two or more --part runs")
    for i, record in enumerate(records, 1):
        if not record.get("complete", True):
            raise PartsDoNotJoin(f"part {i} ({record.get('command', '?')}) was cut off before its last mutant; "
                                 f"run that part again")
        base = record.get("baseline")
        if base is not None and base.get("status") != "passed":
            raise PartsDoNotJoin(f"part {i}'s unmutated suites did not pass ({base}); its outcomes mean nothing")
    if all(record.get("baseline") is None for record in records):
        raise PartsDoNotJoin("no part ran the unmutated suites (all used --no-baseline); run one part without it")
    gpus = {(record.get("provenance") or {}).get("gpu") for record in records}
    if len(gpus) > 1:
        raise PartsDoNotJoin(f"the parts ran on different gpus {sorted(map(str, gpus))}: they are not one run")
    commits = [(record.get("provenance") or {}).get("git_commit") for record in records]
    if len(set(commits)) > 1 and not (note or "").strip():
        raise PartsDoNotJoin(f"the parts ran on different git_commits {sorted(set(map(str, commits)))}: pass "
                             f"--note saying why their outcomes still stand together, or run them on one commit")
    names = [m["name"] for record in records for m in record["mutants"]]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice and not rerun:
        raise PartsDoNotJoin(f"mutants planted in more than one part: {twice} (pass --rerun when a later part "
                             f"ran them again on purpose)")
    latest: dict[str, tuple[int, dict]] = {}  # mutant name -> (index of the part that planted it last, outcome)
    superseded: list[dict] = []
    for i, record in enumerate(records):
        for m in record["mutants"]:
            if m["name"] in latest:
                earlier, outcome = latest[m["name"]]
                when = [_ran_at(records[j]) for j in (earlier, i)]
                if None in when or when[1] <= when[0]:
                    raise PartsDoNotJoin(f"{m['name']}: part {i + 1} replaces the outcome of part {earlier + 1} "
                                         f"but did not run after it (dates {when}); list the parts oldest first")
                superseded.append(dict(outcome, git_commit=commits[earlier], date=when[0]))
            latest[m["name"]] = (i, m)
    parts: list[dict] = []
    for record, commit in zip(records, commits, strict=True):
        if "parts" in record:  # an already joined record: its own parts, with their commits
            parts.extend({**part, "git_commit": part.get("git_commit", commit)} for part in record["parts"])
            superseded.extend(record.get("superseded", []))
        else:
            parts.append({"date": record.get("date"), "command": record.get("command"),
                          "baseline": record.get("baseline"), "git_commit": commit})
    first = records[0]
    joined: dict = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                    "command": "python -m nvfp4_harness mutate " + " ".join(argv),
                    "suite": first["suite"],
                    "baseline": next(r["baseline"] for r in records if r.get("baseline") is not None),
                    "mutants": [outcome for _part, outcome in latest.values()],
                    "complete": True,
                    "planned": list(dict.fromkeys(name for record in records for name in record.get("planned", []))),
                    "parts": parts}
    if superseded:
        joined["superseded"] = superseded
    if "provenance" in first:
        joined["provenance"] = dict(first["provenance"])
        if len(set(commits)) > 1:
            joined["provenance"]["git_commit"] = ", ".join(dict.fromkeys(map(str, commits)))
            joined["provenance"]["git_commit_note"] = note.strip()
    return joined


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nvfp4_harness mutate", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--check", action="store_true",
                        help="only check that every mutation applies to the current sources")
    parser.add_argument("--only", default="", help="comma-separated mutation names to plant")
    parser.add_argument("--pytest-args", default="", help="extra pytest arguments, e.g. '-n 2'")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per suite run (default 1800)")
    parser.add_argument("--no-baseline", action="store_true", help="skip the unmutated run")
    parser.add_argument("--keep", action="store_true", help="keep the temporary copy")
    parser.add_argument("--root", type=Path, default=PROJECT_ROOT, help="project to copy (default: this one)")
    parser.add_argument("--gpu", action="store_true",
                        help="plant the CUDA mutants (GPU_MUTATIONS) and run the GPU suites (needs a CUDA GPU)")
    parser.add_argument("--out", type=Path, default=None,
                        help="write the outcomes (and provenance) as JSON here, after every mutant too")
    parser.add_argument("--part", default=None, metavar="K/N",
                        help="plant only the K-th of N consecutive slices of the (selected) table, e.g. 1/2 then "
                             "2/2 in two sessions with a time limit")
    parser.add_argument("--join", nargs="+", type=Path, default=None, metavar="PART.json",
                        help="write one record (to --out) from the --out files of --part runs of the same code")
    parser.add_argument("--note", default=None,
                        help="with --join of parts run on different commits: why their outcomes still stand together")
    parser.add_argument("--rerun", action="store_true",
                        help="with --join: a mutant planted in several parts takes the last (later) part's outcome, "
                             "e.g. the committed record joined with a re-run of one changed file's mutants")
    args = parser.parse_args(list(argv) if argv is not None else None)
    command = list(argv) if argv is not None else sys.argv[1:]

    if args.join is not None:
        if args.out is None:
            parser.error("--join needs --out FILE for the joined record")
        try:
            joined = join_parts([json.loads(p.read_text(encoding="utf-8")) for p in args.join], command,
                                note=args.note, rerun=args.rerun)
        except (OSError, json.JSONDecodeError, KeyError) as exc:
            parser.error(f"cannot read the parts: {exc}")
        except PartsDoNotJoin as exc:
            parser.error(str(exc))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(joined, indent=1) + "\n", encoding="utf-8")
        caught = sum(m["status"] == "caught" for m in joined["mutants"])
        print(f"joined {len(args.join)} parts into {args.out}: {caught} / {len(joined['mutants'])} mutants caught")
        return 0 if caught == len(joined["mutants"]) else 1

    mutations = list(GPU_MUTATIONS if args.gpu else MUTATIONS)
    if args.only:
        wanted = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = sorted(set(wanted) - {m.name for m in mutations})
        if unknown:
            parser.error(f"unknown mutation(s) {unknown}; see --list")
        mutations = [m for m in mutations if m.name in wanted]
    if args.part is not None:
        try:
            mutations = table_part(mutations, args.part)
        except ValueError as exc:
            parser.error(str(exc))
    if args.list:
        width = max(len(m.name) for m in mutations)
        for m in mutations:
            print(f"{m.name:<{width}}  {m.file:<22}  {m.bug}")
        return 0
    problems = check_definitions(args.root, mutations)
    if args.check or problems:
        for problem in problems:
            print(f"STALE: {problem}", file=sys.stderr)
        print(f"{len(mutations) - len(problems)} of {len(mutations)} mutations apply to {args.root}")
        return 1 if problems else 0
    if args.gpu:
        try:
            import torch

            has_gpu = torch.cuda.is_available()
        except ImportError:
            has_gpu = False
        if not has_gpu:
            print("mutate --gpu needs a CUDA GPU (torch.cuda.is_available() is False); run it on the GPU machine",
                  file=sys.stderr)
            return 2
    # read once (nvidia-smi, nvcc and git are asked), not at every one of the run's writes
    provenance = None
    if args.gpu and args.out is not None:
        from nvfp4_harness.nvfp4.provenance import gpu_provenance

        provenance = gpu_provenance()

    def save_so_far(base: Outcome | None, outcomes: list[Outcome]) -> None:
        if args.out is not None:
            write_outcomes(args.out, outcomes, mutations, base, args.gpu, command, complete=False,
                           provenance=provenance)

    base, outcomes = run(mutations, args.root, shlex.split(args.pytest_args), args.timeout,
                         baseline=not args.no_baseline, keep=args.keep, gpu=args.gpu, progress=save_so_far)
    if base is not None and base.status != "passed":
        print(f"the unmutated suites fail ({base.detail}); fix them before measuring mutants", file=sys.stderr)
        return 2
    print()
    print(format_table(outcomes, mutations))
    if args.out is not None:
        write_outcomes(args.out, outcomes, mutations, base, args.gpu, command, provenance=provenance)
    return 0 if outcomes and all(o.caught for o in outcomes) else 1
