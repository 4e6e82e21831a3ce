"""pytest-xdist workers: what a worker has to say (warnings, progress,
refusals, errors, its own crash) reaches the user once, from the controller; a refusal
exits 2 with no INTERNALERROR and no traceback, with -n in the repository's addopts as with
`--workers`."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from helpers import SUBJECT, TESTS, Repo, make_subject_repo, output

pytest_plugins = ("pytester",)

N2_ADDOPTS = '[tool.pytest.ini_options]\naddopts = "-n 2"\n'
STRAY_TESTS = "import helper\n" + TESTS
BROKEN = "raise ImportError('subj is broken at this commit')\n"


def assert_clean(text: str, tracebacks: int = 0) -> None:
    """No sign of a crash: no INTERNALERROR, no traceback but those the message quotes, no
    relay in transit."""
    for sign in ("INTERNALERROR", "no active workers", "WorkerMessage", "warnings summary"):
        assert sign not in text, text
    assert text.count("Traceback") == tracebacks, text


def corrupt_tensor_file(cache: Path) -> Path:
    """Flip one byte of the one stored tensor file."""
    (path,) = cache.rglob("*.safetensors")
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    return path


@pytest.fixture(scope="module")
def n2_repo(tmp_path_factory: pytest.TempPathFactory) -> Repo:
    """A subject repository whose own pyproject says `-n 2`, its reference recorded."""
    root = tmp_path_factory.mktemp("n2")
    repo = make_subject_repo(root / "repo", root / "cache")
    repo.write("pyproject.toml", N2_ADDOPTS)
    repo.commit("xdist in addopts")
    done = repo.invoke("gen")  # gen records in one process, whatever addopts says
    assert done.returncode == 0, output(done)
    return repo


@pytest.mark.slow
@pytest.mark.parametrize("workers", [(), ("--workers", "2")], ids=["addopts", "workers"])
def test_a_corrupt_cache_file_is_warned_of_once_then_recorded(n2_repo: Repo,
                                                              workers: tuple[str, ...]) -> None:
    path = corrupt_tensor_file(n2_repo.cache)
    done = n2_repo.invoke("test", *workers)
    text = output(done)
    assert done.returncode == 0, text
    assert text.count(f"warning: re-recording tests/test_subj.py::test_forward: {path} is "
                      "corrupt or truncated: its content hash does not match") == 1, text
    assert text.count("recording 1 of 1 cases at ") == 1, text
    assert text.count("  [1/1] tests/test_subj.py::test_forward") == 1, text
    assert text.count("recorded 1 cases, reused 0") == 1, text
    assert "reference up to date" not in text  # the worker that waited says nothing
    assert "1 case: 1 identical, 0 changed" in text
    assert "2 workers" in text
    assert_clean(text)


STRAY = ("torch-regression: these modules were imported from your working tree while "
         "recording at the reference, so their current code would pass as the reference:\n"
         "  helper (helper/__init__.py)")


@pytest.fixture(scope="module")
def stray_repo(tmp_path_factory: pytest.TempPathFactory) -> Repo:
    """-n 2 in addopts, and tests that import a helper package of the working tree."""
    root = tmp_path_factory.mktemp("stray")
    repo = make_subject_repo(root / "repo", root / "cache")
    repo.write("pyproject.toml", N2_ADDOPTS)
    repo.write("helper/__init__.py", "FACTOR = 1\n")
    repo.write("tests/test_subj.py", STRAY_TESTS)
    repo.commit("a helper package outside the subject")
    return repo


@pytest.mark.parametrize("task", [("test",), ("test", "--workers", "2"), ("gen",),
                                  ("gen", "--workers", "2")],
                         ids=["test-addopts", "test-workers", "gen", "gen-workers"])
@pytest.mark.slow
def test_a_refused_recording_exits_2_with_its_message_once(stray_repo: Repo,
                                                           task: tuple[str, ...]) -> None:
    done = stray_repo.invoke(*task)
    text = output(done)
    assert done.returncode == 2, text
    assert text.count(STRAY) == 1, text
    assert "Nothing was stored." in text
    assert "did not run" not in text  # nothing ran because of the refusal: not said twice
    assert_clean(text)


@pytest.mark.slow
def test_a_subject_that_fails_to_import_at_the_reference_is_refused_once(
        tmp_path: Path) -> None:
    repo = make_subject_repo(tmp_path / "repo", tmp_path / "cache")
    repo.write("pyproject.toml", N2_ADDOPTS)
    repo.write("subj/__init__.py", BROKEN)
    broken = repo.commit("a subject that does not import")
    repo.write("subj/__init__.py", SUBJECT.format(scale="1.0"))
    done = repo.invoke("test", "--reference", broken)
    text = output(done)
    assert done.returncode == 2, text
    assert text.count("torch-regression: the subject (subj) fails to import at the reference "
                      f"{broken[:12]}") == 1, text
    assert text.count("ImportError: subj is broken at this commit") == 1, text
    assert_clean(text, tracebacks=1)  # the subject's own, which the message quotes


CRASHING = """\
import os

import subj


def test_crash(regression):
    regression.check(subj.forward(regression.randn(2, 4)), name="out")
    if os.environ.get("CRASH_WHEN") == ("record" if subj.SCALE == 1.0 else "check"):
        os._exit(3)


def test_error(regression):
    regression.check(subj.missing(1))
"""


@pytest.fixture(scope="module")
def crash_repo(tmp_path_factory: pytest.TempPathFactory) -> Repo:
    """A case that kills its process (at the reference or in the working tree, as told), and
    a case that raises; the working tree's subject scales by 1.5."""
    root = tmp_path_factory.mktemp("crash")
    repo = make_subject_repo(root / "repo", root / "cache")
    repo.write("tests/test_crash.py", CRASHING)
    repo.commit("a case that may crash, a case that raises")
    repo.write("subj/__init__.py", SUBJECT.format(scale="1.5"))
    return repo


@pytest.mark.slow
def test_a_worker_that_crashes_while_recording_is_named(crash_repo: Repo) -> None:
    done = crash_repo.invoke("gen", "--force", "--workers", "2", env={"CRASH_WHEN": "record"})
    text = output(done)
    assert done.returncode == 2, text
    assert text.count("torch-regression: tests/test_crash.py::test_crash stopped the recording "
                      "at the reference: its pytest-xdist worker gw") == 1, text
    assert "crashed while running it: the process ended (os._exit, a signal, or out of " \
           "memory)" in text
    assert "`invoke gen --workers 1` records in one process" in text
    assert_clean(text)


@pytest.mark.slow
def test_a_worker_that_crashes_in_a_case_is_an_error_naming_it(crash_repo: Repo) -> None:
    gen = crash_repo.invoke("gen", "--force", "--workers", "2")  # a case error in a worker
    assert gen.returncode == 0, output(gen)
    assert "not in reference: tests/test_crash.py::test_error: failed at the reference: " \
           "AttributeError: module 'subj' has no attribute 'missing'" in gen.stdout
    done = crash_repo.invoke("test", "--workers", "2", env={"CRASH_WHEN": "check"})
    text = output(done)
    assert done.returncode == 1, text
    assert "3 cases: 0 identical, 1 changed, 0 not in reference, 2 errors" in text
    assert text.count("ERROR tests/test_crash.py::test_crash: its pytest-xdist worker gw") \
        == 1, text
    assert "so it was not judged; `pytest -n 0 'tests/test_crash.py::test_crash'` runs it " \
           "alone and shows why" in text
    assert text.count("ERROR tests/test_crash.py::test_error: AttributeError: module 'subj' "
                      "has no attribute 'missing' (in tests/test_crash.py:13)") == 1, text
    assert text.count("CHANGED tests/test_subj.py::test_forward") == 1, text
    assert "INTERNALERROR" not in text


RELAYING = """\
from regression.plugin.worker_messages import LINE, PLUGIN, in_worker


def pytest_collection_modifyitems(config, items):
    if in_worker(config):  # each worker says the same: the controller shows it once
        relay = config.pluginmanager.get_plugin(PLUGIN)
        for line in ("warning: the same from every worker", "progress [1/1]"):
            relay.send(LINE, line)
"""


@pytest.mark.slow
def test_the_relay_brings_each_line_once_and_is_no_warning(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(RELAYING)
    pytester.makepyfile(test_plain="def test_one():\n    pass\n\ndef test_two():\n    pass\n")
    done = pytester.runpytest_inprocess("-n", "2", "-p", "no:cacheprovider")
    text = done.stdout.str() + done.stderr.str()
    assert done.ret == 0, text
    assert text.count("warning: the same from every worker") == 1, text
    assert text.count("progress [1/1]") == 1, text
    assert "2 passed" in text and "warning" not in text.splitlines()[-1]
    assert_clean(text)


@pytest.mark.slow
def test_plain_pytest_with_workers_refuses_with_a_usage_error_once(
        pytester: pytest.Pytester) -> None:
    """No config.yaml: every worker refuses; pytest says it once, exit 4, no crash."""
    pytester.makepyfile(test_case=textwrap.dedent("""\
        def test_case(regression):
            regression.check(1)
        """))
    done = pytester.runpytest_inprocess("-n", "2", "-p", "no:cacheprovider")
    text = done.stdout.str() + done.stderr.str()
    assert done.ret == pytest.ExitCode.USAGE_ERROR, text
    assert text.count("ERROR: torch-regression: ") == 1, text
    assert "config.yaml: no config.yaml in" in text
    assert_clean(text)
