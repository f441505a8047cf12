"""Project-wide pytest configuration: the Hypothesis profiles used in CI and locally."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

# CI: derandomized so a red run is reproducible, no deadline (the 2-core CI machine is slow).
settings.register_profile("ci", derandomize=True, deadline=None, max_examples=60,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", deadline=None, max_examples=30)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))
