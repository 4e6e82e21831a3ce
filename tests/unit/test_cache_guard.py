"""The test suite's guard (tests/conftest.py): a cache folder no test chose raises."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from regression.config.settings import load_settings
from regression.config.paths import (CACHE_DIR_ENV, DEFAULT_CACHE_DIR, NO_DEFAULT_CACHE_ENV,
                                    DefaultCacheInTests)
from regression.errors import RegressionError

CONFIG = "reference: v1\nsubject:\n  packages: [subj]\n"


def test_the_session_arms_the_guard_and_drops_a_developer_s_cache_variable() -> None:
    assert os.environ.get(NO_DEFAULT_CACHE_ENV) == "1"
    assert CACHE_DIR_ENV not in os.environ


@pytest.mark.parametrize("cache_key", ["", "cache_dir: .my-cache\n"])
def test_a_cache_folder_the_test_did_not_choose_raises(tmp_path: Path, cache_key: str) -> None:
    (tmp_path / "config.yaml").write_text(CONFIG + cache_key)
    settings = load_settings(tmp_path / "config.yaml")
    with pytest.raises(DefaultCacheInTests) as raised:
        settings.cache_dir  # noqa: B018 - the property is the guarded path
    folder = tmp_path / (".my-cache" if cache_key else DEFAULT_CACHE_DIR)
    assert str(raised.value) == (
        f"the cache folder {folder} was about to be used, but ${NO_DEFAULT_CACHE_ENV} is set "
        f"(the test suite sets it): point ${CACHE_DIR_ENV} at a temporary folder")
    assert not isinstance(raised.value, RegressionError)  # no handler makes it a message
    assert not folder.exists()


def test_a_chosen_cache_folder_is_served(tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "config.yaml").write_text(CONFIG)
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "chosen"))
    assert load_settings(tmp_path / "config.yaml").cache_dir == tmp_path / "chosen"


def test_the_guard_does_not_reach_the_example_zoo_s_own_regression_run() -> None:
    """tests/conftest.py is also a conftest of tests/regression (the zoo that the Quickstart's
    `invoke test` checks with config.yaml's cache): no fixture of it may apply there by itself."""
    import ast

    source = (Path(__file__).resolve().parents[1] / "conftest.py").read_text(encoding="utf-8")
    autouse = [node.name for node in ast.walk(ast.parse(source))
               if isinstance(node, ast.FunctionDef) and any(
                   isinstance(d, ast.Call) and any(k.arg == "autouse" for k in d.keywords)
                   for d in node.decorator_list)]
    assert autouse == []
