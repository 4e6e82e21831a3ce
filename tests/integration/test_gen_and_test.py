"""invoke gen / invoke test end to end on a tiny subject in a real repository."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from helpers import CONFIG, SUBJECT, Repo, output, stored_files


def test_sha_of_the_tag_reuses_the_same_reference(recorded_subject_repo: Repo) -> None:
    subject_repo = recorded_subject_repo  # `invoke gen` recorded v1
    sha = subject_repo.git("rev-parse", "v1^{commit}")
    done = subject_repo.invoke("gen", "--reference", sha)
    assert done.returncode == 0, output(done)
    assert "nothing generated" in output(done)


def test_uncommitted_change_of_behaviour_is_detected(recorded_subject_repo: Repo) -> None:
    subject_repo = recorded_subject_repo
    subject_repo.write("subj/__init__.py", SUBJECT.format(scale="1.0000001"))
    done = subject_repo.invoke("test")
    assert done.returncode == 1, output(done)
    text = output(done)
    assert "CHANGED tests/test_subj.py::test_forward" in text
    assert "'out': float32[2, 3]" in text
    assert "1 passed" in text  # test_plain does not use the fixture and still runs


@pytest.mark.slow
def test_reference_from_head_tilde_sees_the_change_as_committed(
        recorded_subject_repo: Repo) -> None:
    subject_repo = recorded_subject_repo  # `invoke gen` recorded v1, HEAD~2 below
    subject_repo.write("subj/__init__.py", SUBJECT.format(scale="2.0"))
    subject_repo.commit("double")
    assert subject_repo.invoke("test", "--reference", "HEAD~2").returncode == 1
    done = subject_repo.invoke("test", "--reference", "HEAD")
    assert done.returncode == 0, output(done)


def test_unknown_revision_is_a_clear_error(subject_repo: Repo) -> None:
    done = subject_repo.invoke("gen", "--reference", "v9")
    assert done.returncode == 2
    assert "revision 'v9' does not exist" in done.stderr
    assert "Fix:" in done.stderr


def test_shallow_clone_says_fetch_depth(subject_repo: Repo, tmp_path: Path) -> None:
    clone = tmp_path / "shallow"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{subject_repo.path}",
                    str(clone)], check=True)
    done = Repo(clone, subject_repo.cache).invoke("gen", "--reference", "HEAD~1")
    assert done.returncode == 2
    assert "shallow" in done.stderr and "fetch-depth: 0" in done.stderr


@pytest.mark.slow
def test_first_runs_leave_working_tree_index_stash_and_head_untouched(subject_repo: Repo,
                                                                      tmp_path: Path) -> None:
    """End to end, each a real `python -m invoke`: a cold `invoke test` records the annotated
    tag's reference beside the check and finds it identical; `invoke gen` records it alone
    (another cache); neither touches the working tree, the index, the stash or HEAD."""
    subject_repo.write("stashed.txt", "stash me\n")
    subject_repo.git("add", "stashed.txt")
    subject_repo.git("stash", "push", "-q", "-m", "kept")
    subject_repo.write("subj/__init__.py", SUBJECT.format(scale="1.0") + "\n# edited\n")
    subject_repo.write("staged.txt", "staged\n")
    subject_repo.git("add", "staged.txt")
    subject_repo.write("untracked.txt", "untracked\n")
    before = subject_repo.snapshot()
    done = subject_repo.invoke("test", process=True)
    assert done.returncode == 0, output(done)
    assert "recorded 1 cases" in output(done)
    assert "1 case: 1 identical, 0 changed" in output(done)
    assert subject_repo.snapshot() == before
    generated = Repo(subject_repo.path, tmp_path / "gen-cache").invoke("gen", process=True)
    assert generated.returncode == 0, output(generated)
    assert "recorded 1 cases" in output(generated)
    assert subject_repo.snapshot() == before


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["1", "2"])
def test_subject_failing_to_import_at_the_reference(subject_repo: Repo, workers: str) -> None:
    subject_repo.write("subj/__init__.py", "raise ImportError('broken on purpose')\n")
    broken = subject_repo.commit("broken")
    subject_repo.write("subj/__init__.py", SUBJECT.format(scale="1.0"))
    subject_repo.commit("fixed")
    # With 2 workers the workers import the subject: xdist's controller runs no case.
    done = subject_repo.invoke("gen", "--reference", broken, "--workers", workers)
    assert done.returncode == 2, output(done)
    assert "fails to import at the reference" in done.stderr
    assert "broken on purpose" in done.stderr
    assert "--reference" in done.stderr


def test_case_missing_from_the_reference_is_reported_not_passed(subject_repo: Repo) -> None:
    subject_repo.write("subj/extra.py", "def triple(x):\n    return x * 3\n")
    subject_repo.write("tests/test_new.py", """\
        from subj.extra import triple


        def test_triple(regression):
            regression.check(triple(regression.randn(3)))
        """)
    subject_repo.write("tests/test_subj.py", (subject_repo.path / "tests/test_subj.py")
                       .read_text() + "\n\ndef test_new_config(regression):\n"
                       "    import subj.extra\n    regression.check(subj.extra.triple(2.0))\n")
    done = subject_repo.invoke("test")
    text = output(done)
    assert done.returncode == 0, text
    assert "2 not in reference" in text
    assert "NOT IN REFERENCE tests/test_new.py::test_triple" in text
    assert "could not be collected at the reference" in text  # the reason travels too
    assert "NOT IN REFERENCE tests/test_subj.py::test_new_config" in text
    assert "1 identical" in text
    strict = subject_repo.invoke("test", "--strict")
    assert strict.returncode == 1
    assert "2 failed" in output(strict)


def test_second_gen_rewrites_nothing(recorded_subject_repo: Repo) -> None:
    subject_repo = recorded_subject_repo  # `invoke gen` recorded v1
    stored = stored_files(subject_repo.cache)
    again = subject_repo.invoke("gen")
    assert "nothing generated" in output(again)
    assert stored_files(subject_repo.cache) == stored


@pytest.mark.slow
def test_plain_pytest_records_what_is_missing_unless_told_not_to(subject_repo: Repo) -> None:
    refused = subject_repo.pytest("--regression-no-gen", "tests")
    assert refused.returncode == 1
    assert "run `invoke gen`" in output(refused)
    done = subject_repo.pytest("tests")
    assert done.returncode == 0, output(done)
    assert "recording 1 of 1 cases" in output(done)
    assert "1 identical" in output(done)
    again = subject_repo.pytest("--regression-no-gen", "tests")
    assert again.returncode == 0, output(again)
    assert "recording" not in output(again)


@pytest.mark.slow
def test_every_differing_output_is_reported_in_one_failure(subject_repo: Repo,
                                                           tmp_path: Path) -> None:
    subject_repo.write("tests/test_subj.py", """\
        import subj


        def test_forward(regression):
            x = regression.randn(2, 4)
            regression.check(subj.forward(x), name="out")
            regression.check(subj.SCALE, name="scale")
            regression.check(x, name="input")


        def test_fails_on_its_own(regression):
            regression.check(subj.forward(regression.randn(2, 4)), name="out")
            assert subj.SCALE == 1.0, "the test's own assertion"
        """)
    subject_repo.commit("three outputs, and a test that asserts")
    assert subject_repo.invoke("gen", "--reference", "HEAD").returncode == 0
    subject_repo.write("subj/__init__.py", SUBJECT.format(scale="1.5"))
    step_summary = tmp_path / "step-summary.md"
    done = subject_repo.invoke("test", "--reference", "HEAD", env={
        "GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(step_summary)})
    text = output(done)
    assert done.returncode == 1, text
    # Under GitHub Actions: an error annotation on each changed test's line, and the step
    # summary lists each differing output in one line.
    annotations = [line for line in done.stdout.splitlines() if line.startswith("::error ")]
    assert [a.split("::")[1] for a in annotations] == [
        "error file=tests/test_subj.py,line=4,"
        "title=tests/test_subj.py%3A%3Atest_forward changed against "
        f"{subject_repo.git('rev-parse', '--short=12', 'HEAD')} (HEAD)",
        "error file=tests/test_subj.py,line=11,"
        "title=tests/test_subj.py%3A%3Atest_fails_on_its_own changed against "
        f"{subject_repo.git('rev-parse', '--short=12', 'HEAD')} (HEAD)"]
    assert "%0A'scale': 1.5, reference 1.0" in annotations[0]
    summary = step_summary.read_text()
    assert "- **changed** `tests/test_subj.py::test_forward`\n  - `'out': float32[2, 3]: " \
           "6 of 6 elements differ" in summary
    assert "  - `'scale': 1.5, reference 1.0`" in summary
    # and a chart of how far each changed case moved: every output times 1.5, so 0.5
    chart = summary.split("```mermaid\n")[1].split("```")[0]
    assert 'x-axis ["test_forward", "test_fails_on_its_own"]' in chart
    assert "bar [-0.3, -0.3]" in chart  # log10(0.5)
    assert "- `tests/test_subj.py::test_forward`: max relative difference 0.5\n" in summary
    failures = text.split("short test summary info")[0]  # the summary repeats it in full on CI
    assert failures.count("2 of 3 outputs are not bit-identical to the reference") == 1, text
    assert "'scale': 1.5, reference 1.0" in text
    assert "'input'" not in text  # identical: compared, not listed
    assert "ULP distances: " in text and "changed behaviour, far beyond rounding" in text
    assert "(and 1 more output differs: 'scale')" in text  # the summary's line
    # A test that fails on its own keeps its message; the differing outputs come beside it.
    assert "the test's own assertion" in text
    assert "torch-regression: outputs that differ" in text
    assert "0 identical, 2 changed" in text


def test_recording_stopped_early_by_addopts_stores_nothing_false(subject_repo: Repo) -> None:
    subject_repo.write("pyproject.toml", '[tool.pytest.ini_options]\naddopts = "-x"\n')
    subject_repo.write("tests/test_a_fails.py", """\
        def test_fails_everywhere(regression):
            raise RuntimeError("always")
        """)
    subject_repo.commit("-x and a failing case")
    done = subject_repo.invoke("gen", "--reference", "HEAD")
    assert done.returncode == 2, output(done)
    assert "never ran" in done.stderr and "-x" in done.stderr
    assert "tests/test_subj.py::test_forward" in done.stderr


@pytest.mark.slow
def test_k_and_node_ids_record_and_check_only_the_chosen_cases(subject_repo: Repo) -> None:
    subject_repo.write("tests/test_more.py", """\
        import pytest
        import subj


        @pytest.mark.parametrize("n", [1, 2, 3])
        def test_scaled(n, regression):
            regression.check(subj.forward(regression.randn(2, 4)) * n, name="out")
        """)
    subject_repo.commit("three more cases")
    gen = subject_repo.invoke("gen", "--reference", "HEAD", "-k", "scaled and not 3")
    assert gen.returncode == 0, output(gen)
    assert "2 of 4 cases selected by -k 'scaled and not 3'" in gen.stdout
    assert "recorded 2 cases, reused 0" in gen.stdout
    picked = subject_repo.invoke("test", "--reference", "HEAD", "--case",
                                 "tests/test_more.py::test_scaled[3]", "--case",
                                 "tests/test_subj.py")
    assert picked.returncode == 0, output(picked)
    assert "recording 2 of 2 cases" in picked.stdout  # test_scaled[3] and test_forward
    assert "2 cases: 2 identical, 0 changed" in picked.stdout
    assert "3 passed" in picked.stdout  # with test_plain, which uses no fixture
    every = subject_repo.invoke("test", "--reference", "HEAD", "--no-gen")
    assert every.returncode == 0, output(every)  # the two selections recorded all four
    assert "4 cases: 4 identical" in every.stdout
    subject_repo.write("subj/__init__.py", SUBJECT.format(scale="1.5"))
    changed = subject_repo.invoke("test", "--reference", "HEAD", "-k", "scaled and 2")
    assert changed.returncode == 1, output(changed)
    assert "CHANGED tests/test_more.py::test_scaled[2]" in changed.stdout
    assert "test_scaled[1]" not in changed.stdout and "test_forward" not in changed.stdout
    # what was reused is counted among the cases selected, not all of them
    assert "1 of 4 cases selected by -k 'scaled and 2'" in changed.stdout
    assert "reference up to date: 1 case reused from the cache" in changed.stdout
    nothing = subject_repo.invoke("gen", "--reference", "HEAD", "-k", "no_such_case")
    assert nothing.returncode == 0, output(nothing)
    assert "nothing generated: no case was selected" in nothing.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["--case", "tests/none.py::test_x"], "--case tests/none.py::test_x: there is no "
                                           "tests/none.py in "),
    (["-k", "forward", "--shard", "1/2"], "--shard 1/2 and -k 'forward' both choose cases; "
                                          "use one"),
    (["--case", "tests/test_subj.py::test_forwad"],
     "--case tests/test_subj.py::test_forwad is not a regression case of this suite; did you "
     "mean tests/test_subj.py::test_forward?"),
])
@pytest.mark.slow
def test_bad_selection_is_a_clear_error(subject_repo: Repo, args: list[str],
                                        message: str) -> None:
    for task in ("test", "gen"):
        done = subject_repo.invoke(task, *args)
        assert done.returncode == 2, output(done)
        assert message in done.stderr and "Traceback" not in output(done)


def test_subject_not_importable_here_says_to_install_it(subject_repo: Repo) -> None:
    subject_repo.git("mv", "subj", "src")
    subject_repo.write("src/subj/__init__.py", SUBJECT.format(scale="1.0"))
    subject_repo.write("config.yaml", CONFIG.format(reference="HEAD", path="src"))
    subject_repo.commit("src layout, not installed")
    for done in (subject_repo.invoke("test"), subject_repo.pytest("tests")):
        assert done.returncode != 0, output(done)
        text = output(done)
        assert "No module named 'subj'" in text  # pytest's own collection error
        assert "the subject package 'subj' cannot be imported in this environment" in text
        assert "pip install -e ." in text and "Traceback (most recent" not in text
    gen = subject_repo.invoke("gen")
    assert gen.returncode == 2 and "pip install -e ." in gen.stdout, output(gen)


UNSEEDED = """\
import random

import torch

import subj


def test_unseeded(regression):
    regression.check(subj.forward(regression.randn(2, 4)), name="out")
    regression.check(torch.tensor([random.SystemRandom().random()]), name="noise")


def test_string_hashes(regression):  # as a set of names iterates: new in each process
    regression.check(torch.tensor([float(hash("torch-regression") % 997)]), name="hash")
"""


@pytest.mark.slow
def test_nondeterministic_case_is_found_by_repeat_and_never_reported_changed(
        subject_repo: Repo) -> None:
    subject_repo.write("tests/test_noise.py", UNSEEDED)
    subject_repo.commit("a case that draws from an unseeded source")
    gen = subject_repo.invoke("gen", "--reference", "HEAD", "--repeat", "2", "--workers", "2")
    assert gen.returncode == 0, output(gen)
    assert "recording 3 cases again (2 of 2) to find nondeterministic ones" in gen.stdout
    found = [line for line in gen.stdout.splitlines() if line.startswith("nondeterministic: ")]
    assert sorted(found) == [  # a repeat is a new process: its own string hashes too
        "nondeterministic: tests/test_noise.py::test_string_hashes: outputs 'hash' differed "
        "between recording 1 and recording 2, each in its own process",
        "nondeterministic: tests/test_noise.py::test_unseeded: outputs 'noise' "
        "differed between recording 1 and recording 2, each in its own process"]
    done = subject_repo.invoke("test", "--reference", "HEAD")
    assert done.returncode == 0, output(done)
    assert "3 cases: 1 identical, 0 changed, 0 not in reference, 0 errors, 2 nondeterministic" \
           in done.stdout
    assert "NONDETERMINISTIC tests/test_noise.py::test_unseeded: outputs 'noise'" in done.stdout
    assert "CHANGED" not in done.stdout
    strict = subject_repo.invoke("test", "--reference", "HEAD", "--strict")
    assert strict.returncode == 1, output(strict)
    assert "nondeterministic at the reference" in strict.stdout
    warm = subject_repo.invoke("gen", "--reference", "HEAD", "--repeat", "2")
    assert "no case was recorded, so none was checked for nondeterminism" in warm.stdout
    # config.yaml's determinism.repeat does the same for every recording, invoke test's too
    # (a commit that changes the subject: one that leaves it alone reuses the reference).
    subject_repo.write("config.yaml", CONFIG.format(reference="HEAD", path=".")
                       + "  repeat: 2\n")
    subject_repo.write("subj/__init__.py", SUBJECT.format(scale="1.0") + "# recorded again\n")
    subject_repo.commit("record twice")
    again = subject_repo.invoke("test", "--reference", "HEAD")
    assert again.returncode == 0, output(again)
    assert "recording 3 cases again (2 of 2)" in again.stdout
    assert "2 nondeterministic" in again.stdout


def test_a_package_the_tests_need_missing_here_is_named_with_the_install(
        subject_repo: Repo) -> None:
    subject_repo.write("tests/test_more.py", "import no_such_package_here\n")
    gen = subject_repo.invoke("gen")
    text = output(gen)
    assert gen.returncode == 2, text
    assert "the tests import 'no_such_package_here', which this environment" in text
    assert "-m pip install no_such_package_here" in text
    assert "or because it could not collect the tests in this environment" in gen.stderr
    assert "Traceback (most recent" not in text
