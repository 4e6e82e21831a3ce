"""Adversarial workflow generation: every value `torch-regression init` writes into the
workflow or config.yaml is checked or quoted, so no option, tag or folder name can add YAML
of its own (a key, a GitHub expression, a comment) to what CI runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import Repo, init_repo, output

from regression.cli.main import main
from regression.config import load_settings

WORKFLOW = ".github/workflows/regression.yml"


def _library(tmp_path: Path, package: str = "minilib", tag: str = "v0.1") -> Repo:
    """A repository with one package and a tag, as `torch-regression init` finds it."""
    repo = init_repo(tmp_path / "lib", tmp_path / "cache")
    repo.write(f"{package}/__init__.py", "VERSION = 1\n")
    repo.commit("the library")
    repo.git("tag", tag)
    return repo


def _init(repo: Repo, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
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
    repo = _library(tmp_path)
    code, out, err = _init(repo, monkeypatch, capsys, "--python", python)
    assert code == 2, out + err
    assert err == (f"torch-regression: --python {python!r} is not a Python version: digits and "
                   "dots, e.g. --python 3.11.7, the exact version CI sets up\n")
    assert out == ""
    assert not (repo.path / ".github").exists() and not (repo.path / "config.yaml").exists()


@pytest.mark.parametrize("python", ["3.11.7", "3.12", "3.13.0"])
def test_a_python_version_is_written_as_the_one_string_setup_python_reads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        python: str) -> None:
    repo = _library(tmp_path)
    code, out, err = _init(repo, monkeypatch, capsys, "--python", python)
    assert code == 0, out + err
    workflow = yaml.safe_load((repo.path / WORKFLOW).read_text())
    setup = [s for s in workflow["jobs"]["regression"]["steps"]
             if "setup-python" in s.get("uses", "")]
    assert [s["with"]["python-version"] for s in setup] == [python]


@pytest.mark.parametrize("shards", ["0", "65", "-1"])
def test_a_shard_count_out_of_range_is_refused_and_nothing_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        shards: str) -> None:
    repo = _library(tmp_path)
    code, out, err = _init(repo, monkeypatch, capsys, "--shards", shards)
    assert code == 2, out + err
    assert err == f"torch-regression: --shards {shards}: give 1 to 64 CI runners\n"
    assert not (repo.path / ".github").exists()


def test_a_shard_count_that_is_no_number_is_refused_by_the_parser(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
        ) -> None:
    repo = _library(tmp_path)
    with pytest.raises(SystemExit) as exited:
        _init(repo, monkeypatch, capsys, "--shards", "4\n  evil: 1")
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
    repo = _library(tmp_path, tag=tag)
    code, out, err = _init(repo, monkeypatch, capsys)
    assert code == 0, out + err
    settings = load_settings(repo.path / "config.yaml")
    assert settings.reference == tag
    assert settings.subject_packages == ("minilib",)


@pytest.mark.parametrize("package", ["null", "true", "on", "no"])
def test_a_package_whose_name_yaml_reads_as_another_type_is_written_as_a_string(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        package: str) -> None:
    repo = _library(tmp_path, package=package)
    code, out, err = _init(repo, monkeypatch, capsys)
    assert code == 0, out + err
    assert load_settings(repo.path / "config.yaml").subject_packages == (package,)


def test_a_folder_named_as_a_python_keyword_is_no_package(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
        ) -> None:
    repo = _library(tmp_path, package="class")
    code, out, err = _init(repo, monkeypatch, capsys)
    assert code == 2, out + err
    assert "torch-regression: no Python package found in" in err
    assert not (repo.path / "tests").exists()


def test_real_command_refuses_an_injected_version_without_a_traceback(tmp_path: Path) -> None:
    repo = _library(tmp_path)
    done = subprocess.run([sys.executable, "-m", "regression", "init", "--python",
                           '3.11.7"\n  evil: "1'], cwd=repo.path, env=repo.env(), text=True,
                          capture_output=True, check=False, timeout=120)
    assert done.returncode == 2, output(done)
    assert "--python '3.11.7\"\\n  evil: \"1' is not a Python version" in done.stderr
    assert "Traceback" not in output(done)
    assert not (repo.path / WORKFLOW).exists()


def _lint(repo: Repo) -> None:
    """actionlint and zizmor on the generated workflow, with init's actionlint.yaml."""
    folder = Path(sys.executable).parent
    for command in ([str(folder / "actionlint"), WORKFLOW],
                    [str(folder / "zizmor"), "--offline", WORKFLOW]):
        checked = subprocess.run(command, cwd=repo.path, capture_output=True, text=True,
                                 check=False)
        assert checked.returncode == 0, checked.stdout + checked.stderr


def test_device_cuda_writes_a_gpu_workflow_for_a_self_hosted_runner(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    repo = _library(tmp_path)
    code, out, err = _init(repo, monkeypatch, capsys, "--device", "cuda")
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
    repo = _library(tmp_path)
    code, out, err = _init(repo, monkeypatch, capsys, "--device", "cuda", "--runner",
                           "self-hosted, linux, a100-80gb")
    assert code == 0, out + err
    job = yaml.safe_load((repo.path / WORKFLOW).read_text())["jobs"]["regression"]
    assert job["runs-on"] == ["self-hosted", "linux", "a100-80gb"]
    assert "a100-80gb" in (repo.path / ".github/actionlint.yaml").read_text()
    _lint(repo)


def test_a_cpu_workflow_on_github_s_runners_needs_no_actionlint_config(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    repo = _library(tmp_path)
    assert _init(repo, monkeypatch, capsys)[0] == 0
    job = yaml.safe_load((repo.path / WORKFLOW).read_text())["jobs"]["regression"]
    assert job["runs-on"] == "ubuntu-latest"
    assert not (repo.path / ".github/actionlint.yaml").exists()
    assert "device" not in yaml.safe_load((repo.path / "config.yaml").read_text())


@pytest.mark.parametrize("runner", ['gpu"', "gpu\n  evil: 1", "${{ inputs.x }}", "gpu,", "",
                                    "-gpu", "gpu #x"])
def test_a_runner_label_that_is_not_a_plain_label_is_refused_and_nothing_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        runner: str) -> None:
    repo = _library(tmp_path)
    code, out, err = _init(repo, monkeypatch, capsys, "--device", "cuda", f"--runner={runner}")
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
    repo = _library(tmp_path)
    with pytest.raises(SystemExit) as stopped:
        _init(repo, monkeypatch, capsys, "--device", "tpu")
    assert stopped.value.code == 2
    assert "argument --device: invalid choice: 'tpu'" in capsys.readouterr().err
