"""The dispatch-model API (placeholder until the declarations move here)."""
