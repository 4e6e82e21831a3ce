"""Record and check at once: a cold `invoke test` checks each case as soon as the recording
that runs beside it stores the case's reference, and judges every case as a run that
recorded everything first (`invoke gen`, then `invoke test`) does.

That the two runs overlap is shown without a clock: at the reference, a case waits for a
note that the check run leaves only once it checks the first case. Were the recording to
end before the check run began, that case would wait in vain, fail at the reference after
its deadline, and be judged "not in reference". Likewise the tests' conftest, loaded by
both processes, waits until both have loaded it: only a recording started before the check
run loads its conftests (the cache has no entry for the reference) lets it go on.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import CONFIG, SUBJECT, TESTS, Repo, interruptible, make_subject_repo, output

SUBJECT_NOW = SUBJECT.format(scale="2.0") + '''

def extra() -> float:
    return 1.5
'''

CASES = """\
import os
import time
from pathlib import Path

import torch
import subj


def test_first(regression):
    regression.check(torch.arange(4.0), name="const")
    meeting = os.environ.get("MEETING")
    if meeting:  # each process that runs this case leaves a note
        Path(meeting, str(os.getpid())).write_text("checked the first case")


def test_meets_the_check_run(regression):
    meeting = os.environ.get("MEETING")
    deadline = time.monotonic() + 120
    while meeting and len(os.listdir(meeting)) < 2:  # the recording's note and the check run's
        assert time.monotonic() < deadline, "the check run never reached the first case"
        time.sleep(0.05)
    regression.check(torch.ones(2), name="ones")


def test_changed(regression):
    regression.check(subj.forward(regression.randn(2, 4)), name="out")


def test_fails_at_the_reference(regression):
    regression.check(torch.tensor([subj.extra()]), name="extra")
"""

CONFTEST = """\
import os
import time
from pathlib import Path

meeting = os.environ.get("EARLY_MEETING")
if meeting:  # each process notes it loaded this conftest, then waits for the other
    Path(meeting, str(os.getpid())).write_text("loaded the conftest")
    deadline = time.monotonic() + 120
    while len(os.listdir(meeting)) < 2:
        if time.monotonic() > deadline:
            raise RuntimeError("the other process never loaded this conftest")
        time.sleep(0.05)
"""

MANY_SLOW_CASES = """\
import time

import pytest
import torch


@pytest.mark.parametrize("index", range(12))
def test_slow(regression, index):
    time.sleep(0.2)  # long enough for a signal to land mid-recording
    regression.check(torch.full((4,), float(index)), name="value")
"""

NEW_FILE = """\
import torch
from subj import extra


def test_not_collected_at_the_reference(regression):
    regression.check(torch.tensor([extra()]), name="extra")
"""


def _verdicts(done_stdout: str) -> list[str]:
    """The torch-regression section of a run's output: every verdict, not the times nor
    the reference worktree's folder (named by the process that made it)."""
    lines = re.sub(r"torch-regression-worktrees/[^/]+/[^/]+", "WORKTREE",
                   done_stdout).splitlines()
    start = next(i for i, line in enumerate(lines) if "torch-regression" in line and "==" in line)
    return [line for line in lines[start + 1:] if not line.startswith("=")]


@pytest.fixture
def history(tmp_path: Path) -> Repo:
    """A reference (v1) and a working tree whose subject differs: a case identical, one
    changed, one failing at the reference, one whose file does not collect there."""
    repo = make_subject_repo(tmp_path / "repo", tmp_path / "cache")
    repo.write("tests/test_cases.py", CASES)
    repo.write("tests/conftest.py", CONFTEST)
    repo.write("config.yaml", CONFIG.format(reference="v1", path="."))
    repo.commit("the cases")
    repo.git("tag", "-f", "-a", "v1", "-m", "the reference")
    repo.write("subj/__init__.py", SUBJECT_NOW)
    repo.write("tests/test_new.py", NEW_FILE)
    repo.commit("a numerics change and a new function")
    return repo


@pytest.mark.slow
def test_a_cold_run_checks_while_it_records_with_the_verdicts_of_one_that_records_first(
        history: Repo, tmp_path: Path) -> None:
    meeting, early = tmp_path / "meeting", tmp_path / "early"
    meeting.mkdir()
    early.mkdir()
    at_once = history.invoke("test", env={"MEETING": str(meeting),
                                          "EARLY_MEETING": str(early)})
    assert "each checked as soon as it is stored" in at_once.stdout, output(at_once)
    assert len(list(meeting.iterdir())) == 2, output(at_once)  # both processes met
    # ... and had started together; the cases that failed to run or to collect at the
    # reference beside the check run were recorded again alone, once the check run's cases
    # had ended (a third process)
    assert len(list(early.iterdir())) == 3, output(at_once)
    assert "recording 2 of 2 cases at" in at_once.stdout, output(at_once)

    first = Repo(history.path, tmp_path / "other-cache")
    generated = first.invoke("gen")
    assert generated.returncode == 0, output(generated)
    after = first.invoke("test")
    assert "each checked" not in after.stdout, output(after)  # nothing left to record

    assert at_once.returncode == after.returncode == 1, output(at_once) + output(after)
    verdicts = _verdicts(at_once.stdout)
    assert verdicts == _verdicts(after.stdout)
    summary = "\n".join(verdicts)
    assert "6 cases: 2 identical, 2 changed, 2 not in reference, 0 errors" in summary, summary


def test_a_recording_refused_at_its_end_is_an_error_of_every_case_it_handed_over_also_to_junit(
        tmp_path: Path) -> None:
    """The tests import a package of the working tree, and a test reads a data file outside
    the test folders, not listed in `harness`: the recording refuses once it ends, after the
    check run has checked the case against what it handed over. The tool, pytest's own count
    and the JUnit file say error for that case; the plain test beside it passed, and says so."""
    repo = make_subject_repo(tmp_path / "repo", tmp_path / "cache")
    repo.write("helper/__init__.py", "FACTOR = 1\n")
    repo.write("assets/scale.json", '{"scale": 1.0}\n')
    reads = TESTS.replace(
        "    regression.check(subj.forward(regression.randn(2, 4)), name=\"out\")",
        "    root = Path(__file__).resolve().parents[1]  # the working tree's, by its path\n"
        "    scale = json.load(open(root / \"assets\" / \"scale.json\"))[\"scale\"]\n"
        "    regression.check(subj.forward(regression.randn(2, 4)) * scale, name=\"out\")")
    repo.write("tests/test_subj.py",
               "import json\nfrom pathlib import Path\n\nimport helper\n" + reads)
    repo.commit("a helper package and a data file outside the subject and the test folders")
    junit = tmp_path / "junit.xml"
    done = repo.invoke("test", "--reference", "HEAD", "--junitxml", str(junit))
    text = output(done)
    assert done.returncode == 2, text
    assert "each checked as soon as it is stored" in text, text
    assert text.count("these modules were imported from your working tree while recording "
                      "at the reference") == 1, text
    assert "assets/scale.json (read)" in text and "`harness`" in text, text
    assert "ERROR tests/test_subj.py::test_forward: checked against a reference that the " \
           "recording at" in text, text
    assert "1 case: 0 identical, 0 changed, 0 not in reference, 1 error" in text, text
    assert "bit-identical" not in text, text
    assert not list(repo.cache.rglob("*.safetensors")), "a refused recording stored tensors"
    assert re.search(r"\n=+ 1 passed, 1 error in ", done.stdout), text  # test_plain passed
    xml = junit.read_text()
    forward = xml[xml.index('name="test_forward"'):]
    assert "<error" in forward.split("</testcase>")[0], xml
    assert 'errors="1"' in xml and 'failures="0"' in xml, xml


def test_a_recording_started_early_and_not_needed_ends_and_leaves_nothing(
        tmp_path: Path) -> None:
    """A cold run whose tests hold no regression case: the recording it started before
    collecting is told no case, ends, and takes its worktree with it."""
    repo = make_subject_repo(tmp_path / "repo", tmp_path / "cache")
    repo.write("tests/test_subj.py", "def test_plain():\n    assert True\n")
    repo.write("tests/conftest.py", CONFTEST)
    repo.commit("no regression case")
    early = tmp_path / "early"
    early.mkdir()
    done = repo.invoke("test", env={"EARLY_MEETING": str(early)})
    assert len(list(early.iterdir())) == 2, output(done)  # the recording had started
    assert "each checked" not in done.stdout, output(done)
    assert len(repo.git("worktree", "list").splitlines()) == 1, repo.git("worktree", "list")
    assert not list(Path(tmp_path / "cache").rglob("*.json")), "an entry was made"


def test_a_recording_that_fails_before_it_hands_a_case_over_stops_the_run_said_once(
        tmp_path: Path) -> None:
    """The subject does not import at the reference: the first case has no reference, the
    run stops there, and the recording's error is said once, at the end."""
    repo = make_subject_repo(tmp_path / "repo", tmp_path / "cache")
    repo.write("tests/test_more.py", "import torch\n\n\ndef test_more(regression):\n"
                                     "    regression.check(torch.ones(2))\n")
    repo.write("subj/__init__.py", "raise ImportError('subj is broken at this commit')\n")
    broken = repo.commit("a subject that does not import")
    repo.write("subj/__init__.py", SUBJECT.format(scale="1.0"))
    done = repo.invoke("test", "--reference", broken)
    text = output(done)
    assert done.returncode == 2, text
    assert text.count("ImportError: subj is broken at this commit") == 1, text
    assert text.count(f"the subject (subj) fails to import at the reference {broken[:12]}") \
        == 1, text
    assert f"tests/test_more.py::test_more: no reference: the recording at {broken[:12]} " \
           "failed (its error ends this run's output)" in text, text
    assert "tests/test_subj.py::test_forward: the run stopped before it: the recording at " \
           f"{broken[:12]} failed in tests/test_more.py::test_more" in text, text
    assert "INTERNALERROR" not in text and text.count("Traceback") == 1, text


@pytest.mark.slow
def test_ctrl_c_while_recording_and_checking_keeps_what_was_stored(tmp_path: Path) -> None:
    """Ctrl-C reaches both processes: the recording stores what it finished, the check
    run says so, and the worktree goes; the next run records only the rest."""
    repo = make_subject_repo(tmp_path / "repo", tmp_path / "cache")
    repo.write("tests/test_many.py", MANY_SLOW_CASES)
    repo.commit("many slow cases")
    test = subprocess.Popen([sys.executable, "-m", "invoke", "test"], cwd=repo.path,
                            env=repo.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True, preexec_fn=interruptible)
    deadline = time.monotonic() + 300
    while len(list(repo.cache.glob("*/cases/*.safetensors"))) < 3:  # three cases staged
        assert test.poll() is None and time.monotonic() < deadline, test.communicate()[0]
        time.sleep(0.05)
    os.killpg(test.pid, signal.SIGINT)  # as Ctrl-C in a terminal: the whole process group
    text = test.communicate(timeout=300)[0]
    assert test.returncode not in (0, None), text
    said = re.search(r"recording interrupted: (\d+) of 13 cases were stored and are kept; "
                     r"`invoke gen` records the rest\.", text)
    assert said, text
    kept = int(said.group(1))
    assert 3 <= kept < 13, text
    assert "INTERNALERROR" not in text, text
    assert len(repo.git("worktree", "list").splitlines()) == 1
    done = repo.invoke("test")
    assert done.returncode == 0, output(done)
    assert f"recording {13 - kept} of 13 cases" in done.stdout, output(done)
    assert "13 identical, 0 changed, 0 not in reference, 0 errors" in done.stdout


CLASHING_CONFTEST = """\
import os
import socket

import pytest


@pytest.fixture(scope="session", autouse=True)
def server():
    \"\"\"One port for the whole suite: a second process cannot have it at the same time.\"\"\"
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", int(os.environ["SUITE_PORT"])))
    sock.listen()
    yield sock
    sock.close()
"""

NEW_CASE = """\
import torch
import subj


def test_new(regression):
    regression.check(subj.forward(torch.ones(2, 4)), name="out")
"""


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_case_that_fails_at_the_reference_only_beside_the_check_is_not_stored_absent(
        tmp_path: Path) -> None:
    """The check run holds the suite's port while the recording beside it runs a new case,
    which therefore fails at the reference: recorded again alone it runs, so the run calls
    it an error (not "not in reference"), and the next run checks it."""
    repo = make_subject_repo(tmp_path / "repo", tmp_path / "cache")
    repo.write("tests/conftest.py", CLASHING_CONFTEST)
    repo.commit("a suite that holds a port")
    repo.git("tag", "-f", "-a", "v1", "-m", "the reference")
    port = {"SUITE_PORT": str(_free_port())}
    assert repo.invoke("gen", env=port).returncode == 0
    repo.write("tests/test_z_new.py", NEW_CASE)
    repo.write("subj/__init__.py", SUBJECT.format(scale="2.0"))  # the new case would change
    first = repo.invoke("test", env=port)
    text = output(first)
    assert first.returncode == 1, text
    assert "ERROR tests/test_z_new.py::test_new: failed at the reference: OSError" in text, text
    assert "recorded alone it ran, and is stored now: run again to check it" in text, text
    assert "NOT IN REFERENCE" not in text, text
    again = repo.invoke("test", env=port)
    assert again.returncode == 1, output(again)
    assert "CHANGED tests/test_z_new.py::test_new" in again.stdout, output(again)


def test_record_beside_check_off_records_first_so_the_clash_is_no_error(tmp_path: Path) -> None:
    """The same suite that holds a port: with `record_beside_check: false` the recording
    runs first, alone, and the new case is checked at once."""
    repo = make_subject_repo(tmp_path / "repo", tmp_path / "cache")
    repo.write("tests/conftest.py", CLASHING_CONFTEST)
    repo.write("config.yaml", CONFIG.format(reference="v1", path=".")
               + "record_beside_check: false\n")
    repo.commit("a suite that holds a port, recorded first")
    repo.git("tag", "-f", "-a", "v1", "-m", "the reference")
    repo.write("tests/test_z_new.py", NEW_CASE)
    repo.write("subj/__init__.py", SUBJECT.format(scale="2.0"))
    done = repo.invoke("test", env={"SUITE_PORT": str(_free_port())})
    text = output(done)
    assert done.returncode == 1, text
    assert "each checked as soon as" not in text, text
    assert "CHANGED tests/test_z_new.py::test_new" in text, text


def test_a_check_run_whose_conftest_fails_to_import_leaves_no_recording_behind(
        tmp_path: Path) -> None:
    """The recording started before conftests load; pytest then stops before any plugin's
    last hook: the recording is stopped and its worktree removed all the same."""
    repo = make_subject_repo(tmp_path / "repo", tmp_path / "cache")
    repo.write("tests/conftest.py", "import subj  # noqa: F401\n")
    repo.commit("a conftest that imports the subject")
    repo.write("subj/__init__.py", "raise ImportError('the working tree is broken')\n")
    done = repo.invoke("test")
    assert done.returncode != 0, output(done)
    assert "the working tree is broken" in output(done), output(done)
    assert len(repo.git("worktree", "list").splitlines()) == 1, repo.git("worktree", "list")
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True)
    assert str(repo.path) not in ps.stdout, "a recording of this repository still runs"


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


@pytest.mark.slow
def test_a_recording_whose_check_run_was_killed_stops_and_stores_nothing(
        tmp_path: Path) -> None:
    """kill -9 of the check run: its recording, now without the entry's lock, stops after
    the case under way and stores nothing; the next run records everything."""
    repo = make_subject_repo(tmp_path / "repo", tmp_path / "cache")
    repo.write("tests/test_many.py", MANY_SLOW_CASES)
    repo.commit("many slow cases")
    test = subprocess.Popen([sys.executable, "-m", "invoke", "test"], cwd=repo.path,
                            env=repo.env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 300
    while len(list(repo.cache.glob("*/cases/*.safetensors"))) < 2:  # two cases staged
        assert test.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    (check_run,) = _children(test.pid)
    (recording,) = _children(check_run)
    os.kill(check_run, signal.SIGKILL)
    while Path(f"/proc/{recording}").exists() and \
            "Z" not in Path(f"/proc/{recording}/stat").read_text().rsplit(")", 1)[1][:3]:
        assert time.monotonic() < deadline, "the recording did not stop"
        time.sleep(0.05)
    test.wait(timeout=60)
    assert not list(repo.cache.glob("*/cases/*.json")), "a record was stored without the lock"
    done = repo.invoke("test")
    assert done.returncode == 0, output(done)
    assert "recording 13 of 13 cases" in done.stdout, output(done)


@pytest.mark.slow
def test_a_run_cut_short_records_no_doubtful_case_alone_and_stores_nothing_for_it(
        tmp_path: Path) -> None:
    """The new case runs first here and clashes at the reference (this run holds the port
    while it waits); -x then stops the run at the change that follows, its session's port
    maybe still held: the case is an error, not recorded alone, and nothing is stored for
    it."""
    repo = make_subject_repo(tmp_path / "repo", tmp_path / "cache")
    repo.write("tests/conftest.py", CLASHING_CONFTEST)
    repo.commit("a suite that holds a port")
    repo.git("tag", "-f", "-a", "v1", "-m", "the reference")
    port = str(_free_port())
    assert repo.invoke("gen", env={"SUITE_PORT": port}).returncode == 0
    repo.write("tests/test_a_new.py", NEW_CASE)
    repo.write("subj/__init__.py", SUBJECT.format(scale="2.0"))
    done = repo.invoke("test", env={"SUITE_PORT": port, "PYTEST_ADDOPTS": "-x"})
    text = output(done)
    assert done.returncode == 1, text
    assert "CHANGED tests/test_subj.py::test_forward" in text, text
    assert "ERROR tests/test_a_new.py::test_new: failed at the reference: OSError" in text
    assert "the run stopped before it could be recorded alone, so nothing is stored" in text
    assert "recording 1 of 1 cases" not in text, text
    again = repo.invoke("test", env={"SUITE_PORT": port})
    assert "recording 1 of 2 cases" in again.stdout, output(again)  # nothing was stored


SHARED_CASES_HEAD = """\
import fcntl
import os
import socket
import threading

import pytest
import torch
import subj

SHARED = os.environ["SHARED_FILE"]  # outside the repository, the same for both runs
"""

SHARED_CASES = {
    "file": """
@pytest.mark.parametrize("index", range(4))
def test_saved_and_loaded(regression, index):
    torch.save(subj.forward(regression.randn(2, 4) + index), SHARED)
    regression.check(torch.load(SHARED))
""",
    "port": """
@pytest.mark.parametrize("index", range(4))
def test_served_on_a_fixed_port(regression, index):
    value = subj.forward(regression.randn(2, 4) + index)
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)  # both runs can bind it
    server.bind(("127.0.0.1", int(os.environ["SUITE_PORT"])))
    server.listen()
    server.settimeout(0.1)
    done = threading.Event()

    def serve():  # whoever connects gets this run's value: the other run's client too
        while not done.is_set():
            try:
                connection, _ = server.accept()
            except socket.timeout:
                continue
            connection.sendall(value.numpy().tobytes())
            connection.close()

    thread = threading.Thread(target=serve)
    thread.start()
    client = socket.create_connection(("127.0.0.1", int(os.environ["SUITE_PORT"])))
    data = b""
    while len(data) < value.numel() * 4:
        data += client.recv(1 << 16)
    client.close()
    done.set()
    thread.join()
    server.close()
    regression.check(torch.frombuffer(bytearray(data), dtype=torch.float32))
""",
    "safetensors": """
from safetensors.torch import load_file, save


@pytest.mark.parametrize("index", range(4))
def test_exported_and_loaded(regression, index):
    new = f"{SHARED}.{os.getpid()}"  # each process its own: never truncated under a map
    with open(new, "wb") as stream:  # written by Python, read by native code
        stream.write(save({"out": subj.forward(regression.randn(2, 4) + index)}))
    os.replace(new, SHARED)
    regression.check(load_file(SHARED)["out"].clone())
""",
    "lock": """
@pytest.mark.parametrize("index", range(4))
def test_under_a_lock_file(regression, index):
    with open(SHARED + ".lock", "a") as lock:  # as filelock and many suites do
        fcntl.flock(lock, fcntl.LOCK_EX)
        regression.check(subj.forward(regression.randn(2, 4) + index))
""",
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["file", "safetensors", "port", "lock"])
def test_a_case_that_shares_a_file_or_port_with_the_check_run_is_never_stored_from_it(
        tmp_path: Path, kind: str) -> None:
    """Each case saves the subject's output to one file outside the repository and loads it
    back, or serves it on a fixed port: beside the check run, the recording could read the
    check run's value. With the subject changed, no case passes cold; the references stored
    are the reference's own (recorded again alone), so the warm runs call every case
    changed; a subject left alone is identical warm. A lock file both runs take carries no
    value: its cases are judged at once."""
    repo = make_subject_repo(tmp_path / "repo", tmp_path / "cache")
    repo.write("tests/test_subj.py", SHARED_CASES_HEAD + SHARED_CASES[kind])
    repo.commit("tests that share a file, a port or a lock")
    repo.git("tag", "-f", "-a", "v1", "-m", "the reference")
    env = {"SHARED_FILE": str(tmp_path / "shared.pt"), "SUITE_PORT": str(_free_port())}
    repo.write("subj/__init__.py", SUBJECT.format(scale="2.0"))
    cold = repo.invoke("test", env=env)
    text = output(cold)
    assert cold.returncode != 0, text
    assert "each checked as soon as it is stored" in text, text
    if kind == "lock":
        assert "4 cases: 0 identical, 4 changed" in text, text
        assert re.search(r"\n=+ 4 failed in ", cold.stdout), text
        return
    assert "4 cases: 0 identical, 0 changed, 0 not in reference, 4 errors" in text, text
    shared = f"port {env['SUITE_PORT']}" if kind == "port" else str(tmp_path / "shared.pt")
    assert f"this recording and the check run beside it used {shared}" in text, text
    last = cold.stdout.rstrip().splitlines()[-1]  # pytest's own line agrees: nothing passed
    assert "passed" not in last and "error" in last, text
    if kind == "safetensors":  # elsewhere a case may fail as it runs (a half-written file,
        assert re.search(r"\n=+ 4 errors in ", cold.stdout), text  # a dropped connection)
    for _ in range(2):
        warm = repo.invoke("test", env=env)
        assert warm.returncode == 1, output(warm)
        assert "4 cases: 0 identical, 4 changed" in output(warm), output(warm)
    repo.git("checkout", "--", "subj/__init__.py")
    same = repo.invoke("test", env=env)
    assert same.returncode == 0, output(same)
    assert "4 cases: 4 identical" in output(same), output(same)
