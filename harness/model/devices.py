"""What a guard may ask of the device a call runs on."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property


@dataclass(frozen=True)
class DeviceCaps:
    """A device: its name and compute capability (``None`` for a CPU backend).

    Build one with :meth:`cpu`, with :meth:`simulated_gpu` to test guards for hardware that is
    not present, or directly from what a GPU library reports (``DeviceCaps("NVIDIA H200",
    (9, 0))``). ``index`` is the device's ordinal on its host when it has one; it names the
    device in reports but never changes what a guard decides.
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
        """How reports name the device: ``cpu`` or ``NVIDIA H200 (sm_90)``."""
        return self.name if self.sm is None else f"{self.name} (sm_{self.sm})"
