"""The invoke tasks: gen, test, key, shards and compare, and the collection `ns` of them all
(cache.* in cache_tasks.py, bisect and explain in diagnose_tasks.py)."""

from __future__ import annotations

import importlib.util
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

from invoke.collection import Collection
from invoke.context import Context
from invoke.exceptions import Exit
from invoke.tasks import task

from regression.cli.cache_tasks import cache
from regression.cli.common import DEVICE_HELP, REFERENCE_HELP, current_settings, help_if_asked, \
    refusing_remainder, report_path, require_filled, translated
from regression.cli.diagnose_tasks import bisect, explain
from regression.config.settings import MAX_REPEAT, Settings
from regression.declarations import FILE, REMOVAL, Declaration, accepted, pruned, stale
from regression.declarations import read as read_declarations
from regression.declarations import write as write_declarations
from regression import github
from regression.errors import RegressionError
from regression.store.durations import read_durations
from regression.environment.fingerprint import device_details, package_lines
from regression.environment.harness import extra_harness_files, harness_files
from regression.repository.gitcmd import ignored_warning
from regression.run.job import GEN_AUTO, GEN_NEVER, GEN_ONLY
from regression.outcomes import CHANGED, REMOVED, CaseOutcome
from regression.report import count, generation_lines
from regression.selection import Selection, selection, unknown_cases
from regression.run.api import cache_key, candidate_checkout, check_job, collect, key_code_files, \
    restore_key, run_check
from regression.references.needed import record_values
from regression.run.types import CheckResult, Reference, Suite, resolve
from regression.shard import MAX_SHARDS, ShardSpec, assign, parse_shard
from regression.shard import SHARD_START, table as shard_table

PYTEST_INTERRUPTED = 2  # pytest.ExitCode.INTERRUPTED: collection errors, Ctrl-C
PYTEST_USAGE_ERROR = 4  # pytest.ExitCode.USAGE_ERROR: also its "not found" for a node id


SHARD_HELP = "only shard i of n (1-based), e.g. 2/4; every case is in exactly one shard"
K_HELP = "only the cases whose names match this pytest -k expression, e.g. 'vit and not large'"
CASE_HELP = ("only this case: a node id as pytest prints it (tests/test_x.py::test_y[a]) or a "
             "test file; repeat for more")
WORKERS_HELP = ("run in N pytest-xdist processes (recording too); 1: one process, whatever "
                "addopts says; left out: as addopts says, recording in one process")


MAX_WORKERS = 1024


def _number(flag: str, text: str | None, high: int, what: str) -> int | None:
    """A whole-number flag from 1 to `high`, checked here (invoke's own int flags end in a
    traceback on `abc`); None when it was left out."""
    if text is None:
        return None
    if not re.fullmatch(r"\s*[0-9]+\s*", text) or not 1 <= int(text) <= high:
        raise RegressionError(f"{flag} {text!r}: {what} is a whole number from 1 to {high}, "
                              f"e.g. {flag} 2")
    return int(text)


def _shard(text: str | None) -> ShardSpec | None:
    """The --shard flag, checked; None when it was left out (an empty one is refused)."""
    return None if text is None else parse_shard(text)


def _suite(reference: str | None, shard_spec: str | None) -> Suite:
    spec = _shard(shard_spec)
    return collect(resolve(current_settings(), reference)).in_shard(spec)


def _gen(reference: str | None, shard_spec: str | None, force: bool, workers: str | None,
         chosen: tuple[str | None, list[str] | None], repeat_text: str | None) -> None:
    require_filled(("--reference", reference), ("-k", chosen[0]), ("--case", chosen[1]))
    spec = _shard(shard_spec)
    count = _workers(workers)
    repeat = _number("--repeat", repeat_text, MAX_REPEAT,
                     "the number of recordings of each case (2 finds nondeterministic ones)")
    resolved = resolve(current_settings(), reference)
    picked = selection(*chosen, resolved.settings.root, shard_spec,
                       resolved.settings.tests)
    repeat = repeat or resolved.settings.determinism.repeat
    job = check_job(resolved, shard=spec, gen=GEN_ONLY, force=force,
                    workers=count, selection=picked.describe(), repeat=repeat)
    code, result = run_check(resolved, job, picked.pytest_args(), picked.cases)
    _require_known_cases(resolved, picked, code)
    if result is None or code:
        raise RegressionError(_stopped(resolved, code))
    generation = result.generation
    if generation is None:
        print("nothing generated: no case was selected")
        return
    for line in generation_lines(generation):
        print(line)
    if repeat > 1 and not generation.recorded:
        print("no case was recorded, so none was checked for nondeterminism: `invoke gen "
              "--force --repeat 2` records every case again, twice")


@task(help={"reference": REFERENCE_HELP, "shard": SHARD_HELP,
            "force": "regenerate every case, valid or not", "workers": WORKERS_HELP,
            "k": K_HELP, "case": CASE_HELP,
            "device": DEVICE_HELP,
            "repeat": "record each case N times, each in its own process: a case whose "
                      "recordings differ is stored as nondeterministic, never compared "
                      "(default: config.yaml's determinism.repeat, 1)"},
      iterable=["case"])
def gen(c: Context, reference: str | None = None, shard: str | None = None,
        force: bool = False, workers: str | None = None, k: str | None = None,
        case: list[str] | None = None, repeat: str | None = None,
        device: str | None = None) -> None:
    """Generate the reference outputs, or reuse them when the cache holds valid ones."""
    translated(lambda: _gen(reference, shard, force, workers, (k, case), repeat), device)


def _workers(text: str | None) -> int:
    """A --workers count, checked: pytest-xdist must be installed for more than one.
    0 means left out."""
    count = _number("--workers", text, MAX_WORKERS, "the number of pytest-xdist processes") or 0
    if count > 1 and importlib.util.find_spec("xdist") is None:
        raise RegressionError("--workers needs pytest-xdist; install it with "
                              "pip install 'torch-regression[xdist]'")
    return count


def _xdist_option(workers: int) -> list[str]:
    """The check run's -n for --workers: N processes, or one (`-n 0` overrides a -n in
    addopts); nothing when --workers was left out, or there is no xdist to tell."""
    if workers > 1:
        return ["-n", str(workers)]
    if workers == 1 and importlib.util.find_spec("xdist") is not None:
        return ["-n", "0"]
    return []


@dataclass(frozen=True)
class CheckRequest:
    """One check run of `invoke test` or `invoke compare`, as its flags asked for it."""

    resolved: Reference
    shard: ShardSpec | None = None
    no_gen: bool = False
    """Never record: a case without a valid reference stops the run."""
    strict: bool = False
    junitxml: str | None = None
    store_durations: bool = False
    subject_root: Path | None = None
    """`compare`: the candidate's subject comes from this worktree."""
    workers: int = 0
    picked: Selection = Selection()
    full_values: bool = False
    """Where digests differ, record those cases' values and check them again."""
    declarations: tuple[Declaration, ...] = ()
    """regression-changes.yaml's entries: the changes the run lets pass, as declared."""

    def against_values(self, cases: Sequence[str]) -> CheckRequest:
        """The check again of `cases`, against the values --full-values recorded: it records
        nothing, and writes no JUnit report and no durations (the first run did)."""
        return replace(self, shard=None, no_gen=True, junitxml=None, store_durations=False,
                       picked=Selection(cases=tuple(cases)), full_values=False)


def _check(request: CheckRequest) -> int:
    """One pytest run: it records what is missing (unless `no_gen`), then checks. With
    `full_values`, cases whose digests differ are recorded with their values and checked
    again, for the full report; their digest-only references are stored again after it.
    The exit code is the first run's."""
    code, result = _run_check(request)
    if request.full_values and code:
        with record_values(request.resolved, changed_cases(result), print) as again:
            if again:  # checked against the values; the cache keeps the digests after
                _run_check(request.against_values(again))
    return code


def _run_check(request: CheckRequest) -> tuple[int, CheckResult | None]:
    """The check run `request` asks for: its exit code and what it handed back."""
    resolved, picked = request.resolved, request.picked
    args = [*_xdist_option(request.workers), *picked.pytest_args()]
    if request.strict:
        args.append("--regression-strict")
    if request.junitxml is not None:
        args.append(f"--junitxml={report_path('--junitxml', request.junitxml, 'regression.xml')}")
    if request.store_durations:
        args.append(f"--regression-durations={resolved.settings.durations_file}")
    job = check_job(resolved, shard=request.shard, subject_root=request.subject_root,
                    gen=GEN_NEVER if request.no_gen else GEN_AUTO, workers=request.workers,
                    selection=picked.describe(), declarations=request.declarations)
    return run_check(resolved, job, args, picked.cases)


def changed_cases(result: CheckResult | None) -> list[str]:
    """The cases a check run's result names as changed."""
    return result.finished.cases(CHANGED) if result and result.finished else []


def _stopped(resolved: Reference, code: int) -> str:
    """Why a generation ended without a result, in the words pytest's exit code allows."""
    if code == PYTEST_INTERRUPTED:
        return (f"the generation at {resolved.label} did not run to its end: pytest was "
                "interrupted (exit 2): by Ctrl-C, or because it could not collect the tests in "
                "this environment; the errors, and what to install or fix, are above")
    return (f"the generation at {resolved.label} stopped (pytest exit {code}) before it "
            "finished; its output is above")


def _require_known_cases(resolved: Reference, picked: Selection, code: int) -> None:
    """After pytest's "not found" (its usage error) for a --case: which node id names no
    case, and the nearest one (a collection, paid only when the run has failed so)."""
    if code == PYTEST_USAGE_ERROR and any("::" in case for case in picked.cases):
        error = unknown_cases(picked, collect(resolved).cases)
        if error is not None:
            raise error


def _exit_with(code: int) -> None:
    if code:
        raise Exit(code=code)


@task(help={
    "reference": REFERENCE_HELP,
    "shard": SHARD_HELP,
    "strict": "fail cases that are not in the reference instead of skipping them",
    "junitxml": "also write a JUnit XML report to this path",
    "no-gen": "never generate: stop with the reason when a reference is missing or invalid",
    "store-durations": "record the seconds each case takes, for balancing shards",
    "workers": WORKERS_HELP,
    "k": K_HELP,
    "case": CASE_HELP,
    "device": DEVICE_HELP,
    "full-values": "where a reference kept only digests and they differ, record those cases' "
                   "values at the reference and check them again: the full report (for this "
                   "run only: the cache keeps the digests)",
}, iterable=["case"])
def test(c: Context, reference: str | None = None, shard: str | None = None,
         strict: bool = False, junitxml: str | None = None, no_gen: bool = False,
         store_durations: bool = False, workers: str | None = None, k: str | None = None,
         case: list[str] | None = None, device: str | None = None,
         full_values: bool = False) -> None:
    """Generate what is missing, then check the working tree against the reference."""
    def work() -> int:
        require_filled(("--reference", reference), ("--junitxml", junitxml), ("-k", k),
                ("--case", case))
        spec, count = _shard(shard), _workers(workers)
        resolved = resolve(current_settings(), reference)
        picked = selection(k, case, resolved.settings.root, shard, resolved.settings.tests)
        github.tell_reference(resolved.label, reference)
        declarations = read_declarations(resolved.settings.root / FILE)
        code = _check(CheckRequest(resolved, spec, no_gen=no_gen, strict=strict,
                                   junitxml=junitxml, store_durations=store_durations,
                                   workers=count, picked=picked, full_values=full_values,
                                   declarations=declarations))
        _require_known_cases(resolved, picked, code)
        return code
    _exit_with(translated(work, device))


def _accept(chosen: tuple[str | None, list[str] | None], reason: str | None, prune: bool,
            workers: str | None) -> int:
    """Check the working tree without declarations; write each changed case into
    regression-changes.yaml (with --prune: drop the entries whose case no longer differs).
    The exit code is 1 where cases failed that no declaration may excuse."""
    require_filled(("-k", chosen[0]), ("--case", chosen[1]))
    if prune and reason is not None:
        raise RegressionError(f"--prune drops the entries of {FILE} that no longer differ, and "
                              "takes no --reason; run `invoke accept --reason TEXT` to declare")
    if not prune and (reason is None or not reason.strip()):
        raise RegressionError("--reason is required: say why the outputs change, e.g. "
                              "--reason 'attention softmax computed in float32'; the reviewer "
                              "reads it in the pull request, and `invoke test` prints it")
    count = _workers(workers)
    resolved = resolve(current_settings(), None)  # the one `invoke test` and CI check against
    settings = resolved.settings
    path = settings.root / FILE
    existing = read_declarations(path)
    picked = selection(*chosen, settings.root, None, settings.tests)
    # a prune checks with the removals declared in files still there (the run tells which
    # the reference holds too); a declaring run without any, so each change shows as it is
    removals = tuple(d for d in existing if _removal_in_place(d, settings.root))
    _, result = _run_check(CheckRequest(resolved, workers=count, picked=picked,
                                        declarations=removals if prune else ()))
    outcomes = result.finished.outcomes if result and result.finished else ()
    if prune:
        gone = set(result.finished.gone) if result and result.finished else set()
        return _prune(resolved, existing, outcomes, bool(picked), gone)
    changed = [o for o in outcomes if o.outcome == CHANGED or
               (o.outcome == REMOVED and (not picked or picked.names(o.nodeid)))]
    unnamed = [o.nodeid for o in outcomes if o.outcome == REMOVED and o not in changed]
    if unnamed:
        print(f"not declared: {len(unnamed)} removed {'case' if len(unnamed) == 1 else 'cases'}"
              f" that {picked.describe()} does not name (a removed case is collected no more: "
              f"name it with --case): {', '.join(unnamed[:5])}")
    if not changed:
        raise RegressionError(f"nothing to declare: no{' selected' if picked else ''} case "
                              f"differs from the reference {resolved.label}, so {FILE} is "
                              "left as it is; `invoke test` shows each case's outcome")
    write_declarations(path, accepted(existing, changed, (reason or "").strip(), resolved.sha))
    return _declared(settings.root, resolved, changed, outcomes)


def _declared(root: Path, resolved: Reference, changed: Sequence[CaseOutcome],
              outcomes: Sequence[CaseOutcome]) -> int:
    """Say what `invoke accept` declared, and what it could not: 1 where cases failed that
    no declaration may excuse."""
    how = "changed or removed" if any(o.outcome == REMOVED for o in changed) else "changed"
    print(f"declared {len(changed)} {how} {'case' if len(changed) == 1 else 'cases'} "
          f"against {resolved.label} in {FILE}:")
    for outcome in changed:
        print(f"  {outcome.nodeid} (removed)" if outcome.outcome == REMOVED else
              f"  {outcome.nodeid} ({outcome.size}: {', '.join(map(repr, outcome.names))})")
    print(f"commit {FILE} with the change; `invoke test` now passes these cases as declared, "
          "while their change stays within the entry")
    warning = ignored_warning(root, FILE)
    if warning:
        print(warning)
    others = [o for o in outcomes if o.outcome not in (CHANGED, REMOVED) and o.fails(False)]
    if others:
        print(f"not declared: {len(others)} cases failed otherwise (a declaration never "
              f"excuses an error): {', '.join(o.nodeid for o in others[:5])}")
        return 1
    return 0


def _removal_in_place(declaration: Declaration, root: Path) -> bool:
    """Whether `declaration` declares a removal from a test file that is still there."""
    return declaration.size == REMOVAL and (root / declaration.case.split("::")[0]).is_file()


def _prune(resolved: Reference, existing: Sequence[Declaration],
           outcomes: Sequence[CaseOutcome], selected: bool, gone: set[str]) -> int:
    """Drop the declarations whose case this run found identical, the removals the
    reference holds too (`gone`), and (when every case ran) those that name no case: not a
    removal's, which names a case not collected by definition."""
    drop = stale(existing, outcomes)
    identical = {d.case for d in drop}
    drop += [d for d in existing if d.size == REMOVAL and d.case in gone]
    judged = {o.nodeid for o in outcomes} | gone
    root = resolved.settings.root
    unjudged = [d for d in existing if d.case not in judged and not _removal_in_place(d, root)]
    if unjudged and not selected:
        cases = collect(resolved).cases
        drop += [d for d in unjudged if d.case not in cases]
    write_declarations(resolved.settings.root / FILE, pruned(existing, drop))
    if not drop:
        print(f"nothing to prune: every entry of {FILE} this run judged still differs")
        return 0
    for declaration in drop:
        why = "no longer differs" if declaration.case in identical else \
            "the reference no longer has it either" if declaration.case in gone else \
            "names no case"
        print(f"dropped {declaration.case}: {why}")
    left = len(existing) - len(drop)
    print(f"{left} {'entry' if left == 1 else 'entries'} left in {FILE}" if left
          else f"no entry left: {FILE} removed")
    return 0


@task(help={
    "k": "declare only the changed cases whose names match this pytest -k expression",
    "case": CASE_HELP,
    "reason": "why the outputs change: written with each entry, shown by every `invoke test`",
    "prune": "drop the entries whose case no longer differs (or names no case), as "
             "`invoke test` lists them",
    "workers": WORKERS_HELP,
    "device": DEVICE_HELP,
}, iterable=["case"])
def accept(c: Context, k: str | None = None, case: list[str] | None = None,
           reason: str | None = None, prune: bool = False, workers: str | None = None,
           device: str | None = None) -> None:
    """Declare the cases that differ now as changes made on purpose."""
    _exit_with(translated(lambda: _accept((k, case), reason, prune, workers), device))


def _compare(reference: str | None, candidate: str, shard_spec: str | None, strict: bool,
             junitxml: str | None) -> int:
    require_filled(("--candidate", candidate), ("--reference", reference), ("--junitxml", junitxml),
            required="--candidate")
    spec = _shard(shard_spec)
    resolved = resolve(current_settings(), reference)
    github.tell_reference(resolved.label, reference)
    with candidate_checkout(resolved, candidate) as subject_root:
        print(f"comparing {candidate} (candidate) with {resolved.label} (reference)")
        return _check(CheckRequest(resolved, spec, strict=strict, junitxml=junitxml,
                                   subject_root=subject_root))


@task(help={
    "reference": REFERENCE_HELP + " (default: config.yaml's)",
    "candidate": "the candidate revision: its subject is checked with your tests and config",
    "shard": SHARD_HELP,
    "strict": "fail cases that are not in the reference instead of skipping them",
    "junitxml": "also write a JUnit XML report to this path",
    "device": DEVICE_HELP,
})
def compare(c: Context, candidate: str, reference: str | None = None, shard: str | None = None,
            strict: bool = False, junitxml: str | None = None, device: str | None = None
            ) -> None:
    """Check one revision against another, both checked out as worktrees."""
    if not help_if_asked(compare, candidate):
        _exit_with(translated(lambda: _compare(reference, candidate, shard, strict, junitxml),
                              device))


def _key(reference: str | None, shard_spec: str | None, explain: bool,
         github_output: bool) -> None:
    require_filled(("--reference", reference))
    if github_output:
        _append_github_output("key", None)  # checked before the collection, not after
    suite = _suite(reference, shard_spec)
    if explain:
        for name, value in suite.entry.parts.items():
            print(f"{name}: {value}")
        print(reference_line(suite.reference.sha, suite.reference.revision))
        for line in [*device_details(suite.reference.settings.device),
                     *package_lines(suite.reference.settings), *_harness_lines(suite)]:
            print(line)
        print(key_code_line(suite.reference.settings.root, suite.reference.settings.tests,
                             len(key_code_files(suite))))
        if suite.shard:
            print(f"shard: {suite.shard}")
    line = cache_key(suite)
    if github_output:
        _append_github_output("key", line)
        _append_github_output("restore-key", restore_key(suite))
    print(line)


def reference_line(sha: str, revision: str) -> str:
    """For `key --explain`: the commit the subject code was read from, which the key leaves
    out."""
    named = f" ({revision})" if revision != sha else ""
    return (f"reference: commit {sha}{named}, where the subject code was read; not in the "
            "key: a commit that leaves the subject alone shares this reference")


def key_code_line(root: Path, tests: Sequence[str], found: int) -> str:
    """For `key --explain`: the Python files the key hashes under the test folders; a test
    file named in `tests` is no folder, and is hashed as its cases' harness."""
    folders = [t for t in tests if not (root / t).is_file()]
    files = [t for t in tests if (root / t).is_file()]
    parts = [f"{count(found, 'Python file')} under {', '.join(folders)} (the helpers the "
             "tests may import; those found while recording are also checked per case)"
             ] if folders else []
    if files:
        parts.append(f"{'the file' if len(files) == 1 else 'the files'} {', '.join(files)}, "
                     "hashed as the harness of its cases (above)")
    return f"test code: {'; '.join(parts)}"


def _harness_lines(suite: Suite) -> list[str]:
    """For `key --explain`: the harness files, each case's test file with the conftest.py
    files above it and config.yaml's `harness` files."""
    settings = suite.reference.settings
    root = settings.root.resolve()
    tests = sorted({case.split("::")[0] for case in suite.cases})
    extra = extra_harness_files(root, settings.harness)
    found = dict.fromkeys(path for test in tests
                          for path in harness_files(root / test, root, extra))
    names = [path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)
             for path in found]
    return [f"harness: {count(len(suite.cases), 'case')} in {count(len(tests), 'file')}, "
            "hashed with:",
            *(f"  {name}" for name in names)]


def _append_github_output(name: str, value: str | None) -> None:
    """Append `name=value` to $GITHUB_OUTPUT; with no value, only prove that it can be."""
    if not os.environ.get(github.OUTPUT):
        raise RegressionError("--github-output needs $GITHUB_OUTPUT, which GitHub Actions sets "
                              "in every step; outside Actions leave the flag off")
    github.append(github.OUTPUT, "" if value is None else f"{name}={value}\n")


@task(help={
    "reference": REFERENCE_HELP,
    "shard": SHARD_HELP,
    "explain": "list every part the key is made of",
    "github-output": "also append key=... and restore-key=... (its prefix without the "
                     "test code, for actions/cache's restore-keys) to $GITHUB_OUTPUT",
    "device": DEVICE_HELP,
})
def key(c: Context, reference: str | None = None, shard: str | None = None,
        explain: bool = False, github_output: bool = False, device: str | None = None) -> None:
    """Print the cache key (one line) that CI's actions/cache uses."""
    translated(lambda: _key(reference, shard, explain, github_output), device)


def _shards(count_text: str | None, list_cases: bool) -> None:
    count = _number("--count", count_text, MAX_SHARDS, "the number of shards") or 4
    settings = current_settings()
    suite = collect(resolve(settings, None))
    durations = read_durations(settings.durations_file)
    known = sum(1 for case in suite.cases if case in durations)
    for line in _shard_table_lines(list(suite.cases), count, durations, known, settings):
        print(line)
    if list_cases:
        for index, members in enumerate(assign(suite.cases, count, durations, settings.pins)):
            print(f"shard {index + 1}/{count}:")
            for case in sorted(members):
                print(f"  {case}")


def _shard_table_lines(cases: list[str], count: int, durations: dict[str, float], known: int,
                       settings: Settings) -> list[str]:
    """The split as a table; estimated seconds only when some durations are recorded."""
    table = shard_table(cases, count, durations, settings.pins, SHARD_START)
    name = settings.durations_file.name
    if not known:
        return [f"{len(cases)} cases, no recorded durations ({name} "
                f"{'holds none of them' if settings.durations_file.exists() else 'is missing'})"
                ": shards are split by a hash of each case's name, so no time can be "
                "estimated; `invoke test --store-durations` records them",
                f"{'shard':>5}  {'cases':>5}",
                *(f"{index:>5}  {number:>5}" for index, number, _ in table)]
    guessed = f"; the other {len(cases) - known} count as their mean" if known < len(cases) \
        else ""
    return [f"{len(cases)} cases, {known} with recorded durations ({name}){guessed}; each "
            f"shard's estimate includes {SHARD_START:.1f} s to start (Python, torch, "
            "collecting, planning)",
            f"{'shard':>5}  {'cases':>5}  {'est. seconds':>12}",
            *(f"{index:>5}  {number:>5}  {seconds:>12.2f}" for index, number, seconds in table)]


@task(help={"count": "number of shards (default 4)",
            "list": "also list the cases of each shard"})
def shards(c: Context, count: str | None = None, list_: bool = False) -> None:
    """Print how the cases split into shards: shard, cases, estimated seconds."""
    translated(lambda: _shards(count, list_))


ns = refusing_remainder(Collection(gen, test, accept, key, shards, compare, bisect, explain,
                                   cache))
