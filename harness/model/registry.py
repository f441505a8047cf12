"""Which dispatch models a run knows, so an operator that was never called shows 0%.

Models are registered explicitly, as coverage.py registers plugins: a module named in the
``dispatch_models`` ini option or ``--dispatch-model=pkg.mod`` defines
``dispatch_init(reg)`` that calls ``reg.add_model(MODEL)`` (a module without it has its
module-level :class:`DispatchModel` objects registered). Scripts pass models directly.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Iterator

from nvfp4_harness.model.declare import DispatchModel
from nvfp4_harness.model.errors import InvalidArgument, InvalidModel


class ModelRegistry:
    """Dispatch models by name; a second model under a taken name must declare the same."""

    def __init__(self, models: Iterable[DispatchModel] = ()) -> None:
        self._models: dict[str, DispatchModel] = {}
        for model in models:
            self.add_model(model)

    def add_model(self, model: DispatchModel) -> DispatchModel:
        if not isinstance(model, DispatchModel):
            raise InvalidArgument(f"add_model expects a DispatchModel, got {type(model).__name__}")
        known = self._models.get(model.name)
        if known is not None and known is not model and known.fingerprint != model.fingerprint:
            raise InvalidModel(f"two different models are named {model.name!r} (declared at {known.source} and "
                               f"{model.source}); give each operator its own name")
        self._models.setdefault(model.name, model)
        return model

    def load(self, module_name: str) -> list[DispatchModel]:
        """Import ``module_name`` and register its models; returns them."""
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise InvalidArgument(f"cannot import dispatch model module {module_name!r} ({exc}); name an "
                                  f"importable module (pkg.mod) that defines dispatch_init(reg)") from exc
        before = set(self._models)
        init = getattr(module, "dispatch_init", None)
        if callable(init):
            init(self)
        else:
            for value in vars(module).values():
                if isinstance(value, DispatchModel):
                    self.add_model(value)
        added = [m for name, m in self._models.items() if name not in before]
        if not added and not any(isinstance(v, DispatchModel) for v in vars(module).values()) and not callable(init):
            raise InvalidArgument(f"module {module_name!r} declares no dispatch model: define "
                                  f"dispatch_init(reg) calling reg.add_model(MODEL)")
        return added

    def get(self, name: str) -> DispatchModel | None:
        return self._models.get(name)

    @property
    def models(self) -> tuple[DispatchModel, ...]:
        return tuple(self._models.values())

    def __contains__(self, name: object) -> bool:
        return name in self._models

    def __iter__(self) -> Iterator[DispatchModel]:
        return iter(self.models)

    def __len__(self) -> int:
        return len(self._models)
