"""Unit-test setup: no unit test writes to the real reference cache or the working tree."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """REGRESSION_CACHE_DIR points at a throwaway folder for the whole unit session."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("REGRESSION_CACHE_DIR", str(tmp_path_factory.mktemp("regression-cache")))
        yield
