"""Flags and environment variables: every flag of every task and every variable the tool
reads is checked before anything runs (a clear message, exit 2, no traceback)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Callable

import pytest
from helpers import Mounts, Repo, output
from invoke import Program

from regression.errors import ConfigError
from regression.run.job import JOB_ENV, current_job
from regression.cli.tasks import ns


@pytest.fixture
def inside(subject_repo: Repo, monkeypatch: pytest.MonkeyPatch) -> Repo:
    """The subject repository as the current folder, with only our cache in the environment:
    the tasks run in this process, as `invoke` runs them."""
    monkeypatch.chdir(subject_repo.path)
    for name in list(os.environ):
        if name.startswith(("GITHUB_", "REGRESSION_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("REGRESSION_CACHE_DIR", str(subject_repo.cache))
    return subject_repo


def _within(seconds: float, work: Callable[[], None]) -> list[BaseException]:
    """Run `work` in a thread: what it raised; the test fails if it blocks (a pipe)."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            raised.append(exc)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout=seconds)
    assert not thread.is_alive(), f"still running after {seconds} s: it blocked"
    return raised


def run_task(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[object, str]:
    """`invoke ARGV` in this process, parsed by invoke itself: its exit code and stderr."""
    capsys.readouterr()
    raised = _within(120, lambda: Program(namespace=ns, name="invoke", binary="invoke").run(
        ["invoke", *argv]))
    assert len(raised) == 1 and isinstance(raised[0], SystemExit), raised
    return raised[0].code, capsys.readouterr().err


BAD_FLAGS = [
    (("gen", "--workers", "abc"),
     "--workers 'abc': the number of pytest-xdist processes is a whole number from 1 to 1024"),
    (("gen", "--workers", "0"), "--workers '0': the number of pytest-xdist processes is"),
    (("test", "--workers", "-1"), "--workers '-1': the number of pytest-xdist processes is"),
    (("gen", "--repeat", "0"), "--repeat '0': the number of recordings of each case"),
    (("gen", "--repeat", "abc"), "--repeat 'abc': the number of recordings of each case"),
    (("shards", "--count", "abc"), "--count 'abc': the number of shards is a whole number "
                                   "from 1 to 1000, e.g. --count 2"),
    (("key", "--shard", ""), "--shard '' is empty (an unset variable in CI?): give i/n, e.g. "
                             "--shard 2/4, or leave --shard out to run every case"),
    (("test", "--shard", " "), "--shard ' ' is empty (an unset variable in CI?)"),
    (("gen", "--shard", "0/4"), "--shard '0/4': i must be between 1 and n"),
    (("key", "--shard", "5/4"), "--shard '5/4': i must be between 1 and n"),
    (("key", "--shard", "1/0"), "--shard '1/0': i must be between 1 and n"),
    (("key", "--shard", "a/b"), "--shard 'a/b' is not of the form i/n, e.g. --shard 2/4"),
    (("key", "--shard", "1/4/2"), "--shard '1/4/2' is not of the form i/n"),
    (("test", "--reference", ""), "--reference '' is empty (an unset variable in CI?): give a "
                                  "value, or leave --reference out"),
    (("gen", "-k", ""), "-k '' is empty (an unset variable in CI?)"),
    (("test", "--case", ""), "--case '' is empty (an unset variable in CI?)"),
    (("bisect", "--good", ""), "--good '' is empty (an unset variable in CI?)"),
    (("explain", "--case", ""), "--case '' is empty (an unset variable in CI?): give a value\n"),
    (("cache.prune", "--max-size", ""), "--max-size '' is not a size; write e.g. 500M"),
]


@pytest.mark.parametrize(("argv", "message"), BAD_FLAGS, ids=[" ".join(a) for a, _ in BAD_FLAGS])
def test_a_bad_flag_is_refused_before_anything_runs(inside: Repo,
                                                    capsys: pytest.CaptureFixture[str],
                                                    argv: tuple[str, ...], message: str) -> None:
    code, err = run_task(capsys, *argv)
    assert code == 2, err
    assert f"torch-regression: {message}" in err
    assert not inside.cache.exists()  # refused before any recording


@pytest.mark.parametrize("where", ["a folder", "inside a file"])
def test_junitxml_where_no_report_can_be_written_is_refused(
        inside: Repo, capsys: pytest.CaptureFixture[str], tmp_path: Path, where: str) -> None:
    (tmp_path / "file").write_text("")
    target = tmp_path if where == "a folder" else tmp_path / "file" / "report.xml"
    code, err = run_task(capsys, "test", "--junitxml", str(target))
    assert code == 2, err
    expected = (f"--junitxml {tmp_path}: that is a folder; name a file in it, e.g. --junitxml "
                f"{tmp_path / 'regression.xml'}" if where == "a folder" else
                f"--junitxml {target}: {tmp_path / 'file'} is not a folder, so the report "
                "cannot be written there")
    assert expected in err
    assert not inside.cache.exists()


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


@pytest.mark.parametrize(("make", "why"), [
    (lambda tmp: tmp / "missing" / "output", "its folder {tmp}/missing does not exist"),
    (lambda tmp: tmp, "it is a folder, not a file"),
    (lambda tmp: tmp / "file" / "output", "a part of its path is a file, not a folder"),
    (lambda tmp: _fifo(tmp / "pipe"), "it is a pipe that nothing reads"),
], ids=["missing folder", "a folder", "inside a file", "a pipe nothing reads"])
def test_github_output_that_cannot_be_appended_to_is_refused_before_collecting(
        inside: Repo, capsys: pytest.CaptureFixture[str], tmp_path: Path, make: object,
        why: str, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "file").write_text("")
    path = make(tmp_path)  # type: ignore[operator]
    monkeypatch.setenv("GITHUB_OUTPUT", str(path))
    code, err = run_task(capsys, "key", "--github-output")
    assert code == 2, err
    assert (f"torch-regression: $GITHUB_OUTPUT: {str(path)!r} cannot be appended to: "
            f"{why.format(tmp=tmp_path)}. GitHub Actions sets it") in err
    assert "unset GITHUB_OUTPUT" in err


def test_github_output_on_a_read_only_disk_is_refused(
        inside: Repo, capsys: pytest.CaptureFixture[str], tmp_path: Path, mounts: Mounts,
        monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "outputs"
    folder.mkdir()
    (folder / "output").write_text("earlier=1\n")
    mounts.read_only(folder)
    monkeypatch.setenv("GITHUB_OUTPUT", str(folder / "output"))
    code, err = run_task(capsys, "key", "--github-output")
    assert code == 2, err
    assert "cannot be appended to: Read-only file system" in err


@pytest.mark.parametrize(("make", "problem"), [
    (lambda tmp: "", "'' is empty (an unset variable in CI?)"),
    (lambda tmp: str(tmp / "file"), "is a file, not a folder"),
    (lambda tmp: str(tmp / "link-to-file"), "is a file, not a folder"),
    (lambda tmp: str(tmp / "dangling"), "is a link to {tmp}/nowhere, which does not exist"),
    (lambda tmp: str(tmp / "loop"), "is a link that leads to itself"),
], ids=["empty", "a file", "a link to a file", "a link to nothing", "a loop of links"])
def test_a_cache_dir_variable_that_names_no_folder_is_refused_with_its_reason(
        inside: Repo, capsys: pytest.CaptureFixture[str], tmp_path: Path, make: object,
        problem: str, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "file").write_text("not a cache")
    (tmp_path / "link-to-file").symlink_to(tmp_path / "file")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    monkeypatch.setenv("REGRESSION_CACHE_DIR", make(tmp_path))  # type: ignore[operator]
    for argv in (("cache.list",), ("gen",)):
        code, err = run_task(capsys, *argv)
        assert code == 2, err
        assert "torch-regression: $REGRESSION_CACHE_DIR: " in err
        assert problem.format(tmp=tmp_path) in err and "unset it or name a folder" in err
        assert "cannot lock" not in err
    assert (tmp_path / "file").read_text() == "not a cache"
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize("device", ["", "gpu", "cuda:0"])
def test_a_device_variable_that_names_no_device_is_refused(
        inside: Repo, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        device: str) -> None:
    monkeypatch.setenv("REGRESSION_DEVICE", device)
    code, err = run_task(capsys, "key")
    assert code == 2, err
    assert (f"torch-regression: $REGRESSION_DEVICE (or --device): {device!r} is not a "
            "device: give one of cpu, cuda") in err


def test_step_summary_naming_a_folder_stops_a_real_run_before_it_records(
        subject_repo: Repo, tmp_path: Path) -> None:
    done = subject_repo.invoke("test", env={"GITHUB_STEP_SUMMARY": str(tmp_path)})
    text = output(done)
    assert done.returncode == 2, text
    assert (f"torch-regression: $GITHUB_STEP_SUMMARY: {str(tmp_path)!r} cannot be appended "
            "to: it is a folder, not a file") in done.stderr
    assert "Traceback" not in text and "INTERNALERROR" not in text
    assert "recording" not in text


def test_real_invoke_refuses_non_numbers_and_an_empty_shard_without_a_traceback(
        subject_repo: Repo) -> None:
    for argv, message in ((("gen", "--workers", "abc"), "--workers 'abc'"),
                          (("key", "--shard", ""), "--shard '' is empty")):
        done = subject_repo.invoke(*argv, process=True)
        assert done.returncode == 2, output(done)
        assert message in done.stderr and "Traceback" not in output(done)
        assert done.stdout == ""  # no key printed: the run did not collect


def _job_file(tmp: Path, text: str) -> Path:
    (tmp / "job.json").write_text(text)
    return tmp / "job.json"


JOBS = {
    "missing": (lambda tmp: tmp / "gone.json", "gone.json is missing"),
    "not JSON": (lambda tmp: _job_file(tmp, "{mode: check"), "Expecting property name"),
    "a list": (lambda tmp: _job_file(tmp, "[]"), "not a JSON object"),
    "unknown field": (lambda tmp: _job_file(tmp, '{"mode": "check", "result": "r", "x": 1}'),
                      "field 'x' is unknown or of the wrong type"),
    "wrong type": (lambda tmp: _job_file(tmp, '{"mode": "check", "result": 5}'),
                   "field 'result' is unknown or of the wrong type"),
    "unknown mode": (lambda tmp: _job_file(tmp, '{"mode": "delete", "result": "r"}'),
                     "mode 'delete' is none of collect, record, reproduce, trace, check"),
    "a folder": (lambda tmp: tmp, "cannot be read: it is a folder, where torch-regression writes"),
    "a pipe": (lambda tmp: _fifo(tmp / "pipe"),
               "it is a FIFO (named pipe), where torch-regression"),
}


@pytest.mark.parametrize("kind", list(JOBS))
def test_a_job_variable_that_names_no_job_is_a_clear_error_and_never_hangs(
        kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make, why = JOBS[kind]
    path = make(tmp_path)  # type: ignore[operator]
    monkeypatch.setenv(JOB_ENV, str(path))
    raised = _within(10, lambda: print(current_job()))
    assert len(raised) == 1 and isinstance(raised[0], ConfigError), raised
    message = str(raised[0])
    assert message.startswith(f"${JOB_ENV}: {str(path)!r} is no job of torch-regression (")
    assert why in message and f"unset it (`unset {JOB_ENV}`)" in message


def test_plain_pytest_with_a_stale_job_variable_is_a_usage_error(subject_repo: Repo,
                                                                 tmp_path: Path) -> None:
    env = {**subject_repo.env(), JOB_ENV: str(tmp_path / "torch-regression-job-1" / "job.json")}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider"],
                          cwd=subject_repo.path, env=env, text=True, capture_output=True,
                          check=False, timeout=120)
    text = output(done)
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, text
    assert f"ERROR: torch-regression: ${JOB_ENV}: " in text and "job.json is missing" in text
    assert "Traceback" not in text and "INTERNALERROR" not in text
