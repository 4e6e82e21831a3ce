"""The project's own files (pyproject.toml, setup.cfg, setup.py, requirements*.txt) as the
tool reads them: its reads are never the user's, a refusal says what to do for the kind of
file it found, and a runtime requirement file's dependencies are in the key.

The repositories are flat (the subject at the top), not installed, as timm's is.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from helpers import TESTS, Repo, output

TIMM_LAYOUT = {
    "pyproject.toml": '[project]\nname = "subj"\nversion = "1.0"\n'
                      'dependencies = ["torch"]\n\n[tool.pytest.ini_options]\n',
    "requirements.txt": "torch>=2\nnumpy\n",
    "requirements-dev.txt": "pytest\nruff\n",
}
SETUPTOOLS_LAYOUT = {
    "setup.cfg": "[metadata]\nname = subj\n\n[options]\ninstall_requires =\n    numpy\n",
    "setup.py": 'from setuptools import setup\n\nsetup(install_requires=["torch"])\n',
    "requirements/base.txt": "numpy\n",
    "requirements/test.txt": "pytest\n",
}


@pytest.mark.parametrize("files", [TIMM_LAYOUT, SETUPTOOLS_LAYOUT], ids=["timm", "setuptools"])
def test_a_flat_uninstalled_library_with_its_project_files_records_and_passes(
        subject_repo: Repo, files: dict[str, str]) -> None:
    """The key's dependency facts are read from these files in the invoke process and
    handed to the recording: the recording's watch of the tree sees none of those reads."""
    for name, text in files.items():
        subject_repo.write(name, text)
    subject_repo.commit("the project's files")
    gen = subject_repo.invoke("gen")
    assert gen.returncode == 0, output(gen)
    assert "recorded 1 cases" in gen.stdout, output(gen)
    test = subject_repo.invoke("test")
    assert test.returncode == 0, output(test)
    assert "1 case: 1 identical" in test.stdout, output(test)
    assert "were run or read" not in output(gen) + output(test)
    explained = subject_repo.invoke("key", "--explain")
    assert "  numpy: declared by " in explained.stdout, output(explained)  # the facts are used


def test_a_refusal_names_the_fix_for_each_kind_of_file(subject_repo: Repo) -> None:
    """The subject imports a module beside it; a test reads a data file outside the test
    folders and the project's requirements.txt, by paths into the working tree."""
    for name, text in TIMM_LAYOUT.items():
        subject_repo.write(name, text)
    subject_repo.write("helpers.py", "FACTOR = 2.0\n")
    subject_repo.write("subj/__init__.py", "import helpers\n" +
                       (subject_repo.path / "subj" / "__init__.py").read_text())
    subject_repo.write("assets/inputs.json", '{"scale": 1.0}\n')
    subject_repo.write("tests/test_subj.py", textwrap.dedent("""\
        import json
        from pathlib import Path

        ROOT = Path(__file__).resolve().parents[1]  # the working tree
        SCALE = json.loads((ROOT / "assets" / "inputs.json").read_text())["scale"]
        NEEDS = (ROOT / "requirements.txt").read_text()
        """) + TESTS)
    subject_repo.commit("a helper module, a data file and a read of requirements.txt")
    done = subject_repo.invoke("gen", "--reference", "HEAD")
    text = done.stderr
    assert done.returncode == 2, output(done)
    assert "  helpers (helpers.py)\n" in text, text
    assert "Fix: a module beside the subject is code under test: add helpers to " \
           "config.yaml's `subject.packages`" in text, text
    assert "  assets/inputs.json (read)\n" in text, text
    assert "Fix: a data file the tests read, outside the test folders: list it in " \
           "config.yaml's `harness`" in text, text
    assert "  requirements.txt (read)\n" in text, text
    assert "Fix: the project's metadata: to know the subject's own (its version, its " \
           "requirements), install the subject (`pip install -e .`)" in text, text
    assert "requirements-dev.txt" not in text and "pyproject.toml" not in text, text
    assert text.count("Fix: ") == 3 and text.rstrip().endswith("Nothing was stored."), text
    assert "Import the subject by its package name" not in text  # what could not help
    assert not list(subject_repo.cache.rglob("*.safetensors"))


def _fake_distribution(folder: Path, name: str, version: str) -> Path:
    """A real installed distribution, metadata only, in `folder` (to put on the path)."""
    info = folder / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "RECORD").write_text("")
    return folder


def _key_explained(repo: Repo, *folders: Path) -> tuple[str, str]:
    """`invoke key --explain` with `folders` on PYTHONPATH: (the key, the explanation)."""
    done = repo.invoke("key", "--explain", process=True,
                       env={"PYTHONPATH": ":".join(str(f) for f in folders)})
    assert done.returncode == 0, output(done)
    return done.stdout.strip().splitlines()[-1], done.stdout


@pytest.mark.slow
def test_a_dependency_declared_only_in_requirements_txt_is_in_the_key(
        subject_repo: Repo, tmp_path: Path) -> None:
    """timm declares numpy only in requirements.txt: another installed version of it must
    change the key; one of a package requirements-dev.txt names must not."""
    for name, text in TIMM_LAYOUT.items():
        subject_repo.write(name, text)
    subject_repo.write("requirements.txt", "torch>=2\nFake_Runtime_Dep>=1\n")
    subject_repo.write("requirements-dev.txt", "fake-dev-dep\n")
    runtime = {v: _fake_distribution(tmp_path / f"runtime-{v}", "fake_runtime_dep", v)
               for v in ("1.0", "2.0")}
    dev = {v: _fake_distribution(tmp_path / f"dev-{v}", "fake_dev_dep", v)
           for v in ("1.0", "2.0")}
    key, explained = _key_explained(subject_repo, runtime["1.0"], dev["1.0"])
    assert "packages: fake-runtime-dep 1.0\n" in explained, explained
    assert "  fake-runtime-dep: declared by requirements.txt\n" in explained, explained
    assert "fake-dev-dep" not in explained and "fake_runtime_dep" not in explained, explained
    assert "  the subject's dependencies: read from subj's pyproject.toml/setup.cfg (it is " \
           "not installed), requirements.txt\n" in explained, explained
    upgraded, _ = _key_explained(subject_repo, runtime["2.0"], dev["1.0"])
    assert upgraded != key
    dev_upgraded, _ = _key_explained(subject_repo, runtime["1.0"], dev["2.0"])
    assert dev_upgraded == key
