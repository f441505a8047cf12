"""Project-wide pytest configuration: the Hypothesis profiles used in CI and locally."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

# CI: derandomized so a red run is reproducible, no deadline (the 2-core CI machine is slow).
settings.register_profile("ci", derandomize=True, deadline=None, max_examples=60,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", deadline=None, max_examples=30)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


def pytest_configure(config) -> None:
    """Under pytest-xdist, pytest-benchmark disables its timings and warns about it on every run;
    turn them off explicitly there (the benchmark tests still run, as plain tests), so `-n 2`
    runs print no such warning. Serial runs keep the timings."""
    xdist = os.environ.get("PYTEST_XDIST_WORKER") or getattr(config.option, "numprocesses", None)
    if xdist and hasattr(config.option, "benchmark_disable"):
        config.option.benchmark_disable = True
