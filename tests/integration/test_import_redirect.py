"""The reference's subject is imported from the worktree, whatever sys.path says."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from helpers import (CONFIG, SUBJECT, TASKS, TESTS, Repo, init_repo, installable_pyproject,
                     output, venv_with_wheel)

ROOT_CONFTEST = """\
import subj  # imported while conftest loads: before any test, with rootdir first on sys.path


def pytest_report_header(config):
    return f"subj from {subj.__file__}"
"""


def _src_layout_repo(tmp_path: Path) -> Repo:
    repo = init_repo(tmp_path / "repo", tmp_path / "cache")
    repo.write("config.yaml", CONFIG.format(reference="HEAD", path="src"))
    repo.write("src/subj/__init__.py", SUBJECT.format(scale="1.0"))
    repo.write("tests/test_subj.py", TESTS)
    repo.write("conftest.py", ROOT_CONFTEST)
    repo.write("tasks.py", TASKS)
    repo.write(".gitignore", "__pycache__/\n*.egg-info/\nbuild/\n")
    repo.write("pyproject.toml", installable_pyproject("subj", "src"))
    repo.commit("src layout")
    return repo


def _venv_with_editable_install(repo: Repo, folder: Path) -> str:
    """A virtual environment that sees this one's packages, with the subject editable."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = str(folder / "bin" / "python")
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             check=True, capture_output=True, text=True).stdout.strip()
    parent = sysconfig.get_path("purelib")
    Path(purelib, "parent_env.pth").write_text(f"import site; site.addsitedir({parent!r})\n")
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--no-index", "-e", str(repo.path)], check=True, env=repo.env())
    return python


@pytest.mark.slow
def test_editable_src_layout_with_root_conftest_records_the_reference(tmp_path: Path) -> None:
    repo = _src_layout_repo(tmp_path)
    python = _venv_with_editable_install(repo, tmp_path / "venv")
    where = subprocess.run([python, "-c", "import subj; print(subj.__file__)"], cwd=tmp_path,
                           check=True, capture_output=True, text=True).stdout.strip()
    assert where == str(repo.path / "src" / "subj" / "__init__.py")  # the editable install
    repo.write("src/subj/__init__.py", SUBJECT.format(scale="1.5"))
    before = repo.snapshot()
    done = repo.invoke("test", python=python)
    assert done.returncode == 1, output(done)  # the candidate's change is seen: the
    assert "1 changed" in output(done)          # reference really came from the worktree
    assert repo.snapshot() == before


def test_subject_imported_around_the_redirect_fails_the_recording(subject_repo: Repo) -> None:
    subject_repo.write("conftest.py", """\
        import importlib.util
        import sys
        from pathlib import Path

        spec = importlib.util.spec_from_file_location(
            "subj", Path(__file__).parent / "subj" / "__init__.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["subj"] = module
        spec.loader.exec_module(module)
        """)
    done = subject_repo.invoke("gen")
    assert done.returncode == 2, output(done)
    assert "imported from outside the reference worktree" in done.stderr
    assert "subj:" in done.stderr
    assert "Nothing was stored" in done.stderr
    assert not list(subject_repo.cache.rglob("*.safetensors"))


@pytest.mark.slow
def test_installed_from_a_wheel_with_warnings_as_errors(subject_repo: Repo, tmp_path: Path,
                                                        our_wheel: Path) -> None:
    python = venv_with_wheel(our_wheel, tmp_path / "venv")
    where = subprocess.run([python, "-c", "import regression; print(regression.__file__)"],
                           cwd=subject_repo.path, check=True, capture_output=True,
                           text=True).stdout.strip()
    assert where.startswith(str(tmp_path / "venv"))  # the wheel's copy, not this checkout
    subject_repo.write("pyproject.toml", '[tool.pytest.ini_options]\nfilterwarnings = ["error"]\n')
    subject_repo.commit("warnings are errors")
    for task in ("gen", "test"):
        done = subject_repo.invoke(task, "--reference", "HEAD", python=python)
        assert done.returncode == 0, output(done)
        assert "Warning" not in output(done)
