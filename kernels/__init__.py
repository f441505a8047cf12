"""The NVFP4 weight-only matmul operator under test: format, paths, dispatcher, backends.

This package never imports :mod:`harness`; the harness observes it through listeners.
"""

from nvfp4_kernels.dispatch import (
    DispatchEvent,
    add_listener,
    current_policy,
    dequantize,
    nvfp4_matmul,
    policy_scope,
    remove_listener,
)
from nvfp4_kernels.paths import GUARDS, PATH_ORDER, PATHS, DeviceCaps, Policy, Problem, select_path

__all__ = [
    "DeviceCaps", "DispatchEvent", "GUARDS", "PATHS", "PATH_ORDER", "Policy", "Problem",
    "add_listener", "current_policy", "dequantize", "nvfp4_matmul", "policy_scope",
    "remove_listener", "select_path",
]
