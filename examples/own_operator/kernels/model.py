"""The toy operator's dispatch, declared as data through the harness's public API.

Three paths in preference order; each Guard records the line it is written on, which is the
line a coverage report points at when one of its sides was never taken.
"""

from nvfp4_harness.model import DispatchModel, Guard, PathSpec

#: the largest M the row-at-a-time path takes
SMALL_M = 4

MODEL = DispatchModel("toy_matmul", [
    PathSpec("small_m", "one output row at a time, for decode-sized M", guards=[
        Guard("m_small", f"M <= {SMALL_M}", lambda p, device, policy: p["m"] <= SMALL_M,
              detail=lambda p, device, policy: f"M={p['m']}"),
    ]),
    PathSpec("blocked", "the K dimension in blocks of 8", guards=[
        Guard("k_mod_8", "K % 8 == 0", lambda p, device, policy: p["k"] % 8 == 0,
              detail=lambda p, device, policy: f"K={p['k']}, K % 8 = {p['k'] % 8}"),
    ]),
    PathSpec("generic", "numpy's matmul, any shape"),
], summary="a toy matmul with three paths")


def dispatch_init(reg):
    """Called by the pytest plugin for ``dispatch_models = kernels.model``."""
    reg.add_model(MODEL)
