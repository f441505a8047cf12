"""The whole-wave model of scripts/wave_model.py and the table in benchmarks/NOTES.md
(twenty-seventh session) that it produced: the committed figures must be the script's, and the
model must behave as its docstring says on cases worked by hand."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wave_model():
    spec = importlib.util.spec_from_file_location("wave_model", ROOT / "scripts" / "wave_model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_hand_worked_plans(wave_model) -> None:
    # 136 tiles x 3 splits = 408 blocks on 264 slots: 2 waves of 14 steps against 5440 / 264
    assert wave_model.efficiency(17408, 5120, 3, 132, 2) == pytest.approx(5440 / 264 / 28)
    # 40 tiles x 6 splits = 240 blocks on 264 slots: one wave of 23 steps
    assert wave_model.efficiency(5120, 17408, 6, 132, 2) == pytest.approx(5440 / 264 / 23)
    # one tile, one split, one slot: nothing idles
    assert wave_model.efficiency(128, 1280, 1, 1, 1) == 1.0
    # 4 splits of 10 steps ask for ranges of 3, which make 4 non-empty ones
    assert wave_model.nonempty_splits(10, 4) == 4 and wave_model.nonempty_splits(8, 3) == 3
    assert wave_model.partial_megabytes(17408, 64, 1) == 0.0
    assert wave_model.partial_megabytes(5120, 64, 6) == pytest.approx(7.86432)
    with pytest.raises(ValueError):
        wave_model.efficiency(17408, 5000, 3, 132, 2)


def test_the_notes_table_is_the_models(wave_model) -> None:
    notes = (ROOT / "benchmarks" / "NOTES.md").read_text()
    section = notes[notes.index("**Plans and waves, counted**"):]
    rows = re.findall(r"^\| (\d+)[^|]*\|(.*)$", section[:section.index("\n\n", section.index("| splits"))], re.M)
    assert len(rows) == 6, rows
    for splits, rest in rows:
        cells = [c.strip() for c in rest.split("|")[:6]]
        for (n, k), (two, three, partials) in zip(((17408, 5120), (5120, 17408)), (cells[:3], cells[3:]),
                                                  strict=True):
            if not two:  # a row the table leaves empty for this shape
                continue
            s = int(splits)
            assert float(two) == round(wave_model.efficiency(n, k, s, 132, 2), 2), (s, n, two)
            assert float(three) == round(wave_model.efficiency(n, k, s, 132, 3), 2), (s, n, three)
            assert partials == f"{wave_model.partial_megabytes(n, 64, s):.0f} MB", (s, n, partials)
