"""The pytest plugin (entry point ``pytest11: nvfp4_dispatch``): markers for now."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "dispatch: a dispatch suite (selected by pytest -m dispatch)")
