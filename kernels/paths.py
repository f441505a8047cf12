"""The dispatch paths and their guards, declared as data in one place.

A path is taken when every one of its guards holds; paths are tried in :data:`PATH_ORDER`.
Guards are plain predicates over a :class:`Problem` (the call's shape, dtype, backend and
buffer alignment), the :class:`DeviceCaps` of the device it runs on, and the :class:`Policy`.
Each guard remembers the source line it is declared on, so coverage tools (the lcov report)
can point editors at the exact guard whose side a suite never took.

Nothing here runs a kernel; :mod:`nvfp4_kernels.dispatch` evaluates these declarations.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field

PATH_ORDER: tuple[str, ...] = ("gemv", "native_fp4", "prefill_vec8", "prefill_scalar")
#: Outcomes that launch no kernel; recorded as events but not part of path coverage.
SHORTCUTS: dict[str, str] = {
    "empty": "M == 0 or N == 0: the output has no elements, nothing is launched",
    "bias_only": "K == 0: the dot products are empty, the output is the bias (or zeros)",
}
OPS = ("matmul", "dequantize")


@dataclass(frozen=True)
class DeviceCaps:
    """What a guard may ask of the device: its name and compute capability.

    ``compute_capability`` is ``None`` for the CPU backend. Use :meth:`cpu`, :meth:`from_torch`
    for a real GPU, or :meth:`simulated` to test guards for hardware that is not present.
    """

    name: str
    compute_capability: tuple[int, int] | None = None
    simulated: bool = False

    @classmethod
    def cpu(cls) -> DeviceCaps:
        return cls(name="cpu")

    @classmethod
    def simulated_gpu(cls, major: int, minor: int = 0, name: str | None = None) -> DeviceCaps:
        return cls(name=name or f"simulated sm_{major}{minor}", compute_capability=(major, minor),
                   simulated=True)

    @classmethod
    def from_torch(cls, device: object) -> DeviceCaps:
        import torch

        index = torch.device(device).index
        index = torch.cuda.current_device() if index is None else index
        return cls(name=torch.cuda.get_device_name(index),
                   compute_capability=tuple(torch.cuda.get_device_capability(index)))

    @property
    def sm(self) -> int | None:
        cc = self.compute_capability
        return None if cc is None else cc[0] * 10 + cc[1]

    @property
    def label(self) -> str:
        return self.name if self.sm is None else f"{self.name} (sm_{self.sm})"


@dataclass(frozen=True)
class Policy:
    """Tunable dispatch policy.

    ``gemv_max_m``: largest M the decode GEMV takes (the measured GEMV/prefill crossover is in
    BENCHMARKS.md). ``native_fp4_enabled``: allow the Blackwell path where the GPU has it.
    ``force_path``: take this path regardless of preference order, for A/B runs; its guards
    must still hold, otherwise the call raises instead of running a kernel out of its domain.
    """

    gemv_max_m: int = 8
    native_fp4_enabled: bool = True
    force_path: str | None = None

    def __post_init__(self) -> None:
        if self.gemv_max_m < 0:
            raise ValueError(f"gemv_max_m must be >= 0, got {self.gemv_max_m}")
        if self.force_path is not None and self.force_path not in PATH_ORDER:
            raise ValueError(f"force_path must be one of {PATH_ORDER} or None, got {self.force_path!r}")


@dataclass(frozen=True)
class Problem:
    """The facts about one call that guards look at."""

    op: str
    m: int | None
    n: int
    k: int
    block_size: int
    dtype: str
    backend: str
    #: packed rows start on 4-byte boundaries and the output/scratch on 16-byte boundaries
    aligned: bool = True
    alignment_detail: str = "buffers aligned"


Predicate = Callable[[Problem, DeviceCaps, Policy], bool]
Detail = Callable[[Problem, DeviceCaps, Policy], str]


@dataclass(frozen=True)
class Guard:
    """One condition of one path. ``name`` is ``"<path>.<condition>"``."""

    name: str
    path: str
    condition: str
    check: Predicate = field(repr=False, compare=False)
    detail: Detail = field(repr=False, compare=False)
    line: int = 0
    #: when set, the guard's True side exists only on devices where this returns None
    true_unreachable: Callable[[DeviceCaps], str | None] | None = field(default=None, repr=False,
                                                                         compare=False)

    def side_unreachable(self, passed: bool, caps: DeviceCaps) -> str | None:
        """Why this side of the guard cannot occur on ``caps`` (None when it can)."""
        if passed and self.true_unreachable is not None:
            return self.true_unreachable(caps)
        return None


def _guard(path: str, condition: str, check: Predicate, detail: Detail,
           true_unreachable: Callable[[DeviceCaps], str | None] | None = None) -> Guard:
    line = inspect.currentframe().f_back.f_lineno  # the declaration line, for lcov
    return Guard(f"{path}.{condition.split(' ')[0]}", path, condition, check, detail, line,
                 true_unreachable)


def _native_arch_missing(caps: DeviceCaps) -> str | None:
    if caps.sm is None:
        return "native_fp4 needs FP4 tensor cores of an sm_120..129 GPU; the CPU backend has none"
    if not 120 <= caps.sm <= 129:
        return f"native_fp4 needs an sm_120..129 GPU (Blackwell); {caps.label} is not one"
    return None


# Each guard is on its own line: its line number is what the lcov report points at.
GUARDS: tuple[Guard, ...] = (
    _guard("gemv", "m_in_range (1 <= M <= policy.gemv_max_m)",
           lambda p, c, pol: p.m is not None and 1 <= p.m <= pol.gemv_max_m,
           lambda p, c, pol: f"M={p.m}, gemv_max_m={pol.gemv_max_m}"),
    _guard("gemv", "block_size_16 (block_size == 16)",
           lambda p, c, pol: p.block_size == 16, lambda p, c, pol: f"block_size={p.block_size}"),
    _guard("gemv", "k_mod_32 (K % 32 == 0)",
           lambda p, c, pol: p.k % 32 == 0, lambda p, c, pol: f"K={p.k}, K % 32 = {p.k % 32}"),
    _guard("native_fp4", "arch_sm120 (GPU compute capability 12.x)",
           lambda p, c, pol: c.sm is not None and 120 <= c.sm <= 129,
           lambda p, c, pol: f"device {c.label}", true_unreachable=_native_arch_missing),
    _guard("native_fp4", "enabled (policy.native_fp4_enabled)",
           lambda p, c, pol: pol.native_fp4_enabled,
           lambda p, c, pol: f"native_fp4_enabled={pol.native_fp4_enabled}"),
    _guard("native_fp4", "block_size_16 (block_size == 16)",
           lambda p, c, pol: p.block_size == 16, lambda p, c, pol: f"block_size={p.block_size}"),
    _guard("native_fp4", "k_mod_32 (K % 32 == 0)",
           lambda p, c, pol: p.k % 32 == 0, lambda p, c, pol: f"K={p.k}, K % 32 = {p.k % 32}"),
    _guard("native_fp4", "n_mod_32 (N % 32 == 0)",
           lambda p, c, pol: p.n % 32 == 0, lambda p, c, pol: f"N={p.n}, N % 32 = {p.n % 32}"),
    _guard("prefill_vec8", "k_mod_8 (K % 8 == 0)",
           lambda p, c, pol: p.k % 8 == 0, lambda p, c, pol: f"K={p.k}, K % 8 = {p.k % 8}"),
    _guard("prefill_vec8", "block_size_even (block_size % 2 == 0)",
           lambda p, c, pol: p.block_size % 2 == 0, lambda p, c, pol: f"block_size={p.block_size}"),
    _guard("prefill_vec8", "aligned (packed rows 4-byte, output 16-byte aligned)",
           lambda p, c, pol: p.aligned,
           lambda p, c, pol: p.alignment_detail if p.aligned else f"misaligned: {p.alignment_detail}"),
)
GUARDS_BY_NAME: dict[str, Guard] = {g.name: g for g in GUARDS}


@dataclass(frozen=True)
class PathSpec:
    """A dispatch path: its guards, which operations may take it, and the kernels it launches."""

    name: str
    summary: str
    ops: tuple[str, ...]
    guards: tuple[Guard, ...]
    #: kernel-name fragments the CUDA backend launches for this path (checked by observe.py)
    cuda_kernels: tuple[str, ...]

    def unreachable_reason(self, caps: DeviceCaps) -> str | None:
        """Why no call can take this path on ``caps`` (None when some call can)."""
        for guard in self.guards:
            reason = guard.side_unreachable(True, caps)
            if reason:
                return reason
        return None


def _guards_of(path: str) -> tuple[Guard, ...]:
    return tuple(g for g in GUARDS if g.path == path)


PATHS: dict[str, PathSpec] = {
    "gemv": PathSpec("gemv", "fused decode GEMV: packed weights read once, decoded in registers",
                     ("matmul",), _guards_of("gemv"), ("nvfp4_gemv",)),
    "native_fp4": PathSpec("native_fp4", "Blackwell FP4 tensor-core GEMM",
                           ("matmul",), _guards_of("native_fp4"), ()),
    "prefill_vec8": PathSpec("prefill_vec8", "8 values per thread dequant to scratch, then cuBLAS",
                             ("matmul", "dequantize"), _guards_of("prefill_vec8"),
                             ("nvfp4_dequant_vec8",)),
    "prefill_scalar": PathSpec("prefill_scalar", "one byte per thread dequant, then cuBLAS",
                               ("matmul", "dequantize"), (), ("nvfp4_dequant_scalar",)),
}


@dataclass(frozen=True)
class GuardOutcome:
    """One guard evaluated for one call."""

    name: str
    passed: bool
    detail: str


@dataclass(frozen=True)
class Selection:
    """The outcome of path selection: the path, why, and every evaluated guard."""

    path: str
    reason: str
    guards: tuple[GuardOutcome, ...]
    forced: bool


def candidate_paths(op: str) -> tuple[str, ...]:
    """Paths that an operation may take, in preference order."""
    if op not in OPS:
        raise ValueError(f"op must be one of {OPS}, got {op!r}")
    return tuple(p for p in PATH_ORDER if op in PATHS[p].ops)


def evaluate_guards(problem: Problem, caps: DeviceCaps, policy: Policy) -> tuple[GuardOutcome, ...]:
    """Evaluate every guard of every path the operation may take (no short-circuit)."""
    outcomes = []
    for path in candidate_paths(problem.op):
        for guard in PATHS[path].guards:
            outcomes.append(GuardOutcome(guard.name, bool(guard.check(problem, caps, policy)),
                                         guard.detail(problem, caps, policy)))
    return tuple(outcomes)


class PathNotAllowed(ValueError):
    """A forced path whose guards do not hold for this call."""


def select_path(problem: Problem, caps: DeviceCaps, policy: Policy | None = None) -> Selection:
    """Choose the path for a call: the first in preference order whose guards all hold."""
    policy = policy or Policy()
    outcomes = evaluate_guards(problem, caps, policy)
    by_path: dict[str, list[GuardOutcome]] = {}
    for outcome in outcomes:
        by_path.setdefault(GUARDS_BY_NAME[outcome.name].path, []).append(outcome)
    candidates = candidate_paths(problem.op)

    def failed(path: str) -> list[GuardOutcome]:
        return [o for o in by_path.get(path, []) if not o.passed]

    if policy.force_path is not None:
        path = policy.force_path
        if path not in candidates:
            raise PathNotAllowed(f"policy forces {path!r}, which the {problem.op!r} operation "
                                 f"cannot take; choose one of {candidates}")
        misses = failed(path)
        if misses:
            why = "; ".join(f"{o.name} is false ({o.detail})" for o in misses)
            raise PathNotAllowed(f"policy forces {path!r} but its guards do not hold: {why}. "
                                 f"Force a path whose guards hold, or drop force_path.")
        return Selection(path, f"forced by policy (force_path={path!r})", outcomes, True)

    skipped = []
    for path in candidates:
        misses = failed(path)
        if not misses:
            reason = "all guards hold" if PATHS[path].guards else "fallback: no guard"
            if skipped:
                reason += "; skipped " + "; ".join(skipped)
            return Selection(path, reason, outcomes, False)
        skipped.append(f"{path} ({', '.join(o.name.split('.', 1)[1] + ': ' + o.detail for o in misses)})")
    raise AssertionError("prefill_scalar has no guard and always matches")  # pragma: no cover
