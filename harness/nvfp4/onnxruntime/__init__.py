"""ONNX Runtime's own FP4 operator through the harness, in observed mode.

``com.microsoft::MatMulBlockQuantizedFp4Weight`` (ONNX Runtime 1.31.1, CUDA execution provider)
is a library nobody here can edit: its dispatch is declared as data (:mod:`.model`, built with
the public dispatch-model API exactly as an outside user would), every call runs under the
profiler and the launched kernel names say which path it took (:mod:`.observing`), and the
model's prediction is checked against them on every call.

The modules, each small and each importable without onnxruntime or a GPU unless it says so:

* :mod:`.model` - the declared model (paths, guards, kernel-name patterns, shortcuts), with
  the ONNX Runtime source each guard comes from, and where the 1.31.1 build was seen doing
  otherwise (two GEMV kernels with two M limits), the observation it follows;
* :mod:`.graph` - the single-node ONNX model, built with the ``onnx`` helper API;
* :mod:`.session` - sessions on the CUDA execution provider, cached per key, run with I/O bound
  on the device (needs onnxruntime-gpu and a GPU);
* :mod:`.observing` - one call observed: path, prediction, finding, shortcuts;
* :mod:`.cases` - the calls: the project's forcing matrix as ONNX Runtime accepts it, its own
  edge cases, the decode-only suite, the crossover search, the seeded read-out cases;
* :mod:`.readout` - its dequantized weights read out of the matmul bit for bit;
* :mod:`.timing` - profiler kernel durations, L2 warm and cold, beside a same-size copy and
  beside this project's kernels;
* :mod:`.sections` and :mod:`.run` - ``python -m nvfp4_harness onnxruntime``: everything above
  in one GPU run, each file written as soon as its part is done;
* :mod:`.checks` - CPU checks of the files a GPU run wrote (what CPU CI runs on them): what ONNX
  Runtime did, re-judged by today's model, and what the run's model computed, for files written
  under today's model;
* :mod:`.benchmarks_md` - the BENCHMARKS.md section from the timing results.

Guide: docs/onnxruntime.md. Install the extra with ``pip install -e ".[onnxruntime]"``.
"""

from nvfp4_harness.nvfp4.onnxruntime.model import MODEL, ORT_VERSION, OrtPolicy, OrtProblem

__all__ = ["MODEL", "ORT_VERSION", "OrtPolicy", "OrtProblem"]
