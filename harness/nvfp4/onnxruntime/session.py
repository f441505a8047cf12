"""ONNX Runtime sessions on the CUDA execution provider, run with I/O bound on the device.

Why this shape:

* **Sessions are cached per key** (dtype, block size, bias, rank of A): building one takes
  hundreds of milliseconds (graph resolution, CUDA EP and cuBLAS set-up), and the graph keeps N,
  K and M symbolic (:mod:`.graph`), so one session serves every shape of its key. Each
  creation's time is kept (:attr:`OrtRuntime.creation_s`).
* **I/O is bound on the device** (``io_binding.bind_input(name, "cuda", index, element_type,
  shape, data_ptr)`` with torch CUDA tensors, element types as ONNX ints so bfloat16 works):
  no host copy runs inside the call, so the profiler sees the op's own kernels and nothing else.
* **No CPU fallback**: ``session.disable_cpu_ep_fallback`` makes session creation fail when the
  node cannot run on the CUDA EP, and the session's providers are checked, so a silent CPU run
  can never be observed as ONNX Runtime's CUDA dispatch.
* ONNX Runtime runs on its own stream; a call synchronizes the device before the run (the
  inputs torch wrote are complete) and after it (its outputs are, for whatever reads them next).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from nvfp4_harness.nvfp4.onnxruntime.graph import OUTPUT_NAME, model_bytes, tensor_type
from nvfp4_harness.nvfp4.onnxruntime.model import ORT_VERSION

PROVIDER = "CUDAExecutionProvider"


class OnnxRuntimeUnavailable(RuntimeError):
    """onnxruntime-gpu (with its CUDA execution provider) or a GPU is missing."""


def require_onnxruntime() -> Any:
    """The ``onnxruntime`` module with a CUDA execution provider, or :class:`OnnxRuntimeUnavailable`
    saying what to install."""
    try:
        import onnxruntime as ort
    except ImportError as exc:
        raise OnnxRuntimeUnavailable(
            f"onnxruntime is not installed ({exc}); install the extra: pip install -e \".[onnxruntime]\" "
            f"(onnxruntime-gpu {ORT_VERSION}, not the CPU-only onnxruntime)") from exc
    available = list(ort.get_available_providers())
    if PROVIDER not in available:
        raise OnnxRuntimeUnavailable(
            f"onnxruntime {getattr(ort, '__version__', '?')} has no {PROVIDER} (available: {', '.join(available)}); "
            f"install onnxruntime-gpu {ORT_VERSION} instead of onnxruntime")
    return ort


@dataclass(frozen=True)
class SessionKey:
    """What a session is built for; everything else about a call is bound at run time."""

    dtype: str
    block_size: int
    bias: bool
    rank: int = 2

    @property
    def label(self) -> str:
        return f"{self.dtype}/bs{self.block_size}{'/bias' if self.bias else ''}/rank{self.rank}"


class OrtRuntime:
    """onnxruntime, checked once, and its sessions cached per :class:`SessionKey`."""

    def __init__(self, torch: Any, device_index: int | None = None) -> None:
        self.ort = require_onnxruntime()
        self.torch = torch
        self.device_index = torch.cuda.current_device() if device_index is None else device_index
        self.device = torch.device("cuda", self.device_index)
        self.version = str(getattr(self.ort, "__version__", "unknown"))
        self._sessions: dict[SessionKey, Any] = {}
        #: seconds each session took to build, by key label
        self.creation_s: dict[str, float] = {}

    def session(self, key: SessionKey) -> Any:
        """The cached session for ``key`` (built on first use)."""
        found = self._sessions.get(key)
        if found is not None:
            return found
        ort = self.ort
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        options.log_severity_level = 3
        options.intra_op_num_threads = 1  # the op runs on the GPU: no CPU thread pool per session
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        provider_options = {"device_id": str(self.device_index), "arena_extend_strategy": "kSameAsRequested"}
        started = time.perf_counter()
        session = ort.InferenceSession(model_bytes(key.dtype, key.block_size, key.bias, key.rank),
                                       sess_options=options, providers=[(PROVIDER, provider_options)])
        self.creation_s[key.label] = round(time.perf_counter() - started, 3)
        if session.get_providers()[:1] != [PROVIDER]:
            raise OnnxRuntimeUnavailable(f"the session for {key.label} runs on {session.get_providers()}, not "
                                         f"{PROVIDER}")
        self._sessions[key] = session
        return session

    def bind(self, a: Any, b: Any, weight_scale: Any, weight_scale_2: Any, block_size: int,
             bias: Any | None = None) -> BoundCall:
        """A call of the op on these device tensors, ready to run (see :class:`BoundCall`)."""
        dtype = str(a.dtype).removeprefix("torch.")
        key = SessionKey(dtype, int(block_size), bias is not None, a.dim())
        return BoundCall(self, key, a, b, weight_scale, weight_scale_2, bias)


class BoundCall:
    """One prepared call: its I/O binding and output buffer; ``call()`` runs it and returns Y.

    The output is poisoned with a NaN pattern no kernel writes here (0x7FC7), so an element
    the op leaves unwritten shows. Zero-size tensors are bound to a small live buffer (ONNX
    Runtime refuses a null output pointer).
    """

    POISON = 0x7FC7

    def __init__(self, runtime: OrtRuntime, key: SessionKey, a: Any, b: Any, weight_scale: Any,
                 weight_scale_2: Any, bias: Any | None) -> None:
        torch = runtime.torch
        self.runtime, self.key = runtime, key
        self.session = runtime.session(key)
        n = int(b.shape[0])
        self.out = torch.empty(tuple(a.shape[:-1]) + (n,), dtype=a.dtype, device=runtime.device)
        if self.out.numel():
            self.out.view(torch.int16).fill_(self.POISON)
        self._spare = torch.empty(64, dtype=torch.uint8, device=runtime.device)
        self._keep = [a, b, weight_scale, weight_scale_2, bias, self.out]
        self.binding = self.session.io_binding()
        inputs = [("A", a, key.dtype), ("B", b, "uint8"), ("weight_scale", weight_scale, "uint8"),
                  ("weight_scale_2", weight_scale_2.reshape(1), "float32")]
        if bias is not None:
            inputs.append(("bias", bias, key.dtype))
        for name, tensor, dtype in inputs:
            self._check(name, tensor)
            self.binding.bind_input(name, "cuda", runtime.device_index, tensor_type(dtype), list(tensor.shape),
                                    self._pointer(tensor))
        self.binding.bind_output(OUTPUT_NAME, "cuda", runtime.device_index, tensor_type(key.dtype),
                                 list(self.out.shape), self._pointer(self.out))

    def _check(self, name: str, tensor: Any) -> None:
        if not tensor.is_cuda or not tensor.is_contiguous():
            raise ValueError(f"{name} must be a contiguous CUDA tensor to be bound on the device")

    def _pointer(self, tensor: Any) -> int:
        return int(tensor.data_ptr()) if tensor.numel() else int(self._spare.data_ptr())

    def __call__(self) -> Any:
        torch = self.runtime.torch
        torch.cuda.synchronize()
        self.session.run_with_iobinding(self.binding)
        torch.cuda.synchronize()
        return self.out
