"""The single-node ONNX model that runs ``com.microsoft::MatMulBlockQuantizedFp4Weight``.

Built with the ``onnx`` helper API (the ``[onnxruntime]`` extra). The inputs follow the op's
schema and kernel registration (``ONNX_OPERATOR_KERNEL_EX`` in
``onnxruntime/contrib_ops/cuda/math/matmul_block_scaled_fp4.cc``: T = float16 | bfloat16,
T1 = T2 = uint8, T3 = float):

====  ==================  ==========  ==========================================
slot  name                type        shape
====  ==================  ==========  ==========================================
0     ``A``               T           [M, K] (rank 2) or [D0, D1, K] (rank 3)
1     ``B``               uint8       [N, K/2] packed E2M1, low nibble first
2     ``weight_scale``    uint8       [N, ceil(K / block_size)] raw E4M3FN bytes
3     ``weight_scale_2``  float       [1] global scale
4     ``input_scale``     (skipped)   only the opt-in native SM120 path reads it
5     ``bias``            T           [N], optional
====  ==================  ==========  ==========================================

Attribute ``block_size`` (int, default 16). N and K are not attributes in 1.31: the kernel
derives them from B's shape at run time, so the graph keeps every dimension symbolic and one
session serves every shape of a (dtype, block_size, bias, rank) key.
"""

from __future__ import annotations

from typing import Any

from nvfp4_harness.nvfp4.onnxruntime.model import OP_DOMAIN, OP_TYPE

#: ``default`` ONNX opset and IR version of the model (ONNX Runtime 1.31 reads both)
ONNX_OPSET = 21
IR_VERSION = 10
INPUT_NAMES = ("A", "B", "weight_scale", "weight_scale_2", "bias")
OUTPUT_NAME = "Y"


def require_onnx() -> Any:
    """The ``onnx`` module, or an ImportError that says how to get it."""
    try:
        import onnx
    except ImportError as exc:
        raise ImportError("building the ONNX model needs the `onnx` package: pip install -e \".[onnxruntime]\" "
                          f"(or pip install onnx) ({exc})") from exc
    return onnx


def tensor_type(dtype: str) -> int:
    """The ``onnx.TensorProto`` element type of ``"float16"``/``"bfloat16"``/``"uint8"``/``"float32"``
    (plain ints, so this works without onnx: they are fixed by the ONNX standard)."""
    types = {"float32": 1, "uint8": 2, "float16": 10, "bfloat16": 16}
    if dtype not in types:
        raise ValueError(f"no ONNX element type for {dtype!r}; known: {', '.join(types)}")
    return types[dtype]


def build_model(dtype: str, block_size: int, bias: bool, rank: int = 2) -> Any:
    """The ``onnx.ModelProto`` of one ``MatMulBlockQuantizedFp4Weight`` node.

    ``rank`` is A's rank (2 or 3): leading dimensions are symbolic, so rank 3 checks that ONNX
    Runtime flattens them into M as its MatMul helper does.
    """
    onnx = require_onnx()
    helper = onnx.helper
    if rank not in (2, 3):
        raise ValueError(f"rank must be 2 or 3, got {rank}")
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size <= 0:
        raise ValueError(f"block_size must be a positive int, got {block_size!r}")
    elem = tensor_type(dtype)
    lead = ["D0", "D1"] if rank == 3 else ["M"]
    inputs = [
        helper.make_tensor_value_info("A", elem, [*lead, "K"]),
        helper.make_tensor_value_info("B", tensor_type("uint8"), ["N", "K_half"]),
        helper.make_tensor_value_info("weight_scale", tensor_type("uint8"), ["N", "K_blocks"]),
        helper.make_tensor_value_info("weight_scale_2", tensor_type("float32"), [1]),
    ]
    node_inputs = ["A", "B", "weight_scale", "weight_scale_2"]
    if bias:
        inputs.append(helper.make_tensor_value_info("bias", elem, ["N"]))
        node_inputs += ["", "bias"]  # input_scale (slot 4) skipped with an empty name
    output = helper.make_tensor_value_info(OUTPUT_NAME, elem, [*lead, "N"])
    node = helper.make_node(OP_TYPE, node_inputs, [OUTPUT_NAME], domain=OP_DOMAIN, block_size=int(block_size),
                            name="fp4_matmul")
    graph = helper.make_graph([node], f"nvfp4_observed_{dtype}_bs{block_size}{'_bias' if bias else ''}_r{rank}",
                              inputs, [output])
    model = helper.make_model(graph, producer_name="nvfp4-harness", ir_version=IR_VERSION,
                              opset_imports=[helper.make_opsetid("", ONNX_OPSET), helper.make_opsetid(OP_DOMAIN, 1)])
    onnx.checker.check_model(model, full_check=True)
    return model


def model_bytes(dtype: str, block_size: int, bias: bool, rank: int = 2) -> bytes:
    """The serialized model, what ``onnxruntime.InferenceSession`` takes."""
    return build_model(dtype, block_size, bias, rank).SerializeToString()
