"""Test order for pytest-xdist: the longest tests (marked slow) start first and the quick unit
tests fill in at the end, so no worker is left running a long test alone. And no test uses a
cache folder it did not choose."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from regression.config import CACHE_DIR_ENV, NO_DEFAULT_CACHE_ENV


def _rank(item: pytest.Item) -> int:
    if item.get_closest_marker("slow"):
        return 0
    return 1 if item.nodeid.startswith("tests/integration/") else 2


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_rank)  # stable: the order within a rank stays pytest's


@pytest.fixture(scope="session", autouse=True)
def _no_default_cache() -> Iterator[None]:
    """As pre-commit's tests do: a cache folder that a test did not choose raises, here and in
    every process started from here, so no test reads or writes a developer's real cache (nor
    the one a developer's own $REGRESSION_CACHE_DIR names)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(NO_DEFAULT_CACHE_ENV, "1")
        patch.delenv(CACHE_DIR_ENV, raising=False)
        yield
