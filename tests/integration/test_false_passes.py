"""Ways a run could pass without checking what it should: each one fails, and says why."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers import SUBJECT, Repo, output

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


def test_case_that_checks_nothing_is_an_error(subject_repo: Repo) -> None:
    subject_repo.write("tests/test_subj.py", """\
        def test_forward(regression):
            regression.randn(3)  # draws inputs, checks nothing
        """)
    subject_repo.commit("a case that checks nothing")
    done = subject_repo.invoke("test", "--reference", "HEAD")
    text = output(done)
    assert done.returncode == 1, text
    assert "0 identical" in text and "1 error" in text
    assert "called regression.check() zero times" in text


def test_reasons_name_the_exception_and_where_it_happened(subject_repo: Repo) -> None:
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
    subject_repo.commit("a subject module that does not parse, a value that cannot be stored")
    subject_repo.write("subj/edge.py", "def edge(x):\n    return x\n")
    done = subject_repo.invoke("test", "--reference", "HEAD")
    text = output(done)
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


def test_thread_count_changed_by_a_conftest_is_an_error_in_both_modes(subject_repo: Repo) -> None:
    subject_repo.write("tests/conftest.py", """\
        import os

        import pytest
        import torch


        @pytest.fixture(autouse=True)
        def threads():
            if os.environ.get("MORE_THREADS"):
                torch.set_num_threads(2)
        """)
    subject_repo.commit("a conftest that may change the thread count")
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


@pytest.mark.slow
def test_subject_from_elsewhere_fails_the_run_also_with_workers(subject_repo: Repo,
                                                                tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(subject_repo.path / "subj", copy / "subj")
    subject_repo.write("tests/conftest.py", f"import sys\n\nsys.path.insert(0, {str(copy)!r})\n")
    for workers in ("1", "2"):
        done = subject_repo.invoke("test", "--workers", workers)
        assert done.returncode == 3, (workers, output(done))
        assert "subject modules were imported from outside" in output(done)


def test_case_skipped_before_its_fixture_fails_when_the_reference_recorded_it(
        subject_repo: Repo) -> None:
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
    subject_repo.commit("a case a fixture may skip")
    assert subject_repo.invoke("gen", "--reference", "HEAD").returncode == 0
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
