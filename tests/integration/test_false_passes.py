"""Ways a run could pass without checking what it should: each one fails, and says why."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
# Imported before any in-process run: pytester removes the modules a run imported, and
# torch (a C extension) cannot be imported twice in one process.
import regression.plugin.fixture  # noqa: F401 - torch, safetensors, the store
import regression.references.beside  # noqa: F401 - the cache, the recording
import regression.references.needed  # noqa: F401 - the check run's recorder
from helpers import CONFIG, SUBJECT, Repo, make_subject_repo, output, tagged_repo

from regression.declarations import FILE

pytest_plugins = ["pytester"]

HELPED_SUBJECT = """\
import torch
import zoohelp


def forward(x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x) * zoohelp.SCALE
"""


@pytest.mark.slow
def test_helper_package_outside_the_subject_stops_the_recording(subject_repo: Repo) -> None:
    subject_repo.write("zoohelp/__init__.py", "SCALE = 1.0\n")
    subject_repo.write("subj/__init__.py", HELPED_SUBJECT)
    subject_repo.commit("a helper package beside the subject")
    refused = subject_repo.invoke("gen", "--reference", "HEAD")
    assert refused.returncode == 2, output(refused)
    assert "zoohelp (zoohelp/__init__.py)" in refused.stderr
    assert "subject.packages" in refused.stderr and "harness" in refused.stderr
    assert "Traceback" not in output(refused)
    config = (subject_repo.path / "config.yaml").read_text()
    subject_repo.write("config.yaml", config.replace("[subj]", "[subj, zoohelp]"))
    subject_repo.write("zoohelp/__init__.py", "SCALE = 1.5\n")  # now the reference's is used
    caught = subject_repo.invoke("test", "--reference", "HEAD")
    assert caught.returncode == 1, output(caught)
    assert "CHANGED tests/test_subj.py::test_forward" in output(caught)


@pytest.mark.slow
def test_cases_deselected_by_addopts_or_collect_only_fail_the_run(
        recorded_subject_repo: Repo) -> None:
    subject_repo = recorded_subject_repo
    # Each way a case can be left out, once unsharded and once as a shard of one.
    for addopts, why, shard in (("-k nomatch", "deselected by -k", ()),
                                ("--co", "--collect-only", ("--shard", "1/1"))):
        done = subject_repo.invoke("test", *shard, env={"PYTEST_ADDOPTS": addopts})
        text = output(done)
        assert done.returncode == 1, (addopts, shard, text)
        assert "1 of 1 regression cases this run was meant to check did not run" in text
        assert f"tests/test_subj.py::test_forward: {why}" in text


def test_a_case_that_checks_nothing_is_an_error_and_reasons_name_the_exception_and_where(
        subject_repo: Repo) -> None:
    """One recording at HEAD for both: a case that checks nothing, a subject module that
    does not parse there, and a value that cannot be stored."""
    subject_repo.write("tests/test_subj.py", """\
        def test_forward(regression):
            regression.randn(3)  # draws inputs, checks nothing
        """)
    subject_repo.write("subj/edge.py", "def edge(x:\n    return x\n")  # does not parse
    subject_repo.write("tests/test_edge.py", """\
        from subj.edge import edge


        def test_edge(regression):
            regression.check(edge(1.0))
        """)
    subject_repo.write("tests/test_store.py", """\
        def test_unstorable(regression):
            regression.check(object())
        """)
    subject_repo.commit("a case that checks nothing, a subject module that does not parse, "
                        "a value that cannot be stored")
    subject_repo.write("subj/edge.py", "def edge(x):\n    return x\n")
    done = subject_repo.invoke("test", "--reference", "HEAD")
    text = output(done)
    assert done.returncode == 1, text
    assert "3 cases: 0 identical, 0 changed, 1 not in reference, 2 errors" in text, text
    assert "ERROR tests/test_subj.py::test_forward: the test called regression.check() zero " \
           "times" in text
    assert "NOT IN REFERENCE tests/test_edge.py::test_edge: could not be collected at the " \
           "reference: SyntaxError: " in text, text
    assert "(in subj/edge.py:1)" in text
    assert "StoreError: output '0': cannot store builtins.object at <value>" in text
    assert "(in tests/test_store.py:2)" in text


@pytest.mark.slow
def test_xdist_in_addopts_records_in_one_process_and_checks_in_workers(subject_repo: Repo
                                                                       ) -> None:
    workers = {"PYTEST_ADDOPTS": "-n 2"}
    # invoke gen records whatever addopts say: in one process, and despite --regression-no-gen
    gen = subject_repo.invoke("gen", env={"PYTEST_ADDOPTS": "-n 2 --regression-no-gen"})
    assert gen.returncode == 0, output(gen)
    assert "recorded 1 cases" in gen.stdout
    done = subject_repo.invoke("test", env=workers)
    text = output(done)
    assert done.returncode == 0, text
    assert "2 workers" in text
    assert text.count("1 case: 1 identical, 0 changed") == 1  # once, by the controller
    one = subject_repo.invoke("test", "--workers", "1", env=workers)  # overrides addopts' -n 2
    assert one.returncode == 0, output(one)
    assert "workers" not in output(one) and "1 case: 1 identical" in one.stdout
    deselected = subject_repo.invoke("gen", "--force", env={"PYTEST_ADDOPTS": "-k nomatch"})
    assert "warning: 1 of 1 cases deselected (-k, -m or --deselect in addopts or " \
           "PYTEST_ADDOPTS) are not recorded" in output(deselected)
    subject_repo.write("subj/__init__.py", SUBJECT.format(scale="1.5"))
    changed = subject_repo.invoke("test", env={"PYTEST_ADDOPTS": "-n 2 -k nomatch"})
    assert changed.returncode == 1, output(changed)
    assert "1 of 1 regression cases this run was meant to check did not run" in output(changed)


@pytest.mark.slow
def test_subject_from_elsewhere_fails_the_run_also_with_workers(recorded_subject_repo: Repo,
                                                                tmp_path: Path) -> None:
    subject_repo = recorded_subject_repo  # `invoke gen` recorded v1
    copy = tmp_path / "copy"
    shutil.copytree(subject_repo.path / "subj", copy / "subj")
    subject_repo.write("tests/conftest.py", f"import sys\n\nsys.path.insert(0, {str(copy)!r})\n")
    for workers in ("1", "2"):
        done = subject_repo.invoke("test", "--workers", workers)
        assert done.returncode == 3, (workers, output(done))
        assert "subject modules were imported from outside" in output(done)


def test_thread_count_changed_by_a_conftest_or_a_case_skipped_before_its_fixture_fail(
        subject_repo: Repo) -> None:
    """One recording at HEAD for both: a conftest that may change the thread count (an
    error in both modes) and a case a fixture may skip (the reference recorded it)."""
    subject_repo.write("tests/conftest.py", """\
        import os

        import pytest
        import torch


        @pytest.fixture(autouse=True)
        def threads():
            if os.environ.get("MORE_THREADS"):
                torch.set_num_threads(2)
        """)
    subject_repo.write("tests/test_guarded.py", """\
        import os

        import pytest
        import subj


        @pytest.fixture
        def maybe_skip():
            if os.environ.get("SKIP_IT"):
                pytest.skip("skipped by the candidate")


        def test_guarded(maybe_skip, regression):
            regression.check(subj.forward(regression.randn(2, 4)))
        """)
    subject_repo.commit("a conftest that may change the thread count, a case a fixture may skip")
    more = {"MORE_THREADS": "1"}
    refused = subject_repo.invoke("gen", "--reference", "HEAD", env=more)
    assert refused.returncode == 2, output(refused)
    assert "torch.get_num_threads() is 2, but config.yaml's determinism.threads is 1" \
        in refused.stderr
    assert subject_repo.invoke("gen", "--reference", "HEAD").returncode == 0
    checked = subject_repo.invoke("test", "--reference", "HEAD", env=more)
    assert checked.returncode == 1, output(checked)
    assert "determinism.threads is 1" in output(checked)
    assert "0 identical" in output(checked)

    done = subject_repo.invoke("test", "--reference", "HEAD", env={"SKIP_IT": "1"})
    text = output(done)
    assert done.returncode == 1, text
    assert "skipped, but the reference" in text and "skipped by the candidate" in text


def test_gen_shows_why_a_test_file_did_not_collect(subject_repo: Repo) -> None:
    subject_repo.write("tests/test_broken.py", "import nonexistent_mod\n")
    done = subject_repo.invoke("gen")
    text = output(done)
    assert done.returncode == 2, text
    assert "error collecting tests/test_broken.py" in text and "nonexistent_mod" in text


# Traps: a recorded case that does not run to its check, and a run that
# ends early, each fail and say which case and why.
#
# One repository is recorded once (module scope); each test runs it with an environment
# variable that turns one trap on. Where the plugin alone is judged, pytest runs in this
# process (pytester); where the process boundary matters (early exits), `invoke test` runs.


CONFTEST = """\
import os
import sys

import pytest

MODE = os.environ.get("ADV_MODE", "")
END = os.environ.get("ADV_END", "")
SESSION = []

if END == "conftest-exit":
    sys.exit(0)

if MODE == "override":
    class Fake:
        def randn(self, *size):
            import torch
            return torch.zeros(*size)

        def check(self, value, name=None):
            pass

    @pytest.fixture
    def regression():
        return Fake()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if MODE == "launder" and report.failed:
        report.outcome = "passed"
        report.longrepr = None
    return report


def pytest_collection_modifyitems(items):
    if MODE == "drop":
        items[:] = [i for i in items if "test_subj.py::test_forward" not in i.nodeid]


def pytest_runtest_protocol(item):
    if MODE == "protocol" and "regression" in item.fixturenames:
        return True  # "handled": the case never runs, and nothing reports it


def pytest_sessionstart(session):
    SESSION.append(session)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session):
    if END == "sessionfinish-exit":
        raise SystemExit(0)


def pytest_unconfigure(config):
    if END == "status-reset":
        SESSION[0].exitstatus = 0
"""

TRAPS = """\
import os

import pytest
import subj

MODE = os.environ.get("ADV_MODE", "")


def out(regression):
    return subj.forward(regression.randn(2, 4))


@pytest.fixture
def after_regression():
    if MODE == "fixture-after":
        pytest.skip("the candidate skips it in a fixture")


@pytest.fixture
def uses_regression(regression):
    if MODE == "fixture-uses":
        pytest.skip("a fixture that uses regression skips it")
    return regression


@pytest.mark.xfail(reason="known issue")
def test_xfail_lax(regression):
    regression.check(out(regression), name="out")


@pytest.mark.xfail(MODE == "xfail-strict", reason="marked now", strict=True)
def test_xfail_strict(regression):
    regression.check(out(regression), name="out")


@pytest.mark.xfail(MODE == "xfail-norun", reason="not run now", run=False)
def test_xfail_norun(regression):
    regression.check(out(regression), name="out")


def test_xfail_call(regression):
    regression.check(out(regression), name="out")
    if MODE == "xfail-call":
        pytest.xfail("xfail() called after the check")


def test_skip_call(regression):
    regression.check(out(regression), name="out")
    if MODE == "skip-call":
        pytest.skip("skip() called after the check")


@pytest.mark.skipif("os.environ.get('ADV_MODE') == 'skipif'", reason="skipif on the candidate")
def test_skipif(regression):
    regression.check(out(regression), name="out")


def test_fixture_after(regression, after_regression):
    regression.check(out(regression), name="out")


def test_fixture_uses(uses_regression):
    uses_regression.check(out(uses_regression), name="out")


def test_importorskip(regression):
    if MODE == "importorskip":
        pytest.importorskip("no_such_module_here")
    regression.check(out(regression), name="out")
"""

MODULE_SKIP = """\
import os

import pytest

if os.environ.get("ADV_MODE") == "module-skip":
    pytest.importorskip("no_such_module_here")

import subj


def test_module(regression):
    regression.check(subj.forward(regression.randn(2, 4)), name="out")
"""

ENDS = """\
import os
import signal
import sys

import pytest
import subj

END = os.environ.get("ADV_END", "")


@pytest.fixture
def ends_in_teardown():
    yield
    if END == "teardown":
        os._exit(0)


def test_ends(regression):
    regression.check(subj.forward(regression.randn(2, 4)), name="out")
    if END == "os._exit":
        os._exit(0)
    if END == "sys.exit":
        sys.exit(0)
    if END == "pytest.exit":
        pytest.exit("stopped by the test", returncode=0)
    if END == "KeyboardInterrupt":
        raise KeyboardInterrupt
    if END == "SIGKILL":
        os.kill(os.getpid(), signal.SIGKILL)


def test_teardown_ends(regression, ends_in_teardown):
    regression.check(subj.forward(regression.randn(2, 4)), name="out")
"""

CHANGED_SUBJECT = SUBJECT.format(scale="1.5")
ENDS_ONLY = ("--case", "tests/test_end.py")


@pytest.fixture(scope="module")
def traps(tmp_path_factory: pytest.TempPathFactory) -> Repo:
    """The subject repository with every trap in its tests, recorded at HEAD. Tests must
    not change it: in-process runs copy it, invoke runs only set variables."""
    root = tmp_path_factory.mktemp("traps")
    repo = make_subject_repo(root / "repo", root / "cache")
    repo.write("config.yaml", CONFIG.format(reference="HEAD", path="."))
    repo.write("tests/conftest.py", CONFTEST)
    repo.write("tests/test_adv.py", TRAPS)
    repo.write("tests/test_adv_module.py", MODULE_SKIP)
    repo.write("tests/test_end.py", ENDS)
    repo.commit("traps")
    done = repo.invoke("gen")
    assert done.returncode == 0, output(done)
    assert "recorded 13 cases" in done.stdout, output(done)
    return repo


@pytest.fixture
def plain(traps: Repo, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
          ) -> Iterator[pytest.Pytester]:
    """A copy of the recorded repository for plain pytest in this process, its cache shared."""
    shutil.copytree(traps.path, pytester.path, symlinks=True, dirs_exist_ok=True)
    pytester.syspathinsert()
    monkeypatch.setenv("REGRESSION_CACHE_DIR", str(traps.cache))
    for name in ("ADV_MODE", "ADV_END"):
        monkeypatch.delenv(name, raising=False)
    yield pytester


def _run(pytester: pytest.Pytester, mode: str, *args: str, changed: bool = False
         ) -> tuple[int, str]:
    """Plain pytest with the trap `mode` on (and the subject changed): exit code, output."""
    pytester.path.joinpath("subj", "__init__.py").write_text(
        CHANGED_SUBJECT if changed else SUBJECT.format(scale="1.0"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ADV_MODE", mode)
        result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p",
                                              "no:hypothesispytest", *(args or ("tests",)))
    return int(result.ret), result.stdout.str() + result.stderr.str()


# 1. A recorded case must end identical, changed or error: no mark or fixture excuses it.

@pytest.mark.slow
def test_non_strict_xfail_does_not_hide_a_change(plain: pytest.Pytester) -> None:
    code, text = _run(plain, "", "tests/test_adv.py::test_xfail_lax", changed=True)
    assert code == 1, text
    assert "CHANGED tests/test_adv.py::test_xfail_lax: 'out'" in text
    assert "output 'out' is not bit-identical to the reference" in text
    assert "xfailed" not in text


def test_strict_xfail_marked_now_does_not_hide_a_change(plain: pytest.Pytester) -> None:
    code, text = _run(plain, "xfail-strict", "tests/test_adv.py::test_xfail_strict",
                      changed=True)
    assert code == 1, text
    assert "CHANGED tests/test_adv.py::test_xfail_strict" in text and "xfailed" not in text


def test_xfail_that_does_not_run_the_case_is_an_error(plain: pytest.Pytester) -> None:
    code, text = _run(plain, "xfail-norun", "tests/test_adv.py::test_xfail_norun")
    assert code == 1, text
    assert "ERROR tests/test_adv.py::test_xfail_norun: skipped, but the reference" in text
    assert "recorded this case: [NOTRUN] not run now" in text


def test_xfail_called_after_the_check_is_changed_or_an_error(plain: pytest.Pytester) -> None:
    code, text = _run(plain, "xfail-call", "tests/test_adv.py::test_xfail_call", changed=True)
    assert code == 1, text
    assert "CHANGED tests/test_adv.py::test_xfail_call" in text and "xfailed" not in text
    code, text = _run(plain, "xfail-call", "tests/test_adv.py::test_xfail_call")
    assert code == 1, text
    assert "ERROR tests/test_adv.py::test_xfail_call: skipped, but the reference" in text
    assert "recorded this case: xfail() called after the check" in text


def test_skip_called_after_the_check_is_an_error(plain: pytest.Pytester) -> None:
    code, text = _run(plain, "skip-call", "tests/test_adv.py::test_skip_call")
    assert code == 1, text
    assert "ERROR tests/test_adv.py::test_skip_call: skipped, but the reference" in text
    assert "recorded this case: skip() called after the check" in text


def test_skipif_mark_on_a_recorded_case_is_an_error(plain: pytest.Pytester) -> None:
    code, text = _run(plain, "skipif", "tests/test_adv.py::test_skipif")
    assert code == 1, text
    assert "ERROR tests/test_adv.py::test_skipif: skipped, but the reference" in text
    assert "recorded this case: skipif on the candidate" in text


def test_fixture_after_regression_that_skips_is_an_error(plain: pytest.Pytester) -> None:
    code, text = _run(plain, "fixture-after", "tests/test_adv.py::test_fixture_after")
    assert code == 1, text
    assert "ERROR tests/test_adv.py::test_fixture_after: skipped, but the reference" in text
    assert "the candidate skips it in a fixture" in text


def test_fixture_that_uses_regression_and_skips_is_an_error(plain: pytest.Pytester) -> None:
    code, text = _run(plain, "fixture-uses", "tests/test_adv.py::test_fixture_uses")
    assert code == 1, text
    assert "ERROR tests/test_adv.py::test_fixture_uses: skipped, but the reference" in text
    assert "a fixture that uses regression skips it" in text


def test_importorskip_in_the_body_is_an_error(plain: pytest.Pytester) -> None:
    code, text = _run(plain, "importorskip", "tests/test_adv.py::test_importorskip")
    assert code == 1, text
    assert "ERROR tests/test_adv.py::test_importorskip: skipped, but the reference" in text
    assert "could not import 'no_such_module_here'" in text


def test_module_skipped_at_collection_is_an_error_for_its_recorded_cases(
        plain: pytest.Pytester) -> None:
    code, text = _run(plain, "module-skip", "tests/test_adv_module.py", "tests/test_subj.py")
    assert code == 1, text
    assert "ERROR tests/test_adv_module.py::test_module: skipped as tests/test_adv_module.py " \
           "was collected, but the reference" in text
    assert "could not import 'no_such_module_here'" in text
    assert "1 regression case did not pass, which pytest's own count does not show" in text


def test_a_conftest_regression_fixture_is_not_a_pass(plain: pytest.Pytester) -> None:
    code, text = _run(plain, "override", "tests/test_adv.py::test_skip_call")
    assert code == 1, text
    assert "ERROR tests/test_adv.py::test_skip_call: the test's `regression` fixture is not " \
           "torch-regression's" in text


def test_a_hook_that_launders_reports_does_not_pass_a_change(plain: pytest.Pytester) -> None:
    code, text = _run(plain, "launder", "tests/test_subj.py", changed=True)
    assert code == 1, text
    assert "2 passed" in text  # what the laundered report says; the run still fails
    assert "CHANGED tests/test_subj.py::test_forward" in text
    assert "regression case did not pass, which pytest's own count does not show: " \
           "CHANGED tests/test_subj.py::test_forward" in text


def test_a_hook_that_runs_no_case_does_not_pass(plain: pytest.Pytester) -> None:
    code, text = _run(plain, "protocol", "tests/test_subj.py")
    assert code == 1, text
    assert "1 passed" in text  # test_plain: pytest alone would call this run green
    assert "1 of 1 regression cases this run was meant to check did not run, so it does not " \
           "pass:\n  tests/test_subj.py::test_forward: did not run" in text


def test_every_trap_off_the_recorded_repository_passes(plain: pytest.Pytester) -> None:
    code, text = _run(plain, "")
    assert code == 0, text
    assert "13 cases: 13 identical" in text


# 2. A run passes only on the check run's own completion record.

@pytest.mark.parametrize("end, where", [
    ("os._exit", "while running tests/test_end.py::test_ends"),
    ("teardown", "while running tests/test_end.py::test_teardown_ends"),
    ("SIGKILL", "was killed by signal 9 (SIGKILL) while running tests/test_end.py::test_ends"),
    ("conftest-exit", "before any test started"),
    ("sessionfinish-exit", "after 2 tests had ended, outside any test"),
])
def test_a_process_that_ends_early_does_not_pass(traps: Repo, end: str, where: str) -> None:
    done = traps.invoke("test", *ENDS_ONLY, env={"ADV_END": end})
    text = output(done)
    assert done.returncode == 2, text
    assert "torch-regression: the check run ended before it finished: its process" in text
    assert where in text
    assert "so nothing says every case was judged and the run does not pass" in text


def test_gen_whose_process_ends_early_does_not_pass(traps: Repo) -> None:
    done = traps.invoke("gen", env={"ADV_END": "conftest-exit"})
    text = output(done)
    assert done.returncode == 2, text
    assert "the check run ended before it finished: its process exited with code 0 before " \
           "any test started" in text


def test_pytest_exit_with_code_0_names_the_cases_it_cut_short(traps: Repo) -> None:
    done = traps.invoke("test", *ENDS_ONLY, env={"ADV_END": "pytest.exit"})
    text = output(done)
    assert done.returncode == 1, text
    assert "2 of 2 regression cases this run was meant to check did not run" in text
    assert "tests/test_end.py::test_ends: the run stopped in this case: pytest.exit('stopped " \
           "by the test') was called" in text
    assert "tests/test_end.py::test_teardown_ends: the run stopped before it: pytest.exit(" \
           "'stopped by the test') was called in tests/test_end.py::test_ends" in text


def test_sys_exit_or_keyboard_interrupt_in_a_case_do_not_pass(traps: Repo) -> None:
    done = traps.invoke("test", *ENDS_ONLY, env={"ADV_END": "sys.exit"})
    assert done.returncode == 1, output(done)
    assert "ERROR tests/test_end.py::test_ends: SystemExit: 0" in output(done)
    done = traps.invoke("test", *ENDS_ONLY, env={"ADV_END": "KeyboardInterrupt"})
    text = output(done)
    assert done.returncode == 2, text
    assert "tests/test_end.py::test_teardown_ends: the run stopped before it: it was " \
           "interrupted (KeyboardInterrupt" in text


def test_an_exit_status_reset_to_0_does_not_pass_a_change(traps: Repo) -> None:
    traps.write("subj/__init__.py", CHANGED_SUBJECT)
    try:
        done = traps.invoke("test", *ENDS_ONLY, env={"ADV_END": "status-reset"})
    finally:
        traps.write("subj/__init__.py", SUBJECT.format(scale="1.0"))
    text = output(done)
    assert done.returncode == 1, text
    assert "torch-regression: the exit status was set to 0 after the run was judged (by a " \
           "hook?), but 2 regression cases did not pass: CHANGED tests/test_end.py::test_ends, " \
           "CHANGED tests/test_end.py::test_teardown_ends" in text


def test_a_case_a_hook_drops_without_deselecting_fails_the_run(traps: Repo) -> None:
    done = traps.invoke("test", "--case", "tests/test_subj.py", env={"ADV_MODE": "drop"})
    text = output(done)
    assert done.returncode == 1, text
    assert "tests/test_subj.py::test_forward: removed from the run by a " \
           "pytest_collection_modifyitems hook" in text


def test_plain_pytest_stopped_by_pytest_exit_does_not_pass(plain: pytest.Pytester,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    monkeypatch.setenv("ADV_END", "pytest.exit")
    code, text = _run(plain, "", "tests/test_end.py")
    assert code == 1, text
    assert "2 of 2 regression cases this run was meant to check did not run" in text
    assert "tests/test_end.py::test_ends: the run stopped in this case: pytest.exit(" \
           "'stopped by the test') was called" in text


def test_plain_pytest_with_its_exit_status_reset_to_0_does_not_pass(
        plain: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ADV_END", "status-reset")
    code, text = _run(plain, "", "tests/test_end.py", changed=True)
    assert code == 1, text
    assert "the exit status was set to 0 after the run was judged (by a hook?), but 2 " \
           "regression cases did not pass: CHANGED tests/test_end.py::test_ends" in text


LISTED_SUBJECT = """\
import torch

MODELS = {models}


def forward(name: str, x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x) * (1 + MODELS.index(name))
"""

LISTED_TESTS = """\
import pytest
import subj
{extra}

@pytest.mark.parametrize("name", subj.MODELS)
def test_model(regression, name):
    regression.check(subj.forward(name, regression.randn(2, 4)), name="out")
"""


def listed_repo(tmp_path: Path) -> Repo:
    """A library whose tests are parametrized over the models it lists (the README's
    pattern): a, b and c at the reference (v1); the working tree lists a and b."""
    repo = tagged_repo(tmp_path / "repo", tmp_path / "cache", {
        "config.yaml": CONFIG.format(reference="v1", path="."),
        "subj/__init__.py": LISTED_SUBJECT.format(models='["a", "b", "c"]'),
        "tests/test_models.py": LISTED_TESTS.format(extra=""), "tests/listing.py": "SKIP = ()\n"})
    repo.write("subj/__init__.py", LISTED_SUBJECT.format(models='["a", "b"]'))
    return repo


REMOVED_C = "REMOVED tests/test_models.py::test_model[c]"


@pytest.mark.slow  # twelve runs of one history
def test_a_case_the_subject_no_longer_makes_fails_until_declared(tmp_path: Path) -> None:
    """The subject stops listing a model its tests are parametrized over: the case the
    reference collected is reported, recorded beside the check (cold) or not (warm), with
    cases deselected (-k, -m in addopts), by each shard (each with a cache of its own, as
    CI's), where what the cache kept of the collection is gone or damaged (recorded again),
    and passes once declared."""
    repo = listed_repo(tmp_path)
    for run in ("cold", "warm"):
        done = repo.invoke("test")
        text = output(done)
        assert done.returncode == 1, (run, text)
        assert f"{REMOVED_C}: collected at the reference" in text, (run, text)
        assert "2 identical" in text and "1 removed" in text, (run, text)
    selected = repo.invoke("test", "-k", "a")
    assert selected.returncode == 1 and REMOVED_C in output(selected), output(selected)
    marked = repo.invoke("test", env={"PYTEST_ADDOPTS": "-m 'not slow'"})
    assert marked.returncode == 1 and REMOVED_C in output(marked), output(marked)
    for shard in ("1/2", "2/2"):
        alone = Repo(repo.path, tmp_path / f"cache-{shard[0]}")
        done = alone.invoke("test", "--shard", shard)
        assert done.returncode == 1 and REMOVED_C in output(done), (shard, output(done))
    (folder,) = repo.cache.glob("*/collections")
    (record,) = folder.iterdir()
    record.write_bytes(record.read_bytes().replace(b"[b]", b"[B]"))  # damaged
    damaged = repo.invoke("test")
    assert damaged.returncode == 1 and REMOVED_C in output(damaged), output(damaged)
    assert "re-recording tests/test_models.py::test_model[a]" in output(damaged)
    shutil.rmtree(folder)
    gone = repo.invoke("test")
    assert gone.returncode == 1 and REMOVED_C in output(gone), output(gone)
    picked = repo.invoke("accept", "-k", "a", "--reason", "a only")  # -k names no removal
    assert "not declared: 1 removed case that -k 'a' does not name" in output(picked), \
        output(picked)
    assert not (repo.path / FILE).exists(), output(picked)
    accepted = repo.invoke("accept", "--reason", "c is retired")
    assert accepted.returncode == 0, output(accepted)
    entry = yaml.safe_load((repo.path / FILE).read_text())["changes"]
    assert [(e["case"], e["size"], e["outputs"]) for e in entry] == [
        ("tests/test_models.py::test_model[c]", "removed", [])]
    declared = repo.invoke("test")
    assert declared.returncode == 0, output(declared)
    assert "DECLARED tests/test_models.py::test_model[c]: c is retired" in output(declared)
    unjudged = repo.invoke("accept", "--prune", env={"PYTEST_ADDOPTS": "--ignore=tests/none"})
    assert "nothing to prune" in output(unjudged) and (repo.path / FILE).exists(), \
        output(unjudged)  # not judged under other options: still in effect, kept
    repo.commit("c is retired")
    repo.git("tag", "v2")
    repo.write("config.yaml", CONFIG.format(reference="v2", path="."))
    moved = repo.invoke("test")  # the reference holds the removal: the declaration is stale
    assert moved.returncode == 0, output(moved)
    assert "STALE tests/test_models.py::test_model[c]" in output(moved)
    pruned = repo.invoke("accept", "--prune")
    assert "dropped tests/test_models.py::test_model[c]: the reference no longer has it " \
        "either" in output(pruned), output(pruned)


ONLY_C = """\
import subj

if "c" in subj.MODELS:
    def test_c(regression):
        regression.check(subj.forward("c", regression.randn(2, 4)), name="out")
"""


def test_a_test_file_whose_every_case_the_subject_removed_is_judged(tmp_path: Path) -> None:
    """A test file whose cases the library's list decides yields no test once its last
    model goes: its cases are still removed, cold and warm (before: it was never judged,
    the run passed); a file of plain tests beside it keeps nothing."""
    repo = tagged_repo(tmp_path / "repo", tmp_path / "cache", {
        "config.yaml": CONFIG.format(reference="v1", path="."),
        "subj/__init__.py": LISTED_SUBJECT.format(models='["a", "c"]'),
        "tests/test_only_c.py": ONLY_C, "tests/test_plain.py": "def test_plain():\n    pass\n",
        "tests/test_models.py": LISTED_TESTS.format(extra="")})
    repo.write("subj/__init__.py", LISTED_SUBJECT.format(models='["a"]'))
    for run in ("cold", "warm"):
        done = repo.invoke("test")
        assert done.returncode == 1, (run, output(done))
        assert "REMOVED tests/test_only_c.py::test_c: collected at the reference" in \
            output(done), (run, output(done))
        assert "1 identical" in output(done) and "2 removed" in output(done), output(done)
    (folder,) = repo.cache.glob("*/collections")
    assert len(list(folder.iterdir())) == 2  # test_models.py's and test_only_c.py's


def test_a_case_the_test_code_no_longer_makes_is_no_removal(tmp_path: Path) -> None:
    """Cases the test code stops making on purpose (an edited test file, a helper it
    imports) are no removal: the reference's collection is taken with that code. Nor is
    the placeholder of a parameter set that was empty at the reference (`[NOTSET]`)."""
    repo = listed_repo(tmp_path)
    repo.write("subj/__init__.py", LISTED_SUBJECT.format(models='["a", "b", "c", "z"]'))
    repo.write("tests/test_new.py", LISTED_TESTS.format(extra="").replace(
        "subj.MODELS)", "[m for m in subj.MODELS if m == 'z'])"))  # none at the reference
    first = repo.invoke("test")  # records a, b and c; z is not in the reference
    assert first.returncode == 0 and "REMOVED" not in output(first), output(first)
    repo.write("tests/listing.py", 'SKIP = ("c",)\n')
    repo.write("tests/test_models.py", LISTED_TESTS.format(extra="import listing").replace(
        "subj.MODELS)", "[m for m in subj.MODELS if m not in listing.SKIP])"))
    by_test_file = repo.invoke("test")
    assert by_test_file.returncode == 0 and "REMOVED" not in output(by_test_file), \
        output(by_test_file)
    repo.write("tests/listing.py", 'SKIP = ("b", "c")\n')  # the helper, not the test file
    by_helper = repo.invoke("test")
    assert by_helper.returncode == 0 and "REMOVED" not in output(by_helper), output(by_helper)
    repo.write("subj/__init__.py", LISTED_SUBJECT.format(models='["b", "c", "d"]'))
    by_subject = repo.invoke("test")  # the subject again: a is gone
    assert by_subject.returncode == 1, output(by_subject)
    assert "REMOVED tests/test_models.py::test_model[a]" in output(by_subject)


def test_cases_gone_while_the_subject_is_the_reference_s_are_no_removal(tmp_path: Path
                                                                       ) -> None:
    """The tests pick models by an environment variable: a run that picks fewer, with the
    subject as the reference has it, removed nothing; it says what it did not judge (before:
    REMOVED, blaming the subject). Once the subject changes, a removal is one again."""
    chosen = LISTED_TESTS.format(extra="import os").replace(
        "subj.MODELS)", "os.environ.get('MODELS', ','.join(subj.MODELS)).split(','))")
    repo = tagged_repo(tmp_path / "repo", tmp_path / "cache", {
        "config.yaml": CONFIG.format(reference="v1", path="."),
        "subj/__init__.py": LISTED_SUBJECT.format(models='["a", "b"]'),
        "tests/test_models.py": chosen})
    assert repo.invoke("test").returncode == 0
    fewer = repo.invoke("test", env={"MODELS": "a"})
    assert fewer.returncode == 0 and "REMOVED" not in output(fewer), output(fewer)
    assert "NOTE 1 case the reference collected is not collected here " \
        "(tests/test_models.py::test_model[b]), though the subject is the reference's" in \
        output(fewer), output(fewer)
    repo.write("subj/__init__.py", LISTED_SUBJECT.format(models='["a", "b"]') + "# edited\n")
    edited = repo.invoke("test", env={"MODELS": "a"})
    assert edited.returncode == 1 and "REMOVED tests/test_models.py::test_model[b]" in \
        output(edited), output(edited)


def test_the_stand_in_for_an_empty_parameter_set_is_no_case(tmp_path: Path) -> None:
    """A test parametrized over a family the library has none of (yet) is pytest's skipped
    stand-in, `[NOTSET]`: no case, so not one missing from the reference (before: reported
    so every run, and an error under --strict)."""
    repo = tagged_repo(tmp_path / "repo", tmp_path / "cache", {
        "config.yaml": CONFIG.format(reference="v1", path="."),
        "subj/__init__.py": LISTED_SUBJECT.format(models='["a"]'),
        "tests/test_models.py": LISTED_TESTS.format(extra=""),
        "tests/test_vit.py": LISTED_TESTS.format(extra="").replace(
            "subj.MODELS)", "[m for m in subj.MODELS if 'vit' in m])")})
    done = repo.invoke("test", "--strict")
    assert done.returncode == 0, output(done)
    assert "NOTSET" not in done.stdout.split("= torch-regression =", 1)[1], output(done)
    assert "1 case: 1 identical" in output(done), output(done)


OPTION_CONFTEST = """\
import subj


def pytest_addoption(parser):
    parser.addoption("--only-first", action="store_true")


def pytest_generate_tests(metafunc):
    if "name" in metafunc.fixturenames:
        first = metafunc.config.getoption("--only-first")
        metafunc.parametrize("name", subj.MODELS[:1] if first else subj.MODELS)
"""

OPTION_TESTS = """\
import subj


def test_model(regression, name):
    regression.check(subj.forward(name, regression.randn(2, 4)), name="out")
"""


def test_an_option_that_narrows_what_the_tests_collect_is_no_removal(tmp_path: Path) -> None:
    """A conftest's option decides which cases exist: in PYTEST_ADDOPTS unlike the
    recording's, or on plain pytest's command line (which no recording sees), nothing is
    compared; once a recording took the collection under the option, a removal by the
    subject under it is one."""
    repo = listed_repo(tmp_path)
    repo.write("subj/__init__.py", LISTED_SUBJECT.format(models='["a", "b", "c"]'))
    repo.write("tests/conftest.py", OPTION_CONFTEST)
    repo.write("tests/test_models.py", OPTION_TESTS)
    assert repo.invoke("test").returncode == 0
    narrowed = repo.invoke("test", env={"PYTEST_ADDOPTS": "--only-first"})
    assert narrowed.returncode == 0 and "REMOVED" not in output(narrowed), output(narrowed)
    assert "NOTE removed cases not judged in 1 test file (tests/test_models.py): the " \
        "reference's cases were collected under other pytest settings or PYTEST_ADDOPTS " \
        "options than this run's; `invoke gen --force` collects them again under these" in \
        output(narrowed), output(narrowed)  # said, not silent
    plain = repo.pytest("--only-first", "tests")
    assert plain.returncode == 0 and "REMOVED" not in output(plain), output(plain)
    assert "NOTE removed cases not judged: --only-first on the command line may decide " \
        "which cases exist" in output(plain), output(plain)
    assert repo.invoke("gen", "--force", env={"PYTEST_ADDOPTS": "--only-first"}).returncode == 0
    repo.write("subj/__init__.py", LISTED_SUBJECT.format(models='["b", "c"]'))
    removed = repo.invoke("test", env={"PYTEST_ADDOPTS": "--only-first"})
    assert removed.returncode == 1, output(removed)
    assert "REMOVED tests/test_models.py::test_model[a]" in output(removed)
    assert "NOTE" not in output(removed), output(removed)
    last_failed = subprocess.run(  # plain pytest's, its cache on: drops tests unsaid
        [sys.executable, "-m", "pytest", "--lf", "tests"], cwd=repo.path, env=repo.env(),
        text=True, capture_output=True, check=False, timeout=600)
    assert "NOTE removed cases not judged: --lf and --sw drop tests without deselecting " \
        "them" in output(last_failed), output(last_failed)
    shown = "--verbosity=2 --setup-show --durations-min 0.5"  # pytest's output options alone
    judged = repo.invoke("test", env={"PYTEST_ADDOPTS": f"--only-first {shown}"})
    assert "REMOVED tests/test_models.py::test_model[a]" in output(judged), output(judged)
