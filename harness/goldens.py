"""Golden-hash fixtures (pytest11 entry point ``nvfp4_goldens``); filled in by the suites work."""
