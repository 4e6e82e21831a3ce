"""Tests of regression.plugin.common: how a failure at the reference is described, and which
options may decide what a test file collects."""

from __future__ import annotations

from pathlib import Path

import pytest

from regression.plugin.common import collecting_options, exception_reason, pytest_section, \
    shown_path, traceback_frames


def _raised(error: BaseException) -> BaseException:
    try:
        raise error
    except BaseException as caught:  # noqa: B036 - the test needs the raised exception
        return caught


def test_message_and_deepest_frame_inside_the_project(tmp_path: Path) -> None:
    error = _raised(ValueError("bad shape"))
    here = Path(__file__).resolve()
    reason = exception_reason(error, traceback_frames(error), (here.parent,))
    assert reason.startswith("ValueError: bad shape (in test_mode_common.py:")


def test_syntax_error_names_the_file_that_does_not_parse(tmp_path: Path) -> None:
    broken = tmp_path / "subj" / "edge.py"
    broken.parent.mkdir()
    broken.write_text("def edge(x:\n    return x\n")
    error = _raised(SyntaxError("invalid syntax", (str(broken), 1, 9, "def edge(x:\n")))
    reason = exception_reason(error, traceback_frames(error), (tmp_path.resolve(),))
    assert reason == "SyntaxError: invalid syntax (edge.py, line 1) (in subj/edge.py:1)"


def test_collect_error_is_described_by_its_cause(tmp_path: Path) -> None:
    cause = _raised(ImportError("No module named 'gone'"))
    wrapper = pytest.Collector.CollectError("ImportError while importing test module ...")
    wrapper.__cause__ = cause
    reason = exception_reason(wrapper, traceback_frames(wrapper), (tmp_path,))
    assert reason.startswith("ImportError: No module named 'gone' (in ")


def test_skip_and_fail_give_their_message_alone() -> None:
    skipped = _raised(pytest.skip.Exception("needs a GPU"))
    assert exception_reason(skipped, [], ()) == "needs a GPU"


def test_paths_outside_every_root_are_shown_whole(tmp_path: Path) -> None:
    assert shown_path("/elsewhere/x.py", (tmp_path,)) == "/elsewhere/x.py"
    assert shown_path(str(tmp_path / "a" / "b.py"), (tmp_path.resolve(),)) == "a/b.py"



def _define(file: Path, source: str, namespace: dict[str, object]) -> None:
    """`source` run into `namespace` as the file `file`: its functions' frames are there."""
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(source)
    exec(compile(source, str(file), "exec"), namespace)  # noqa: S102 - a real frame in `file`


def _called(call: str, namespace: dict[str, object]) -> BaseException:
    try:
        exec(call, namespace)  # noqa: S102
    except Exception as caught:  # noqa: BLE001 - the test needs the raised exception
        return caught
    raise AssertionError("nothing raised")


def test_an_error_raised_in_a_library_names_the_users_frame_that_called_it(
        tmp_path: Path) -> None:
    import sysconfig
    library = Path(sysconfig.get_paths()["purelib"]).resolve()
    # an "installed" module (site-packages) calling back is not the user's code, even when
    # the venv sits inside the project; the subject's frame that called it is named too
    lib_file = library / "_torch_regression_probe_lib.py"
    namespace: dict[str, object] = {}
    try:
        _define(lib_file, "def rearrange(x):\n    raise ValueError('bad pattern')\n", namespace)
    finally:
        lib_file.unlink()
    _define(tmp_path / "subj" / "model.py", "def forward(x):\n    return rearrange(x)\n",
            namespace)
    error = _called("forward(1)", namespace)
    reason = exception_reason(error, traceback_frames(error), (tmp_path.resolve(), library))
    assert reason == ("ValueError: bad pattern (raised in _torch_regression_probe_lib.py:2, "
                      "called from subj/model.py:2)"), reason


def test_an_error_raised_in_the_users_code_names_one_place(tmp_path: Path) -> None:
    namespace: dict[str, object] = {}
    _define(tmp_path / "subj" / "model.py", "def forward(x):\n    raise KeyError(x)\n",
            namespace)
    error = _called("forward(1)", namespace)
    reason = exception_reason(error, traceback_frames(error), (tmp_path.resolve(),))
    assert reason == "KeyError: 1 (in subj/model.py:2)"


@pytest.mark.parametrize(("args", "found"), [
    (["tests", "tests/test_a.py::test_b[x]"], []),  # paths and node ids
    (["-p", "no:cacheprovider", "--rootdir", "/r", "-n", "2", "-k", "a and not b"], []),
    (["-q", "-x", "-rN", "--tb=short", "--tb", "line", "-kfoo", "-n2", "--regression-strict",
      "--regression-durations=d.json", "-W", "ignore::DeprecationWarning"], []),
    (["--only-first"], ["--only-first"]),  # a conftest's option
    (["-sv", "-qx", "-vv"], []), (["-sz"], ["-sz"]),  # flags given together
    (["-c", "other.ini", "tests"], ["-c"]),  # its value is read as a path
    (["-o", "python_files=check_*.py"], ["-o"]),
    (["--import-mode=importlib", "-m", "slow"], ["--import-mode=importlib"]),
    (["-p", "no:randomly", "-pno:cacheprovider", "-p", "myplugin", "-pother"],
     ["-p myplugin", "-pother"]),  # a plugin loaded may parametrize
    (["--verbosity=2", "--setup-show", "--durations-min", "0.5", "--code-highlight=no",
      "--pdb", "--trace", "--cache-clear", "--cov=src", "--cov-report", "term", "--reruns",
      "2", "--html=r.html"], []),  # pytest's and common plugins' output and debugging
])
def test_the_options_that_may_decide_what_a_file_collects(args: list[str],
                                                          found: list[str]) -> None:
    assert collecting_options(args) == found


@pytest.mark.parametrize(("name", "before", "after"), [
    ("pyproject.toml", '[project]\nversion = "1"\n[tool.pytest.ini_options]\naddopts = "-q"\n',
     '[project]\nversion = "2"\n[tool.pytest.ini_options]\naddopts = "-q -x"\n'),
    ("pytest.toml", '[pytest]\npython_functions = ["test_*"]\n',
     '[pytest]\npython_functions = ["test_forward"]\n'),
    ("pytest.ini", "[pytest]\nmarkers = slow\n", "[pytest]\nmarkers = slow\nmodels = a\n"),
    ("setup.cfg", "[metadata]\nname = x\n[tool:pytest]\naddopts = -q\n",
     "[metadata]\nname = y\n[tool:pytest]\naddopts = -q -p myplugin\n"),
])
def test_pytest_s_section_of_its_settings_file_is_what_counts(
        tmp_path: Path, name: str, before: str, after: str) -> None:
    """pytest's own section, in each kind of settings file: an edit there counts, one of the
    rest of the file (a version) does not."""
    path = tmp_path / name
    path.write_text(before)
    first = pytest_section(path)
    assert first not in ("", "{}")
    path.write_text(before.replace('"1"', '"9"').replace("name = x", "name = z"))
    assert pytest_section(path) == first
    path.write_text(after)
    assert pytest_section(path) != first


def test_a_skip_s_reason_is_its_message_not_its_tuple() -> None:
    from regression.plugin.common import report_reason

    skipped = pytest.CollectReport("t/test_c.py", "skipped", ("/x/t/test_c.py", 4,
                                                              "Skipped: no conv model"), [])
    assert report_reason(skipped) == "no conv model"
    failed = pytest.CollectReport("t/test_c.py", "failed", "E   ImportError: no x\nlast", [])
    assert report_reason(failed) == "last"


@pytest.mark.parametrize("addopts, found", [
    ("-o a=1 -ob=2 --override-ini c=3 --override-ini=d=4 -v", ["a=1", "b=2", "c=3", "d=4"]),
    ("-x -p no:cacheprovider", []), ("-o", [])])
def test_the_overrides_of_pytest_addopts_are_read_in_each_spelling(
        addopts: str, found: list[str]) -> None:
    import shlex

    from regression.plugin.common import _overrides

    assert _overrides(shlex.split(addopts)) == found
