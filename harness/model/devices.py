"""What a guard may ask of the device a call runs on."""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property


@dataclass(frozen=True)
class DeviceCaps:
    """A device: its name and compute capability (``None`` for a CPU backend).

    Build one with :meth:`cpu`, with :meth:`simulated_gpu` to test guards for hardware that is
    not present, or directly from what a GPU library reports (``DeviceCaps("NVIDIA H200",
    (9, 0))``). ``index`` is the device's ordinal on its host when it has one (the host's
    numbering, not the process's: see :func:`physical_gpu_index`); it tells apart the GPUs of
    one host in reports but never changes what a guard decides.
    """

    name: str
    compute_capability: tuple[int, int] | None = None
    simulated: bool = False
    index: int | None = None

    @classmethod
    def cpu(cls) -> DeviceCaps:
        return cls(name="cpu")

    @classmethod
    def simulated_gpu(cls, major: int, minor: int = 0, name: str | None = None) -> DeviceCaps:
        return cls(name=name or f"simulated sm_{major}{minor}", compute_capability=(major, minor),
                   simulated=True)

    @cached_property
    def sm(self) -> int | None:
        """The compute capability as one number (9.0 -> 90), None on a CPU."""
        cc = self.compute_capability
        return None if cc is None else cc[0] * 10 + cc[1]

    @cached_property
    def label(self) -> str:
        """How reports name the device: ``cpu``, ``NVIDIA H200 (sm_90, GPU 1)``, or for a
        device without an index (simulated, or recorded before indices were) ``... (sm_90)``."""
        if self.sm is None:
            return self.name
        if self.index is None or self.simulated:
            return f"{self.name} (sm_{self.sm})"
        return f"{self.name} (sm_{self.sm}, GPU {self.index})"


def physical_gpu_index(visible_index: int, environ: dict[str, str] | None = None) -> int:
    """The host's index of the GPU a process sees as ``visible_index``: a process started with
    ``CUDA_VISIBLE_DEVICES=1`` sees the host's GPU 1 as its GPU 0. The visible index itself when
    the variable is unset or names GPUs by UUID."""
    environ = os.environ if environ is None else environ
    visible = [g.strip() for g in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()]
    if visible_index < len(visible) and visible[visible_index].isdigit():
        return int(visible[visible_index])
    return visible_index
