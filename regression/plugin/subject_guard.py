"""A recording's proof that what it ran is the reference's: the subject imported from the
reference worktree, and no other file of the user's repository used than test code and
`harness` files."""

from __future__ import annotations

import importlib
import os
import traceback
from pathlib import Path
from typing import Sequence

import pytest

from regression.errors import SubjectImportError
from regression.environment.harness import extra_harness_files, helper_digests
from regression.plugin.importer import install_redirect, verify_origins
from regression.plugin.recording_run import RecordingRun
from regression.plugin.worker_messages import CONTROLLER, role
from regression.environment.origins import stray_modules
from regression.plugin.strays import require_own_files
from regression.plugin.tree_watch import TreeWatch, stop_watching, watch_tree
from regression.repository.worktree import lay_working_harness

_PYTEST_SETTINGS = ("pyproject.toml", "pytest.ini", ".pytest.ini", "tox.ini", "setup.cfg")


class SubjectGuard:
    """A pytest plugin: imports the subject from its worktree, watches what the process
    reads from the user's repository, and proves both at the end."""

    def __init__(self, run: RecordingRun) -> None:
        self.run = run
        self.watch: TreeWatch | None = None
        """What this process reads from the user's repository, when recording a worktree."""
        run.at_end.append(self.prove)

    def redirect(self) -> None:
        """Before conftests load: the subject's packages import from `subject_root`
        (RegressionError if they cannot)."""
        install_redirect(self.run.settings.subject_packages, self.run.subject_root, strict=True)

    def enter_workdir(self) -> None:
        """Recording a worktree: its project folder becomes the working folder, and the
        user's repository is watched."""
        run = self.run
        if not run.job.workdir:
            return
        if not run.worker:  # the controller of xdist's workers lays it for them
            self._lay_working_harness()
        os.chdir(run.job.workdir)  # arguments resolve against where pytest started
        self.watch = self._tree_watch()
        watch_tree(self.watch)

    def _lay_working_harness(self) -> None:
        """The worktree's test folders and `harness` files become the working tree's."""
        settings = self.run.settings
        root = settings.root
        lay_working_harness(Path(self.run.job.workdir), root, settings.tests,
                            extra_harness_files(root, settings.harness),
                            [root / settings.subject_path / p for p in settings.subject_packages])

    def _tree_watch(self) -> TreeWatch:
        """A watch of the user's repository: free are the worktree, the cache, git's
        folder, config.yaml and pytest's settings, and `harness` files; test folders are
        hashed; the subject's folders are named as such."""
        settings = self.run.settings
        root = settings.root
        free = [Path(self.run.job.workdir), self.run.subject_root, settings.cache_dir,
                root / ".git"]
        files = [settings.path, *(root / n for n in _PYTEST_SETTINGS),
                 *extra_harness_files(root, settings.harness)]
        subject = [root / settings.subject_path / p for p in settings.subject_packages]
        return TreeWatch(root, free, files, subject, [root / t for t in settings.tests],
                         Path(self.run.job.workdir),
                         keyed_paths(self.run.subject_root, settings.subject_packages))

    @pytest.hookimpl(trylast=True)  # once the kernel settings are made
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if role(session.config) == CONTROLLER:
            return  # pytest-xdist's controller runs no case
        run = self.run
        for package in run.settings.subject_packages:
            try:
                importlib.import_module(package)
            except BaseException:  # noqa: B036 - any failure at import is reported as data
                run.fail(SubjectImportError(traceback.format_exc(limit=-8)))
                if run.worker:
                    return  # it runs nothing; the relay has told its controller
                pytest.exit(f"the subject {package!r} failed to import at the reference",
                            returncode=3)

    def pytest_runtest_teardown(self, item: pytest.Item) -> None:
        """Files that native code mapped (safetensors) raise no audit event: look now."""
        if self.watch is not None:
            self.watch.saw_mappings()

    def prove(self) -> None:
        """The subject came from the worktree; every module from the user's repository is
        subject (from the worktree), test code or harness, and so is every file read or run
        from it: anything else would be the candidate posing as reference. What the tests
        used in the test folders besides the test modules becomes the cases' helpers."""
        run = self.run
        settings = run.settings
        verify_origins(settings.subject_packages, run.subject_root)
        root = settings.root
        tests = [root / t for t in settings.tests]
        harness = extra_harness_files(root, settings.harness)
        stray = stray_modules(root, [run.subject_root, *tests], harness)
        refused: dict[str, str] = {}
        unkeyed: dict[str, str] = {}
        if self.watch is not None:
            self.watch.saw_modules()
            self.watch.saw_mappings()
            stop_watching()
            refused, helpers = self.watch.sorted_out(run.test_modules)
            run.helpers = helper_digests(root, helpers, self.watch.variables_read())
            unkeyed = self.watch.reference_reads()
        require_own_files(stray, refused, unkeyed, settings.subject_packages)


def keyed_paths(subject_root: Path, packages: Sequence[str]) -> list[Path]:
    """The subject's code in the reference's worktree, as the key holds it
    (revision.subject_objects): each package's folder, else its module file, else the whole
    subject folder."""
    found = []
    for package in packages:
        folder, module = subject_root / package, subject_root / f"{package}.py"
        if folder.is_dir() and not folder.is_symlink():
            found.append(folder)
        elif module.is_file() and not module.is_symlink():
            found.append(module)
        else:
            found.append(subject_root)
    return found
