"""Faults injected into the cache: each ends in a pass or a clear stop, never a false result."""

from __future__ import annotations

import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest
from helpers import Mounts, Repo, fill, make_subject_repo, output

from regression.store.files import dump_verified, load_verified
from regression.fingerprint import digest

MANY_CASES = """\
import pytest
import torch


@pytest.mark.parametrize("n", range(24))
def test_big(n, regression):
    regression.check({"x": torch.tanh(regression.randn(512, 256) * n), "n": n}, name="out")
"""


@pytest.fixture
def repo(recorded_subject: Repo, tmp_path: Path) -> Repo:
    """The recorded subject repository, shared, with a copy of its cache to damage."""
    shutil.copytree(recorded_subject.cache, tmp_path / "cache")
    return Repo(recorded_subject.path, tmp_path / "cache")


def _entry(repo: Repo) -> Path:
    (entry,) = [p for p in repo.cache.iterdir() if p.is_dir()]
    return entry


def _case_json(repo: Repo) -> Path:
    return sorted((_entry(repo) / "cases").glob("*.json"))[0]


def _tensor_file(repo: Repo) -> Path:
    return sorted((_entry(repo) / "cases").glob("*.safetensors"))[0]


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])


FILES: dict[str, Callable[[Repo], Path]] = {
    "entry": lambda repo: _entry(repo) / "entry.json",
    "case": _case_json,
    "tensors": _tensor_file,
}
FAULTS: dict[str, Callable[[Path], None]] = {"flipped byte": _flip, "truncation": _truncate}


# Each file once, the faults alternating; unit tests (test_cache) cover every damage of each.
@pytest.mark.parametrize(("kind", "fault"), [("entry", "flipped byte"), ("case", "truncation"),
                                             ("tensors", "flipped byte")])
def test_damaged_file_stops_no_gen_and_is_rerecorded(repo: Repo, kind: str, fault: str) -> None:
    damaged = FILES[kind](repo)
    FAULTS[fault](damaged)
    stopped = repo.invoke("test", "--no-gen")
    assert stopped.returncode == 2, output(stopped)
    assert "invoke gen" in stopped.stderr
    assert damaged.name in stopped.stderr or "entry" in stopped.stderr
    done = repo.invoke("test")
    assert done.returncode == 0, output(done)
    assert "warning:" in done.stdout
    assert "1 identical, 0 changed" in done.stdout
    assert repo.invoke("cache.verify").returncode == 0


@pytest.mark.slow
def test_plain_pytest_never_compares_a_corrupt_reference(repo: Repo) -> None:
    _flip(_tensor_file(repo))
    refused = repo.pytest("--regression-no-gen", "tests")
    assert refused.returncode == 1
    assert "cannot be trusted" in output(refused)
    assert "0 identical, 0 changed, 0 not in reference, 1 error" in output(refused)
    done = repo.pytest("tests")  # records it again, like invoke test
    assert done.returncode == 0, output(done)
    assert "warning: re-recording" in output(done)
    assert "1 identical, 0 changed" in output(done)


def test_cache_verify_reports_each_fault(repo: Repo) -> None:
    assert repo.invoke("cache.verify").returncode == 0
    _flip(_tensor_file(repo))
    done = repo.invoke("cache.verify")
    assert done.returncode == 1
    assert "FAULT" in done.stdout and _tensor_file(repo).name in done.stdout


def test_foreign_entry_is_discarded_and_rerecorded(repo: Repo) -> None:
    entry = _entry(repo)
    body = load_verified(entry / "entry.json")
    body["parts"]["cpu"] = "AVX512; GenuineIntel; another machine"
    (entry / "entry.json").write_bytes(dump_verified(body))
    stopped = repo.invoke("test", "--no-gen")
    assert stopped.returncode == 2
    assert "belongs to another environment" in stopped.stderr
    assert "cpu: recorded 'AVX512; GenuineIntel; another machine'" in stopped.stderr
    done = repo.invoke("test")
    assert done.returncode == 0, output(done)
    assert "discarding the cache entry" in done.stdout


@pytest.mark.parametrize("value", [{"list": [{"set": []}]}, {"tensor": "t7"}],
                         ids=["unknown kind", "tensor not in file"])
def test_record_with_a_malformed_node_and_a_valid_hash_is_rerecorded_by_gen(
        repo: Repo, value: dict[str, object]) -> None:
    case = _case_json(repo)
    body = load_verified(case)
    body["outputs"][0]["value"] = value
    case.write_bytes(dump_verified(body))  # the hash matches: only decoding shows the damage
    stopped = repo.invoke("test", "--no-gen")
    assert stopped.returncode == 2, output(stopped)
    assert f"{case.name} is malformed" in stopped.stderr and "invoke gen" in stopped.stderr
    done = repo.invoke("gen")
    assert done.returncode == 0, output(done)
    assert "warning: re-recording tests/test_subj.py::test_forward" in done.stdout
    assert f"{case.name} is malformed" in done.stdout
    assert "recorded 1 cases, reused 0" in done.stdout
    tested = repo.invoke("test", "--no-gen")
    assert tested.returncode == 0, output(tested)
    assert "1 identical, 0 changed" in tested.stdout


def test_records_are_checked_without_importing_torch(repo: Repo) -> None:
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from regression.store.cache import Entry\n"
        "from regression.store.files import load_verified\n"
        "entry = Entry.from_directory(Path(sys.argv[1]))\n"
        "nodeid = load_verified(entry.stored_cases()[0])['nodeid']\n"
        "assert entry.valid_harness(nodeid) and entry.faults() == []\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(_entry(repo))], text=True,
                          capture_output=True, check=False, timeout=120)
    assert done.returncode == 0, output(done)


class Payload:
    """Pickled, it would create a file: proof of code execution."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, ...]:
        return (Path.touch, (self.marker,))


def test_crafted_pickle_with_valid_hashes_is_never_unpickled(repo: Repo, tmp_path: Path) -> None:
    marker = tmp_path / "executed"
    case = _case_json(repo)
    body = load_verified(case)
    crafted = pickle.dumps(Payload(marker))
    (case.parent / body["tensors"]["file"]).write_bytes(crafted)
    body["tensors"]["digest"] = digest(crafted)
    case.write_bytes(dump_verified(body))
    done = repo.invoke("test")
    assert done.returncode == 0, output(done)
    assert "not a valid safetensors file" in done.stdout
    assert not marker.exists()


def test_stale_lock_of_a_killed_process_does_not_block(repo: Repo) -> None:
    (lock,) = repo.cache.glob("*.lock")
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time, filelock; filelock.FileLock(sys.argv[1]).acquire(); "
        "print('held', flush=True); time.sleep(600)"), str(lock)], stdout=subprocess.PIPE,
        text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    done = repo.invoke("gen", "--force")
    assert done.returncode == 0, output(done)
    assert "recording 1 of 1" in done.stdout


@pytest.mark.slow
def test_four_concurrent_gens_of_one_key_record_once(repo: Repo) -> None:
    shutil.rmtree(repo.cache)
    runs = [subprocess.Popen([sys.executable, "-m", "invoke", "gen"], cwd=repo.path,
                             env=repo.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True) for _ in range(4)]
    texts = [run.communicate(timeout=600)[0] for run in runs]
    assert [run.returncode for run in runs] == [0, 0, 0, 0], texts
    assert sum("recording 1 of 1" in text for text in texts) == 1, texts
    assert sum("nothing generated" in text for text in texts) == 3, texts
    assert repo.invoke("cache.verify").returncode == 0
    assert repo.invoke("test", "--no-gen").returncode == 0


@pytest.fixture(scope="module")
def big_repo(tmp_path_factory: pytest.TempPathFactory) -> Repo:
    root = tmp_path_factory.mktemp("kill")
    repo = make_subject_repo(root / "repo", root / "unused")
    repo.write("tests/test_many.py", MANY_CASES)
    repo.commit("many cases")
    repo.git("tag", "-f", "-a", "v1", "-m", "many")
    return repo


def _worktree_made(repo: Repo) -> bool:
    return len(repo.git("worktree", "list").splitlines()) > 1


def _cases_stored(repo: Repo, count: int) -> bool:
    return len(list(repo.cache.glob("*/cases/*.json"))) >= count


# When to kill: as the recording starts (its worktree made, nothing stored), while it stores
# (a few of 24 cases stored), and as it ends (every case stored, the entry being finished).
PHASES: dict[str, Callable[[Repo], bool]] = {
    "worktree made": _worktree_made,
    "storing": lambda repo: _cases_stored(repo, 4),
    "every case stored": lambda repo: _cases_stored(repo, 24),
}


@pytest.mark.slow
@pytest.mark.parametrize("phase", PHASES)
def test_sigkill_during_gen_leaves_nothing_read_as_valid(big_repo: Repo, tmp_path: Path,
                                                          phase: str) -> None:
    repo = Repo(big_repo.path, tmp_path / "cache")
    gen = subprocess.Popen([sys.executable, "-m", "invoke", "gen"], cwd=repo.path,
                           env=repo.env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True)
    while not PHASES[phase](repo):
        assert gen.poll() is None, f"gen ended (exit {gen.returncode}) before: {phase}"
        time.sleep(0.005)
    os.killpg(gen.pid, signal.SIGKILL)
    gen.wait()
    assert gen.returncode == -signal.SIGKILL  # killed, not finished
    done = repo.invoke("test")
    assert done.returncode == 0, output(done)
    assert "25 identical, 0 changed, 0 not in reference, 0 errors" in done.stdout
    assert len(repo.git("worktree", "list").splitlines()) == 1  # the killed run's was pruned


@pytest.mark.slow
def test_ctrl_c_while_recording_shows_progress_and_keeps_what_was_stored(
        big_repo: Repo, tmp_path: Path) -> None:
    repo = Repo(big_repo.path, tmp_path / "cache")
    gen = subprocess.Popen([sys.executable, "-m", "invoke", "gen"], cwd=repo.path,
                           env=repo.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, start_new_session=True)
    assert gen.stdout is not None
    seen = []
    for line in gen.stdout:  # progress, live: a line per case as it finishes
        seen.append(line)
        if line.startswith("  [3/25] tests/test_many.py::test_big["):
            break
    os.killpg(gen.pid, signal.SIGINT)  # as Ctrl-C in a terminal: the whole process group
    text = "".join(seen) + gen.communicate(timeout=300)[0]
    assert gen.returncode not in (0, None), text
    said = re.search(r"recording interrupted: (\d+) of 25 cases were stored and are kept; "
                     r"the reference worktree was removed\. `invoke gen` records the rest\.",
                     text)
    assert said, text
    kept = int(said.group(1))
    assert 3 <= kept < 25, text
    assert len(repo.git("worktree", "list").splitlines()) == 1
    done = repo.invoke("test")
    assert done.returncode == 0, output(done)
    assert f"recording {25 - kept} of 25 cases" in done.stdout  # the kept ones are reused
    assert "25 identical, 0 changed, 0 not in reference, 0 errors" in done.stdout


def _files(folder: Path) -> dict[str, tuple[bytes, int, int]]:
    """Every file under `folder`: its bytes, modification time and inode."""
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns, p.stat().st_ino)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _clean(done: subprocess.CompletedProcess[str]) -> str:
    text = output(done)
    assert "Traceback" not in text and "OSError" not in text, text
    return text


# links inside the cache: never followed for writing or deleting


@pytest.mark.slow
def test_linked_entry_is_left_by_clear_and_replaced_by_gen(repo: Repo, tmp_path: Path) -> None:
    entry = _entry(repo)
    target = tmp_path / "elsewhere"
    entry.rename(target)
    entry.symlink_to(target, target_is_directory=True)
    before = _files(target)
    cleared = repo.invoke("cache.clear")
    assert cleared.returncode == 0, output(cleared)
    assert "removed 0 entries" in cleared.stdout
    assert f"left alone, not provably a cache entry: {entry}: " in cleared.stdout
    assert entry.is_symlink() and _files(target) == before
    done = repo.invoke("gen")
    assert done.returncode == 0, output(done)
    assert "discarding the cache entry" in done.stdout and "recorded 1 cases" in done.stdout
    assert entry.is_dir() and not entry.is_symlink()
    assert _files(target) == before  # the link went, never what it pointed at
    assert repo.invoke("test", "--no-gen").returncode == 0


@pytest.mark.slow
def test_linked_cases_folder_is_never_written_through(repo: Repo, tmp_path: Path) -> None:
    cases = _entry(repo) / "cases"
    target = tmp_path / "elsewhere"
    cases.rename(target)
    cases.symlink_to(target, target_is_directory=True)
    before = _files(target)
    done = repo.invoke("gen", "--force")
    assert done.returncode == 0, output(done)
    assert "cases is a symbolic link" in done.stdout
    assert cases.is_dir() and not cases.is_symlink()
    assert _files(target) == before
    tested = repo.invoke("test", "--no-gen")
    assert tested.returncode == 0, output(tested)


# a read-only cache (a restored CI cache, a shared read-only mount)


@pytest.mark.slow
def test_read_only_cache_holding_every_case_serves_test_gen_and_pytest(
        repo: Repo, mounts: Mounts) -> None:
    mounts.read_only(repo.cache)
    for args in (["test"], ["test", "--no-gen"]):
        done = repo.invoke(*args)
        assert done.returncode == 0, output(done)
        assert "1 identical, 0 changed" in _clean(done)
    done = repo.invoke("gen")
    assert done.returncode == 0 and "nothing generated" in _clean(done)
    done = repo.pytest("tests")
    assert done.returncode == 0 and "1 identical, 0 changed" in _clean(done)
    for args in (["cache.list"], ["cache.verify"]):
        assert repo.invoke(*args).returncode == 0
    for args in (["cache.clear"], ["cache.prune", "--max-size", "0"]):
        done = repo.invoke(*args)
        assert done.returncode == 2, output(done)
        assert f"the cache folder {repo.cache} is read-only" in _clean(done)
    assert repo.invoke("cache.verify").returncode == 0


@pytest.mark.slow
def test_read_only_cache_missing_a_case_is_a_clear_error(repo: Repo, mounts: Mounts) -> None:
    _case_json(repo).unlink()
    mounts.read_only(repo.cache)
    for args in (["test"], ["gen"]):
        done = repo.invoke(*args)
        assert done.returncode == 2, output(done)
        text = _clean(done)
        assert "1 of 1 cases have no valid reference, and nothing can be recorded: " \
               f"the cache folder {repo.cache} is read-only" in text
        assert "REGRESSION_CACHE_DIR" in text
    done = repo.pytest("tests")  # plain pytest records what is missing, like invoke test
    assert done.returncode == 4, output(done)
    assert "nothing can be recorded" in _clean(done) and "Traceback" not in output(done)
    done = repo.pytest("--regression-no-gen", "tests")
    assert done.returncode == 1
    assert "no reference is recorded for this case" in _clean(done)


# a full disk


@pytest.mark.slow
def test_full_disk_while_storing_tensors_names_the_case_and_stores_nothing_false(
        big_repo: Repo, tmp_path: Path, mounts: Mounts) -> None:
    repo = Repo(big_repo.path, tmp_path / "cache")
    mounts.tmpfs(repo.cache, "1m")  # room for the identity file and one case of 512 KiB
    done = repo.invoke("gen")
    assert done.returncode == 2, output(done)
    text = _clean(done)
    assert "cannot store the reference of tests/test_many.py::test_big[" in text
    assert "no space left on device" in text and "dtype" not in text
    assert f"{_entry(repo) / 'cases'}" in text
    assert repo.invoke("cache.verify").returncode == 0  # what was stored reads back exactly
    stopped = repo.invoke("test", "--no-gen")
    assert stopped.returncode == 2 and "have no valid reference" in stopped.stderr
    mounts.resize(repo.cache, "64m")
    done = repo.invoke("test")
    assert done.returncode == 0, output(done)
    assert "25 identical, 0 changed, 0 not in reference, 0 errors" in done.stdout


@pytest.mark.slow
@pytest.mark.parametrize("where", ["entry.json", ".gitignore"])
def test_full_disk_while_making_the_cache_is_a_clear_error(
        subject_repo: Repo, tmp_path: Path, mounts: Mounts, where: str) -> None:
    disk = tmp_path / "disk"
    mounts.tmpfs(disk, "64k")
    fill(disk)
    # The disk itself exists, so no .gitignore goes there; a folder made on it gets one.
    repo = Repo(subject_repo.path, disk if where == "entry.json" else disk / "cache")
    done = repo.invoke("gen")
    assert done.returncode == 2, output(done)
    text = _clean(done)
    assert f"no space left on device: cannot write {where} in " in text
    assert "REGRESSION_CACHE_DIR at a bigger disk" in text
    assert not [p for p in disk.iterdir() if p.is_dir()]  # no half-made entry or cache folder
    (disk / "filler").unlink()
    done = repo.invoke("test")
    assert done.returncode == 0, output(done)
    assert "1 identical, 0 changed" in done.stdout
