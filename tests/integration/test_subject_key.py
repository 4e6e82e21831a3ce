"""The reference is keyed by the subject's code (its git trees at the reference commit), not
by the commit: real repositories, real recordings."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from helpers import SUBJECT, Repo, flat_subject_repo, output

from regression.store.cache import Entry
from regression.store.cachedir import ENTRY_FILE


def entries(cache: Path) -> list[Path]:
    """The cache's entry folders."""
    return sorted(p.parent for p in cache.glob(f"*/{ENTRY_FILE}"))


def test_a_docs_only_commit_as_the_reference_records_nothing(recorded_subject_repo: Repo
                                                              ) -> None:
    repo = recorded_subject_repo  # v1 recorded; HEAD only adds a README on top
    before = entries(repo.cache)
    done = repo.invoke("gen", "--reference", "HEAD")
    assert done.returncode == 0, output(done)
    assert "nothing generated" in output(done) and "recording" not in output(done)
    warm = repo.invoke("test", "--reference", "HEAD")
    assert warm.returncode == 0, output(warm)
    assert "recording" not in output(warm)
    assert "1 case: 1 identical, 0 changed" in output(warm)
    assert entries(repo.cache) == before


def test_a_commit_that_changes_the_subject_records_again(recorded_subject_repo: Repo) -> None:
    repo = recorded_subject_repo
    repo.write("subj/__init__.py", SUBJECT.format(scale="1.0") + "\n# the same outputs\n")
    repo.commit("a comment in the subject")
    done = repo.invoke("gen", "--reference", "HEAD")
    assert done.returncode == 0, output(done)
    assert "recording 1 of 1 cases" in output(done)
    assert len(entries(repo.cache)) == 2


def test_key_explain_shows_the_subject_trees_and_the_commit(recorded_subject_repo: Repo
                                                             ) -> None:
    repo = recorded_subject_repo
    tree, head = repo.git("rev-parse", "HEAD:subj"), repo.git("rev-parse", "HEAD")
    assert tree == repo.git("rev-parse", "v1:subj")
    done = repo.invoke("key", "--explain", "--reference", "HEAD")
    assert done.returncode == 0, output(done)
    lines = done.stdout.splitlines()
    assert f"subject code: subj tree {tree}" in lines
    assert f"reference: commit {head} (HEAD), where the subject code was read; not in the " \
        "key: a commit that leaves the subject alone shares this reference" in lines
    at_v1 = repo.invoke("key", "--reference", "v1")
    assert at_v1.returncode == 0, output(at_v1)
    assert at_v1.stdout.splitlines()[-1] == lines[-1]  # one key for both commits


def test_an_entry_of_the_old_format_is_recorded_again(recorded_subject_repo: Repo) -> None:
    """An entry that format 3 keyed by the commit is never read: the case is recorded anew."""
    repo = recorded_subject_repo
    (folder,) = entries(repo.cache)
    new = Entry.from_directory(folder)
    parts = {name: value for name, value in new.parts.items() if name != "subject code"}
    old = Entry(repo.cache, {**parts, "format": "3",
                             "reference": repo.git("rev-parse", "v1^{commit}")})
    old.create()
    record = new.load_case("tests/test_subj.py::test_forward")
    assert record is not None
    old.save_case(record)
    shutil.rmtree(folder)
    done = repo.invoke("test")
    assert done.returncode == 0, output(done)
    assert "recording 1 of 1 cases" in output(done)
    assert "1 case: 1 identical, 0 changed" in output(done)
    assert len(entries(repo.cache)) == 2 and old.directory.is_dir()


TESTS = """\
import json

import torch

import subj


def test_reads_the_reference_s_data(regression):
    scale = json.load(open("data/scale.json"))["scale"]  # the worktree's: outside the subject
    regression.check(subj.forward(regression.randn(2, 4)) * scale)


def test_reads_back_what_it_wrote(regression):
    torch.save(torch.ones(3), "made.pt")  # native code writes it: no audit event
    with open("made.txt", "w") as stream:
        stream.write("2.0")
    scale = float(open("made.txt").read())
    regression.check(subj.forward(regression.randn(2, 4)) * torch.load("made.pt") * scale)
"""


@pytest.mark.slow
def test_a_file_of_the_reference_outside_the_subject_stops_the_recording(
        tmp_path: Path) -> None:
    """The key holds only the subject's code: a commit that changed this file alone would
    reuse the recording, so reading it is refused; files the recording wrote are its own."""
    repo = flat_subject_repo(tmp_path / "repo", tmp_path / "cache")
    repo.write("data/scale.json", '{"scale": 1.0}\n')
    repo.write("tests/test_data.py", TESTS)
    repo.commit("tests read data beside the subject")
    done = repo.invoke("gen")
    assert done.returncode == 2, output(done)
    assert "these files of the reference were run, read or asked about while recording, " \
        "outside the subject's code" in done.stderr
    assert "  data/scale.json (read)\n" in done.stderr
    assert "made.pt" not in done.stderr and "made.txt" not in done.stderr
    assert "move it into a subject package (subj)" in done.stderr
    assert "Nothing was stored" in done.stderr and "Traceback" not in output(done)
    assert not list((tmp_path / "cache").rglob("*.safetensors"))


ASKING_SUBJECT = SUBJECT.format(scale="1.0") + '''
import glob
import importlib.metadata
import os
from pathlib import Path

HERE = os.path.dirname(__file__)


def switches():
    """What the subject asks of the files around it."""
    list(importlib.metadata.distributions())  # lists sys.path's folders: the library's own
    os.path.exists(os.path.join(HERE, "weights.bin"))  # its own package: in the key
    return (os.path.exists("FAST_PATH"), Path("switches/b").is_file(),
            sorted(os.listdir("plugins")), glob.glob("extras/*.txt"),
            os.path.isfile("resnet50"), Path(".git").exists())  # a name; every checkout's
'''

ASKING_TESTS = """\
import os

import subj


def test_switches(regression):
    subj.switches()
    os.path.exists("RELEASE")  # the test code asks too
    os.path.exists("pyproject.toml")  # the project's top: no setting
    os.path.exists("tests/data/table.json")  # its own folder: the working tree's
    regression.check(subj.forward(regression.randn(2, 4)))
"""


def test_what_the_code_asks_of_the_reference_outside_the_subject_stops_the_recording(
        tmp_path: Path) -> None:
    """Whether a file is there, or what a folder holds, is read of the reference too: a
    commit that removed FAST_PATH alone would keep the key. Asked by the subject or the
    tests, through os.path, pathlib, os.listdir or glob; not what installed code
    (importlib.metadata listing sys.path) asks, nor a path of the subject's own package or
    of the test folders, nor one that is not there (a model's name tried as a path)."""
    repo = flat_subject_repo(tmp_path / "repo", tmp_path / "cache")
    repo.write("subj/__init__.py", ASKING_SUBJECT)
    repo.write("tests/test_switches.py", ASKING_TESTS)
    repo.write("switches/b", "on\n")
    repo.write("FAST_PATH", "")
    repo.write("RELEASE", "")
    repo.write("plugins/one.py", "")
    repo.write("extras/a.txt", "")
    repo.commit("switches beside the subject")
    done = repo.invoke("gen")
    assert done.returncode == 2, output(done)
    listed = done.stderr.split("a commit that changed only them would reuse this recording:\n",
                               1)[1].split("Fix:", 1)[0]
    assert listed.splitlines() == ["  FAST_PATH (asked about)", "  RELEASE (asked about)",
                                   "  extras (listed)", "  plugins (listed)",
                                   "  switches/b (asked about)"], done.stderr
    assert "Fix: code that asks whether a file of the reference is there" in done.stderr
    assert "Nothing was stored" in done.stderr and "Traceback" not in output(done)
