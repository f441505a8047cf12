"""The NVFP4 weight-only matmul operator under test: format, declared dispatch model,
dispatcher, CPU and CUDA backends.

This package uses only the dispatch-model API of the harness (:mod:`nvfp4_harness.model`),
as any user's operator would; the harness observes it through that API's listeners.
"""

from nvfp4_harness.model import DeviceCaps, DispatchEvent, add_listener, remove_listener
from nvfp4_kernels import layout  # the opt-in tile-contiguous weight layout (layout.register)
from nvfp4_kernels.dispatch import cuda_device_caps, current_policy, dequantize, nvfp4_matmul, policy_scope
from nvfp4_kernels.model import MODEL, PATH_NAMES, Policy, Problem

__all__ = [
    "MODEL", "PATH_NAMES", "DeviceCaps", "DispatchEvent", "Policy", "Problem", "add_listener",
    "cuda_device_caps", "current_policy", "dequantize", "layout", "nvfp4_matmul", "policy_scope", "remove_listener",
]
