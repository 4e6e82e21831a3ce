"""Memory is bounded by the largest case: a run lets go of each case's outputs (recording)
and of its reference (checking) once the case has ended.

Each case of the suite holds weak references to what the plugin keeps of it (the recorded
copies of its outputs, or the reference's loaded tensors); the next case notes how many of
them are still alive. Not timed, not measured: a reference the run still holds is alive.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
# Imported before the in-process run: pytester removes the modules a run imported, and
# torch (a C extension) cannot be imported twice in one process.
import regression.plugin.fixture  # noqa: F401 - torch, safetensors, the store
import regression.references.beside  # noqa: F401 - the cache, GitPython, the runner
import regression.references.needed  # noqa: F401 - the check run's recorder
from helpers import CONFIG, SUBJECT, Repo, make_subject_repo, output

pytest_plugins = ["pytester"]

HOLDERS = """\
import gc
import os
import weakref

import pytest
import subj

HELD = []


def _kept(regression):
    sink = regression._sink
    if hasattr(sink, "record"):  # check mode: the reference's loaded tensors
        return [o.value for o in sink.record.outputs]
    return [o.value for o in sink.outputs]  # recording: the copies of the outputs


@pytest.mark.parametrize("index", range(3))
def test_case(regression, index):
    gc.collect()
    alive = sum(ref() is not None for ref in HELD)
    with open(os.environ["MEMORY_LOG"], "a", encoding="utf-8") as log:
        log.write(f"case {index}: {alive} of {len(HELD)} alive\\n")
    HELD.clear()
    regression.check(subj.forward(regression.randn(2, 4)), name="out")
    regression.check(regression.randn(3), name="noise")
    HELD.extend(weakref.ref(value) for value in _kept(regression))
"""

LET_GO = ["case 0: 0 of 0 alive", "case 1: 0 of 2 alive", "case 2: 0 of 2 alive"]
"""Each case finds both tensors the previous case held released."""


@pytest.fixture(scope="module")
def holders(tmp_path_factory: pytest.TempPathFactory) -> tuple[Repo, Path]:
    """A repository whose cases note what the previous case left alive; recorded at HEAD,
    the recording's notes in the log that is returned."""
    root = tmp_path_factory.mktemp("memory")
    repo = make_subject_repo(root / "repo", root / "cache")
    repo.write("config.yaml", CONFIG.format(reference="HEAD", path="."))
    repo.write("tests/test_holders.py", HOLDERS)
    repo.commit("cases that watch their references")
    log = root / "recording.log"
    done = repo.invoke("gen", "--case", "tests/test_holders.py",
                       env={"MEMORY_LOG": str(log)})
    assert done.returncode == 0, output(done)
    assert "recorded 3 cases" in done.stdout, output(done)
    return repo, log


def test_the_recording_lets_go_of_each_case_s_outputs(holders: tuple[Repo, Path]) -> None:
    _, log = holders
    assert log.read_text().splitlines() == LET_GO


def test_the_check_run_lets_go_of_each_case_s_reference(
        holders: tuple[Repo, Path], pytester: pytest.Pytester,
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    repo, _ = holders
    shutil.copytree(repo.path, pytester.path, symlinks=True, dirs_exist_ok=True)
    pytester.syspathinsert()
    log = tmp_path / "check.log"
    monkeypatch.setenv("REGRESSION_CACHE_DIR", str(repo.cache))
    monkeypatch.setenv("MEMORY_LOG", str(log))
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p",
                                          "no:hypothesispytest", "tests/test_holders.py")
    text = result.stdout.str() + result.stderr.str()
    assert result.ret == 0, text
    assert "every case is bit-identical to the reference (3 of 3)" in text
    assert log.read_text().splitlines() == LET_GO
    # Cases that fail on a change let go of their reference too.
    pytester.path.joinpath("subj", "__init__.py").write_text(SUBJECT.format(scale="1.5"))
    log.unlink()
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p",
                                          "no:hypothesispytest", "tests/test_holders.py")
    text = result.stdout.str() + result.stderr.str()
    assert result.ret == 1, text
    assert "3 cases: 0 identical, 3 changed" in text
    assert log.read_text().splitlines() == LET_GO
