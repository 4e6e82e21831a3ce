"""The unit tests use no cache folder they did not choose (tests/conftest.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session", autouse=True)
def _no_default_cache(no_default_cache: None) -> None:
    """The guard of tests/conftest.py, for every unit test."""
