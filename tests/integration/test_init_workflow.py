"""The workflow `torch-regression init` writes: torch and its sibling packages from one
index in one pip command, pip's cache, manual runs, a runner count that fits the suite, and
torch-regression from a pinned git URL; linted, and its steps rehearsed offline."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import Repo, expand_expressions, init_repo, installable_pyproject, output

from regression.cli.workflow import TORCH_INDEXES, TORCH_REGRESSION
from regression.cli.main import main
from regression.config.settings import load_settings

WORKFLOW = ".github/workflows/regression.yml"
BIN = Path(sys.executable).parent
PROJECT = Path(__file__).resolve().parents[2]
CPU_INDEX = "https://download.pytorch.org/whl/cpu"

MODELS = """\
from torch import nn


def list_models():
    return ["mini-a", "mini-b"]


def create_model(name):
    width = 8 if name == "mini-a" else 16
    return nn.Sequential(nn.Linear(4, width), nn.Tanh(), nn.Linear(width, 2))
"""

FILLED = {
    'MODELS: list[str] = []  # e.g. ["resnet18", "vit_tiny"]':
        "MODELS: list[str] = minilib.list_models()",
    '    raise NotImplementedError("fill in build() in tests/regression/test_regression.py")':
        "    return minilib.create_model(name)",
    "    return regression.randn(2, 3, 32, 32)": "    return regression.randn(2, 4)",
}


def _library(tmp_path: Path, files: dict[str, str]) -> Repo:
    """A library `minilib` with the given project files, committed and tagged."""
    repo = init_repo(tmp_path / "minilib", tmp_path / "cache")
    repo.write("minilib/__init__.py", MODELS)
    repo.write(".gitignore", "__pycache__/\n*.egg-info/\nbuild/\n.venv/\n")
    for name, text in files.items():
        repo.write(name, text)
    repo.commit("minilib 0.1")
    repo.git("tag", "v0.1")
    return repo


def _pyproject(dependencies: list[str], extras: str = "") -> str:
    text = installable_pyproject("minilib", ".")
    listed = ", ".join(json.dumps(d) for d in dependencies)
    return text.replace('version = "1.0"\n', f'version = "1.0"\ndependencies = [{listed}]\n'
                                             f"{extras}")


def _init(repo: Repo, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
          *args: str) -> str:
    """`torch-regression init ARGS` in this process; its output."""
    monkeypatch.chdir(repo.path)
    capsys.readouterr()
    code = main(["init", *args])
    captured = capsys.readouterr()
    assert code == 0, captured.out + captured.err
    return captured.out


def _job(repo: Repo) -> dict[str, Any]:
    data = yaml.safe_load((repo.path / WORKFLOW).read_text())
    assert isinstance(data, dict)
    return data["jobs"]["regression"]  # type: ignore[no-any-return]


def _step(repo: Repo, name: str) -> dict[str, Any]:
    (step,) = [s for s in _job(repo)["steps"] if s.get("name") == name or s.get("id") == name]
    return step  # type: ignore[no-any-return]


def _pip_lines(repo: Repo) -> list[str]:
    return [line.strip() for line in _step(repo, "Install")["run"].splitlines()
            if line.strip().startswith(".venv/bin/pip ")]


def _lint(repo: Repo) -> None:
    for command in ([str(BIN / "actionlint"), WORKFLOW],
                    [str(BIN / "zizmor"), "--offline", WORKFLOW]):
        checked = subprocess.run(command, cwd=repo.path, capture_output=True, text=True,
                                 check=False)
        assert checked.returncode == 0, checked.stdout + checked.stderr


TORCHVISION_SOURCES = {
    "pyproject": {"pyproject.toml": _pyproject(["einops>=0.7", "torchvision>=0.15"])},
    "optional": {"pyproject.toml": _pyproject(
        ["einops"], '\n[project.optional-dependencies]\nvision = ["torchvision>=0.15"]\n')},
    "setup.cfg": {"setup.cfg": "[metadata]\nname = minilib\n\n[options]\npackages = "
                               "minilib\ninstall_requires =\n    torchvision>=0.15\n",
                  "pyproject.toml": "[build-system]\nrequires = ['setuptools>=64']\n"},
    "setup.py": {"setup.py": "from setuptools import setup\n\nsetup(name='minilib', "
                             "packages=['minilib'], install_requires=['einops>=0.7', "
                             "'torch>=1.10', 'torchvision>=0.15'])\n"},
    "requirements": {"requirements.txt": "torchvision>=0.15  # the models' transforms\n",
                     "pyproject.toml": _pyproject([])},
    "requirements folder": {"requirements/test.txt": "-r ../requirements.txt\n"
                                                     "torchvision>=0.15\n",
                            "pyproject.toml": _pyproject([])},
}


@pytest.mark.parametrize("files", list(TORCHVISION_SOURCES.values()),
                         ids=list(TORCHVISION_SOURCES))
def test_torchvision_declared_anywhere_is_installed_with_torch_from_one_index_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        files: dict[str, str]) -> None:
    repo = _library(tmp_path, files)
    out = _init(repo, monkeypatch, capsys)
    together, pins, library = _pip_lines(repo)
    assert re.fullmatch(r'\.venv/bin/pip install "torch(>=1\.10)?" "torchvision>=0\.15" '
                        rf"--index-url {re.escape(CPU_INDEX)}", together), together
    assert pins.startswith(".venv/bin/pip freeze --all | grep -iE '^(torch|torchvision)==' ")
    assert library == '.venv/bin/pip install -c .venv/torch-pins.txt -e . "$TORCH_REGRESSION"'
    assert (f"workflow: torch and torchvision from {CPU_INDEX}, in one pip command before "
            "the library (other torch packages your project declares: torchvision>=0.15)"
            in out)
    setup = next(s for s in _job(repo)["steps"] if "setup-python" in s.get("uses", ""))
    paths = setup["with"]["cache-dependency-path"].split()
    assert setup["with"]["cache"] == "pip" and paths
    assert all((repo.path / path).is_file() for path in paths), paths


def test_every_torch_package_and_each_of_its_specifiers_go_into_the_one_command(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    repo = _library(tmp_path, {
        "pyproject.toml": _pyproject(["torch>=2.1", "torchaudio"]),
        "requirements.txt": "torch==2.13.0\ntorchvision==0.28.0\nnumpy\n"})
    _init(repo, monkeypatch, capsys, "--device", "cuda")
    together = _pip_lines(repo)[0]
    assert together == ('.venv/bin/pip install "torch>=2.1,==2.13.0" "torchvision==0.28.0" '
                        f'"torchaudio" --index-url {TORCH_INDEXES["cuda"]}')
    assert "download.pytorch.org/whl/cu" in TORCH_INDEXES["cuda"]
    _lint(repo)


def test_a_library_without_torchvision_installs_torch_alone_and_passes_the_linters(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    repo = _library(tmp_path, {"pyproject.toml": _pyproject(["numpy"])})
    out = _init(repo, monkeypatch, capsys)
    assert _pip_lines(repo)[0] == f'.venv/bin/pip install "torch" --index-url {CPU_INDEX}'
    assert "other torch packages your project declares: none" in out
    _lint(repo)


def test_a_torchvision_library_s_workflow_passes_the_linters(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    repo = _library(tmp_path, TORCHVISION_SOURCES["pyproject"])
    _init(repo, monkeypatch, capsys)
    _lint(repo)


def test_manual_runs_take_a_reference_and_a_candidate_as_this_project_s_workflow_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    repo = _library(tmp_path, {"pyproject.toml": _pyproject([])})
    _init(repo, monkeypatch, capsys)
    data = yaml.safe_load((repo.path / WORKFLOW).read_text())
    inputs = data[True]["workflow_dispatch"]["inputs"]  # YAML 1.1 reads `on` as true
    assert set(inputs) == {"reference", "candidate"}
    assert all(i["type"] == "string" and i["default"] == "" for i in inputs.values())
    env = _job(repo)["env"]
    assert env["REFERENCE"] == "${{ github.event.pull_request.base.sha || inputs.reference }}"
    assert env["CANDIDATE"] == "${{ inputs.candidate }}"
    test = _step(repo, "test")["run"]
    assert 'invoke compare --candidate "$CANDIDATE"' in test and "invoke test" in test
    for step in _job(repo)["steps"]:
        assert "${{" not in step.get("run", ""), step


def test_a_pull_request_is_checked_against_its_base_and_a_push_against_config_yaml(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    repo = _library(tmp_path, {"pyproject.toml": _pyproject([])})
    repo.git("checkout", "-q", "-b", "trunk")  # a default branch not called main
    _init(repo, monkeypatch, capsys)
    data = yaml.safe_load((repo.path / WORKFLOW).read_text())
    assert set(data[True]) == {"push", "pull_request", "schedule", "workflow_dispatch"}
    assert data[True]["push"] == {"branches": ["trunk"]}
    env = _job(repo)["env"]
    assert env["REFERENCE"] == "${{ github.event.pull_request.base.sha || inputs.reference }}"
    assert env["REGRESSION_REFERENCE_FOR"] == "${{ github.event_name }}"
    for name in ("key", "gen", "test"):
        assert '${REFERENCE:+--reference "$REFERENCE"}' in _step(repo, name)["run"], name
    restore = _step(repo, "restore")["with"]
    assert restore["restore-keys"] == "${{ steps.key.outputs.restore-key }}"
    ours = yaml.safe_load((PROJECT / ".github/workflows/regression.yml").read_text())
    for workflow in (data, ours):  # a newer push cancels a pull request's older run only
        assert workflow["concurrency"] == {
            "group": "regression-${{ github.event.pull_request.number || github.ref }}",
            "cancel-in-progress": "${{ github.event_name == 'pull_request' }}"}
    _lint(repo)


def test_torch_regression_comes_from_a_pinned_git_url_and_init_says_to_check_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    repo = _library(tmp_path, {"pyproject.toml": _pyproject([])})
    out = _init(repo, monkeypatch, capsys)
    value = _job(repo)["env"]["TORCH_REGRESSION"]
    assert value == TORCH_REGRESSION
    assert re.fullmatch(r"torch-regression\[xdist\] @ git\+https://\S+@v\d+\.\d+\.\d+", value)
    assert f"3. check the TORCH_REGRESSION line of {WORKFLOW}: it installs {value!r}, a " \
           "placeholder" in out


def test_a_new_suite_gets_one_runner_and_init_says_why(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    repo = _library(tmp_path, {"pyproject.toml": _pyproject([])})
    out = _init(repo, monkeypatch, capsys)
    assert _job(repo)["strategy"]["matrix"]["shard"] == [1]
    assert _job(repo)["env"]["SHARD"] == "${{ matrix.shard }}/${{ strategy.job-total }}"
    assert ("workflow: 1 runner (a new suite (tests/regression holds no tests yet, and no "
            "durations are recorded), which one runner checks in minutes); --shards N, or "
            "the matrix's shard list, changes it") in out


@pytest.mark.parametrize(("seconds", "runners"), [(30.0, 1), (299.0, 1), (301.0, 2),
                                                  (1000.0, 4), (10000.0, 4)])
def test_recorded_durations_give_about_five_minutes_a_runner(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        seconds: float, runners: int) -> None:
    repo = _library(tmp_path, {"pyproject.toml": _pyproject([]),
                               ".regression-durations.json": json.dumps(
                                   {"t.py::a": seconds / 2, "t.py::b": seconds / 2})})
    out = _init(repo, monkeypatch, capsys)
    assert _job(repo)["strategy"]["matrix"]["shard"] == list(range(1, runners + 1))
    assert f"the 2 cases in .regression-durations.json take {seconds:.0f} s" in out


def test_many_regression_tests_without_durations_get_more_runners_and_shards_wins(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    tests = "".join(f"def test_{i}(regression):\n    pass\n\n\n" for i in range(25))
    repo = _library(tmp_path, {"pyproject.toml": _pyproject([]),
                               "tests/regression/test_many.py": tests})
    out = _init(repo, monkeypatch, capsys)
    assert _job(repo)["strategy"]["matrix"]["shard"] == [1, 2, 3]
    assert "tests/regression holds 25 test functions and no durations are recorded" in out
    asked = _init(repo, monkeypatch, capsys, "--force", "--shards", "2")
    assert _job(repo)["strategy"]["matrix"]["shard"] == [1, 2]
    assert "workflow: 2 runners (as --shards asked)" in asked


def test_a_requirements_file_named_to_inject_yaml_stays_out_of_the_cache_paths(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    repo = _library(tmp_path, {"requirements${{ github.token }}.txt": "torchvision\n",
                               "requirements:x.txt": "torchaudio\n"})
    _init(repo, monkeypatch, capsys)
    setup = next(s for s in _job(repo)["steps"] if "setup-python" in s.get("uses", ""))
    assert setup["with"]["cache-dependency-path"].split() == [WORKFLOW]
    assert '"torchvision" "torchaudio"' in _pip_lines(repo)[0]  # read, but not named
    _lint(repo)


# The rehearsal: the Install step as the workflow runs it, then its key, gen and test steps.


def _local_index() -> str:
    """The first file:// index pip is configured with here: this machine's package index."""
    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], text=True,
                            capture_output=True, check=False).stdout
    found = re.findall(r"file://\S+?(?=['\s])", listed)
    if not found:
        pytest.skip("pip has no local (file://) package index here to install offline from")
    return found[0]


def _expand(value: object, base: str) -> str:
    """The job's env as GitHub evaluates it for a pull request on base commit `base`."""
    return expand_expressions(value, {
        "matrix.shard": "1", "strategy.job-total": "1", "inputs.reference": "",
        "inputs.candidate": "", "github.event_name": "pull_request",
        "github.event.pull_request.base.sha": base})


def _run_step(repo: Repo, name: str, env: dict[str, str], base: str, script: str | None = None
              ) -> subprocess.CompletedProcess[str]:
    """A run step with the job's env, in bash -e, as GitHub runs it on a pull request: Python
    writes bytecode there (the first step that imports torch compiles what it imports)."""
    job = _job(repo)
    environment = {**repo.env(), **{k: _expand(v, base) for k, v in job["env"].items()},
                   **env}
    environment.pop("PYTHONDONTWRITEBYTECODE", None)
    return subprocess.run(["bash", "-e", "-c", script or _step(repo, name)["run"]],
                          cwd=repo.path, env=environment, text=True, capture_output=True,
                          check=False, timeout=900)


@pytest.mark.slow
def test_rehearsal_installs_offline_and_its_key_gen_and_test_steps_pass(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        our_wheel: Path) -> None:
    """The Install step, run in bash as the workflow runs it, with two substitutions only:
    this machine's package index for PyTorch's, and our wheel for the placeholder git URL.
    torch is the CPU build on both; torchvision has no CPU build on this machine's index
    (its torchvision is PyPI's CUDA build), so this library declares torch alone. Then its
    key, gen and test steps on a pull request whose base widened mini-a since the release
    (config.yaml's reference): checked against its base, nothing changed."""
    index = _local_index()
    repo = _library(tmp_path, {"pyproject.toml": _pyproject(["torch==2.13.0"])})
    repo.write("minilib/__init__.py", MODELS.replace("width = 8", "width = 12"))
    base = repo.commit("the base: mini-a is wider")
    _init(repo, monkeypatch, capsys)
    starter = (repo.path / "tests/regression/test_regression.py").read_text()
    starter = starter.replace("import minilib", "import minilib  # noqa")
    for old, new in FILLED.items():
        starter = starter.replace(old, new)
    repo.write("tests/regression/test_regression.py", starter)
    repo.git("add", "-f", ".")
    repo.commit("regression tests")
    install = _step(repo, "Install")["run"].replace(f"--index-url {CPU_INDEX}",
                                                    f"--index-url {index}")
    env = {"PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
           "TORCH_REGRESSION": f"torch-regression[xdist] @ {our_wheel.as_uri()}",
           "PIP_NO_INPUT": "1",
           "PIP_NO_COMPILE": "0"}  # --no-compile (pip reads its "no-" variables inverted: pypa/
    # pip#5735): compiling all of torch's modules takes longer than the rest of the install
    try:
        installed = _run_step(repo, "Install", env, base, install)
        assert installed.returncode == 0, output(installed)
        pins = (repo.path / ".venv/torch-pins.txt").read_text()
        assert re.fullmatch(r"torch==2\.13\.0\+cpu\n", pins), pins
        github_output = tmp_path / "github-output"
        github_output.write_text("")
        steps = {"GITHUB_OUTPUT": str(github_output), "REGRESSION_CACHE_DIR": str(repo.cache)}
        for name in ("key", "gen", "test"):
            done = _run_step(repo, name, steps, base)
            assert done.returncode == 0, (name, output(done))
        assert github_output.read_text().startswith("key=torch-regression-")
        assert f"reference {base[:12]}: the pull request's base commit" in done.stdout
        assert f"reference {base[:12]}: 6 cases: 6 identical, 0 changed" in done.stdout
    finally:
        shutil.rmtree(repo.path / ".venv", ignore_errors=True)  # a gigabyte of torch


@pytest.mark.slow
def test_torch_and_torchvision_resolve_together_from_one_index_offline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The one command's resolution (pip --dry-run, nothing installed): pip picks a
    torchvision built for the torch it installs beside it."""
    index = _local_index()
    repo = _library(tmp_path, {"pyproject.toml": _pyproject(["torch==2.13.0",
                                                             "torchvision"])})
    _init(repo, monkeypatch, capsys)
    together = _pip_lines(repo)[0].replace(f"--index-url {CPU_INDEX}", f"--index-url {index}")
    report = tmp_path / "report.json"
    command = together.replace(".venv/bin/pip", f"{sys.executable} -m pip") + \
        f" --dry-run --ignore-installed --quiet --report {report}"
    done = subprocess.run(["bash", "-e", "-c", command], capture_output=True, text=True,
                          check=False, timeout=600)
    assert done.returncode == 0, output(done)
    chosen = {item["metadata"]["name"]: item["metadata"] for item in
              json.loads(report.read_text())["install"]}
    assert chosen["torch"]["version"].startswith("2.13.0")
    needs = [r for r in chosen["torchvision"].get("requires_dist", []) if r.startswith("torch")]
    assert needs == ["torch (==2.13.0)"] or needs == ["torch==2.13.0"], needs


# Values init writes into the workflow and config.yaml: every value `torch-regression init`
# writes into the workflow or config.yaml is checked or quoted, so no option, tag or folder
# name can add YAML of its own (a key, a GitHub expression, a comment) to what CI runs.


def _tagged_library(tmp_path: Path, package: str = "minilib", tag: str = "v0.1") -> Repo:
    """A repository with one package and a tag, as `torch-regression init` finds it."""
    repo = init_repo(tmp_path / "lib", tmp_path / "cache")
    repo.write(f"{package}/__init__.py", "VERSION = 1\n")
    repo.commit("the library")
    repo.git("tag", tag)
    return repo


def _init_result(repo: Repo, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
          *args: str) -> tuple[int, str, str]:
    """`torch-regression init ARGS` in this process, at the top of `repo`."""
    monkeypatch.chdir(repo.path)
    capsys.readouterr()
    code = main(["init", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


INJECTED_PYTHON = {
    "quote and newline": '3.11.7"\n  evil: "1',
    "expression": "${{ github.event.pull_request.title }}",
    "comment": "3.11 # pinned",
    "single quote": "3.11'",
    "trailing newline": "3.11.7\n",
    "empty": "",
    "a word": "latest",
    "major only": "3",
    "flow mapping": "{3.11: x}",
}


@pytest.mark.parametrize("python", list(INJECTED_PYTHON.values()), ids=list(INJECTED_PYTHON))
def test_a_python_version_that_is_not_digits_and_dots_is_refused_and_nothing_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        python: str) -> None:
    repo = _tagged_library(tmp_path)
    code, out, err = _init_result(repo, monkeypatch, capsys, "--python", python)
    assert code == 2, out + err
    assert err == (f"torch-regression: --python {python!r} is not a Python version: digits and "
                   "dots, e.g. --python 3.11.7, the exact version CI sets up\n")
    assert out == ""
    assert not (repo.path / ".github").exists() and not (repo.path / "config.yaml").exists()


@pytest.mark.parametrize("python", ["3.11.7", "3.12", "3.13.0"])
def test_a_python_version_is_written_as_the_one_string_setup_python_reads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        python: str) -> None:
    repo = _tagged_library(tmp_path)
    code, out, err = _init_result(repo, monkeypatch, capsys, "--python", python)
    assert code == 0, out + err
    workflow = yaml.safe_load((repo.path / WORKFLOW).read_text())
    setup = [s for s in workflow["jobs"]["regression"]["steps"]
             if "setup-python" in s.get("uses", "")]
    assert [s["with"]["python-version"] for s in setup] == [python]


@pytest.mark.parametrize("shards", ["0", "65", "-1"])
def test_a_shard_count_out_of_range_is_refused_and_nothing_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        shards: str) -> None:
    repo = _tagged_library(tmp_path)
    code, out, err = _init_result(repo, monkeypatch, capsys, "--shards", shards)
    assert code == 2, out + err
    assert err == f"torch-regression: --shards {shards}: give 1 to 64 CI runners\n"
    assert not (repo.path / ".github").exists()


def test_a_shard_count_that_is_no_number_is_refused_by_the_parser(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
        ) -> None:
    repo = _tagged_library(tmp_path)
    with pytest.raises(SystemExit) as exited:
        _init_result(repo, monkeypatch, capsys, "--shards", "4\n  evil: 1")
    assert exited.value.code == 2
    assert "argument --shards: invalid int value: '4\\n  evil: 1'" in capsys.readouterr().err
    assert not (repo.path / ".github").exists()


# A tag is any name git allows: quotes, '#', '$', '{', '&', '!' are allowed, and YAML reads
# some bare words as other types. Each must come back from config.yaml as that very string.
TAGS = ["v1\"x", "v1#x", "${{x}}", "{a}", "&anchor", "!tag", "'quoted'", "on", "null",
        "1.10", "0123abcd", "%v1", "|x", "release/2.0"]


@pytest.mark.parametrize("tag", TAGS)
def test_the_newest_tag_is_written_so_that_config_yaml_reads_it_back_unchanged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tag: str) -> None:
    repo = _tagged_library(tmp_path, tag=tag)
    code, out, err = _init_result(repo, monkeypatch, capsys)
    assert code == 0, out + err
    settings = load_settings(repo.path / "config.yaml")
    assert settings.reference == tag
    assert settings.subject_packages == ("minilib",)


@pytest.mark.parametrize("package", ["null", "true", "on", "no"])
def test_a_package_whose_name_yaml_reads_as_another_type_is_written_as_a_string(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        package: str) -> None:
    repo = _tagged_library(tmp_path, package=package)
    code, out, err = _init_result(repo, monkeypatch, capsys)
    assert code == 0, out + err
    assert load_settings(repo.path / "config.yaml").subject_packages == (package,)


def test_a_folder_named_as_a_python_keyword_is_no_package(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
        ) -> None:
    repo = _tagged_library(tmp_path, package="class")
    code, out, err = _init_result(repo, monkeypatch, capsys)
    assert code == 2, out + err
    assert "torch-regression: no Python package found in" in err
    assert not (repo.path / "tests").exists()


def test_real_command_refuses_an_injected_version_without_a_traceback(tmp_path: Path) -> None:
    repo = _tagged_library(tmp_path)
    done = subprocess.run([sys.executable, "-m", "regression", "init", "--python",
                           '3.11.7"\n  evil: "1'], cwd=repo.path, env=repo.env(), text=True,
                          capture_output=True, check=False, timeout=120)
    assert done.returncode == 2, output(done)
    assert "--python '3.11.7\"\\n  evil: \"1' is not a Python version" in done.stderr
    assert "Traceback" not in output(done)
    assert not (repo.path / WORKFLOW).exists()


def test_device_cuda_writes_a_gpu_workflow_for_a_self_hosted_runner(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    repo = _tagged_library(tmp_path)
    code, out, err = _init_result(repo, monkeypatch, capsys, "--device", "cuda")
    assert code == 0, out + err
    job = yaml.safe_load((repo.path / WORKFLOW).read_text())["jobs"]["regression"]
    assert job["runs-on"] == ["self-hosted", "gpu"]
    install = next(s["run"] for s in job["steps"] if s.get("name") == "Install")
    assert '.venv/bin/pip install "torch" --index-url https://download.pytorch.org/whl/cu' \
        in install
    assert "whl/cpu" not in install
    assert load_settings(repo.path / "config.yaml").device == "cuda"
    assert "runners labelled self-hosted, gpu: register one that has a GPU" in out
    assert yaml.safe_load((repo.path / ".github/actionlint.yaml").read_text()) == {
        "self-hosted-runner": {"labels": ["gpu"]}}
    _lint(repo)


def test_runner_labels_are_written_as_given_and_declared_for_actionlint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    repo = _tagged_library(tmp_path)
    code, out, err = _init_result(repo, monkeypatch, capsys, "--device", "cuda", "--runner",
                           "self-hosted, linux, a100-80gb")
    assert code == 0, out + err
    job = yaml.safe_load((repo.path / WORKFLOW).read_text())["jobs"]["regression"]
    assert job["runs-on"] == ["self-hosted", "linux", "a100-80gb"]
    assert "a100-80gb" in (repo.path / ".github/actionlint.yaml").read_text()
    _lint(repo)


def test_a_cpu_workflow_on_github_s_runners_needs_no_actionlint_config(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    repo = _tagged_library(tmp_path)
    assert _init_result(repo, monkeypatch, capsys)[0] == 0
    job = yaml.safe_load((repo.path / WORKFLOW).read_text())["jobs"]["regression"]
    assert job["runs-on"] == "ubuntu-latest"
    assert not (repo.path / ".github/actionlint.yaml").exists()
    assert "device" not in yaml.safe_load((repo.path / "config.yaml").read_text())


@pytest.mark.parametrize("runner", ['gpu"', "gpu\n  evil: 1", "${{ inputs.x }}", "gpu,", "",
                                    "-gpu", "gpu #x"])
def test_a_runner_label_that_is_not_a_plain_label_is_refused_and_nothing_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        runner: str) -> None:
    repo = _tagged_library(tmp_path)
    code, out, err = _init_result(repo, monkeypatch, capsys, "--device", "cuda",
                                  f"--runner={runner}")
    if runner == "":  # empty: the device's default labels
        assert code == 0, out + err
        return
    assert code == 2, out + err
    assert err.startswith(f"torch-regression: --runner {runner!r}: ")
    assert "is not a runner label; give labels of letters, digits" in err
    assert not (repo.path / WORKFLOW).exists()


def test_an_unknown_device_is_refused_by_the_parser(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    repo = _tagged_library(tmp_path)
    with pytest.raises(SystemExit) as stopped:
        _init_result(repo, monkeypatch, capsys, "--device", "tpu")
    assert stopped.value.code == 2
    assert "argument --device: invalid choice: 'tpu'" in capsys.readouterr().err


@pytest.mark.parametrize("moves,expected", [
    ([], "main"),
    ([("checkout", "-q", "-b", "release/2.x")], "release/2.x"),
    ([("symbolic-ref", "refs/remotes/origin/HEAD", "refs/remotes/origin/develop"),
      ("checkout", "-q", "-b", "feature")], "develop"),  # origin's default, not the checkout
    ([("checkout", "-q", "--detach")], "main"),  # no branch checked out: main
    ([("checkout", "-q", "-b", "${{x}}")], "main"),  # an expression if written: main instead
    ([("checkout", "-q", "-b", "a#b")], "main"),  # a YAML comment if written: main instead
])
def test_the_push_branch_is_origin_s_default_else_the_checked_out_one_else_main(
        tmp_path: Path, moves: list[tuple[str, ...]], expected: str) -> None:
    from regression.cli.workflow import default_branch

    repo = init_repo(tmp_path / "lib", tmp_path / "cache")
    repo.write("README.md", "lib\n")
    repo.commit("first")
    for move in moves:
        subprocess.run(["git", "-C", str(repo.path), *move], capture_output=True, check=False)
    assert default_branch(repo.path) == expected
