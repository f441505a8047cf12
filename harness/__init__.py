"""The verification harness for the NVFP4 operator in :mod:`kernels`.

It listens to the dispatcher (the arrow goes harness -> kernels, never back), attributes
dispatch events to tests, verifies outputs bit for bit, computes path coverage, and times
kernels beside the copy-bandwidth ceiling.
"""

from nvfp4_harness.engine.coverage import CoverageData, Requirement
from nvfp4_harness.engine.recorder import Recorded, Recorder, recording

__all__ = ["CoverageData", "Recorded", "Recorder", "Requirement", "recording"]
