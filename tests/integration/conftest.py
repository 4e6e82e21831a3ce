"""Fixtures: repositories made of real commits, for the integration tests."""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import (PROJECT, TASKS, Mounts, Repo, build_wheel, init_repo, make_subject_repo,
                     mount_refused, output)
from warm_python import WARM


@pytest.fixture(scope="session", autouse=True)
def _no_default_cache(no_default_cache: None) -> None:
    """The guard of tests/conftest.py, for every integration test."""


@pytest.fixture(scope="session", autouse=True)
def warm_python() -> Iterator[None]:
    """The warm Python behind `Repo.invoke`, stopped when the session ends."""
    yield
    WARM.stop()


@pytest.fixture
def subject_repo(tmp_path: Path) -> Repo:
    """A repository with a tiny subject `subj` at commit v1 (tagged), a second commit on top."""
    return make_subject_repo(tmp_path / "repo", tmp_path / "cache")


@pytest.fixture(scope="session")
def recorded_subject(tmp_path_factory: pytest.TempPathFactory) -> Repo:
    """A subject repository whose reference (v1) `invoke gen` recorded, once per worker.

    Tests must not change it: `recorded_subject_repo` gives each its own copy.
    """
    root = tmp_path_factory.mktemp("recorded")
    repo = make_subject_repo(root / "repo", root / "cache")
    done = repo.invoke("gen")
    assert done.returncode == 0, output(done)
    return repo


@pytest.fixture
def recorded_subject_repo(recorded_subject: Repo, tmp_path: Path) -> Repo:
    """A copy of `recorded_subject`, repository and cache, for a test to change at will."""
    shutil.copytree(recorded_subject.path, tmp_path / "repo", symlinks=True)
    shutil.copytree(recorded_subject.cache, tmp_path / "cache", symlinks=True)
    return Repo(tmp_path / "repo", tmp_path / "cache")


@pytest.fixture(scope="session")
def our_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This project as a wheel, built once per run: under pytest-xdist the first worker to
    need it builds it into the folder the workers' temporary folders share, the others wait
    for it and use it."""
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # pytest-of-USER/pytest-N/, above popen-gwN/
    folder = shared / "wheel"
    with open(shared / "wheel.lock", "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released as the file closes
        built = sorted(folder.glob("torch_regression-*.whl"))
        if built:
            return built[0]
        folder.mkdir(exist_ok=True)
        return build_wheel(folder)


@pytest.fixture(scope="session")
def zoo_repo_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository made of this project's example zoo, its tests and its config."""
    path = tmp_path_factory.mktemp("zoo") / "repo"
    repo = init_repo(path, path.parent / "cache")
    shutil.copytree(PROJECT / "zoo", path / "zoo",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(PROJECT / "tests" / "regression", path / "tests" / "regression",
                    ignore=shutil.ignore_patterns("__pycache__"))
    config = (PROJECT / "config.yaml").read_text(encoding="utf-8")
    lines = [line if not line.startswith("reference:") else "reference: HEAD"
             for line in config.splitlines()]
    repo.write("config.yaml", "\n".join(lines) + "\n")
    repo.write("tasks.py", TASKS)
    repo.write("pyproject.toml", "[tool.pytest.ini_options]\n")
    repo.write(".gitignore", "__pycache__/\n")
    repo.commit("the zoo")
    return path


@pytest.fixture(scope="session")
def mount_allowed(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Skip, saying why, where this machine cannot mount (CI runs as root, and can)."""
    refused = mount_refused(tmp_path_factory.mktemp("probe") / "mount")
    if refused:
        pytest.skip(f"needs mount (root or CAP_SYS_ADMIN) for a real full or read-only disk: "
                    f"{refused}")


@pytest.fixture
def mounts(mount_allowed: None) -> Iterator[Mounts]:
    """Mounts made by a test, undone after it whatever its outcome."""
    made = Mounts()
    try:
        yield made
    finally:
        made.undo()
