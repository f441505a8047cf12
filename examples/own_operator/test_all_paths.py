"""Shapes chosen so every path of the toy operator is taken and every guard is seen both ways:
``pytest test_all_paths.py --dispatch-require=all-reachable`` passes."""

import numpy as np
import pytest

from kernels import toy_matmul

CASES = [
    (2, 16, 3),   # small_m; m_small True, k_mod_8 True
    (2, 12, 3),   # small_m; k_mod_8 False
    (9, 16, 5),   # blocked: m_small False, k_mod_8 True
    (9, 12, 5),   # generic: both guards False
]


@pytest.mark.parametrize("m,k,n", CASES)
def test_matches_numpy(m, k, n):
    rng = np.random.default_rng(m * 100 + k)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    np.testing.assert_allclose(toy_matmul(a, b), a @ b, rtol=1e-5, atol=1e-5)
