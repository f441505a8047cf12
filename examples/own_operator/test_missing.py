"""A decode-only suite, the shape of the production lesson behind the harness: every case has
M <= 4, so only the small_m path ever runs. ``pytest test_missing.py
--dispatch-require=all-reachable`` fails and names what was never taken."""

import numpy as np
import pytest

from kernels import toy_matmul


@pytest.mark.parametrize("m", [1, 2, 3, 4])
def test_decode_sizes(m):
    rng = np.random.default_rng(m)
    a = rng.standard_normal((m, 16)).astype(np.float32)
    b = rng.standard_normal((16, 4)).astype(np.float32)
    np.testing.assert_allclose(toy_matmul(a, b), a @ b, rtol=1e-5, atol=1e-5)
