"""What a run is about, as plain data: the resolved reference, the suite of cases, what a
generation did and what each process hands back. The launcher, the API and the plugins all
build on these; this module imports only the cores below it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

if TYPE_CHECKING:  # every pytest run imports this module (the plugin's job): it stays light
    from regression.config.settings import Settings
    from regression.repository.gitcmd import Repository
    from regression.run.completion import Completion
    from regression.shard import ShardSpec
    from regression.store.cache import Entry

Echo = Callable[[str], None]


@dataclass(frozen=True)
class Reference:
    """A reference revision, resolved to a commit."""

    settings: Settings
    repo: Repository
    revision: str
    sha: str
    code: str
    """The subject's code at `sha`, as the key holds it (fingerprint.code_part): found once,
    by the process the user started; its children get it in their job."""

    @cached_property  # asked for by every phase of every case
    def label(self) -> str:
        from regression.repository.gitcmd import describe

        return describe(self.revision, self.sha)


def resolve(settings: Settings, reference: str | None) -> Reference:
    """Resolve the reference revision (config.yaml's unless given) to a commit: once per
    run, by whichever process the user started; its children get it in their job."""
    from regression.repository.gitcmd import open_repo
    from regression.repository.revision import resolve_revision

    revision = settings.revision_for(reference)
    repo = open_repo(settings.root)
    sha = resolve_revision(repo, revision)
    return Reference(settings, repo, revision, sha, subject_code(settings, repo, sha))


def at_commit(reference: Reference, sha: str) -> Reference:
    """`reference` moved to the commit `sha` (bisect's), its subject's code found again."""
    return replace(reference, revision=sha, sha=sha,
                   code=subject_code(reference.settings, reference.repo, sha))


def subject_code(settings: Settings, repo: Repository, sha: str) -> str:
    """The key's part for the subject's code at commit `sha`: the git objects of its
    packages (one git process)."""
    from regression.environment.fingerprint import code_part
    from regression.repository.revision import subject_objects

    return code_part(subject_objects(repo, sha, subject_folder(settings, repo),
                                     settings.subject_packages))


def subject_folder(settings: Settings, repo: Repository) -> str:
    """The folder the subject packages are in, relative to the repository's top ("" for
    the top), as git names it."""
    top = Path(repo.working_dir).resolve()
    folder = (settings.root / settings.subject_path).resolve()
    relative = folder.relative_to(top).as_posix() if folder.is_relative_to(top) else "."
    return "" if relative == "." else relative


def shard_cases(settings: Settings, cases: Iterable[str], spec: ShardSpec | None) -> set[str]:
    """The cases of shard `spec` (all of them without one), balanced by the recorded
    durations and config.yaml's pins: the assignment depends only on the set of case ids,
    whatever pytest selected or in which order."""
    from regression.store.durations import read_durations
    from regression.shard import select

    chosen = sorted(set(cases))
    if spec is None:
        return set(chosen)
    return set(select(chosen, spec, read_durations(settings.durations_file), settings.pins))


@dataclass(frozen=True)
class Suite:
    """The candidate's regression cases, and the cache entry of this environment."""

    reference: Reference
    cases: dict[str, str]
    entry: Entry
    shard: ShardSpec | None = None
    subject_root: Path | None = None
    """Set by `compare`: the candidate's subject comes from this worktree."""
    workers: int = 0
    """pytest-xdist workers for recording; 0 or 1 records in one process."""
    repeat: int = 1
    """Recordings of each case recorded; from 2, differing ones are stored nondeterministic."""
    files: dict[str, str] = field(default_factory=dict)
    """The check run's: every test file it collected regression cases from (of every shard),
    with its harness digest here; where each recording's collection is stored."""
    conditions: str = ""
    """The check run's: what else decides which cases its files collect (pytest's settings
    file, PYTEST_ADDOPTS), as a digest; "" where its own options may decide it too (nothing
    is stored of what the recording collected, nor compared)."""

    def in_shard(self, spec: ShardSpec | None) -> Suite:
        """The suite narrowed to one shard (every case when `spec` is None)."""
        if spec is None:
            return self
        chosen = shard_cases(self.reference.settings, self.cases, spec)
        return replace(self, cases={c: h for c, h in self.cases.items() if c in chosen},
                       shard=spec)


@dataclass
class Generation:
    """What `gen` did."""

    reused: int = 0
    recorded: list[str] = field(default_factory=list)
    absent: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    nondeterministic: dict[str, str] = field(default_factory=dict)
    """Recorded cases whose recordings differed, and how."""
    doubtful: dict[str, str] = field(default_factory=dict)
    """Cases that failed or skipped at the reference while a check ran beside the
    recording, and why: not stored (the two runs may have clashed), recorded again alone."""


@dataclass(frozen=True)
class Pending:
    """A case to record, and why: missing, stale, forced, or a fault in what was stored."""

    harness: str
    why: str
    fault: bool = False


@dataclass(frozen=True)
class CollectResult:
    """What a collect run hands back: every case with its harness digest (deselected ones
    too), the cases left selected, and the environment's fingerprint parts."""

    cases: dict[str, str]
    selected: list[str]
    parts: dict[str, str]


@dataclass(frozen=True)
class RecordResult:
    """What a record run hands back: the cases it stored and those not in the reference,
    with why; verifying, the cases whose outputs differ from the stored ones, by name."""

    recorded: list[str] = field(default_factory=list)
    absent: dict[str, str] = field(default_factory=dict)
    differ: dict[str, list[str]] = field(default_factory=dict)
    doubtful: dict[str, str] = field(default_factory=dict)
    """Recording beside a check run: the cases that failed or skipped, not stored (see
    Generation.doubtful)."""
    collected: dict[str, list[str]] | None = None
    """The regression cases each test file collected at the reference (files that failed
    to collect left out); None where it is not told (the run shared a file with the check
    run beside it, or no recording collected)."""
    helpers: dict[str, str] = field(default_factory=dict)
    """The helpers the recording found its cases using (see CaseRecord.helpers)."""


@dataclass(frozen=True)
class CheckResult:
    """What a check run hands back: what its generation did (None when it recorded nothing
    or had no case), and the record it writes at its very end."""

    generation: Generation | None = None
    finished: Completion | None = None


def hint_names() -> dict[str, object]:
    """The classes this module's annotations name, imported when a job is decoded (see
    job.decode): a plain pytest run never needs them."""
    from regression.config.settings import Determinism, Settings
    from regression.repository.gitcmd import Repository
    from regression.run.completion import Completion
    from regression.shard import ShardSpec

    return {cls.__name__: cls for cls in (Determinism, Settings, Repository, Completion,
                                          ShardSpec)}
