"""The key covers the subject's dependencies: another installed version of one changes it.

tabulate (small, pure Python, no dependencies of its own) stands for einops or torchvision:
two of its releases are installed from this machine's package index into folders of their
own, and put on the path in turn.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import Repo, installable_pyproject, output

from regression.config import load_settings
from regression.fingerprint import environment_parts, key_of, key_packages

OLD, NEW = "0.8.10", "0.10.0"
DEPENDENT = installable_pyproject("subj", ".").replace(
    'version = "1.0"\n', 'version = "1.0"\ndependencies = ["tabulate>=0.8", "torch"]\n')


def _pip_target(folder: Path, *requirements: str) -> Path:
    """`requirements` installed into `folder` alone (no dependencies), offline."""
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                           "--no-build-isolation", "--target", str(folder), *requirements],
                          capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return folder


@pytest.fixture(scope="module")
def tabulate_releases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two releases of tabulate, each in a folder of its own."""
    root = tmp_path_factory.mktemp("tabulate")
    return {version: _pip_target(root / version, f"tabulate=={version}")
            for version in (OLD, NEW)}


def _keys_by_version(settings_path: Path, releases: dict[str, Path],
                     monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The environment's key with each release of tabulate on the path in turn."""
    settings = load_settings(settings_path)
    keys = {}
    for version, folder in releases.items():
        monkeypatch.syspath_prepend(str(folder))
        parts = environment_parts(settings, "a" * 40)
        assert parts["packages"] in (f"tabulate {version}", "none")
        keys[version] = key_of(parts)
    return keys


@pytest.mark.slow
def test_upgrading_a_dependency_the_subject_declares_changes_the_key(
        subject_repo: Repo, tabulate_releases: dict[str, Path],
        monkeypatch: pytest.MonkeyPatch) -> None:
    subject_repo.write("pyproject.toml", DEPENDENT)
    subject_repo.commit("subj needs tabulate")
    keys = _keys_by_version(subject_repo.path / "config.yaml", tabulate_releases, monkeypatch)
    assert keys[OLD] != keys[NEW]
    done = subject_repo.invoke("key", "--explain", process=True,
                               env={"PYTHONPATH": str(tabulate_releases[OLD])})
    assert done.returncode == 0, output(done)
    explained = done.stdout
    assert f"packages: tabulate {OLD}\n" in explained
    assert "  tabulate: declared by pyproject.toml\n" in explained
    assert "  the subject's dependencies: read from subj's pyproject.toml/setup.cfg (it is " \
           "not installed)\n" in explained
    assert "harness: 1 case in 1 file, hashed with:\n  tests/test_subj.py\n" in explained


def test_an_installed_subject_s_metadata_names_its_dependencies(
        subject_repo: Repo, tabulate_releases: dict[str, Path], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The subject installed (here into a folder of its own): its Requires-Dist counts,
    whatever the repository's files say now."""
    subject_repo.write("pyproject.toml", DEPENDENT)
    installed = _pip_target(tmp_path / "site", str(subject_repo.path))
    subject_repo.write("pyproject.toml", installable_pyproject("subj", "."))  # declares none
    monkeypatch.syspath_prepend(str(installed))
    keys = _keys_by_version(subject_repo.path / "config.yaml", tabulate_releases, monkeypatch)
    assert keys[OLD] != keys[NEW]
    settings = load_settings(subject_repo.path / "config.yaml")
    assert [(p.name, p.why) for p in key_packages(settings)] == [
        ("tabulate", "declared by subj 1.0 (installed)")]


def test_an_excluded_dependency_is_not_in_the_key(
        subject_repo: Repo, tabulate_releases: dict[str, Path],
        monkeypatch: pytest.MonkeyPatch) -> None:
    subject_repo.write("pyproject.toml", DEPENDENT)
    config = subject_repo.path / "config.yaml"
    config.write_text(config.read_text() + "fingerprint:\n  exclude_packages: [tabulate]\n")
    keys = _keys_by_version(config, tabulate_releases, monkeypatch)
    assert keys[OLD] == keys[NEW]
