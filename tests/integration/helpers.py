"""Helpers: real temporary git repositories, real commits, real invoke and pytest runs."""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import sys
import sysconfig
import textwrap
from dataclasses import dataclass
from pathlib import Path

from warm_python import WARM, reads_at_load

from regression.config.paths import CACHE_DIR_ENV, NO_DEFAULT_CACHE_ENV

PROJECT = Path(__file__).resolve().parents[2]

CONFIG = """\
reference: {reference}
subject:
  packages: [subj]
  path: {path}
tests: [tests]
determinism:
  seed: 0
  threads: 1
"""

SUBJECT = """\
import torch

SCALE = {scale}


def forward(x: torch.Tensor) -> torch.Tensor:
    weight = torch.linspace(-1.0, 1.0, 3 * x.shape[-1]).reshape(3, x.shape[-1])
    return torch.tanh(torch.nn.functional.linear(x, weight)) * SCALE
"""

TESTS = """\
import subj


def test_forward(regression):
    regression.check(subj.forward(regression.randn(2, 4)), name="out")


def test_plain():
    assert subj.SCALE > 0
"""

TASKS = "from regression.tasks import ns\n"

# hypothesis (a development dependency) has a pytest plugin that imports hypothesis, about
# 1 s, in every pytest process; the repositories made here have no hypothesis tests.
NO_HYPOTHESIS = "-p no:hypothesispytest"


def with_addopts(env: dict[str, str]) -> dict[str, str]:
    """`env` with hypothesis's plugin off, before any PYTEST_ADDOPTS of its own."""
    addopts = f"{NO_HYPOTHESIS} {env.get('PYTEST_ADDOPTS', '')}".strip()
    return {**env, "PYTEST_ADDOPTS": addopts}


@dataclass
class Repo:
    """A real git repository in a temporary folder, and the commands run in it."""

    path: Path
    cache: Path

    def git(self, *args: str) -> str:
        done = subprocess.run(["git", *args], cwd=self.path, text=True, capture_output=True,
                              check=True)
        return done.stdout.strip()

    def write(self, relative: str, text: str) -> None:
        target = self.path / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(textwrap.dedent(text), encoding="utf-8")

    def commit(self, message: str) -> str:
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)
        return self.git("rev-parse", "HEAD")

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("REGRESSION_", "PYTEST_", "GITHUB_"))}
        env[CACHE_DIR_ENV] = str(self.cache)
        env[NO_DEFAULT_CACHE_ENV] = "1"  # only the cache chosen here (tests/conftest.py)
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        return with_addopts(env)

    def invoke(self, *args: str, python: str = sys.executable,
               env: dict[str, str] | None = None,
               process: bool = False) -> subprocess.CompletedProcess[str]:
        """`python -m invoke ARGS` here: a fork of a warm Python (see warm_python.py) unless
        told to start a `process`, given another `python`, or an `env` torch reads as it
        loads."""
        environment = with_addopts({**self.env(), **(env or {})})
        if process or python != sys.executable or reads_at_load(env or {}):
            return subprocess.run([python, "-m", "invoke", *args], cwd=self.path,
                                  env=environment, text=True, capture_output=True, check=False,
                                  timeout=600)
        return WARM.invoke(self.path, args, environment)

    def pytest(self, *args: str, process: bool = False) -> subprocess.CompletedProcess[str]:
        """`python -m pytest ARGS` here: a fork of the warm Python, as `invoke` runs are,
        unless told to start a `process`."""
        arguments = ["-p", "no:cacheprovider", *args]
        if process:
            return subprocess.run([sys.executable, "-m", "pytest", *arguments], cwd=self.path,
                                  env=self.env(), text=True, capture_output=True, check=False,
                                  timeout=600)
        return WARM.pytest(self.path, arguments, self.env())

    def snapshot(self) -> dict[str, object]:
        """HEAD, index, stash, status and every file's bytes, outside .git."""
        files = {
            str(p.relative_to(self.path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(self.path.rglob("*"))
            if p.is_file() and ".git" not in p.relative_to(self.path).parts
        }
        return {
            "head": self.git("rev-parse", "HEAD"),
            "branch": self.git("symbolic-ref", "-q", "HEAD"),
            "index": self.git("ls-files", "--stage"),
            "stash": self.git("stash", "list"),
            "status": self.git("status", "--porcelain", "--untracked-files=all"),
            "files": files,
        }


def interruptible() -> None:
    """A child's `preexec_fn`: Ctrl-C (SIGINT) interrupts it, as in a terminal, also where
    this suite was started in the background (a shell's `&` ignores SIGINT, and a child
    inherits that)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def output(done: subprocess.CompletedProcess[str]) -> str:
    return done.stdout + done.stderr


def init_repo(path: Path, cache: Path) -> Repo:
    path.mkdir(parents=True, exist_ok=True)
    repo = Repo(path, cache)
    repo.git("init", "-q", "-b", "main")
    repo.git("config", "user.email", "test@example.com")
    repo.git("config", "user.name", "Test")
    repo.git("config", "commit.gpgsign", "false")
    return repo




def tagged_repo(path: Path, cache: Path, files: dict[str, str], tag: str = "v1",
                message: str = "") -> Repo:
    """A repository of `files` (with tasks.py, an empty pytest section and a .gitignore
    beside them), committed and tagged `tag`: an annotated tag where given a `message`."""
    repo = init_repo(path, cache)
    for name, text in {"tasks.py": TASKS, "pyproject.toml": "[tool.pytest.ini_options]\n",
                       ".gitignore": "__pycache__/\n", **files}.items():
        repo.write(name, text)
    repo.commit(tag)
    repo.git("tag", *(("-a", tag, "-m", message) if message else (tag,)))
    return repo


def make_subject_repo(path: Path, cache: Path) -> Repo:
    """A repository with a tiny subject `subj` at commit v1 (tagged), a second commit on top."""
    repo = tagged_repo(path, cache, {"config.yaml": CONFIG.format(reference="v1", path="."),
                                     "subj/__init__.py": SUBJECT.format(scale="1.0"),
                                     "tests/test_subj.py": TESTS}, message="version 1")
    repo.write("README.md", "a second commit\n")
    repo.commit("docs")
    return repo


def flat_subject_repo(path: Path, cache: Path) -> Repo:
    """The tiny subject with a flat layout and `reference: HEAD`, written but not committed."""
    repo = init_repo(path, cache)
    repo.write("config.yaml", CONFIG.format(reference="HEAD", path="."))
    repo.write("subj/__init__.py", SUBJECT.format(scale="1.0"))
    repo.write("tasks.py", TASKS)
    repo.write("pyproject.toml", "[tool.pytest.ini_options]\n")
    repo.write(".gitignore", "__pycache__/\n")
    return repo


class Mounts:
    """Real mounts for fault tests (a small disk, a read-only cache); undone by `undo`."""

    def __init__(self) -> None:
        self.points: list[Path] = []

    @staticmethod
    def run(*args: str) -> None:
        subprocess.run(["mount", *args], check=True, capture_output=True, text=True)

    def tmpfs(self, path: Path, size: str) -> None:
        """A fresh file system of `size` bytes (e.g. 64k) at `path`."""
        path.mkdir(parents=True, exist_ok=True)
        self.run("-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path))
        self.points.append(path)

    def resize(self, path: Path, size: str) -> None:
        self.run("-o", f"remount,size={size}", str(path))

    def read_only(self, path: Path) -> None:
        """`path` as a read-only view of itself: even root cannot write there."""
        self.run("--bind", str(path), str(path))
        self.points.append(path)
        self.run("-o", "remount,ro,bind", str(path))

    def undo(self) -> None:
        for path in reversed(self.points):
            subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)
        self.points.clear()


def mount_refused(probe: Path) -> str:
    """Why this machine cannot mount (not root, no CAP_SYS_ADMIN); "" when it can."""
    probe.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4k", "tmpfs", str(probe)],
                          capture_output=True, text=True, check=False)
    if done.returncode:
        return done.stderr.strip() or f"mount exited {done.returncode}"
    subprocess.run(["umount", str(probe)], check=True)
    return ""


def fill(folder: Path) -> None:
    """Write a file into `folder` until its disk is full."""
    with open(folder / "filler", "wb", buffering=0) as stream:
        try:
            while True:
                stream.write(b"x" * 4096)
        except OSError:
            pass


def stored_files(cache: Path) -> dict[Path, tuple[int, int]]:
    """Modification time and inode of every stored reference file (entry and cases)."""
    return {p: (p.stat().st_mtime_ns, p.stat().st_ino) for p in cache.rglob("*")
            if p.is_file() and p.name not in ("last-used", ".gitignore")
            and p.suffix != ".lock"}


def stored_bytes(cache: Path) -> dict[Path, bytes]:
    """The bytes of every stored reference file (records and tensor files), by path."""
    return {path.relative_to(cache): path.read_bytes() for path in stored_files(cache)}


def build_wheel(folder: Path) -> Path:
    """This project built as a wheel into `folder`, as a user would install it."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(folder),
                    str(PROJECT)], check=True, capture_output=True)
    (wheel,) = folder.glob("torch_regression-*.whl")
    return wheel


def venv_with_wheel(wheel: Path, folder: Path) -> str:
    """A new virtual environment with torch-regression installed from `wheel`; it sees this
    one's packages (torch, pytest...) instead of installing them again. Returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = str(folder / "bin" / "python")
    where = "import sysconfig; print(sysconfig.get_path('purelib'))"
    purelib = subprocess.run([python, "-c", where], check=True, capture_output=True,
                             text=True).stdout.strip()
    Path(purelib, "parent_env.pth").write_text(
        f"import site; site.addsitedir({sysconfig.get_path('purelib')!r})\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "-q",
                    "--no-deps", "--no-index", "--ignore-installed", str(wheel)], check=True,
                   capture_output=True)  # here, beside the editable install it also sees
    return python


def installable_pyproject(name: str, where: str, pytest_settings: str = "") -> str:
    """A pyproject.toml that pip can install (editable too) from the `where` folder, with
    pytest's settings section."""
    return f"""\
[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "{name}"
version = "1.0"

[tool.setuptools.packages.find]
where = ["{where}"]
include = ["{name}*"]

[tool.pytest.ini_options]
{pytest_settings}"""


def expand_expressions(value: object, known: dict[str, str]) -> str:
    """`value` with each `${{ ... }}` GitHub would evaluate in a job's env replaced, for the
    few forms a workflow here uses: a name, or names joined by `||` (the first that is not
    empty; a null is empty). A name not in `known` is a KeyError: the test must say it."""
    def evaluate(found: re.Match[str]) -> str:
        values = [known[name.strip()] for name in found.group(1).split("||")]
        return next((value for value in values if value), "")
    return re.sub(r"\$\{\{\s*([\w.|\s-]+?)\s*\}\}", evaluate, str(value))
