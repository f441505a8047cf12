"""The dispatch-model API: how any operator declares its paths and guards and announces (or
is observed) taking one. The bottom layer of the harness, and the only part of it an operator
package imports; it needs neither numpy nor torch.

* :class:`DispatchModel`, :class:`PathSpec`, :class:`Guard`: the declarations;
* :func:`record`, :func:`record_shortcut`, :func:`instrument`: instrumented recording;
* :class:`DispatchEvent` and the bus (:func:`add_listener`, :func:`announce`);
* :class:`ModelRegistry`: which models a run knows;
* the errors, all under :class:`DispatchError`.

Guide: docs/dispatch-models.md.
"""

from nvfp4_harness.model.bus import (
    ListenerFailure,
    add_listener,
    announce,
    clear_listener_failures,
    failure_count,
    listener_failures,
    listening,
    remove_listener,
)
from nvfp4_harness.model.declare import (
    Classification,
    DispatchModel,
    Guard,
    GuardOutcome,
    PathSpec,
    Selection,
    SourceLocation,
    side_key,
)
from nvfp4_harness.model.devices import DeviceCaps, physical_gpu_index
from nvfp4_harness.model.errors import (
    DataError,
    DispatchError,
    InvalidArgument,
    InvalidModel,
    ModelConflict,
    NoDataError,
    PathNotAllowed,
    UnknownPathError,
)
from nvfp4_harness.model.events import DispatchEvent
from nvfp4_harness.model.instrument import build_event, instrument, record, record_shortcut, simulate
from nvfp4_harness.model.registry import ModelRegistry

__all__ = [
    "Classification", "DataError", "DeviceCaps", "DispatchError", "DispatchEvent", "DispatchModel", "Guard",
    "GuardOutcome", "InvalidArgument", "InvalidModel", "ListenerFailure", "ModelConflict", "ModelRegistry",
    "NoDataError", "PathNotAllowed", "PathSpec", "Selection", "SourceLocation", "UnknownPathError",
    "add_listener", "announce", "build_event", "clear_listener_failures", "failure_count", "instrument",
    "listener_failures",
    "listening", "physical_gpu_index", "record", "record_shortcut", "remove_listener", "side_key", "simulate",
]
