"""Two tiers, and the order of a run. The quick tier (the default, the README's test command)
leaves out the long end-to-end scenarios marked `slow`; `--tier slow` runs those alone and
`--tier all` runs both (.ci/run runs the quick tier, then the slow one). Within a run the longest
tests start first and the quick unit tests fill in at the end, so no worker is left running a
long test alone. And no test uses a cache folder it did not choose."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from regression.config.paths import CACHE_DIR_ENV, NO_DEFAULT_CACHE_ENV


def _rank(item: pytest.Item) -> int:
    if item.get_closest_marker("slow"):
        return 0
    return 1 if item.nodeid.startswith("tests/integration/") else 2


TIERS = ("quick", "slow", "all")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--tier", choices=TIERS, default="quick",
                     help="quick (default): all but the tests marked slow; slow: only those; "
                          "all: both")


def _in_tier(item: pytest.Item, tier: str) -> bool:
    slow = item.get_closest_marker("slow") is not None
    return tier == "all" or slow == (tier == "slow")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tier = config.getoption("--tier")
    left_out = [item for item in items if not _in_tier(item, tier)]
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = [item for item in items if _in_tier(item, tier)]
    items.sort(key=_rank)  # stable: the order within a rank stays pytest's


@pytest.fixture(scope="session")
def no_default_cache() -> Iterator[None]:
    """As pre-commit's tests do: a cache folder that a test did not choose raises, here and in
    every process started from here, so no test reads or writes a developer's real cache (nor
    the one a developer's own $REGRESSION_CACHE_DIR names). Used automatically by the unit and
    integration tests (their conftests), never by tests/regression: the example zoo's own
    regression run uses config.yaml's cache, as a user's would."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(NO_DEFAULT_CACHE_ENV, "1")
        patch.delenv(CACHE_DIR_ENV, raising=False)
        yield
