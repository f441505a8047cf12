"""A toy operator with three code paths, instrumented for the dispatch-coverage harness.

It is named ``kernels`` on purpose: installing nvfp4-harness adds no top-level ``kernels``
module, so a user's own package of that name is the one Python imports.
"""

from kernels.ops import toy_matmul

__all__ = ["toy_matmul"]
