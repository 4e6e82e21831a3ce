"""Faults injected into the cache: each ends in a pass or a clear stop, never a false result."""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
import warm_python
from helpers import Mounts, Repo, fill, interruptible, make_subject_repo, output

from regression.errors import CacheError, StoreError
from regression.environment.fingerprint import digest
from regression.store import inventory
from regression.store.cache import Entry
from regression.store.record import CaseRecord, Output
from regression.store.files import MAX_RECORD, dump_verified, load_verified, verified_layout

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
                           text=True, start_new_session=True, preexec_fn=interruptible)
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


# Crafted cache files: each is refused with a message that names it, in bounded time.
#
# Anyone who can write the cache can put anything there and fix up the content hash. What is
# not a regular file is never opened (a FIFO would block, a device act), nothing is read through
# a link, sizes are checked before reading, and JSON (records and safetensors headers alike) is
# parsed within bounds. Most cases read crafted files in-process; a few real runs prove that
# `invoke` ends, with exit code and message, instead of hanging. Every blocking step runs under
# a timer, so a regression fails the test instead of hanging the suite.


PARTS = {"format": "1", "reference": "0123456789abcdef" * 2 + "01234567", "threads": "1"}
NODEID = "tests/test_model.py::test_forward"
DEEP = 200_000
RUN_TIMEOUT = 180  # seconds an `invoke` run may take here; a hang fails instead


class Blocked(Exception):
    """A read that waited: not an OSError, so that no `except OSError` can swallow it."""


@contextmanager
def within(seconds: float) -> Iterator[None]:
    """Fail with Blocked, instead of hanging, if the block blocks (SIGALRM interrupts a
    blocking open() of a FIFO, and the handler's exception ends it)."""
    def expire(signum: int, frame: object) -> None:
        raise Blocked(f"still blocked after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def refused(read: Callable[[], object], match: str, error: type[Exception] = StoreError) -> str:
    """The message of the error `read` raises, within 20 s, checked to hold `match`."""
    with within(20), pytest.raises(error, match=re.escape(match)) as caught:
        read()
    return str(caught.value)


@pytest.fixture
def entry(tmp_path: Path) -> Entry:
    """A real entry holding one case with a tensor and a scalar."""
    made = Entry(tmp_path / "cache", PARTS)
    made.create()
    made.save_case(CaseRecord(NODEID, "h", outputs=(Output("y", torch.arange(4.0)),
                                                    Output("n", 3))))
    return made


def record(entry: Entry) -> Path:
    return entry.case_path(NODEID)


def tensor_file(entry: Entry) -> Path:
    (found,) = entry.cases.glob("*.safetensors")
    return found


def write_record(path: Path, content: bytes) -> None:
    """A record of any content, its hash fixed up, as anyone with write access can make."""
    path.write_bytes(b"torch-regression " + digest(content).encode() + b"\n" + content)


def write_tensors(entry: Entry, data: bytes) -> None:
    """Crafted bytes as the case's tensor file, the record's digest fixed up to match."""
    tensor_file(entry).write_bytes(data)
    body = load_verified(record(entry))
    body["tensors"]["digest"] = digest(data)
    record(entry).write_bytes(dump_verified(body))


def safetensors(header: bytes, data: bytes = b"", length: int | None = None) -> bytes:
    return struct.pack("<Q", len(header) if length is None else length) + header + data


READERS: dict[str, Callable[[Entry], Callable[[], object]]] = {
    "plan": lambda entry: lambda: entry.valid_harness(NODEID),  # what gen, test, verify read
    "check": lambda entry: lambda: entry.load_case(NODEID),  # what the check run reads
}


# something other than a regular file in place of a file the cache wrote


def make_fifo(path: Path, valid: Path) -> None:
    os.mkfifo(path)


def make_link(path: Path, valid: Path) -> None:
    """A link to a valid copy: its content would pass every check, but it is never read."""
    path.symlink_to(valid)


def make_folder(path: Path, valid: Path) -> None:
    path.mkdir()


def make_device(path: Path, valid: Path) -> None:
    """/dev/null's device numbers under the cache's file name (needs CAP_MKNOD)."""
    try:
        os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("making a device node needs CAP_MKNOD")


def make_socket(path: Path, valid: Path) -> None:
    """A listening Unix socket; bound by a relative name, as the full path may be too long."""
    here = Path.cwd()
    os.chdir(path.parent)
    try:
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(path.name)
        server.listen(1)
    finally:
        os.chdir(here)
    SOCKETS.append(server)


SOCKETS: list[socket.socket] = []
KINDS: dict[str, tuple[Callable[[Path, Path], None], str]] = {
    "fifo": (make_fifo, "a FIFO (named pipe)"),
    "link": (make_link, "a symbolic link"),
    "folder": (make_folder, "a folder"),
    "device": (make_device, "a character device"),
    "socket": (make_socket, "a socket"),
}


@pytest.fixture(autouse=True)
def _close_sockets() -> Iterator[None]:
    yield
    while SOCKETS:
        SOCKETS.pop().close()


def replace(path: Path, kind: str, keep: Path) -> None:
    """`path` replaced by a thing of `kind`; its valid content kept at `keep`."""
    shutil.move(path, keep)
    KINDS[kind][0](path, keep)


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("kind", KINDS)
def test_case_record_that_is_not_a_regular_file_is_never_opened(
        entry: Entry, tmp_path: Path, kind: str, reader: str) -> None:
    path = record(entry)
    replace(path, kind, tmp_path / "valid.json")
    message = refused(READERS[reader](entry), "cannot be read")
    assert f"{path} cannot be read: it is {KINDS[kind][1]}, where the cache writes a regular " \
           "file; the cache never opens one" in message


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("kind", KINDS)
def test_tensor_file_that_is_not_a_regular_file_is_never_opened(
        entry: Entry, tmp_path: Path, kind: str, reader: str) -> None:
    path = tensor_file(entry)
    replace(path, kind, tmp_path / "valid.safetensors")
    message = refused(READERS[reader](entry), "cannot be read")
    assert f"{path} cannot be read: it is {KINDS[kind][1]}" in message


@pytest.mark.parametrize("kind", KINDS)
def test_identity_file_that_is_not_a_regular_file_is_a_fault_of_verify(
        entry: Entry, tmp_path: Path, kind: str) -> None:
    path = entry.directory / "entry.json"
    replace(path, kind, tmp_path / "valid-entry.json")
    refused(lambda: Entry.from_directory(entry.directory), f"it is {KINDS[kind][1]}")
    with within(20):
        faults = inventory.verify(entry.directory.parent)
    assert faults == [f"{path} cannot be read: it is {KINDS[kind][1]}, where the cache writes "
                      "a regular file; the cache never opens one"]


def test_folder_in_place_of_a_record_stops_recording_and_is_kept(entry: Entry) -> None:
    path = record(entry)
    path.unlink()
    (path / "mine").mkdir(parents=True)
    again = CaseRecord(NODEID, "h", outputs=(Output("y", torch.arange(4.0)),))
    message = refused(lambda: entry.save_case(again), "cannot store the reference", CacheError)
    assert f"cannot write {path}: a folder is in its place, and the cache never removes a " \
           "folder it did not make: remove it yourself" in message
    assert (path / "mine").is_dir()


def test_fifo_in_place_of_last_used_is_skipped_without_waiting(entry: Entry) -> None:
    os.mkfifo(entry.directory / "last-used")
    with within(20):
        assert entry.touch() is False  # only a hint: skipped, never waited for
        assert entry.last_used() > 0
    assert stat.S_ISFIFO((entry.directory / "last-used").lstat().st_mode)


# crafted content with its hash fixed up


@pytest.mark.parametrize("reader", READERS)
def test_safetensors_header_nested_200000_deep_is_refused_not_a_recursion_error(
        entry: Entry, reader: str) -> None:
    header = b'{"a":' + b"[" * DEEP + b"]" * DEEP + b"}"
    write_tensors(entry, safetensors(header))
    message = refused(READERS[reader](entry), "not a valid safetensors file")
    assert f"the header nests too deeply ({DEEP + 1} levels, more than 3)" in message


def test_case_record_nested_200000_deep_is_refused_with_the_bound(entry: Entry) -> None:
    body = json.dumps(load_verified(record(entry)))
    write_record(record(entry), ('{"deep": ' + "[" * DEEP + "]" * DEEP + ", "
                                 + body[1:]).encode())
    for reader in READERS.values():
        message = refused(reader(entry), "is not a record this tool wrote")
        assert f"its JSON nests too deeply ({DEEP + 1} levels, more than 308)" in message


def test_brackets_inside_strings_do_not_count_as_nesting(entry: Entry) -> None:
    body = load_verified(record(entry))
    body["reason"] = "[" * 1000 + '\\"{' * 1000
    record(entry).write_bytes(dump_verified(body))
    stored = entry.valid_harness(NODEID)
    assert stored is not None and stored.digest == "h"


@pytest.mark.parametrize("length", [1 << 20, (1 << 64) - 1], ids=["past-the-file", "2^64-1"])
@pytest.mark.parametrize("reader", READERS)
def test_safetensors_header_length_past_the_file_is_refused(
        entry: Entry, reader: str, length: int) -> None:
    data = safetensors(b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', bytes(4),
                       length=length)
    write_tensors(entry, data)
    message = refused(READERS[reader](entry), "not a valid safetensors file")
    assert f"header length {length} does not fit a file of {len(data)} bytes" in message


@pytest.mark.parametrize(("header", "problem"), [
    (b'{"a":{"dtype":"U8","shape":[1000000000000000000000000],"data_offsets":[0,1]}}',
     "the header holds an integer of 25 digits, more than 20"),
    (b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
     b'"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}',
     "the header names the key 'a' twice in one object"),
    (b'{"a":{"dtype":"U8","shape":[1e999],"data_offsets":[0,1]}}',
     "the header holds the number 1e999, out of range"),
    (b'{"a":{"dtype":"U8","shape":[Infinity],"data_offsets":[0,1]}}',
     "the header holds Infinity, which is not a JSON number"),
], ids=["huge-int", "duplicate-key", "huge-float", "infinity"])
def test_safetensors_header_numbers_and_keys_are_bounded(
        entry: Entry, header: bytes, problem: str) -> None:
    write_tensors(entry, safetensors(header, bytes(1)))
    for reader in READERS.values():
        assert problem in refused(reader(entry), "not a valid safetensors file")


@pytest.mark.parametrize(("first", "problem"), [
    ('"nodeid": "tests/other.py::test_x"', "its JSON names the key 'nodeid' twice in one object"),
    ('"extra": 1' + "0" * 31, "its JSON holds an integer of 32 digits, more than 20"),
    ('"extra": NaN', "its JSON holds NaN, which is not a JSON number"),
    ('"extra": -1e400', "its JSON holds the number -1e400, out of range"),
], ids=["duplicate-key", "huge-int", "nan", "huge-float"])
def test_case_record_keys_and_numbers_are_bounded(entry: Entry, first: str, problem: str) -> None:
    text = json.dumps(load_verified(record(entry)))
    write_record(record(entry), ("{" + first + ", " + text[1:]).encode())
    for reader in READERS.values():
        assert problem in refused(reader(entry), "is not a record this tool wrote")


def test_identity_file_with_a_number_out_of_range_is_not_trusted(entry: Entry) -> None:
    body = json.dumps(load_verified(entry.directory / "entry.json"))
    created = json.loads(body)["created"]
    write_record(entry.directory / "entry.json",
                 body.replace(json.dumps(created), "1e999").encode())
    message = refused(lambda: Entry.from_directory(entry.directory), "not a record")
    assert "its JSON holds the number 1e999, out of range" in message
    assert any("out of range" in fault for fault in inventory.verify(entry.directory.parent))


def test_record_larger_than_any_the_cache_writes_is_refused_before_reading(entry: Entry) -> None:
    with open(record(entry), "r+b") as stream:  # sparse: no disk, and never read
        stream.truncate(MAX_RECORD + (1 << 20))
    message = refused(lambda: entry.valid_harness(NODEID), "cannot be read")
    assert f"it is {MAX_RECORD + (1 << 20)} bytes, more than any file of its kind the cache " \
           "writes" in message


def test_tensor_file_that_grows_while_it_is_read_is_read_to_its_size_only(
        entry: Entry) -> None:
    """A writer appends a byte every millisecond while the file is read: reading stops at the
    size the file had when it was opened, and says why."""
    count = 48 << 20
    data = safetensors(json.dumps({"a": {"dtype": "U8", "shape": [count],
                                         "data_offsets": [0, count]}}).encode(), bytes(count))
    write_tensors(entry, data)
    path, growing, done = tensor_file(entry), threading.Event(), threading.Event()

    def grow() -> None:
        with open(path, "ab", buffering=0) as stream:
            while not done.wait(0.001):
                stream.write(b"\0")
                growing.set()

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)  # the writer gets its turns while the file is read
    writer = threading.Thread(target=grow, daemon=True)
    writer.start()
    try:
        assert growing.wait(20)
        message = refused(lambda: verified_layout(path, digest(data)), f"{path} ")
    finally:
        done.set()
        writer.join()
        sys.setswitchinterval(interval)
    assert message == f"{path} changed while it was read"


# leftovers of a removal or creation cut short (kill -9)


def half_removed(entry: Entry) -> Path:
    """What `remove_folder` leaves when killed inside rmtree: no identity file, some files."""
    (entry.directory / "entry.json").unlink()
    tensor_file(entry).unlink()
    return entry.directory


def test_clear_reclaims_a_half_removed_entry_and_leaves_a_folder_with_a_stranger(
        entry: Entry, tmp_path: Path) -> None:
    cache = entry.directory.parent
    other = Entry(cache, {**PARTS, "threads": "2"})
    other.create()
    other.save_case(CaseRecord(NODEID, "h", outputs=(Output("y", 1),)))
    (other.directory / "entry.json").unlink()
    (other.cases / "notes.txt").write_text("mine\n")
    leftover = half_removed(entry)
    (listed,) = [i for i in inventory.entries(cache) if i.directory == leftover]
    assert listed.leftover and "it holds only files the cache writes" in listed.fault
    removed = inventory.clear(cache)
    assert [i.directory for i in removed] == [leftover] and not leftover.exists()
    assert inventory.removed_lines(removed) == [
        f"removed {leftover} ({inventory.human_size(removed[0].size)}): not an entry, but a "
        "leftover holding only files the cache writes", "removed 1 entries"]
    (kept,) = inventory.foreign(cache)
    assert kept.directory == other.directory
    assert "it holds cases/notes.txt (a file), which the cache never writes" in kept.fault
    assert (other.cases / "notes.txt").read_text() == "mine\n"


def test_prune_reclaims_a_leftover_whatever_its_limits_and_keeps_the_entries(
        entry: Entry) -> None:
    cache = entry.directory.parent
    kept = Entry(cache, {**PARTS, "threads": "2"})
    kept.create()
    unfinished = cache / ("c" * 32)  # a creation cut short: only its temporary identity file
    unfinished.mkdir()
    (unfinished / ".entry.json.k3x_9a0b.tmp").write_bytes(b"half")
    leftover = half_removed(entry)
    removed = inventory.prune(cache, max_size=1 << 40, older_than=None)
    assert sorted(i.directory for i in removed) == sorted([leftover, unfinished])
    assert kept.exists() and not leftover.exists() and not unfinished.exists()


@pytest.mark.parametrize("stranger", ["link", "fifo", "folder", "identity"])
def test_leftover_holding_anything_else_is_left_alone_saying_what(
        entry: Entry, tmp_path: Path, stranger: str) -> None:
    leftover = half_removed(entry)
    target = tmp_path / "precious.txt"
    target.write_text("keep\n")
    thing = leftover / "cases" / "0123456789abcdef.json"
    record(entry).unlink()
    {"link": lambda: thing.symlink_to(target), "fifo": lambda: os.mkfifo(thing),
     "folder": lambda: thing.mkdir(),
     "identity": lambda: (leftover / "entry.json").write_bytes(b"garbage")}[stranger]()
    with within(20):
        assert inventory.clear(leftover.parent) == []
        assert inventory.prune(leftover.parent, max_size=0, older_than=0.0) == []
    (info,) = inventory.foreign(leftover.parent)
    assert info.directory == leftover and thing.parent.exists()
    kind = {"link": "a symbolic link", "fifo": "a special file", "folder": "a folder"}
    if stranger == "identity":
        assert "corrupt or truncated" in info.fault and "which the cache never" not in info.fault
    else:
        assert f"it holds cases/{thing.name} ({kind[stranger]}), which the cache never writes" \
               in info.fault
    assert target.read_text() == "keep\n"


# real runs: they end, with the exit code and the message


@pytest.fixture
def bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """`Repo.invoke` gives up after RUN_TIMEOUT s (TimeoutError) instead of 600."""
    monkeypatch.setattr(warm_python, "TIMEOUT", RUN_TIMEOUT)


def _stored(repo: Repo) -> tuple[Path, Path]:
    """The recorded case's record and tensor file."""
    (folder,) = [p for p in repo.cache.iterdir() if p.is_dir()]
    (case,) = (folder / "cases").glob("*.json")
    (tensors,) = (folder / "cases").glob("*.safetensors")
    return case, tensors


def _fifo_record(repo: Repo) -> tuple[Path, str]:
    case, _ = _stored(repo)
    case.unlink()
    os.mkfifo(case)
    return case, "it is a FIFO (named pipe), where the cache writes a regular file"


def _deep_header(repo: Repo) -> tuple[Path, str]:
    case, tensors = _stored(repo)
    data = safetensors(b'{"a":' + b"[" * DEEP + b"]" * DEEP + b"}")
    tensors.write_bytes(data)
    body = load_verified(case)
    body["tensors"]["digest"] = digest(data)
    case.write_bytes(dump_verified(body))
    return tensors, f"the header nests too deeply ({DEEP + 1} levels, more than 3)"


@pytest.mark.slow
@pytest.mark.parametrize("damage", [_fifo_record, _deep_header], ids=["fifo", "deep-header"])
def test_invoke_ends_with_the_message_and_test_records_again(
        recorded_subject_repo: Repo, bounded: None,
        damage: Callable[[Repo], tuple[Path, str]]) -> None:
    repo = recorded_subject_repo
    path, problem = damage(repo)
    stopped = repo.invoke("test", "--no-gen")
    assert stopped.returncode == 2, output(stopped)
    assert f"{path}" in stopped.stderr and problem in stopped.stderr
    assert "Run `invoke gen`" in stopped.stderr
    verified = repo.invoke("cache.verify")
    assert verified.returncode == 1, output(verified)
    assert f"FAULT {path}" in verified.stdout and problem in verified.stdout
    done = repo.invoke("test")
    assert done.returncode == 0, output(done)
    assert f"warning: re-recording tests/test_subj.py::test_forward: {path}" in done.stdout
    assert "1 identical, 0 changed" in done.stdout
    for run in (stopped, verified, done):
        text = output(run)
        assert "Traceback" not in text and "INTERNALERROR" not in text, text


@pytest.mark.slow
def test_invoke_clear_reclaims_a_leftover_and_says_what_it_leaves(
        recorded_subject_repo: Repo, bounded: None) -> None:
    repo = recorded_subject_repo
    case, tensors = _stored(repo)
    leftover = case.parent.parent
    (leftover / "entry.json").unlink()
    tensors.unlink()
    stranger = repo.cache / ("e" * 32)
    shutil.copytree(leftover, stranger)
    (stranger / "last-used").unlink(missing_ok=True)
    (stranger / "README").write_text("the user's\n")
    listed = repo.invoke("cache.list")
    assert listed.returncode == 0, output(listed)
    assert "NOT AN ENTRY, a leftover:" in listed.stdout
    assert "NOT AN ENTRY, left alone:" in listed.stdout
    cleared = repo.invoke("cache.clear")
    assert cleared.returncode == 0, output(cleared)
    assert f"removed {leftover} (" in cleared.stdout
    assert "not an entry, but a leftover holding only files the cache writes" in cleared.stdout
    assert "removed 1 entries" in cleared.stdout
    assert f"left alone, not provably a cache entry: {stranger}: {stranger}/entry.json is " \
           "missing; it holds README (a file), which the cache never writes" in cleared.stdout
    assert not leftover.exists() and (stranger / "README").read_text() == "the user's\n"

