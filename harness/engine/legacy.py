"""Reading schema version 1 coverage files (nvfp4-harness 0.1) as version 2 documents.

Version 1 knew one operator, the NVFP4 matmul of this project, and stored its guards as
``"<path>.<name>": {"condition": "<name> (<description>)", "line": N, ...}`` without the
operations each path serves or why a path is unreachable. Those facts were fixed in 0.1 and
are restored here: ``gemv`` and ``native_fp4`` serve ``matmul`` only, and ``native_fp4``
(its ``arch_sm120`` guard) can only be taken on sm_120..129 GPUs. A version 1 file therefore
gets the fingerprint of the declarations it was recorded under (0.1's four paths, today's model
without ``fused_mma``) and merges with data of those declarations; data of other declarations,
today's included, refuses to merge with it, naming both fingerprints.
"""

from __future__ import annotations

from typing import Any

from nvfp4_harness.model import DataError, DeviceCaps, side_key
from nvfp4_harness.model.declare import declaration_fingerprint

OPERATOR = "nvfp4"
OPS = ["matmul", "dequantize"]
MATMUL_ONLY = {"gemv", "native_fp4"}
SHORTCUTS = {
    "empty": "M == 0 or N == 0: the output has no elements, nothing is launched",
    "bias_only": "K == 0: the dot products are empty, the output is the bias (or zeros)",
}


def _native_unreachable(device: DeviceCaps) -> str | None:
    if device.sm is None:
        return "native_fp4 needs FP4 tensor cores of an sm_120..129 GPU; the CPU backend has none"
    if not 120 <= device.sm <= 129:
        return f"native_fp4 needs an sm_120..129 GPU (Blackwell); {device.label} is not one"
    return None


def upgrade_v1(doc: dict[str, Any], origin: str) -> dict[str, Any]:
    """The version 2 document holding what the version 1 document ``doc`` holds."""
    try:
        path_names = list(doc["paths"])
        guards: dict[str, list[dict[str, Any]]] = {p: [] for p in path_names}
        for key, g in doc["guards"].items():
            path, name = key.split(".", 1)
            condition = str(g.get("condition", name))
            description = condition[len(name):].strip()
            description = description[1:-1] if description.startswith("(") and description.endswith(")") else condition
            guards[path].append({"name": name, "description": description,
                                 "source": f"kernels/paths.py:{int(g.get('line', 0))}", "_sides": g})
        paths = [{"name": p, "summary": "", "source": None, "ops": ["matmul"] if p in MATMUL_ONLY else list(OPS),
                  "kernels": [], "guards": [{k: v for k, v in g.items() if k != "_sides"} for g in guards[p]]}
                 for p in path_names]
        fingerprint = declaration_fingerprint(OPERATOR, OPS, SHORTCUTS, [
            (p["name"], p["ops"], [(g["name"], g["description"]) for g in p["guards"]]) for p in paths])
        declaration = {"name": OPERATOR, "summary": f"upgraded from schema version 1 ({origin})", "source": None,
                       "ops": list(OPS), "shortcuts": dict(SHORTCUTS), "fingerprint": fingerprint, "paths": paths}
        unreachable = {}
        for d in doc.get("devices", []):
            cc = d.get("compute_capability")
            device = DeviceCaps(d["name"], tuple(cc) if cc else None)
            reason = _native_unreachable(device) if "native_fp4" in guards else None
            sides = {}
            if reason:
                for g in guards["native_fp4"]:
                    for passed in (True, False):
                        sides[side_key("native_fp4", g["name"], passed)] = reason
            unreachable[device.label] = {"paths": {"native_fp4": reason} if reason else {}, "sides": sides}
        operator = {
            "model": declaration,
            "paths": doc["paths"],
            "guard_sides": {side_key(p, g["name"], passed): g["_sides"].get("true" if passed else "false", {})
                            for p in path_names for g in guards[p] for passed in (True, False)},
            "shortcuts": doc.get("shortcuts", {}),
            "findings": {},
            "unreachable": unreachable,
        }
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise DataError(f"{origin} claims schema version 1 but does not follow it ({type(exc).__name__}: {exc}); "
                        f"regenerate it with this harness") from exc
    return {"format": "dispatch-coverage", "version": 2, "runs": doc.get("runs", []),
            "devices": doc.get("devices", []), "operators": {OPERATOR: operator}}
