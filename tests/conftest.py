"""Test order for pytest-xdist: the longest tests (marked slow) start first and the quick unit
tests fill in at the end, so no worker is left running a long test alone."""

from __future__ import annotations

import pytest


def _rank(item: pytest.Item) -> int:
    if item.get_closest_marker("slow"):
        return 0
    return 1 if item.nodeid.startswith("tests/integration/") else 2


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_rank)  # stable: the order within a rank stays pytest's
