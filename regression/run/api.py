"""What the tasks call: collect the cases, run the check (which records what is missing),
make the cache key, check out a candidate. Above the launcher and the recording; nothing
below imports it.
"""

from __future__ import annotations

import json
import subprocess
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Iterator, Sequence

from regression.declarations import Declaration
from regression.errors import CollectionError, RunIncompleteError
from regression.environment.fingerprint import digest, files_digest
from regression.environment.harness import python_files_under
from regression.repository.revision import resolve_revision
from regression.repository.worktree import reference_worktree
from regression.run.completion import settle
from regression.references.recorder import in_context
from regression.run.job import GEN_AUTO, CheckJob, CollectJob
from regression.run.launch import forks, run_forked, run_pytest, tail
from regression.run.types import CheckResult, CollectResult, Reference, Suite
from regression.shard import ShardSpec
from regression.store.cache import Entry
from regression.store.scratch import scratch_folder


def collect(reference: Reference, subject_root: Path | None = None) -> Suite:
    """The candidate's regression cases and environment, as pytest itself sees them."""
    result = _collected(reference, subject_root)
    return Suite(reference, dict(result.cases), Entry(reference.settings.cache_dir,
                                                      dict(result.parts)),
                 subject_root=subject_root)


def matching_cases(reference: Reference, expression: str) -> list[str]:
    """The regression cases a pytest `-k` expression selects, as pytest itself matches."""
    return list(_collected(reference, None, ("-k", expression)).selected)


def _collected(reference: Reference, subject_root: Path | None,
               select: Sequence[str] = ()) -> CollectResult:
    """What a collect run writes: every case with its harness digest, the cases `select`
    leaves selected, and the environment's parts."""
    settings = reference.settings
    with scratch_folder("result") as folder:
        job = CollectJob(reference, result=str(Path(folder) / "result.json"),
                         subject_root=str(subject_root or ""))
        args = ["--collect-only", "-q", *select, *settings.tests]
        if not forks(job):
            process = run_pytest(settings, args, job, True)
        else:  # no second Python start, nor a second import of torch
            output = Path(folder) / "output.txt"
            code = run_forked(settings, args, job, output)
            process = subprocess.CompletedProcess(
                args, code, output.read_text(encoding="utf-8", errors="replace")
                if output.is_file() else "", "")
        error = job.read_error()
        result = job.read_result()
    if error is not None:
        raise in_context(reference, error)
    if process.returncode not in (0, 5) or result is None:
        raise CollectionError(
            f"pytest could not collect the tests in {', '.join(settings.tests)} "
            f"(exit {process.returncode}); fix the errors below, then run again:\n"
            f"{tail(process)}"
        )
    return result


def check_job(reference: Reference, *, shard: ShardSpec | None = None,
              subject_root: Path | None = None, gen: str = GEN_AUTO, force: bool = False,
              workers: int = 0, selection: str = "", repeat: int = 0,
              declarations: tuple[Declaration, ...] = ()) -> CheckJob:
    """The job of a check run: the resolved reference and what to do about its cache."""
    return CheckJob(reference, subject_root=str(subject_root or ""), shard=shard, gen=gen,
                    force=force, workers=workers, selection=selection, repeat=repeat,
                    declarations=declarations)


def run_check(reference: Reference, job: CheckJob, args: Sequence[str],
              paths: Sequence[str] = ()) -> tuple[int, CheckResult | None]:
    """The one pytest run of `invoke test` or `invoke gen`, in a fork of this process, over
    `paths` (node ids or folders; config.yaml's `tests` when none).

    Returns its exit code and its result. An error it reports as data is raised here as the
    same error; a run that did not report at its very end that it judged every case and
    passed, whatever the exit code of its process, raises RunIncompleteError.
    """
    settings = reference.settings
    with scratch_folder("result") as folder:
        job = replace(job, result=str(Path(folder) / "result.json"))
        args = [*args, *(paths or settings.tests)]
        if forks(job):
            code = run_forked(settings, args, job)
        else:
            code = run_pytest(settings, args, job, capture=False).returncode
        error = job.read_error()
        result = job.read_result()
        journal = job.read_journal()
    if error is not None:
        raise error
    try:
        return settle(code, result.finished if result else None, journal), result
    except RunIncompleteError:
        print(flush=True)  # the run may have ended mid-line
        raise


def cache_key(suite: Suite) -> str:
    """The key CI's cache uses: `restore_key`'s prefix (the subject's code, the environment
    entry, the shard), then every case's harness and every Python file under the test folders
    (helpers are known only once recorded)."""
    code = files_digest(suite.reference.settings.root, key_code_files(suite))
    harness = digest(json.dumps([sorted(suite.cases.items()), code]).encode())
    return f"{restore_key(suite)}{harness[:16]}"


def restore_key(suite: Suite) -> str:
    """The prefix of `cache_key` that actions/cache's restore-keys matches: the same subject
    code (not the commit: a commit that leaves the subject alone restores the same cache),
    environment and shard, whatever the test code. Harmless, as every entry is checked, case
    by case, before use: a case whose harness is unchanged is reused, any other recorded."""
    subject = digest(suite.reference.code.encode())[:12]
    shard = f"shard{suite.shard.index}of{suite.shard.count}-" if suite.shard else ""
    return f"torch-regression-{subject}-{suite.entry.key[:16]}-{shard}"


def key_code_files(suite: Suite) -> list[Path]:
    """The Python files under the test folders, which the key hashes: which of them are
    helpers is known only once recorded, and the key is made before the cache is restored."""
    settings = suite.reference.settings
    return python_files_under(settings.root, settings.tests)


@contextmanager
def candidate_checkout(reference: Reference, revision: str) -> Iterator[Path]:
    """A candidate revision as a worktree: the folder its subject is imported from.

    Only the subject comes from the candidate: the working tree's config.yaml and tests
    drive the check, as they drive the reference's recording, so any revision whose subject
    they can call (a tag from before adoption too) can be a candidate."""
    sha = resolve_revision(reference.repo, revision)
    with reference_worktree(reference.repo, sha) as worktree:
        yield worktree / reference.settings.subject_path
