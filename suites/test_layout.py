"""The tile-contiguous weight layout (nvfp4_kernels.layout): the transform, its inverse, its checks,
and the registry that hands a weight's tiled copy to the fused path.

The transform must put row r's packed byte c (scale byte j) of every K step at the place the
fused kernel's tiled loader reads it: [r // 64, c // 64, r % 64, c % 64] (scales: [.., j // 8, ..,
j % 8]), and inside every 4-byte word of codes move code i's sign bit (bit 4 i + 3) to bit 8 i + 7
(i < 4) or 8 (i - 4) + 3 (i >= 4), the magnitudes staying. Here that is checked element by element
against loops written from that definition, code by code for the signs, for numpy and torch,
with rows that do not fill the last tile; the GPU suite (test_layout_gpu.py) then shows the
kernel's output bits equal on both layouts, and suites/test_fused_table_decode.py the kernel's
decode of placed signs bit-exact for every code at every position.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
from nvfp4_kernels import layout

torch = pytest.importorskip("torch")

SHAPES = [(1, 128), (63, 256), (64, 128), (65, 384), (200, 1024), (130, 640)]


def _random(n: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 256, (n, k // 2), dtype=np.uint8), rng.integers(0, 256, (n, k // 16), dtype=np.uint8))


def _tiled_by_loops(packed: np.ndarray, scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The layout's definition, one byte at a time."""
    n, half_k = packed.shape
    tiles, steps = -(-n // 64), half_k // 64
    pt = np.zeros((tiles, steps, 64, 64), np.uint8)
    st = np.zeros((tiles, steps, 64, 8), np.uint8)
    for r in range(n):
        for c in range(half_k):
            pt[r // 64, c // 64, r % 64, c % 64] = packed[r, c]
        for j in range(scales.shape[1]):
            st[r // 64, j // 8, r % 64, j % 8] = scales[r, j]
    words = pt.reshape(-1, 4)
    for w in range(words.shape[0]):
        word = int.from_bytes(bytes(words[w]), "little")
        words[w] = _placed_word([(word >> (4 * i)) & 0xF for i in range(8)])
    return pt, st


def _placed_word(codes: list[int]) -> np.ndarray:
    """Eight codes (code i at nibble i) -> the 4 bytes of their word with the signs placed: code
    i's magnitude stays in nibble i, its sign goes to bit 8 i + 7 (i < 4) or 8 (i - 4) + 3."""
    placed = 0
    for i, code in enumerate(codes):
        placed |= (code & 7) << (4 * i)
        placed |= (code >> 3) << (8 * i + 7 if i < 4 else 8 * (i - 4) + 3)
    return np.frombuffer(placed.to_bytes(4, "little"), np.uint8)


@pytest.mark.parametrize(("n", "k"), SHAPES)
def test_tile_weights_places_every_byte_where_the_definition_says(n: int, k: int) -> None:
    packed, scales = _random(n, k, n * 7 + k)
    want_p, want_s = _tiled_by_loops(packed, scales)
    got_p, got_s = layout.tile_weights(packed, scales)
    assert got_p.shape == layout.tiled_shapes(n, k)[0] and got_s.shape == layout.tiled_shapes(n, k)[1]
    assert np.array_equal(got_p, want_p) and np.array_equal(got_s, want_s)
    t_p, t_s = layout.tile_weights(torch.from_numpy(packed), torch.from_numpy(scales))
    assert t_p.is_contiguous() and t_s.is_contiguous()
    assert np.array_equal(t_p.numpy(), want_p) and np.array_equal(t_s.numpy(), want_s)
    layout.check_tiled(t_p, t_s, n, k)


@pytest.mark.parametrize(("n", "k"), SHAPES)
def test_untile_weights_inverts_the_transform(n: int, k: int) -> None:
    packed, scales = _random(n, k, 3)
    back_p, back_s = layout.untile_weights(*layout.tile_weights(packed, scales), n)
    assert np.array_equal(back_p, packed) and np.array_equal(back_s, scales)


def test_place_signs_moves_only_the_sign_bits_and_unplace_signs_inverts_it() -> None:
    # every byte value at every position of a word, numpy and torch alike
    values = np.arange(256, dtype=np.uint8)
    words = np.stack([np.roll(values, 61 * j) for j in range(4)], axis=-1).reshape(-1)
    placed = layout.place_signs(words)
    assert np.array_equal(placed & 0x77, words & 0x77)  # the magnitudes stay where they are
    assert np.array_equal(layout.unplace_signs(placed), words)
    assert np.array_equal(layout.place_signs(torch.from_numpy(words)).numpy(), placed)
    assert np.array_equal(layout.unplace_signs(torch.from_numpy(placed)).numpy(), words)
    # code 0's sign (bit 3 of byte 0) goes to bit 7 of byte 0, code 4's (bit 3 of byte 2) to bit 3
    one = np.zeros(4, np.uint8)
    one[0] = 0x08
    assert list(layout.place_signs(one)) == [0x80, 0, 0, 0]
    one[:] = [0, 0, 0x08, 0]
    assert list(layout.place_signs(one)) == [0x08, 0, 0, 0]
    with pytest.raises(ValueError, match="multiple of 4"):
        layout.place_signs(words[:6])
    with pytest.raises(ValueError, match="uint8"):
        layout.unplace_signs(words.astype(np.int16))


def test_bad_weights_are_refused_with_the_fix() -> None:
    packed, scales = _random(64, 256, 1)
    with pytest.raises(ValueError, match="K % 128 == 0"):
        layout.tile_weights(packed[:, :96], scales[:, :12])
    with pytest.raises(ValueError, match=r"scales must be \[N, K/16\]"):
        layout.tile_weights(packed, scales[:, :8])
    with pytest.raises(ValueError, match="2-D"):
        layout.tile_weights(packed.reshape(-1), scales)
    p, s = layout.tile_weights(packed, scales)
    with pytest.raises(ValueError, match=r"tiled packed must be \[1, 2, 64, 64\]"):
        layout.check_tiled(p[:, :1], s, 64, 256)
    with pytest.raises(TypeError, match="uint8"):
        layout.check_tiled(p.astype(np.int16), s, 64, 256)
    with pytest.raises(ValueError, match="contiguous"):
        t = torch.from_numpy(p).transpose(2, 3)
        layout.check_tiled(t, torch.from_numpy(s), 64, 256)


def test_register_hands_out_the_tiled_copy_while_the_weight_is_unchanged() -> None:
    packed, scales = (torch.from_numpy(x) for x in _random(100, 256, 5))
    other_scales = scales.clone()
    assert layout.registered(packed, scales) is None
    layout.register(packed, scales)
    got = layout.registered(packed, scales)
    assert got is not None
    want_p, want_s = layout.tile_weights(packed, scales)
    assert torch.equal(got.packed, want_p) and torch.equal(got.scales, want_s)
    assert got.scale_bytes == layout.scale_byte_range(scales)
    assert layout.registered(packed, other_scales) is None  # the copy belongs to the pair it was made from
    assert layout.registered(packed.clone(), scales) is None
    packed.add_(1)  # changed in place: the copy is stale and dropped
    assert layout.registered(packed, scales) is None
    layout.register(packed, scales)  # registering again tiles the new values
    assert torch.equal(layout.registered(packed, scales)[0], layout.tile_weights(packed, scales)[0])
    assert layout.unregister(packed) is True
    assert layout.unregister(packed) is False
    assert layout.registered(packed, scales) is None


def test_a_registered_weight_does_not_outlive_its_tensor() -> None:
    packed, scales = (torch.from_numpy(x) for x in _random(64, 128, 6))
    layout.register(packed, scales)
    before = len(layout._registry)
    del packed
    gc.collect()
    assert len(layout._registry) == before - 1


def test_register_refuses_what_the_operator_would() -> None:
    packed, scales = (torch.from_numpy(x) for x in _random(64, 128, 7))
    with pytest.raises(TypeError, match="torch tensors"):
        layout.register(packed.numpy(), scales)
    with pytest.raises(TypeError, match="uint8"):
        layout.register(packed.to(torch.int16), scales)
    with pytest.raises(ValueError, match="K % 128"):
        layout.register(packed[:, :32], scales[:, :4])


def _range_by_loop(scales: np.ndarray) -> int:
    """The range's definition, byte by byte: lo | hi << 8 when every byte is 0x01..0x7E, else 0."""
    flat = [int(v) for v in scales.ravel()]
    if not flat or any(not 0x01 <= v <= 0x7E for v in flat):
        return 0
    return min(flat) | max(flat) << 8


@pytest.mark.parametrize("seed", range(6))
def test_scale_byte_range_is_the_range_of_ordinary_bytes(seed: int) -> None:
    rng = np.random.default_rng(seed)
    lo = int(rng.integers(0x01, 0x7F))
    hi = int(rng.integers(lo, 0x7F))
    scales = rng.integers(lo, hi + 1, (int(rng.integers(1, 70)), 8 * int(rng.integers(1, 5))), dtype=np.uint8)
    for x in (scales, torch.from_numpy(scales)):
        assert layout.scale_byte_range(x) == _range_by_loop(scales) != 0
    # one byte that is not a positive, finite, non-zero E4M3 value leaves the range unknown
    for special in (0x00, 0x7F, 0x80, 0xC3, 0xFF):
        spoiled = scales.copy()
        spoiled.flat[int(rng.integers(spoiled.size))] = special
        for x in (spoiled, torch.from_numpy(spoiled)):
            assert layout.scale_byte_range(x) == _range_by_loop(spoiled) == 0


def test_scale_byte_range_edges_and_bad_input() -> None:
    assert layout.scale_byte_range(np.full((3, 8), 0x01, np.uint8)) == 0x0101
    assert layout.scale_byte_range(np.full((3, 8), 0x7E, np.uint8)) == 0x7E7E
    assert layout.scale_byte_range(np.zeros((0, 8), np.uint8)) == 0
    with pytest.raises(ValueError, match="2-D"):
        layout.scale_byte_range(np.ones(8, np.uint8))


def test_check_scale_bytes_accepts_only_what_scale_byte_range_gives() -> None:
    for good in (0, 0x0101, 0x7E01, 0x7E7E, 0x4028):
        assert layout.check_scale_bytes(good) == good
    for bad in (0x0102, 0x7F01, 0x0100, 0x10101, -1, 0x01, True, 1.5, "0x7e01"):
        with pytest.raises(ValueError, match="scale_bytes"):
            layout.check_scale_bytes(bad)


def test_tiled_weight_is_the_tiled_copy_with_the_scale_range() -> None:
    packed, scales = _random(130, 640, 9)
    scales = np.clip(scales, 0x20, 0x50)
    tiled = layout.tiled_weight(packed, scales)
    want_p, want_s = layout.tile_weights(packed, scales)
    assert np.array_equal(tiled.packed, want_p) and np.array_equal(tiled.scales, want_s)
    assert tiled.scale_bytes == _range_by_loop(scales) == int(scales.min()) | int(scales.max()) << 8


def test_register_keeps_one_copy_for_the_paths_it_is_told() -> None:
    packed, scales = (torch.from_numpy(x) for x in _random(130, 384, 8))
    assert layout.default_paths(packed.device) == ("fused_mma",)  # fused_wgmma's kernel needs sm_90
    want_t = layout.tile_weights(packed, scales)
    one_copy = 192 * 192 + 192 * 24  # 130 rows pad to 192: the codes (192 x 192 bytes) and the scales (192 x 24)
    try:
        got = layout.register(packed, scales, paths=("fused_wgmma", "fused_mma"))
        assert got == layout.Registration(("fused_mma", "fused_wgmma"), one_copy)
        mma, wgmma = layout.registered(packed, scales), layout.registered(packed, scales, "fused_wgmma")
        assert torch.equal(mma.packed, want_t[0]) and wgmma.packed is mma.packed  # both paths read one copy
        assert wgmma.scales is mma.scales and torch.equal(mma.scales, want_t[1])
        assert wgmma.scale_bytes == mma.scale_bytes == layout.scale_byte_range(scales)
        assert layout.register(packed, scales, paths=["fused_wgmma"]) == layout.Registration(
            ("fused_wgmma",), one_copy)  # registering again replaces the copy and its paths
        assert layout.registered(packed, scales) is None
        assert torch.equal(layout.registered(packed, scales, "fused_wgmma").packed, want_t[0])
        layout.register(packed, scales)  # the default on the CPU: fused_mma only
        assert layout.registered(packed, scales, "fused_wgmma") is None
        assert torch.equal(layout.registered(packed, scales).packed, want_t[0])
        packed.add_(1)  # changed in place: the copy is stale
        assert layout.registered(packed, scales) is None
    finally:
        layout.unregister(packed)
    with pytest.raises(ValueError, match=r"paths must name one or more of \['fused_mma', 'fused_wgmma'\]"):
        layout.register(packed, scales, paths=("gemv",))
    with pytest.raises(ValueError, match="paths must name one or more"):
        layout.register(packed, scales, paths=())
    with pytest.raises(ValueError, match="path must be one of"):
        layout.registered(packed, scales, "prefill_vec8")
