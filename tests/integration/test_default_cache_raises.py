"""The test suite's guard across processes: a run that would use the project's own cache
folder (no $REGRESSION_CACHE_DIR) fails loudly and writes nothing there."""

from __future__ import annotations

from helpers import Repo, output
from warm_python import WARM

from regression.config.paths import CACHE_DIR_ENV, DEFAULT_CACHE_DIR


def test_a_run_without_a_chosen_cache_fails_and_leaves_the_default_folder_alone(
        subject_repo: Repo) -> None:
    env = {k: v for k, v in subject_repo.env().items() if k != CACHE_DIR_ENV}
    for task in ("gen", "cache.list"):
        done = WARM.invoke(subject_repo.path, (task,), env)
        assert done.returncode != 0, output(done)
        assert "DefaultCacheInTests: the cache folder " in done.stderr, output(done)
        assert f"{subject_repo.path / DEFAULT_CACHE_DIR} was about to be used" in done.stderr
    assert not (subject_repo.path / DEFAULT_CACHE_DIR).exists()
