"""The calls the ONNX Runtime run makes, as data (no GPU, no onnxruntime needed to list them).

* :func:`full_suite` - the project's forcing matrix (:data:`nvfp4_harness.nvfp4.shapes.MATRIX`)
  as ONNX Runtime accepts it, plus edge cases at *its* thresholds. The matrix forces this
  project's guards (its GEMV stops at M = 8); ONNX Runtime has two GEMVs with two limits, so
  cases at M = t and t + 1 of each are derived from the declared model's own policy: M =
  gemv_max_m and gemv_max_m + 1 at K % 128 != 0 (the warp GEMV), M = gemv_mma_max_m and
  gemv_mma_max_m + 1 at K % 128 == 0 (the tensor-core GEMV), so that both sides of every one of
  its guards are taken.
* :func:`excluded_matrix_cases` - the matrix cases the op does not accept, each with the reason.
* :func:`decode_suite` - the shape of ONNX Runtime's own FP4 tests in the seed's lesson: decode
  calls only (1 <= M <= 8 at the decode shape of an NVFP4 checkpoint, block size 16 and K a
  multiple of 32). It must fail ``all-reachable`` naming the dequant paths.
* :data:`CROSSOVER` - the exact M crossover searches, one per GEMV kernel: M = 1..64 at a K that
  is a multiple of 128 (the tensor-core GEMV), and M = 1..12 plus the row-tile boundaries at a K
  that is not (the warp GEMV); :func:`crossover_summary` says which GEMV each search saw up to
  which M, beside what the declared model predicts for the same calls, and
  :func:`observed_policy` turns that into the run's policy. :data:`PROBES`: the block sizes
  and K granularity of the GEMVs, found by observation.

Every case has an integer seed; :func:`host_operands` regenerates its inputs with the
project's :class:`~nvfp4_harness.nvfp4.shapes.StableRng`, bit for bit on any machine.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from nvfp4_harness.model import DeviceCaps
from nvfp4_harness.nvfp4.onnxruntime.model import (
    DEFAULT_POLICY,
    GEMV_LIMITS,
    GEMV_PATHS,
    OrtPolicy,
    OrtProblem,
    predict,
)
from nvfp4_harness.nvfp4.shapes import MATRIX, StableRng, random_weights
from nvfp4_kernels.reference import numpy_dtype

#: global scale of the coverage cases (as the shape matrix uses)
CASE_GLOBAL_SCALE = 0.125


@dataclass(frozen=True)
class OrtCase:
    """One call of the op: A's leading dimensions, N, K, block size, dtype, bias, and why."""

    id: str
    lead: tuple[int, ...]
    n: int
    k: int
    block_size: int
    dtype: str
    bias: bool
    origin: str
    why: str

    @property
    def m(self) -> int:
        return math.prod(self.lead)

    @property
    def rank(self) -> int:
        return len(self.lead) + 1

    @property
    def seed(self) -> int:
        """A stable seed from the case id (CRC-32), so a case's inputs never depend on order."""
        return zlib.crc32(self.id.encode())

    @property
    def problem(self) -> OrtProblem:
        return OrtProblem(self.m, self.n, self.k, self.block_size, self.dtype, self.bias)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["lead"] = list(self.lead)
        out.update(m=self.m, seed=self.seed)
        return out


def _case(id: str, lead: tuple[int, ...], n: int, k: int, bs: int, dtype: str, why: str, *, bias: bool = False,
          origin: str = "ort-edge") -> OrtCase:
    return OrtCase(id, lead, n, k, bs, dtype, bias, origin, why)


def matrix_cases() -> tuple[OrtCase, ...]:
    """Every case of the project's forcing matrix that ONNX Runtime's op accepts."""
    out = []
    for c in MATRIX:
        if exclusion_reason(c) is None:
            out.append(OrtCase(c.id, tuple(c.lead or ()), c.n, c.k, c.block_size, c.dtype, c.bias, "matrix",
                               f"{c.why} (forces this project's {c.path})"))
    return tuple(out)


def exclusion_reason(case: Any) -> str | None:
    """Why a :class:`~nvfp4_harness.nvfp4.shapes.ShapeCase` is not a call of ONNX Runtime's op."""
    if case.op != "matmul":
        return "ONNX Runtime's op is a matmul; the dequantize entry is this project's own"
    if case.misaligned is not None:
        return (f"{case.misaligned} one byte off an aligned address: ONNX Runtime's kernels assume its own "
                "256-byte-aligned allocations and check no bound address (16-byte and 4-byte vector loads), so "
                "a misaligned buffer is outside the op's contract, not another path")
    return None


def excluded_matrix_cases() -> list[dict[str, str]]:
    """The matrix cases left out, with the reason for each."""
    return [{"id": c.id, "reason": reason} for c in MATRIX if (reason := exclusion_reason(c)) is not None]


def edge_cases(policy: OrtPolicy = DEFAULT_POLICY) -> tuple[OrtCase, ...]:
    """Cases at ONNX Runtime's own thresholds, derived from the declared model's policy: both
    sides of each GEMV's M limit, at a K that sends the call to that GEMV."""
    t, tm = policy.gemv_max_m, policy.gemv_mma_max_m
    return (
        # the tensor-core GEMV (K % 128 == 0) and its limit
        _case("ort-gemv-mma-m-max", (tm,), 64, 128, 16, "bfloat16", f"M = {tm}, K % 128 == 0: the last M the "
              "tensor-core GEMV takes"),
        _case("ort-gemv-mma-m-max-bias", (tm,), 48, 256, 16, "float16", f"M = {tm}, K = 256, with bias: the "
              "tensor-core GEMV adds the bias itself", bias=True),
        _case("ort-vec8-mma-m-max-plus-1", (tm + 1,), 64, 128, 16, "float16", f"M = {tm + 1}, K % 128 == 0: "
              "gemv_mma.m_in_range false, dequant + cuBLAS"),
        _case("ort-gemv-mma-lead-3d-max", (2, max(1, tm // 2)), 32, 128, 16, "bfloat16",
              f"A [2, {max(1, tm // 2)}, 128]: leading dims flatten to M = {2 * max(1, tm // 2)}"),
        # the warp GEMV (K % 128 != 0, K % 32 == 0) and its limit
        _case("ort-gemv-m-max-bias-k96", (t,), 48, 96, 16, "float16", f"M = {t}, K = 96 (K % 128 != 0), with "
              "bias: the last M the warp GEMV takes", bias=True),
        _case("ort-vec8-m-max-plus-1-k96", (t + 1,), 64, 96, 16, "bfloat16", f"M = {t + 1}, K = 96: "
              "gemv.m_in_range false, and the tensor-core GEMV needs K % 128 == 0: dequant + cuBLAS"),
        _case("ort-vec8-k96-m-mma-max", (tm,), 40, 96, 16, "bfloat16", f"M = {tm}, K = 96: within the tensor-core "
              "GEMV's M but not its K, past the warp GEMV's M: dequant + cuBLAS"),
        _case("ort-gemv-lead-3d-max", (2, max(1, t // 2)), 32, 64, 16, "bfloat16",
              f"A [2, {max(1, t // 2)}, 64]: leading dims flatten to M = {2 * max(1, t // 2)}, warp GEMV"),
        # dequant + cuBLAS just past them, and the GEMVs' other guards at M = 1
        _case("ort-vec8-m-max-plus-1-bias", (tm + 1,), 40, 64, 16, "bfloat16", f"M = {tm + 1} with bias: "
              "AddBiasKernel after cuBLAS", bias=True),
        _case("ort-scalar-m-max-plus-1", (t + 1,), 32, 36, 16, "bfloat16", f"M = {t + 1}, K % 8 == 4"),
        _case("ort-vec8-m1-k48", (1,), 16, 48, 16, "bfloat16", "M = 1, K = 48: K % 32 != 0 sends decode to vec8"),
        _case("ort-scalar-m1-bs15", (1,), 16, 64, 15, "float16", "M = 1, block 15: odd block, scalar kernel"),
    )


def full_suite(policy: OrtPolicy = DEFAULT_POLICY) -> tuple[OrtCase, ...]:
    """The forcing matrix as ONNX Runtime accepts it, then its own edge cases."""
    return matrix_cases() + edge_cases(policy)


#: decode calls at a real shape (the seed's 4096 x 4096), added to the decode-only suite
DECODE_EXTRA = tuple(_case(f"decode-4096x4096-m{m}", (m,), 4096, 4096, 16, "bfloat16",
                           f"decode step M = {m} at 4096 x 4096", origin="decode") for m in (1, 2, 4, 8))


def is_decode_shaped(case: OrtCase) -> bool:
    """A call of an autoregressive decode of an NVFP4 checkpoint: 1 <= M <= 8, block size 16,
    K a multiple of 32 (every hidden size of such a model is)."""
    return 1 <= case.m <= 8 and case.block_size == 16 and case.k > 0 and case.k % 32 == 0


def decode_suite(policy: OrtPolicy = DEFAULT_POLICY) -> tuple[OrtCase, ...]:
    """The decode-only suite: the decode-shaped cases of :func:`full_suite`, and :data:`DECODE_EXTRA`."""
    return tuple(c for c in full_suite(policy) if is_decode_shaped(c)) + DECODE_EXTRA


@dataclass(frozen=True)
class Crossover:
    """One M search at one shape: which path each M takes."""

    name: str
    n: int
    k: int
    ms: tuple[int, ...]
    block_size: int = 16
    dtype: str = "bfloat16"


#: one search per GEMV kernel: the tensor-core one (K % 128 == 0), contiguous over M = 1..64, and
#: the warp one (K = 4064, K % 128 = 96), contiguous over M = 1..12, then the row-tile boundaries
CROSSOVER = (
    Crossover("primary", 17408, 5120, tuple(range(1, 65))),
    Crossover("k-not-multiple-of-128", 4096, 4064, tuple(range(1, 13)) + (16, 17, 32, 33, 48, 64, 65)),
)

#: (block_size, K) probes of the GEMVs' block-size and K granularity, at M = 1, N = 64, bf16 (K = 128
#: and 384: the tensor-core GEMV; K = 32..160 otherwise: the warp GEMV or a dequant)
PROBES: tuple[tuple[int, int], ...] = (
    (16, 16), (16, 32), (16, 48), (16, 64), (16, 96), (16, 128), (16, 160), (16, 384), (16, 36), (16, 40),
    (16, 34), (8, 64), (32, 64), (8, 128), (32, 128), (15, 64), (2, 64), (6, 64), (1, 64),
)


def probe_cases() -> tuple[OrtCase, ...]:
    return tuple(_case(f"probe-bs{bs}-k{k}", (1,), 64, k, bs, "bfloat16", f"M = 1, block {bs}, K = {k}",
                       origin="probe") for bs, k in PROBES)


def crossover_threshold(paths: dict[int, str | None]) -> int:
    """The largest searched M such that every searched M' <= M took a GEMV (either kernel; 0
    when the smallest did not). Exact where the search is contiguous up to the threshold and
    one past it; at a sparse search it is the last GEMV value before the first M that took
    another path."""
    last = 0
    for m in sorted(paths):
        if paths[m] not in GEMV_PATHS:
            break
        last = m
    return last


def gemv_path_seen(paths: dict[int, str | None], threshold: int) -> str | None:
    """Which GEMV the M <= ``threshold`` calls of a search took: its name, None when none did,
    ``"several"`` when both did."""
    seen = {paths[m] for m in paths if m <= threshold and paths[m] in GEMV_PATHS}
    if not seen:
        return None
    return seen.pop() if len(seen) == 1 else "several"


def search_summary(search: dict[str, Any], paths: dict[int, str | None], policy: OrtPolicy = DEFAULT_POLICY,
                   device: DeviceCaps | None = None) -> dict[str, Any]:
    """One search's verdict: the GEMV it saw and up to which M (from the observed ``paths``,
    M -> path), beside what the declared model predicts for the same calls on ``device``."""
    device = device or DeviceCaps.cpu()
    declared_paths = {m: predict(OrtProblem(m, search["n"], search["k"], search["block_size"], search["dtype"]),
                                 device, policy) for m in paths}
    declared_t = crossover_threshold(declared_paths)
    observed_t = crossover_threshold(paths)
    observed = {"gemv_path": gemv_path_seen(paths, observed_t), "gemv_max_m": observed_t}
    declared = {"gemv_path": gemv_path_seen(declared_paths, declared_t), "gemv_max_m": declared_t}
    differ = sorted(m for m in paths if paths[m] != declared_paths[m])
    return {"observed": observed, "declared": declared, "as_declared": observed == declared and not differ,
            "calls_not_as_declared": differ}


def crossover_summary(searches: list[dict[str, Any]], policy: OrtPolicy = DEFAULT_POLICY,
                      device: DeviceCaps | None = None) -> dict[str, Any]:
    """Every search's :func:`search_summary`, the policy the searches imply
    (:func:`observed_policy`) and whether everything was as declared. ``searches`` are dicts
    with ``name``, ``n``, ``k``, ``block_size``, ``dtype`` and ``paths`` (M -> path, keys int
    or str, as the JSON keeps them)."""
    out = []
    for s in searches:
        paths = {int(m): p for m, p in s["paths"].items()}
        out.append({"name": s["name"], "n": s["n"], "k": s["k"], **search_summary(s, paths, policy, device)})
    observed, conflicts = observed_policy(out, policy)
    return {"declared_policy": policy.to_dict(), "observed_policy": observed.to_dict(), "searches": out,
            "conflicts": conflicts,
            "as_declared": all(s["as_declared"] for s in out) and not conflicts and observed == policy}


def observed_policy(summaries: list[dict[str, Any]], base: OrtPolicy = DEFAULT_POLICY
                    ) -> tuple[OrtPolicy, list[str]]:
    """The policy the searches show: each GEMV's limit from the search that saw that GEMV (and
    only it), ``base``'s value for a GEMV no search saw; and the conflicts (two searches showing
    one GEMV stopping at different M, or a search seeing both)."""
    limits: dict[str, int] = {}
    conflicts = []
    for s in summaries:
        path, t = s["observed"]["gemv_path"], s["observed"]["gemv_max_m"]
        if path == "several":
            conflicts.append(f"{s['name']}: both GEMV kernels ran in one search")
            continue
        if path is None:
            continue
        field = GEMV_LIMITS[path]
        if field in limits and limits[field] != t:
            conflicts.append(f"{s['name']}: {path} stops at M = {t} here, at M = {limits[field]} in another search")
            t = min(t, limits[field])
        limits[field] = t
    values = base.to_dict()
    values.update(limits)
    return OrtPolicy(**values), conflicts  # type: ignore[arg-type]


# --- operands ----------------------------------------------------------------------------------


def host_operands(case: OrtCase) -> dict[str, np.ndarray]:
    """The inputs of ``case`` on the host, from its seed: random codes, random finite scale bytes
    of both signs (2^-3 .. 2^3, as the shape matrix draws them), A in [-2, 2], bias in [-1, 1]."""
    rng = StableRng(case.seed)
    n, k, bs = case.n, case.k, case.block_size
    packed, scales = random_weights(rng, n, k, bs)
    out = {"a": rng.uniform(-2, 2, case.lead + (k,)).astype(numpy_dtype(case.dtype)), "b": packed,
           "weight_scale": scales,
           "weight_scale_2": np.array([CASE_GLOBAL_SCALE], dtype=np.float32)}
    if case.bias:
        out["bias"] = rng.uniform(-1, 1, (n,)).astype(numpy_dtype(case.dtype))
    return out


# --- timing plan -------------------------------------------------------------------------------


@dataclass(frozen=True)
class TimingRow:
    """One timed call: the weights' shape, M, block size and dtype, and the section it belongs to."""

    section: str
    n: int
    k: int
    m: int
    block_size: int = 16
    dtype: str = "bfloat16"


#: M of the sweep at the first large (27B FFN) shape (K % 128 == 0: the tensor-core GEMV), around
#: its limit (32) and the warp GEMV's (8)
SWEEP_M = (1, 2, 4, 8, 16, 32, 33, 48, 64, 128, 256, 4096)


#: the eager-loop comparison: (M, N, K) of the decode calls timed the way a decode loop makes them
EAGER_LOOP_SHAPES = ((1, 17408, 5120), (1, 5120, 17408), (1, 4096, 4096))
#: calls per timed loop and loops per contender (the median loop is kept)
EAGER_LOOP_CALLS = 200
EAGER_LOOP_REPEATS = 15


def timing_rows() -> tuple[TimingRow, ...]:
    """The seed's shapes (decode and M = 1024 prefill), the 27B FFN shapes (M = 1 and 8), a scalar
    dequant (block 15), the M sweep at 17408 x 5120, and the lm_head decode last (the budget cuts
    from the end)."""
    from nvfp4_harness.nvfp4.bench_metrics import LARGE_SHAPES, LM_HEAD, SEED_M, SEED_SHAPES, SWEEP_SHAPE

    rows = [TimingRow("seed", n, k, m) for n, k in SEED_SHAPES for m in (1, SEED_M)]
    rows += [TimingRow("ffn", n, k, m) for n, k in LARGE_SHAPES for m in (1, 8)]
    rows.append(TimingRow("scalar", 4096, 4096, SEED_M, block_size=15))
    done = {(r.n, r.k, r.m, r.block_size) for r in rows}
    rows += [TimingRow("sweep", *SWEEP_SHAPE, m) for m in SWEEP_M if (*SWEEP_SHAPE, m, 16) not in done]
    rows.append(TimingRow("lm_head", *LM_HEAD, 1))
    return tuple(rows)
