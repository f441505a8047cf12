"""CPU-CI tests of what the eager fast path (nvfp4_kernels.fast) compares to tell whether a
plan still fits its weights: every in-place change of a weight tensor, of its data or of its
view, moves the version counters it reads; inference tensors, which keep none, are compared by
shape. (The GPU suite test_fast_path.py checks the re-planning end to end.)"""

from __future__ import annotations

import pytest
from nvfp4_kernels import fast

torch = pytest.importorskip("torch")


def weights():
    return (torch.zeros(8, 4, dtype=torch.uint8), torch.zeros(8, 1, dtype=torch.uint8),
            torch.zeros(8, dtype=torch.bfloat16))


@pytest.mark.parametrize("which", [0, 1, 2])
@pytest.mark.parametrize("change", ["resize_(4, 4)", "unsqueeze_(0)", "t_()", "fill_(3)", "as_strided_((2, 2), (1, 2))",
                                    "set_(torch.zeros_like(x))"])
def test_every_in_place_change_moves_the_versions(which, change):
    tensors = weights()
    if which == 2:
        change = change.replace("t_()", "neg_()").replace("(4, 4)", "(4,)").replace("(2, 2), (1, 2)", "(2,), (2,)")
    before = fast.weight_versions(*tensors)
    x = tensors[which]
    eval(f"x.{change}", {"torch": torch, "x": x})
    assert fast.weight_versions(*tensors) != before


def test_reading_does_not_move_the_versions():
    tensors = weights()
    before = fast.weight_versions(*tensors)
    tensors[0].sum(), tensors[1].data_ptr(), tensors[2].clone()
    assert fast.weight_versions(*tensors) == before
    assert fast.weight_versions(tensors[0], tensors[1], None) == before[:2] + (-1,)


def test_inference_tensors_have_no_versions_and_are_compared_by_shape():
    with torch.inference_mode():
        b, scales, bias = weights()
    assert fast.weight_versions(b, scales, bias) is None
    assert fast.weight_versions(torch.zeros(8, 4, dtype=torch.uint8), scales, None) is None  # one is enough
    before = fast.weight_shapes(b, scales, bias)
    with torch.inference_mode():
        b.resize_(4, 4)
    assert fast.weight_shapes(b, scales, bias) != before
    assert fast.weight_shapes(b, scales, None)[2] is None
