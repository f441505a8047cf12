"""CPU tests of the pure parts of ``nvfp4_harness.nvfp4.bench`` and ``nvfp4_harness.nvfp4.bench_report``.

The byte counts are checked against the issue's per-element figures computed here with
fractions; the statistics against numpy; the crossover and the report against synthetic rows
whose expected verdicts are worked out in the test; the naive LUT dequant against
``nvfp4_kernels.reference``. A CPU dry run drives the whole GPU runner (verify, time, copy rows,
JSON) with the reference backend standing in for the CUDA kernels, and a planted bug shows
that a wrong kernel gets no time.
"""

from __future__ import annotations

import contextlib
import json
import time
import types
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from nvfp4_harness.nvfp4 import bench, bench_report
from nvfp4_harness.nvfp4.verify import compare_bitwise, to_numpy
from nvfp4_kernels import layout, reference
from nvfp4_kernels.model import Policy

E2M1_VALUES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


# --- bytes ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("n,k", bench.SHAPES)
def test_dequant_bytes_match_the_per_element_figure(n: int, k: int) -> None:
    per_element = Fraction(1, 2) + Fraction(1, 16) + 2  # packed + scale + bf16 out
    assert bench.dequant_bytes(n, k, 16, "bfloat16") == n * k * per_element


def test_partial_last_block_still_has_a_scale_byte() -> None:
    n, k, bs = 3, 40, 16
    blocks_per_row = len(range(0, k, bs))  # 0, 16, 32: three blocks, the last one partial
    assert bench.scale_bytes(n, k, bs) == n * blocks_per_row == 9
    assert bench.dequant_bytes(n, k, bs, "float16") == n * k // 2 + 9 + 2 * n * k


@pytest.mark.parametrize("m", [1, 3, 8])
@pytest.mark.parametrize("n,k", [(17408, 5120), (5120, 17408), (248320, 2048)])
def test_gemv_bytes_are_0_5625_per_weight_plus_activations_and_output(m: int, n: int, k: int) -> None:
    expected = n * k * Fraction(9, 16) + m * k * 2 + m * n * 2
    assert bench.gemv_bytes(m, n, k) == expected


def test_cublas_and_prefill_bytes() -> None:
    m, n, k = 1024, 17408, 5120
    a, w, y = m * k * 2, n * k * 2, m * n * 2
    assert bench.gemm_bytes(m, n, k) == a + w + y
    assert bench.prefill_bytes(m, n, k, 16) == a + w + y + n * k * Fraction(41, 16)
    assert bench.kernel_bytes("cublas_bf16", m, n, k, 16) == a + w + y


def test_a_copy_row_moves_the_bytes_of_the_row_it_copies() -> None:
    for kernel, m in (("dequant_vec8", None), ("gemv", 3), ("prefill", 7)):
        own = bench.kernel_bytes(kernel, m, 6, 40, 16)
        copy = bench.kernel_bytes("copy", m, 6, 40, 16, copy_of=kernel)
        assert copy in (own, own - 1) and copy % 2 == 0


def test_the_copy_ceiling_copies_the_half_size_rounded_up_to_4_kib() -> None:
    # worked by hand: a half of 0 copies nothing, 1..4096 bytes copy one granule, 4097 two
    assert bench.copy_ceiling_half(0) == 0 and bench.copy_ceiling_half(1) == 0
    assert bench.copy_ceiling_half(2) == 4096 and bench.copy_ceiling_half(8192) == 4096
    assert bench.copy_ceiling_half(8193) == 4096 and bench.copy_ceiling_half(8194) == 8192
    # the bench's slow size (M = 1 on 17408 x 5120: 50,180,096 row bytes) and its rounding
    assert bench.copy_ceiling_half(50_180_096) == 25_092_096 == 6126 * 4096
    with pytest.raises(ValueError, match="nbytes"):
        bench.copy_ceiling_half(-2)


def test_byte_counting_rejects_what_it_cannot_count() -> None:
    with pytest.raises(ValueError, match="copy_of"):
        bench.kernel_bytes("copy", 1, 8, 32, 16)
    with pytest.raises(ValueError, match="needs M"):
        bench.kernel_bytes("gemv", None, 8, 32, 16)
    with pytest.raises(ValueError, match="kernel must be one of"):
        bench.kernel_bytes("cutlass", 1, 8, 32, 16)
    with pytest.raises(ValueError, match="dtype"):
        bench.dequant_bytes(8, 32, 16, "float32")


# --- statistics -----------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [1, 2, 5, 50, 101])
def test_percentiles_agree_with_numpy(size: int) -> None:
    values = list(np.random.default_rng(size).exponential(10.0, size))
    for q in (0, 10, 50, 90, 100):
        assert bench.percentile(values, q) == pytest.approx(float(np.percentile(values, q)), rel=1e-12)
    assert bench.median(values) == pytest.approx(float(np.median(values)), rel=1e-12)


def test_percentile_errors() -> None:
    with pytest.raises(ValueError):
        bench.percentile([], 50)
    with pytest.raises(ValueError):
        bench.percentile([1.0], 101)


def test_summarize_and_bandwidth() -> None:
    stats = bench.summarize([4.0, 1.0, 3.0, 2.0])
    assert stats == {"median_us": 2.5, "p10_us": pytest.approx(1.3), "p90_us": pytest.approx(3.7), "min_us": 1.0}
    assert bench.tb_per_s(4_250_000, 1.0) == pytest.approx(4.25)  # 4.25 MB in 1 us = 4.25 TB/s


# --- the crossover --------------------------------------------------------------------------------


def _row(kernel: str, m: int | None, us: float, n: int = 17408, k: int = 5120, section: str = "sweep",
         copy_us: float = 1.0) -> dict[str, Any]:
    stats = {"median_us": us, "p10_us": us, "p90_us": us, "min_us": us}
    return bench.make_row(kernel, section, m, n, k, 16, "bfloat16", stats, copy_us, 50)


def _sweep(gemv: dict[int, float], prefill: dict[int, float]) -> list[dict[str, Any]]:
    return [_row("gemv", m, us) for m, us in gemv.items()] + [_row("prefill", m, us) for m, us in prefill.items()]


def test_crossover_inside_the_gemv_range() -> None:
    gemv = {m: 30.0 + 2 * m for m in range(1, 9)}  # 32, 34, ..., 46
    prefill = {m: 41.0 for m in range(1, 9)} | {16: 42.0}
    # gemv < 41 for 30 + 2m < 41, i.e. m <= 5; from m = 6 on prefill is faster
    result = bench.crossover(_sweep(gemv, prefill), 17408, 5120, current_max_m=8)
    assert result["gemv_max_m_recommended"] == 5
    assert result["first_m_prefill_faster"] == 6
    assert [p["M"] for p in result["points"]] == list(range(1, 9))
    assert "between" in result["summary"]


def test_crossover_above_the_gemv_range_recommends_the_kernel_limit() -> None:
    result = bench.crossover(_sweep({1: 10.0, 2: 11.0, 4: 12.0, 8: 13.0},
                                    {1: 60.0, 2: 60.0, 4: 61.0, 8: 62.0, 64: 70.0}), 17408, 5120, 8)
    assert result["gemv_max_m_recommended"] == 8
    assert result["first_m_prefill_faster"] is None
    assert "above" in result["summary"]


def test_crossover_when_prefill_always_wins_and_when_noise_interleaves() -> None:
    never = bench.crossover(_sweep({1: 99.0, 2: 99.0}, {1: 50.0, 2: 50.0}), 17408, 5120, 8)
    assert never["gemv_max_m_recommended"] == 0 and never["first_m_prefill_faster"] == 1
    # a later GEMV win after a loss does not extend the range: the threshold must hold for every smaller M
    noisy = bench.crossover(_sweep({1: 10.0, 2: 10.0, 3: 30.0, 4: 10.0}, {m: 20.0 for m in range(1, 5)}),
                            17408, 5120, 8)
    assert noisy["gemv_max_m_recommended"] == 2 and noisy["first_m_prefill_faster"] == 3


def test_crossover_ignores_other_shapes_and_sections() -> None:
    rows = _sweep({1: 10.0}, {1: 20.0}) + [_row("gemv", 2, 1.0, section="gemv"),
                                            _row("prefill", 2, 2.0, n=4096, k=4096)]
    result = bench.crossover(rows, 17408, 5120, 8)
    assert [p["M"] for p in result["points"]] == [1]


# --- the model replay -----------------------------------------------------------------------------


def test_model_layer_list_is_a_27b_class_ffn_replay_of_168_nodes() -> None:
    model = bench.load_layers(bench.DEFAULT_LAYERS)
    layers = model["layers"]
    nodes = sum(layer["count"] for layer in layers)
    weights = sum(layer["N"] * layer["K"] * layer["count"] for layer in layers)
    assert nodes == 168
    assert 14.5e9 <= weights <= 15.5e9
    assert {(layer["N"], layer["K"]) for layer in layers} == {(17408, 5120), (5120, 17408)}
    assert model["source"] and model["notes"] and model["tokens"] == 8192


def test_replay_summary_weights_each_shape_by_its_count(tmp_path: Path) -> None:
    model = {"model": "m", "layers": [{"name": "up", "N": 64, "K": 32, "count": 4},
                                      {"name": "gate", "N": 64, "K": 32, "count": 2},
                                      {"name": "down", "N": 32, "K": 64, "count": 3}]}
    rows = [_row("dequant_vec8", None, 2.0, 64, 32, "replay"), _row("cublas_bf16", 16, 10.0, 64, 32, "replay"),
            _row("prefill", 16, 12.5, 64, 32, "replay"), _row("dequant_vec8", None, 3.0, 32, 64, "replay"),
            _row("cublas_bf16", 16, 7.0, 32, 64, "replay"), _row("prefill", 16, 10.5, 32, 64, "replay"),
            _row("dequant_vec8", None, 999.0, 64, 32, "dequant")]  # another section: ignored
    summary = bench.replay_summary(model, rows, tokens=16)
    dequant, gemm = 6 * 2.0 + 3 * 3.0, 6 * 10.0 + 3 * 7.0
    assert summary["nodes"] == 9 and summary["weights"] == 6 * 64 * 32 + 3 * 32 * 64
    assert summary["dequant_total_us"] == pytest.approx(dequant)
    assert summary["gemm_total_us"] == pytest.approx(gemm)
    assert summary["prefill_total_us"] == pytest.approx(6 * 12.5 + 3 * 10.5)
    assert summary["dequant_share"] == pytest.approx(dequant / (dequant + gemm))
    partial = bench.replay_summary(model, rows[:3], tokens=16)
    assert partial["dequant_share"] is None and partial["missing_shapes"] == ["32x64"]


def test_load_layers_rejects_a_malformed_list(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"layers": [{"name": "x", "N": 4, "K": 0, "count": 1}]}))
    with pytest.raises(ValueError, match="positive integer"):
        bench.load_layers(bad)
    bad.write_text(json.dumps([{"name": "x"}]))
    with pytest.raises(ValueError, match="'layers'"):
        bench.load_layers(bad)


# --- names, arguments and the command -------------------------------------------------------------


def test_results_file_name_is_the_gpu_slug_and_date(tmp_path: Path) -> None:
    assert bench.slugify("NVIDIA H200") == "nvidia-h200"
    assert bench.slugify("  NVIDIA  H100 80GB HBM3 ") == "nvidia-h100-80gb-hbm3"
    assert bench.results_path(tmp_path, "NVIDIA H200", "2026-11-30") == tmp_path / "nvidia-h200-2026-11-30.json"


def test_arguments() -> None:
    args = bench.parse_args(["--only", "gemv,sweep", "--quick"])
    assert args.sections == ("gemv", "sweep") and args.reps == bench.QUICK_REPS
    assert bench.parse_args([]).reps == bench.DEFAULT_REPS >= 50
    with pytest.raises(SystemExit):
        bench.parse_args(["--only", "everything"])
    with pytest.raises(SystemExit):
        bench.parse_args(["--reps", "0"])


def test_bench_without_a_gpu_exits_2(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert bench.main(["--quick"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


def test_git_commit_prefers_the_explicit_value(monkeypatch: pytest.MonkeyPatch) -> None:
    assert bench.git_commit("abc1234") == "abc1234"
    monkeypatch.setenv("BENCH_GIT_COMMIT", "def5678")
    assert bench.git_commit(None) == "def5678"


# --- the naive LUT dequant ------------------------------------------------------------------------


def _random_weights(n: int, k: int, bs: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.float32]:
    rng = np.random.default_rng(seed)
    packed = rng.integers(0, 256, (n, k // 2), dtype=np.uint8)
    scales = rng.integers(0, 256, (n, -(-k // bs)), dtype=np.uint8)
    scales[(scales & 0x7F) == 0x7F] = 0x01  # no NaN scales (torch's NaN bits differ); 0x01 is subnormal
    scales[0, 0] = 0x00  # a zero scale: +-0 results keep the code's sign
    return packed, scales, np.float32(rng.uniform(0.01, 3.0))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("n,k,bs", [(16, 64, 16), (7, 40, 16), (5, 42, 7), (9, 30, 5), (4, 128, 32), (3, 24, 2)])
def test_naive_lut_dequant_is_bit_identical_to_the_reference(n: int, k: int, bs: int, dtype: str) -> None:
    packed, scales, g = _random_weights(n, k, bs, seed=n * 1000 + k + bs)
    lut = torch.tensor(E2M1_VALUES, dtype=torch.float32)
    got = bench.naive_lut_dequant(torch.from_numpy(packed), torch.from_numpy(scales), torch.tensor([g]), lut, bs,
                                  getattr(torch, dtype))
    diff = compare_bitwise(reference.dequantize(packed, scales, g, bs, dtype), got)
    assert diff, str(diff)


def test_naive_lut_dequant_traces_into_one_graph() -> None:
    """The torch.compile baseline must be capturable without graph breaks (aot_eager: no codegen)."""
    packed, scales, g = _random_weights(8, 64, 16, seed=3)
    lut = torch.tensor(E2M1_VALUES, dtype=torch.float32)
    compiled = torch.compile(bench.naive_lut_dequant, backend="aot_eager", fullgraph=True, dynamic=False)
    got = compiled(torch.from_numpy(packed), torch.from_numpy(scales), torch.tensor([g]), lut, 16, torch.bfloat16)
    assert compare_bitwise(reference.dequantize(packed, scales, g, 16, "bfloat16"), got)


# --- a CPU dry run of the GPU runner --------------------------------------------------------------


class ReferenceBackend:
    """The cuda_backend interface implemented with nvfp4_kernels.reference on CPU tensors."""

    def __init__(self, corrupt: str | None = None) -> None:
        self.corrupt = corrupt
        self.prepared: list[str] = []  # what the bench prepared, in order
        self.launched: dict[int, int] = {}  # launches of each prepared call, by its place in `prepared`

    def _prepare(self, name: str, *args: Any, **kwargs: Any) -> Callable[[], None]:
        """cuda_backend.prepare_*: the call's checks once (here, the call itself runs at each launch)."""
        index = len(self.prepared)
        self.prepared.append(name)
        self.launched[index] = 0

        def launch() -> None:
            self.launched[index] += 1
            getattr(self, name)(*args, **kwargs)

        return launch

    def prepare_gemv(self, *args: Any, **kwargs: Any) -> Callable[[], None]:
        return self._prepare("gemv", *args, **kwargs)

    def prepare_fused_mma(self, *args: Any, **kwargs: Any) -> Callable[[], None]:
        return self._prepare("fused_mma", *args, **kwargs)

    def prepare_fused_wgmma(self, *args: Any, **kwargs: Any) -> Callable[[], None]:
        return self._prepare("fused_wgmma", *args, **kwargs)

    @staticmethod
    def _into(out: torch.Tensor, result: np.ndarray) -> None:
        out.copy_(torch.from_numpy(np.ascontiguousarray(result).view(np.int16)).view(out.dtype))

    def dequantize(self, path: str, packed: torch.Tensor, scales: torch.Tensor, g: torch.Tensor,
                   block_size: int, out: torch.Tensor) -> None:
        fn = reference.dequantize_vec8 if path == "prefill_vec8" else reference.dequantize_scalar
        result = fn(packed.numpy(), scales.numpy(), float(g.item()), block_size, str(out.dtype)[6:])
        if self.corrupt == path:
            result = result.copy()
            result[-1, -1] = -result[-1, -1] if result[-1, -1] != 0 else 1.0  # one wrong element, at the end
        self._into(out, result)

    def gemv(self, a: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, g: torch.Tensor,
             bias: torch.Tensor | None, out: torch.Tensor) -> None:
        result = reference.gemv(to_numpy(a), packed.numpy(), scales.numpy(), float(g.item()), 16, None)
        if self.corrupt == "gemv":
            result = result[:, ::-1]  # rows of the output permuted: plausible magnitudes, wrong values
        self._into(out, result)

    def fused_splits(self, n: int, k: int, m: int) -> int:
        from nvfp4_kernels.tiling import fused_split_count

        return fused_split_count(n, k, m)

    def fused_mma(self, a: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, g: torch.Tensor,
                  bias: torch.Tensor | None, out: torch.Tensor, splits: int | None = None,
                  tiled: tuple[Any, ...] | None = None) -> None:
        n, k, m = packed.shape[0], 2 * packed.shape[1], a.shape[0]
        if tiled is not None:  # read the weight from the tiled copy, as the kernel does
            layout.check_tiled(tiled[0], tiled[1], n, k)
            packed, scales = layout.untile_weights(tiled[0], tiled[1], n)
            # the bench hands the copy with the range layout.register keeps, which must be the weight's
            assert len(tiled) == 3 and tiled[2] == layout.scale_byte_range(scales)
        assert splits in (None, self.fused_splits(n, k, m)), "the bench hands in the dispatcher's split count"
        result = reference.fused_mma(to_numpy(a), packed.numpy(), scales.numpy(), float(g.item()), 16, None,
                                     splits=self.fused_splits(n, k, m))
        if self.corrupt == "fused_mma":
            result = result[::-1]  # activation rows permuted
        self._into(out, result)


    def fused_wgmma(self, a: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, g: torch.Tensor,
                    bias: torch.Tensor | None, out: torch.Tensor, plan: tuple[int, int] | None = None,
                    tiled: tuple[Any, ...] | None = None) -> None:
        from nvfp4_kernels.tiling import WGMMA_TILE_ROWS, wgmma_call_plan

        n, k = packed.shape[0], 2 * packed.shape[1]
        if tiled is not None:  # read the weight from the tile-contiguous copy, as the kernel does
            layout.check_tiled(tiled[0], tiled[1], n, k)
            packed, scales = layout.untile_weights(tiled[0], tiled[1], n)
            assert len(tiled) == 3 and tiled[2] == layout.scale_byte_range(scales)
        whole, splits = wgmma_call_plan(n, k, a.shape[0])
        assert plan in (None, (whole, splits)), "the bench hands in the call's plan"
        result = reference.fused_wgmma(to_numpy(a), packed.numpy(), scales.numpy(), float(g.item()), 16, None,
                                       whole_rows=min(n, whole * WGMMA_TILE_ROWS), splits=splits)
        if self.corrupt == "fused_wgmma":
            result = result[::-1]  # activation rows permuted
        self._into(out, result)


def _dry_run(tmp_path: Path, backend: ReferenceBackend, sections: tuple[str, ...] = bench.SECTIONS
             ) -> tuple[dict[str, Any], Path]:
    layers = tmp_path / "layers.json"
    layers.write_text(json.dumps({"model": "tiny", "layers": [
        {"name": "up", "N": 48, "K": 64, "count": 3}, {"name": "down", "N": 32, "K": 96, "count": 2}]}))
    runner = bench.Runner(torch, backend, reps=3, warmup=1, budget_s=1e9, started=time.monotonic(),
                          device="cpu", compile_backend="aot_eager", flush_bytes=1 << 16)
    plan = bench.Plan(shapes=((48, 64), (32, 96)), gemv_m=(1, 8), seed_m=16, sweep_shape=(48, 64),
                      sweep_m=(1, 2, 8, 16), paths_shapes=((40, 256), (24, 384)), paths_m=(1, 8, 9, 16, 300),
                      replay_tokens=24, compile_shapes=((48, 64),), sections=sections, layers=str(layers))
    prov = {"gpu": "Dry Run CPU", "date": "2026-01-02", "reps": 3, "warmup": 1, "flush_bytes": 1 << 16}
    return bench.execute(runner, plan, prov, tmp_path / "results")


def test_dry_run_verifies_times_and_writes_every_kind_of_row(tmp_path: Path) -> None:
    results, path = _dry_run(tmp_path, ReferenceBackend())
    assert path.name == "dry-run-cpu-2026-01-02.json"
    assert json.loads(path.read_text()) == json.loads(json.dumps(results))
    assert results["failures"] == [] and results["complete"] is True
    rows = results["rows"]
    assert {r["kernel"] for r in rows} == set(bench.KERNELS)
    copies = {r["bytes"]: r for r in rows if r["kernel"] == "copy"}
    for row in rows:
        assert row["median_us"] > 0 and row["copy_us"] > 0
        assert row["bytes"] == bench.kernel_bytes(row["kernel"], row["M"], row["N"], row["K"], row["block_size"],
                                                  row["dtype"], row.get("copy_of"))
        if row["kernel"] != "copy":
            assert "verified" in row
            assert copies[2 * (row["bytes"] // 2)]["median_us"] == row["copy_us"]
        else:  # the copy moved its half-size rounded up to whole 4 KiB granules
            half = row["bytes"] // 2
            assert row["copied_bytes"] == 2 * 4096 * -(-half // 4096), row
    gemv_sweep = sorted(r["M"] for r in rows if r["kernel"] == "gemv" and r["section"] == "sweep")
    assert gemv_sweep == [1, 2, 8]
    assert [p["M"] for p in results["crossover"]["points"]] == [1, 2, 8]
    assert results["replay"]["nodes"] == 5 and results["replay"]["dequant_share"] is not None
    assert results["provenance"]["torch_compile"] == {"48x64": "torch.compile (aot_eager, dynamic=False)"}
    paths = {(r["kernel"], r["N"], r["M"]) for r in rows if r["section"] == "paths"}
    for n in (40, 24):  # every path at every M it takes, cuBLAS beside each
        assert {m for kern, nn, m in paths if kern == "gemv" and nn == n} == {1, 8}
        assert {m for kern, nn, m in paths if kern == "fused_mma" and nn == n} == {1, 8, 9, 16}
        assert {m for kern, nn, m in paths if kern == "prefill" and nn == n} == {1, 8, 9, 16, 300}
        assert {m for kern, nn, m in paths if kern == "cublas_bf16" and nn == n} == {1, 8, 9, 16, 300}
    choice = results["path_choice"]
    assert set(choice["times_us"]) == {"40x256", "24x384"} and choice["policy_fused_max_m"] == Policy().fused_max_m


def test_a_second_run_of_the_day_writes_its_own_file(tmp_path: Path) -> None:
    """Two runs on one day (say --only paths, then --only host) keep both results: the second
    takes its commit's name (or, without one, the next free number), and each run's later saves
    rewrite its own file only."""
    first, first_path = _dry_run(tmp_path, ReferenceBackend(), sections=("gemv",))
    second, second_path = _dry_run(tmp_path, ReferenceBackend(), sections=("dequant", "gemv"))
    assert (first_path.name, second_path.name) == ("dry-run-cpu-2026-01-02.json", "dry-run-cpu-2026-01-02-2.json")
    assert json.loads(first_path.read_text())["rows"] == json.loads(json.dumps(first["rows"]))
    assert {r["section"] for r in json.loads(second_path.read_text())["rows"]} == {"dequant", "gemv"}
    results = tmp_path / "results"
    assert bench.new_results_path(results, "Dry Run CPU", "2026-01-02", "abc1234").name == \
        "dry-run-cpu-2026-01-02-abc1234.json"
    (results / "dry-run-cpu-2026-01-02-abc1234.json").write_text("{}")
    (results / "dry-run-cpu-2026-01-02-3.json.tmp").write_text("{}")  # a run cut off mid-write
    assert bench.new_results_path(results, "Dry Run CPU", "2026-01-02", "abc1234").name == \
        "dry-run-cpu-2026-01-02-4.json"


def test_a_runs_provenance_says_when_it_started(monkeypatch: pytest.MonkeyPatch) -> None:
    """bench's provenance carries the day (the file's name) and the start time (the order of a
    day's runs), read here from a stand-in for torch's CUDA queries."""
    from types import SimpleNamespace

    props = SimpleNamespace(major=9, minor=0, multi_processor_count=132, total_memory=141 << 30,
                            L2_cache_size=60 << 20)
    fake = SimpleNamespace(cuda=SimpleNamespace(get_device_properties=lambda _: props, current_device=lambda: 0,
                                                get_device_name=lambda: "NVIDIA H200"),
                           version=SimpleNamespace(cuda="13.0"), __version__="2.11.0+cu130")
    monkeypatch.setattr(bench, "driver_version", lambda: "580.159.04")
    monkeypatch.setattr(bench, "cublas_version", lambda: "13.1.0")
    args = bench.parse_args(["--only", "dequant", "--git-commit", "abc1234"])
    prov = bench.provenance(fake, ["--only", "dequant"], args, "available", "2026-12-05", "2026-12-05T13:54:07+00:00")
    assert (prov["date"], prov["started"], prov["git_commit"]) == ("2026-12-05", "2026-12-05T13:54:07+00:00", "abc1234")
    assert prov["gpu"] == "NVIDIA H200" and prov["sections"] == ["dequant"]


def test_the_newest_run_of_a_day_is_the_one_that_started_last(tmp_path: Path) -> None:
    """A day's second run is named <day>-<commit>.json, which sorts before the day's first file
    by name: bench-report must still take it by the time it started (the 2026-12-05 bench was
    first rendered from the older run of the day)."""
    def write(name: str, started: str | None, rows: list) -> Path:
        path = tmp_path / name
        prov = {"gpu": "NVIDIA H200", "date": name[12:22], **({"started": started} if started else {})}
        path.write_text(json.dumps({"provenance": prov, "rows": rows}))
        return path

    first = write("nvidia-h200-2026-12-05.json", "2026-12-05T05:10:00+00:00", [{"kernel": "copy"}])
    second = write("nvidia-h200-2026-12-05-e5e90f0.json", "2026-12-05T13:54:00+00:00", [{"kernel": "copy"}])
    write("nvidia-h200-2026-12-04.json", "2026-12-04T23:59:59+00:00", [{"kernel": "copy"}])
    write("nvidia-h200-2026-12-05-host.json", "2026-12-05T20:00:00+00:00", [])  # no kernel rows
    assert bench_report.newest_results(tmp_path) == second
    # files written before runs recorded their start: the day, then the name, as before
    for path in (first, second):
        data = json.loads(path.read_text())
        del data["provenance"]["started"]
        path.write_text(json.dumps(data))
    assert bench_report.newest_results(tmp_path) == first


@pytest.mark.parametrize("bug,kernel", [("prefill_vec8", "dequant_vec8"), ("prefill_scalar", "dequant_scalar"),
                                        ("gemv", "gemv"), ("fused_mma", "fused_mma")])
def test_a_wrong_kernel_reports_no_time(tmp_path: Path, bug: str, kernel: str) -> None:
    results, _ = _dry_run(tmp_path, ReferenceBackend(corrupt=bug), sections=("dequant", "gemv", "paths"))
    assert not [r for r in results["rows"] if r["kernel"] == kernel]
    failed = {(f["kernel"], f["kind"]) for f in results["failures"]}
    assert (kernel, "wrong output") in failed
    assert [r for r in results["rows"] if r["kernel"] == "cublas_bf16"]  # the others still ran


def test_a_missing_backend_fails_its_rows_but_not_the_run(tmp_path: Path) -> None:
    results, _ = _dry_run(tmp_path, None, sections=("dequant", "gemv", "compile"))  # type: ignore[arg-type]
    kernels = {r["kernel"] for r in results["rows"]}
    assert {"cublas_bf16", "torch_compile_dequant", "copy"} <= kernels
    assert not kernels & {"dequant_scalar", "dequant_vec8", "gemv"}
    assert all("unavailable" in f["message"] for f in results["failures"])


def test_the_time_budget_skips_the_remaining_rows(tmp_path: Path) -> None:
    runner = bench.Runner(torch, ReferenceBackend(), reps=2, warmup=0, budget_s=0.0, started=time.monotonic() - 1,
                          device="cpu", flush_bytes=1 << 10)
    runner.dequant_rows(16, 32)
    assert runner.rows == [] and {f["kind"] for f in runner.failures} == {"skipped"}


# --- the report -----------------------------------------------------------------------------------


def _synthetic_results() -> tuple[dict[str, Any], dict[str, str]]:
    """Rows with chosen times; returns them and each target's expected verdict, computed here."""
    rows, expected = [], {}

    def add(kernel: str, section: str, m: int | None, n: int, k: int, us: float, copy_us: float) -> dict[str, Any]:
        row = _row(kernel, m, us, n, k, section, copy_us)
        rows.append(row)
        return row

    vec8 = {(17408, 5120): (60.0, 55.7), (4096, 4096): (10.0, 9.4), (6144, 2048): (20.0, 9.0), (2048, 6144): (9.0, 8.0)}
    scalar = {(4096, 4096): 40.0, (6144, 2048): 30.0, (2048, 6144): 36.0}
    for (n, k), (us, copy_us) in vec8.items():
        add("dequant_vec8", "dequant", None, n, k, us, copy_us)
        floor = 0.9 if (n, k) == (17408, 5120) else 0.8
        expected[f"vec8 dequant >= {floor:.0%} of copy on {n} x {k}"] = "pass" if copy_us / us >= floor else "FAIL"
    for (n, k), us in scalar.items():
        add("dequant_scalar", "dequant", None, n, k, us, vec8[(n, k)][1])
        expected[f"vec8 >= 3.8x scalar on {n} x {k}"] = "pass" if us / vec8[(n, k)][0] >= 3.8 else "FAIL"
    add("torch_compile_dequant", "compile", None, 4096, 4096, 33.0, 9.4)
    gemv = {(17408, 5120): (30.0, 36.0, 25.0), (5120, 17408): (40.0, 60.0, 25.0)}  # M=1 us, M=8 us, copy us
    for (n, k), (one, eight, copy_us) in gemv.items():
        add("gemv", "gemv", 1, n, k, one, copy_us)
        add("gemv", "gemv", 8, n, k, eight, copy_us)
        add("cublas_bf16", "gemv", 1, n, k, 60.0, 45.0)
        expected[f"GEMV M=1 >= 80% of copy on {n} x {k}"] = "pass" if copy_us / one >= 0.8 else "FAIL"
        expected[f"GEMV M=8 <= 1.3x its M=1 time on {n} x {k}"] = "pass" if eight / one <= 1.3 else "FAIL"
    for m, (g_us, p_us) in {1: (30.0, 90.0), 2: (31.0, 91.0), 4: (33.0, 92.0), 8: (36.0, 95.0)}.items():
        add("gemv", "sweep", m, 17408, 5120, g_us, 25.0)
        add("prefill", "sweep", m, 17408, 5120, p_us, 70.0)
        add("cublas_bf16", "sweep", m, 17408, 5120, p_us - 55.0, 50.0)
    add("prefill", "sweep", 64, 17408, 5120, 100.0, 80.0)
    add("prefill", "prefill", 1024, 4096, 4096, 120.0, 30.0)
    add("cublas_bf16", "prefill", 1024, 4096, 4096, 105.0, 28.0)
    for n, k in ((17408, 5120), (5120, 17408)):
        add("dequant_vec8", "replay", None, n, k, 60.0, 55.0)
        add("cublas_bf16", "replay", 8192, n, k, 1900.0, 300.0)
        add("prefill", "replay", 8192, n, k, 1965.0, 320.0)
    model = bench.load_layers(bench.DEFAULT_LAYERS)
    results = {"provenance": {"gpu": "NVIDIA H200", "date": "2026-11-30", "driver": "580.1", "cuda": "13.0",
                              "torch": "2.11", "cublas": "13.1.0", "command": "python -m nvfp4_harness bench",
                              "git_commit": "0123abc", "reps": 100, "warmup": 5, "flush_bytes": 256 << 20},
               "rows": rows, "failures": [], "complete": True,
               "crossover": bench.crossover(rows, 17408, 5120, current_max_m=8),
               "replay": bench.replay_summary(model, rows, 8192)}
    # with a "paths" section, the GEMV-vs-prefill crossover target gives way to the choice among every path
    # section "paths": (gemv, fused_mma, prefill, cuBLAS) times per M, the copy of a row's bytes 28 us
    paths = {1: (36.0, 33.0, 95.0, 55.0), 16: (None, 37.0, 110.0, 55.0), 64: (None, 70.0, 115.0, 56.0),
             256: (None, 230.0, 130.0, 69.0)}
    for n, k in ((17408, 5120), (5120, 17408)):
        for m, times in paths.items():
            for kernel, us in zip(("gemv", "fused_mma", "prefill", "cublas_bf16"), times, strict=True):
                if us is not None:
                    add(kernel, "paths", m, n, k, us, 28.0)
    results["path_choice"] = bench.path_choice(rows, bench.LARGE_SHAPES, Policy().gemv_max_m, Policy().fused_max_m)
    # by hand from the table: the GEMV loses at M = 1 (36 > 33), fused_mma wins up to 64 and loses at 256
    expected["policy gemv_max_m and fused_max_m equal the measured crossovers"] = (
        "pass" if (Policy().gemv_max_m, Policy().fused_max_m) == (0, 64) else "FAIL")
    for n, k in ((17408, 5120), (5120, 17408)):
        for m, limit, kind in ((1, 0.8, "copy"), (16, 0.7, "copy"), (64, 0.5, "cublas"), (256, 1.3, "cublas")):
            gemv, fused, prefill, cublas = paths[m]
            chosen = gemv if m <= Policy().gemv_max_m else fused if m <= Policy().fused_max_m else prefill
            if kind == "copy":
                expected[f"chosen path at M={m} >= {limit:.0%} of copy on {n} x {k}"] = (
                    "pass" if 28.0 / chosen >= limit else "FAIL")
            else:
                expected[f"chosen path at M={m} <= {limit}x cuBLAS bf16 on {n} x {k}"] = (
                    "pass" if chosen / cublas <= limit else "FAIL")
    return results, expected


#: section "paths" on both shapes, by hand: M -> (gemv, fused_mma, fused_wgmma, prefill) us
HOPPER_PATHS = {1: (33.0, 30.0, 75.0, 115.0), 16: (None, 35.0, 75.0, 115.0), 64: (None, 60.0, 78.0, 116.0),
                96: (None, 100.0, 72.0, 116.0), 128: (None, 105.0, 73.0, 118.0), 160: (None, 150.0, 77.0, 122.0),
                256: (None, 180.0, 87.0, 130.0), 512: (None, None, None, 180.0)}


def _hopper_paths_rows() -> list[dict[str, Any]]:
    rows = []
    for n, k in bench.LARGE_SHAPES:
        for m, times in HOPPER_PATHS.items():
            for kernel, us in zip(("gemv", "fused_mma", "fused_wgmma", "prefill"), times, strict=True):
                if us is not None:
                    rows.append(_row(kernel, m, us, n, k, "paths", 20.0))
    return rows


def test_path_choice_separates_fused_mmas_hopper_range_from_its_range_against_prefill() -> None:
    """Read off HOPPER_PATHS: the GEMV never wins (33 > 30 at M = 1); fused_mma wins up to M = 64
    and loses to fused_wgmma at 96 (100 > 72), so fused_wgmma starts at 65; fused_mma still beats
    prefill up to M = 128 (105 <= 118) but not at 160 (150 > 122), its range without fused_wgmma;
    fused_wgmma wins up to 256, the kernel's limit."""
    rows = _hopper_paths_rows()
    choice = bench.path_choice(rows, bench.LARGE_SHAPES, 0, 128, 256, 65)
    got = {key: choice[f"{key}_recommended"] for key in ("gemv_max_m", "fused_max_m", "wgmma_min_m", "wgmma_max_m")}
    assert got == {"gemv_max_m": 0, "fused_max_m": 128, "wgmma_min_m": 65, "wgmma_max_m": 256}
    assert choice["policy_matches"] and "DIFFERENT" not in choice["summary"]
    other = bench.path_choice(rows, bench.LARGE_SHAPES, 0, 128, 256, 97)
    assert not other["policy_matches"] and other["summary"].endswith("(DIFFERENT from the measurement)")
    # a run of the policy of its day (fused_wgmma after fused_mma, no wgmma_min_m): fused_mma's
    # range had to beat fused_wgmma too
    old = bench.path_choice(rows, bench.LARGE_SHAPES, 0, 128, 256)
    assert (old["fused_max_m_recommended"], old["wgmma_max_m_recommended"]) == (64, 256)
    assert "wgmma_min_m_recommended" not in old and not old["policy_matches"]


def test_the_chosen_path_row_follows_the_policy_of_the_run() -> None:
    rows = _hopper_paths_rows()
    n, k = bench.LARGE_SHAPES[0]
    chosen = {m: bench_report.chosen_path_row(rows, n, k, m, 0, 128, 256, 65)["kernel"] for m in HOPPER_PATHS}
    assert chosen == {1: "fused_mma", 16: "fused_mma", 64: "fused_mma", 96: "fused_wgmma", 128: "fused_wgmma",
                      160: "fused_wgmma", 256: "fused_wgmma", 512: "prefill"}
    before = {m: bench_report.chosen_path_row(rows, n, k, m, 0, 128, 256)["kernel"] for m in HOPPER_PATHS}
    assert before == chosen | {96: "fused_mma", 128: "fused_mma"}
    # a GPU without fused_wgmma: no rows of it, fused_mma up to fused_max_m
    no_wgmma = [r for r in rows if r["kernel"] != "fused_wgmma"]
    elsewhere = {m: bench_report.chosen_path_row(no_wgmma, n, k, m, 0, 128, None, None)["kernel"] for m in HOPPER_PATHS}
    assert elsewhere == {1: "fused_mma", 16: "fused_mma", 64: "fused_mma", 96: "fused_mma", 128: "fused_mma",
                         160: "prefill", 256: "prefill", 512: "prefill"}


def test_the_m256_target_is_stated_for_the_registered_wgmma_copy_too() -> None:
    """Where the policy takes fused_wgmma, the target is computed for its row-major row and again
    for its row on the registered tile-contiguous copy (fused_wgmma_tiled), each against the same
    cuBLAS row."""
    rows = []
    times = {"fused_wgmma": 99.0, "fused_wgmma_tiled": 88.0, "cublas_bf16": 68.0, "prefill": 130.0}
    for n, k in bench.LARGE_SHAPES:
        for kernel, us in times.items():
            rows.append(_row(kernel, 256, us, n, k, "paths", 20.0))
    choice = bench.path_choice(rows, bench.LARGE_SHAPES, 0, 128, 256)
    verdicts = {t["target"]: (t["status"], t["shown"]) for t in bench_report._path_targets(
        {"rows": rows, "path_choice": choice})}
    for n, k in bench.LARGE_SHAPES:
        name = f"chosen path at M=256 <= 1.3x cuBLAS bf16 on {n} x {k}"
        assert verdicts[name] == ("FAIL", f"{99.0 / 68.0:.2f}x (fused_wgmma)")
        assert verdicts[name + ", tile-contiguous weights"] == ("pass", f"{88.0 / 68.0:.2f}x (fused_wgmma_tiled)")
        assert f"chosen path at M=1 >= 80% of copy on {n} x {k}, tile-contiguous weights" not in verdicts


def test_targets_are_computed_from_the_rows() -> None:
    results, expected = _synthetic_results()
    verdicts = {t["target"]: t["status"] for t in bench_report.evaluate_targets(results)}
    assert verdicts == expected
    assert "FAIL" in verdicts.values() and "pass" in verdicts.values()  # the fixture exercises both


def test_a_target_without_data_is_not_measured() -> None:
    results, _ = _synthetic_results()
    results["rows"] = [r for r in results["rows"] if not (r["kernel"] == "gemv" and r["N"] == 5120)]
    verdicts = {t["target"]: t["status"] for t in bench_report.evaluate_targets(results)}
    assert verdicts["GEMV M=1 >= 80% of copy on 5120 x 17408"] == "not measured"


def test_report_generation_writes_markdown_and_png(tmp_path: Path) -> None:
    results, expected = _synthetic_results()
    source = tmp_path / "nvidia-h200-2026-11-30.json"
    source.write_text(json.dumps(results))
    md, png = tmp_path / "BENCHMARKS.md", tmp_path / "bandwidth.png"
    assert bench_report.main([str(source), "--out", str(md), "--png", str(png)]) == 0
    text = md.read_text()
    for target, status in expected.items():
        line = next(x for x in text.splitlines() if x.startswith(f"| {target} |"))
        assert line.endswith(f"| {status} |"), line
    share = results["replay"]["dequant_share"]
    assert f"Dequantization share: {share:.1%}" in text
    assert "Recommended `Policy.gemv_max_m` = **8**" in text
    assert "nvidia-h200-2026-11-30.json" in text and "](benchmarks/bandwidth.png)" in text
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert text == bench_report.render_benchmarks(source)  # deterministic
    assert bench_report.main([str(source), "--out", str(md), "--check"]) == 0
    md.write_text(text.replace("pass", "PASS", 1))
    assert bench_report.main([str(source), "--out", str(md), "--check"]) == 1


def test_console_summary_lists_rows_and_targets() -> None:
    results, _ = _synthetic_results()
    text = bench_report.console_summary(results)
    assert "dequant_vec8" in text and "targets:" in text and "crossover:" in text and "replay:" in text
    assert f"{15.2 / 10.0:.2f}x vs ONNX Runtime 1.31.1 vec8 (15.2 us)" in text  # the anchor over our 10 us


class RaisingBackend(ReferenceBackend):
    def dequantize(self, *args: Any) -> None:
        raise RuntimeError("CUDA error 700 launching nvfp4_dequant_scalar_kernel: an illegal memory access")


def test_a_sticky_cuda_error_stops_the_remaining_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = bench.Runner(torch, RaisingBackend(), reps=2, warmup=0, budget_s=1e9, started=time.monotonic(),
                          device="cpu", flush_bytes=1 << 10)
    monkeypatch.setattr(runner, "context_usable", lambda: False)
    runner.dequant_rows(16, 32)
    assert [f["kind"] for f in runner.failures] == ["error", "skipped"]
    assert "not run" in runner.failures[1]["message"] and runner.rows == []


def test_a_refused_launch_does_not_stop_the_run() -> None:
    runner = bench.Runner(torch, RaisingBackend(), reps=2, warmup=0, budget_s=1e9, started=time.monotonic(),
                          device="cpu", flush_bytes=1 << 10)
    runner.dequant_rows(16, 32)  # on the CPU the "context" stays usable: both kernels are tried
    assert [f["kind"] for f in runner.failures] == ["error", "error"] and runner.aborted is None


def test_provenance_helpers_answer_without_a_gpu() -> None:
    assert isinstance(bench.driver_version(), str) and bench.driver_version()
    assert isinstance(bench.cublas_version(), str) and bench.cublas_version()


def test_host_time_arithmetic_and_verdicts() -> None:
    from nvfp4_harness.nvfp4 import host_time

    assert host_time.per_call(0.002, 200) == pytest.approx(10.0)
    with pytest.raises(ValueError):
        host_time.per_call(1.0, 0)
    row = {"eager_host_us": host_time.HOST_TARGET_US, "recording_host_us": host_time.RECORDING_TARGET_US}
    assert host_time.verdict(row) == "met"
    assert host_time.verdict({**row, "eager_host_us": host_time.HOST_TARGET_US + 0.01}) == "missed"
    assert host_time.verdict({**row, "recording_host_us": host_time.RECORDING_TARGET_US + 0.01}) == "missed"
    from nvfp4_harness.model import DeviceCaps
    from nvfp4_kernels import cuda_backend
    from nvfp4_kernels.model import Problem, select_path

    for case in host_time.CASES:  # each case's path is the default policy's choice on an H200
        problem = Problem("matmul", case.m, case.n, case.k, 16, "bfloat16", "cuda", True)
        assert select_path(problem, DeviceCaps.simulated_gpu(9, 0), Policy()).path == case.path, case.name
        # every path timed has a packed launcher (the eager fast path), so the rows time that
        assert case.path in cuda_backend.PACKED_KERNEL, case.name
        # a case left out on other GPUs is one whose path they do not take (an Ampere, a Blackwell)
        for sm in ((8, 0), (10, 0)):
            other = select_path(problem, DeviceCaps.simulated_gpu(*sm), Policy()).path
            assert (other == case.path) == (case.needs_capability is None), (case.name, sm, other)
    assert {c.path for c in host_time.CASES} == {"gemv", "fused_mma", "fused_wgmma", "prefill_vec8"}


def test_host_rows_render_in_benchmarks_md() -> None:
    row = {"case": "decode M=1, 17408 x 5120", "path": "gemv", "M": 1, "N": 17408, "K": 5120, "calls": 200,
           "loops": 5, "eager_host_us": 7.5, "eager_wall_us": 33.9, "recording_host_us": 11.2,
           "recording_wall_us": 34.0, "graph_replay_us": 33.5, "kernel_us": 34.1, "ort_eager_us": 55.0,
           "verdict": "met"}
    lines = bench_report._host_lines({"host": [row]})
    assert "| decode M=1, 17408 x 5120 | gemv | 7.50 | 33.90 | 11.20 | 34.00 | 33.50 | 34.10 | 55.00 | met |" in lines
    assert bench_report._host_lines({}) == ["Not measured in this run (section `host`)."]


def test_host_rows_with_a_floor_render_launches_floor_and_the_dispatcher_cost() -> None:
    row = {"case": "M=64, 17408 x 5120", "path": "fused_mma", "M": 64, "N": 17408, "K": 5120, "calls": 200,
           "loops": 5, "eager_host_us": 15.5, "eager_wall_us": 73.0, "recording_host_us": 16.0,
           "recording_wall_us": 73.1, "graph_replay_us": 71.0, "kernel_us": 74.0, "launches": 2, "floor_us": 11.25,
           "ort_eager_us": None, "verdict": "missed"}
    lines = bench_report._host_lines({"host": [row]})
    assert "| M=64, 17408 x 5120 | fused_mma | 15.50 | 73.00 | 16.00 | 73.10 | 71.00 | 74.00 | 2 | 11.25 | 4.25 |  " \
           "| missed |" in lines
    assert any("| launches | floor | over floor |" in line for line in lines)
    # the method text quotes this run's floor per launch (11.25 us / 2 launches), not a fixed figure
    assert any("in this run it is 5.6 us per launch." in line for line in lines)
    one = dict(row, launches=1, floor_us=9.0)
    assert any("in this run it is 5.6-9.0 us per launch." in line
               for line in bench_report._host_lines({"host": [row, one]}))
    # a run from before the floor existed keeps its old columns
    old = {k: v for k, v in row.items() if k not in ("launches", "floor_us")}
    assert not any("floor" in line for line in bench_report._host_lines({"host": [old]}) if line.startswith("|"))


class _FakeOut:
    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape = shape

    def data_ptr(self) -> int:
        return 0x7000


class _FakeLike:
    def __init__(self) -> None:
        self.allocated: list[tuple[int, ...]] = []

    def get_device(self) -> int:
        return 3

    def new_empty(self, *shape: int) -> _FakeOut:
        self.allocated.append(shape)
        return _FakeOut(shape)


def test_host_floor_allocates_the_output_and_launches_the_empty_kernel_as_often_as_the_call(monkeypatch) -> None:
    from nvfp4_harness.nvfp4 import host_time
    from nvfp4_kernels import cuda_backend

    launched: list[tuple[Any, ...]] = []
    result = {"err": 0}

    def fake_launch(kernel: int, words: Any, address: int, *per_call: int) -> int:
        launched.append((kernel, len(words), address, *per_call))
        return result["err"]

    monkeypatch.setattr(cuda_backend, "launch_call", lambda: fake_launch)
    monkeypatch.setattr(cuda_backend, "raw_stream_getter", lambda: lambda index: 0x5000 + index)
    like = _FakeLike()
    floor = host_time.floor_call(None, like, 64, 17408, 2)
    out = floor()
    assert like.allocated == [(64, 17408)] and out.shape == (64, 17408)
    assert [entry[0] for entry in launched] == [cuda_backend.EMPTY_KERNEL] * 2
    assert {entry[1] for entry in launched} == {cuda_backend.ARG_WORDS}
    # a, out, workspace, counters, stream (device 3's), g
    assert {entry[3:] for entry in launched} == {(0, 0x7000, 0, 0, 0x5003, 0)}
    result["err"] = 700
    with pytest.raises(RuntimeError, match="CUDA error 700"):
        floor()
    with pytest.raises(ValueError, match="at least one launch"):
        host_time.floor_call(None, like, 1, 8, 0)


def test_host_floor_counts_kernels_not_memory_operations(monkeypatch) -> None:
    from nvfp4_harness.engine import observe
    from nvfp4_harness.nvfp4 import host_time

    names = ["Memset (Device)", "nvfp4_dequant_vec8_kernel", "Memcpy HtoD (Pageable -> Device)", "sm90_xmma_gemm"]
    monkeypatch.setattr(observe, "launched_kernels", lambda fn: (fn(), names))
    assert host_time.kernel_launches(lambda: None) == 2


def test_serial_fraction_follows_amdahl() -> None:
    from nvfp4_harness.nvfp4.multi_gpu import serial_fraction

    assert serial_fraction(2.0, 2) == pytest.approx(0.0)
    assert serial_fraction(1.0, 2) == pytest.approx(1.0)
    s = 0.3  # a suite 30% serial runs 1 / (0.3 + 0.7 / 4) times faster on 4 GPUs
    assert serial_fraction(1 / (s + (1 - s) / 4), 4) == pytest.approx(s)
    with pytest.raises(ValueError):
        serial_fraction(1.5, 1)


# --- a queued timing loop that the host leads (bench.Runner.time_us, bench_metrics.host_bound) ---


def test_host_bound_is_the_hosts_share_of_the_gpus_span() -> None:
    from nvfp4_harness.nvfp4.bench_metrics import HOST_BOUND_SHARE, host_bound

    assert not host_bound(0.0, 100.0) and not host_bound(30.0, 100.0)
    assert host_bound(HOST_BOUND_SHARE * 100.0, 100.0) and host_bound(250.0, 100.0)
    assert not host_bound(HOST_BOUND_SHARE * 100.0 - 0.1, 100.0)
    for enqueue, span in ((-1.0, 100.0), (10.0, 0.0), (10.0, -5.0)):
        with pytest.raises(ValueError):
            host_bound(enqueue, span)


class _SimulatedGpu:
    """A stream in host time: each operation starts when both it has been queued (now) and the
    previous one has ended, and lasts its duration; an event's time is when the stream reaches it."""

    def __init__(self) -> None:
        self.free_at = 0.0

    def run(self, us: float) -> None:
        self.free_at = max(self.free_at, 1e6 * time.perf_counter()) + us

    def reach(self) -> float:
        self.free_at = max(self.free_at, 1e6 * time.perf_counter())
        return self.free_at


class _FakeCudaTorch:
    """Just what Runner needs for timing on "cuda": a flush whose zero_ runs on the simulated
    stream, CUDA events stamped by it, and synchronize."""

    uint8, float32, bfloat16 = torch.uint8, torch.float32, torch.bfloat16

    def __init__(self, flush_us: float) -> None:
        gpu = self.gpu = _SimulatedGpu()

        class Flush:
            def zero_(self) -> None:
                gpu.run(flush_us)

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                self.at = None

            def record(self) -> None:
                self.at = gpu.reach()

            def elapsed_time(self, other: Any) -> float:  # ms, as torch's
                return (other.at - self.at) / 1000.0

        class Cuda:
            @staticmethod
            def synchronize() -> None:
                pass

        self._flush, self.cuda = Flush, Cuda
        Cuda.Event = Event

    def empty(self, *args: Any, **kwargs: Any) -> Any:
        return self._flush()

    def tensor(self, *args: Any, **kwargs: Any) -> Any:
        return None


@pytest.mark.parametrize(("host_us", "kernel_us", "bound"), [(200.0, 3000.0, False), (6000.0, 300.0, True)])
def test_a_loop_whose_host_falls_behind_is_recorded_as_host_bound(host_us: float, kernel_us: float,
                                                                  bound: bool) -> None:
    """With the host ahead (each call's host work shorter than the flush and kernel it follows) the
    times are the kernel's and the row says host_bound false; with host work longer than both, the
    GPU waits inside every timed region, the times grow to the host's, and the row says so."""
    fake = _FakeCudaTorch(flush_us=1000.0)

    def call() -> None:
        time.sleep(host_us / 1e6)
        fake.gpu.run(kernel_us)

    runner = bench.Runner(fake, None, reps=6, warmup=1, budget_s=1e9, started=time.monotonic(), device="cuda")
    runner.copy_us = lambda nbytes, like: 1.0  # the copy row is not what is tested here
    row = runner.measure("fused_mma", "paths", 8, 1024, 1024, lambda: "checked", call)
    assert row["host_bound"] is bound
    assert row["gpu_span_us"] > 0 and row["enqueue_us"] > 0
    if bound:  # timed again as often as allowed, and still flagged
        assert row["median_us"] > 0.8 * host_us and row["retimed"] == bench.HOST_BOUND_RETIMES
    else:
        assert kernel_us <= row["median_us"] < kernel_us + host_us and row["retimed"] == 0


def test_a_loop_the_host_stalled_is_timed_again_and_the_row_keeps_the_loop_that_stayed_ahead() -> None:
    """A host that stalls during one loop (the H100 hosts of 2026-12-05 stalled for 0.1-1 ms at random
    moments) makes that loop host-bound; the row is timed again and keeps the next loop, which
    stayed ahead, and says it was retimed once."""
    fake = _FakeCudaTorch(flush_us=1000.0)
    calls = [0]
    per_loop = 1 + 6  # warm-up and repetitions

    def call() -> None:
        calls[0] += 1
        if calls[0] <= per_loop:  # the first loop's host stalls for 5x each call's flush and kernel
            time.sleep(20000.0 / 1e6)
        fake.gpu.run(3000.0)

    # The second loop's host work is only the call's own (tens of us against 4000 of GPU work a
    # call), so it stays ahead even where this machine's scheduler delays a thread by a few ms.
    runner = bench.Runner(fake, None, reps=6, warmup=1, budget_s=1e9, started=time.monotonic(), device="cuda")
    runner.copy_us = lambda nbytes, like: 1.0
    row = runner.measure("fused_mma", "paths", 8, 1024, 1024, lambda: "checked", call)
    assert calls[0] == 2 * per_loop
    assert row["retimed"] == 1 and row["host_bound"] is False
    assert 3000.0 <= row["median_us"] < 3000.0 + 200.0


def test_host_bound_rows_get_a_section_of_their_own_in_benchmarks_md() -> None:
    """A run with rows whose GPU waited on the host lists them under their own heading, with the
    host's queueing time beside the GPU's span; a run without (or from before the flag) has none."""
    ahead = {"section": "dequant", "kernel": "dequant_vec8", "M": None, "N": 4096, "K": 4096, "median_us": 17.3,
             "enqueue_us": 2100.0, "gpu_span_us": 7000.0, "host_bound": False}
    behind = {"section": "compile", "kernel": "torch_compile_dequant", "M": None, "N": 4096, "K": 4096,
              "median_us": 75.12, "enqueue_us": 7400.0, "gpu_span_us": 7500.0, "host_bound": True}
    lines = bench_report._host_bound_lines({"rows": [ahead, behind]})
    assert "## Rows timed with the GPU waiting on the host" in lines
    assert "| compile | torch_compile_dequant | - | 4096 x 4096 | 75.12 | 7400 | 7500 |" in lines
    assert not any("dequant_vec8" in line for line in lines)
    assert bench_report._host_bound_lines({"rows": [ahead]}) == []
    assert bench_report._host_bound_lines({"rows": [{k: v for k, v in behind.items() if k != "host_bound"}]}) == []


class _StubGraphCuda:
    """Stands in for ``torch.cuda`` in :meth:`bench.Runner._replayed_baseline`: streams that do
    nothing, and a CUDAGraph whose capture runs the function once (and can be told to fail) and
    whose replay counts."""

    def __init__(self, fail: bool) -> None:
        self.fail, self.replays, self.captures = fail, 0, 0
        stub = self

        class Graph:
            def replay(self) -> None:
                stub.replays += 1

        class Capture:
            def __init__(self, graph: Graph) -> None:
                pass

            def __enter__(self) -> None:
                stub.captures += 1
                if stub.fail:
                    raise RuntimeError("operation not permitted when stream is capturing")

            def __exit__(self, *exc: object) -> None:
                return None

        self.CUDAGraph, self.graph = Graph, Capture

    class _Stream:
        def wait_stream(self, other: object) -> None:
            return None

    def Stream(self) -> _Stream:  # noqa: N802 - torch.cuda's name
        return self._Stream()

    def current_stream(self) -> _Stream:
        return self._Stream()

    def stream(self, s: object) -> contextlib.nullcontext[None]:
        return contextlib.nullcontext()


@pytest.mark.parametrize("fail", [False, True])
def test_the_compiled_baseline_is_timed_from_a_graph_replay_and_keeps_its_eager_time(fail: bool) -> None:
    """The torch.compile row times the compiled kernels by graph replay (its eager calls were
    host-bound on the small shapes), keeps the eager loop's median in the row, and falls back to the
    eager loop, saying why, when capture fails."""
    runner = bench.Runner(torch, ReferenceBackend(), reps=3, warmup=1, budget_s=1e9, started=time.monotonic(),
                          device="cpu", compile_backend="aot_eager", flush_bytes=1 << 10)
    stub = _StubGraphCuda(fail)
    runner.torch = types.SimpleNamespace(cuda=stub)
    calls: list[int] = []

    def run() -> None:
        calls.append(1)

    timed, extra, mode = runner._replayed_baseline(run, "torch.compile (inductor, dynamic=False)")
    assert calls and extra["eager_median_us"] > 0  # the eager loop was timed first
    timed_loop = runner.warmup + runner.reps
    assert stub.captures == 1
    before = len(calls)
    timed()
    if fail:  # the eager loop, one side-stream warm-up, no captured call; the row times eager calls
        assert before == timed_loop + 1 and timed is run and len(calls) == before + 1 and stub.replays == 0
        assert mode.startswith("torch.compile (inductor, dynamic=False), eager (CUDA graph capture failed: "
                               "RuntimeError: operation not permitted")
    else:  # ... and the captured call; timing replays the graph without calling Python again
        assert before == timed_loop + 2 and len(calls) == before and stub.replays == 1
        assert mode == "torch.compile (inductor, dynamic=False), replayed from a CUDA graph"


def test_the_dequant_table_shows_a_replayed_baselines_eager_time_and_flag() -> None:
    base = {"section": "compile", "kernel": "torch_compile_dequant", "M": None, "N": 4096, "K": 4096,
            "median_us": 16.2, "p10_us": 16.0, "p90_us": 16.5, "bytes": 43_000_000, "copy_us": 18.0}
    replayed = {**base, "eager_median_us": 75.12, "eager_host_bound": True}
    assert bench_report._dequant_label(base) == "torch.compile LUT"
    assert bench_report._dequant_label(replayed) == "torch.compile LUT (graph replay; eager calls 75.12 us, host-bound)"
    assert bench_report._dequant_label({**replayed, "eager_host_bound": False}).endswith("eager calls 75.12 us)")
    table = "\n".join(bench_report._dequant_lines({"rows": [replayed]}))
    assert "| 4096 x 4096 | torch.compile LUT (graph replay; eager calls 75.12 us, host-bound) | 16.20 |" in table


def test_each_matmul_row_is_prepared_once_and_its_repetitions_are_launches_alone(tmp_path: Path) -> None:
    """The fused rows' timed calls are the backend's prepared launches (cuda_backend.prepare_*):
    the checks run once per row, when the row is verified, and every warm-up and timed repetition
    only launches, so a slow host's checks cannot put the queued loop behind the GPU (the
    twenty-fourth session's H100 run on a slower host timed host work that way)."""
    backend = ReferenceBackend()
    results, _ = _dry_run(tmp_path, backend, sections=("gemv", "paths"))
    assert results["failures"] == []
    rows = [r for r in results["rows"] if r["kernel"] in ("gemv", "fused_mma", "fused_mma_tiled", "fused_wgmma",
                                                           "fused_wgmma_tiled")]
    # one preparation a row, in the rows' order, for each kind of call
    kinds = {"gemv": "gemv", "fused_mma": "fused_mma", "fused_mma_tiled": "fused_mma", "fused_wgmma": "fused_wgmma",
             "fused_wgmma_tiled": "fused_wgmma"}
    assert backend.prepared == [kinds[r["kernel"]] for r in rows]
    # the verifying call, the warm-up and the timed repetitions, each one launch (reps=3, warmup=1)
    assert set(backend.launched.values()) == {1 + 1 + 3}


@pytest.mark.parametrize("raises", [False, True])
def test_the_timing_loop_runs_without_the_garbage_collector_and_restores_it(raises: bool) -> None:
    """A collection pass inside a queued loop would stall the host mid-repetition; time_us turns the
    collector off for the loop and back on after it, also when the timed call raises."""
    import gc

    runner = bench.Runner(torch, ReferenceBackend(), reps=3, warmup=1, budget_s=1e9, started=time.monotonic(),
                          device="cpu", flush_bytes=1 << 10)
    seen: list[bool] = []

    def call() -> None:
        seen.append(gc.isenabled())
        if raises and len(seen) == 3:
            raise RuntimeError("launch failed")

    assert gc.isenabled()
    if raises:
        with pytest.raises(RuntimeError, match="launch failed"):
            runner.time_us(call)
    else:
        assert len(runner.time_us(call)) == 3
    assert seen and not any(seen) and gc.isenabled()
    gc.disable()
    try:  # a caller that had it off keeps it off
        runner.time_us(lambda: None)
        assert not gc.isenabled()
    finally:
        gc.enable()
