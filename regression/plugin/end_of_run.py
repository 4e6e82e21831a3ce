"""The end of a check run: proves every case it was handed was judged, merges what xdist's
workers judged, stores durations, and writes the record without which a run does not pass."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from regression.errors import RegressionError
from regression.plugin.common import collecting_options, crash_reason
from regression.plugin.case_accounts import RunFacts, outcome_from
from regression.plugin.worker_messages import in_worker
from regression.plugin.state import OUTCOME
from regression.outcomes import DECLARED, ERROR, REMOVED, CaseOutcome
from regression.report import not_run_lines
from regression.run.completion import END, START, Completion
from regression.run.types import CheckResult

if TYPE_CHECKING:
    from regression.plugin.state import CheckState, ReadyReferences

WORKER_KEY = "torch_regression"


class EndOfRun:
    """A pytest plugin: follows the run's cases to their end, and judges the run."""

    def __init__(self, state: CheckState) -> None:
        self.state = state
        self.ledger = state.ledger
        self.config = state.config
        self.job = state.job
        self.session: pytest.Session | None = None
        self.finished = False
        """Whether this plugin's end of the run ran: the completion record needs it."""
        state.relay.on_worker_done(WORKER_KEY, self._worker_done)

    def _facts(self) -> RunFacts:
        option = self.config.option
        return RunFacts(bool(option.collectonly), int(option.maxfail or 0))

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        """Note the test in the journal: if the process ends in it, the parent names it."""
        self.ledger.running = nodeid
        if self.job is not None and not self.state.gen_only:
            self.job.note(f"{START}{nodeid}")

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        self.ledger.running = ""
        if self.job is not None and not self.state.gen_only:
            self.job.note(f"{END}{nodeid}")

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        """pytest.exit() or Ctrl-C: the cases it cut short are named with the reason."""
        error = excinfo.value
        if self.ledger.stopped and isinstance(error, pytest.Session.Interrupted):
            return  # a plugin of ours stopped the run (shouldstop), and said why
        if isinstance(error, pytest.exit.Exception):
            self.ledger.stop(f"pytest.exit({error.msg!r}) was called")
        else:
            self.ledger.stop("it was interrupted (KeyboardInterrupt: Ctrl-C, or raised by code)")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Which tests ran (also in the xdist controller, which sees every worker's), and
        there each case's outcome as its worker reports it: kept if that worker dies."""
        if report.when == "call" or not report.passed:
            self.ledger.ran.add(report.nodeid)
        fields = getattr(report, OUTCOME, None)
        if fields is not None and not in_worker(self.config):
            self.ledger.reported.add(report.nodeid)
            if fields:
                self.ledger.judge(outcome_from(fields))

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport) -> None:
        """xdist's controller: a regression case whose worker died is an error naming it."""
        if crashitem in self.ledger.reported:  # a regression case: its setup was reported
            message = (f"{crash_reason(report)}, so it was not judged; `pytest -n 0 "
                       f"'{crashitem}'` runs it alone and shows why")
            self.ledger.judge(CaseOutcome(crashitem, ERROR, message))

    def _worker_done(self, data: Any, error: object) -> None:
        """xdist's controller: merge what a worker expected, saw and reported."""
        if data:
            self.ledger.merge(data)

    @pytest.hookimpl(tryfirst=True)  # before xdist's worker sends its output
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Prove the subject's origin and the run complete; store durations; summaries.
        An xdist worker hands what it knows to the controller, which judges and reports."""
        from regression.plugin.step_summary import write_step_summary

        self.session = session
        if self.state.refusal:
            return  # no case ran: the refusal says why, and nothing else is to be said
        worker = in_worker(self.config)
        if self.state.gen_only and not worker:
            if session.exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
                session.exitstatus = pytest.ExitCode.OK
            self.finished = True
            return
        self._verify_origins(session)
        self._judge_removed()
        if self.state.relay.hand_over(WORKER_KEY, self.ledger.data()):
            return
        self._require_all_ran(session)
        self._require_verdicts_passed(session)
        self._store_durations()
        if self.ledger.errors and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.INTERNAL_ERROR  # a worker's, merged here
        write_step_summary(self.ledger, self.job.declarations if self.job else ())
        self.finished = True

    def _verify_origins(self, session: pytest.Session) -> None:
        """Regression cases ran here: the candidate must be the working tree (or the
        candidate's worktree), not an installed copy."""
        if self.state.references is None or not self.state.compared:
            return
        from regression.plugin.importer import verify_origins

        settings = self.state.settings
        root = self.state.subject_root or settings.root / settings.subject_path
        try:
            verify_origins(settings.subject_packages, root)
        except RegressionError as exc:
            self.ledger.errors.append(str(exc))
            session.exitstatus = pytest.ExitCode.INTERNAL_ERROR

    def _judge_removed(self) -> None:
        """Each regression case the reference collected that this run did not, where the
        test code that decides which cases exist is unchanged: the subject's change removed
        it, which fails unless regression-changes.yaml declares it. Judged once the
        recording beside the run (if any) has stored what the reference collected, by
        every shard (each collects every file); not where --lf or --sw dropped tests
        without deselecting them."""
        references = self.state.references
        option = self.config.option
        if references is None or self.ledger.collected is None:
            return
        if getattr(option, "lf", False) or getattr(option, "stepwise", False):
            self.ledger.notes.append("removed cases not judged: --lf and --sw drop tests "
                                     "without deselecting them")
            return
        from regression.declarations import REMOVAL, by_case

        declared = by_case(self.job.declarations if self.job is not None else ())
        removed, judged, other = removed_cases(references, self.ledger.collected,
                                               self.ledger.modules, self._partial_files())
        self._note_unjudged(references, other)
        self.ledger.gone |= {case for case, d in declared.items() if d.size == REMOVAL
                             and case.split("::", 1)[0] in judged and case not in removed
                             and case not in self.ledger.collected}
        if removed and not self._subject_changed(references):
            self.ledger.notes.append(
                f"{len(removed)} {'case' if len(removed) == 1 else 'cases'} the reference "
                f"collected {'is' if len(removed) == 1 else 'are'} not collected here "
                f"({_listed(removed)}), though the subject is the reference's and so is the "
                "test code: something else decides which cases exist (an environment "
                "variable the tests read?); not judged as removed")
            return
        for nodeid in removed:
            file = nodeid.split("::", 1)[0]
            detail = (f"collected at the reference {references.label}, not here, by the same "
                      "test code: the subject's change removed it")
            declaration = declared.get(nodeid)
            if declaration is not None and declaration.size == REMOVAL:
                self.ledger.judge(CaseOutcome(nodeid, DECLARED, detail, path=file, line=1,
                                              size=REMOVAL, reason=declaration.reason))
            else:
                self.ledger.judge(CaseOutcome(nodeid, REMOVED, (
                    f"{detail}. If on purpose, `invoke accept --reason TEXT` declares the "
                    "removal"), path=file, line=1))

    def _subject_changed(self, references: ReadyReferences) -> bool:
        """Whether the subject checked (the working tree's) differs from the reference's: a
        candidate's worktree (compare) counts as changed."""
        if self.state.subject_root is not None:
            return True
        from regression.repository.revision import subject_changed
        from regression.run.types import subject_folder

        reference = references.suite.reference
        settings = reference.settings
        return subject_changed(reference.repo, reference.sha,
                               subject_folder(settings, reference.repo),
                               settings.subject_packages)

    def _note_unjudged(self, references: ReadyReferences, unjudged: list[str]) -> None:
        """Say where removed cases were not looked for (`unjudged`: files whose collection
        was taken under other conditions), and why: a run that could not judge them must not
        read as one that found none."""
        suite = references.suite
        if not suite.conditions:
            options = collecting_options(list(self.config.invocation_params.args))
            self.ledger.notes.append(
                f"removed cases not judged: {' '.join(options[:3])} on the command line may "
                "decide which cases exist, and the reference's recording does not see it "
                "(put it in PYTEST_ADDOPTS, which both runs see)" if options else
                "removed cases not judged: PYTEST_ADDOPTS cannot be read as options")
            return
        if unjudged:
            self.ledger.notes.append(
                f"removed cases not judged in {len(unjudged)} test "
                f"{'file' if len(unjudged) == 1 else 'files'} ({', '.join(sorted(unjudged)[:3])}"
                "): the reference's cases were collected under other pytest settings or "
                "PYTEST_ADDOPTS options than this run's; `invoke gen --force` collects "
                "them again under these")

    def _partial_files(self) -> set[str]:
        """The test files this run collected only in part: named with a case (file::test)."""
        rootdir, here = self.config.rootpath, self.config.invocation_params.dir
        found = set()
        for arg in self.config.args:
            if "::" in arg:
                path = (here / arg.split("::", 1)[0]).resolve()
                if path.is_relative_to(rootdir):
                    found.add(path.relative_to(rootdir).as_posix())
        return found

    def _require_all_ran(self, session: pytest.Session) -> None:
        """A run fails unless every case it was handed (invoke's, or those plain pytest
        selected) ended in a verdict; a shard that is empty by assignment passes."""
        expected = self.ledger.expected
        if expected is None:
            return
        missing = self.ledger.unjudged()
        if missing:
            lines = not_run_lines(missing, len(expected), self._why_not_run)
            self.ledger.errors.append("\n".join(lines))
            if session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
        elif not expected and self.job and self.job.shard and \
                session.exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
            session.exitstatus = pytest.ExitCode.OK

    def _why_not_run(self, nodeid: str) -> str:
        return self.ledger.why_not_run(nodeid, self._facts())

    def _require_verdicts_passed(self, session: pytest.Session) -> None:
        """Fail a run whose pytest counted no failure where a case did not pass: a case
        skipped at collection that the reference recorded, or a report a hook changed."""
        failing = _named(self.ledger.failing(self.state.strict))
        if failing and session.exitstatus in (pytest.ExitCode.OK,
                                              pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
            self.ledger.errors.append(f"{_cases(len(failing))} did not pass, which "
                                      "pytest's own count does not show: " + _listed(failing))

    def _store_durations(self) -> None:
        durations_path = self.config.getoption("regression_durations")
        if durations_path and self.ledger.durations:
            from regression.store.durations import store_durations

            try:
                store_durations(Path(durations_path), self.ledger.durations)
            except RegressionError as exc:
                self.ledger.errors.append(f"the durations were not stored: {exc}")

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        """The very end of the run: the last word on its exit status, and in a run invoke
        started, the record without which it does not pass."""
        if self.job is not None:
            self.job.close_journal()
        if in_worker(config) or not self.finished or self.session is None:
            return
        gen_only = self.state.gen_only
        unjudged = [] if gen_only else self.ledger.unjudged()
        outcomes = () if gen_only else tuple(self.ledger.outcomes.values())
        failing = [o for o in outcomes if o.fails(self.state.strict)]
        _keep_failed(self.session, [*_named(failing), *(f"NO VERDICT {n}" for n in unjudged)])
        if self.job is not None:
            completion = Completion(int(self.session.exitstatus),
                                    len(self.ledger.expected or ()),
                                    [f"{n}: {self._why_not_run(n)}" for n in unjudged],
                                    outcomes, self.state.strict, tuple(sorted(self.ledger.gone)))
            self.job.write_result(replace(self.job.read_result() or CheckResult(),
                                          finished=completion))


def removed_cases(references: ReadyReferences, collected: set[str], modules: set[str],
                  partial: set[str]) -> tuple[list[str], set[str], list[str]]:
    """The regression cases the reference collected (as its recordings stored) and this run
    did not (`collected`: every test it collected; `modules`: the test files it collected,
    one that yields no test too), in the files it collected whole whose harness, helpers
    and conditions (pytest's settings, PYTEST_ADDOPTS) are unchanged since: only the
    subject can have removed those; the files so judged; and those whose collection was
    taken under other conditions (not judged till a recording takes it anew)."""
    from regression.environment.harness import changed_helpers
    from regression.errors import StoreError

    suite = references.suite
    if not suite.conditions:
        return [], set(), []  # the run's own options may decide what it collects
    root = suite.reference.settings.root
    rootdir = references.harness.rootdir
    files = ({nodeid.split("::", 1)[0] for nodeid in collected} | modules) - partial
    known: dict[Path, str] = {}
    removed, judged, other = [], set(), []
    for file in sorted(files):
        try:
            stored = references.entry.collection(file)
        except StoreError:
            continue  # untrusted, not believed: the plan records its cases again, anew
        if stored is not None and stored.conditions != suite.conditions:
            other.append(file)
            continue
        if stored is None or stored.harness != references.harness.of(rootdir / file) \
                or changed_helpers(root, stored.helpers, known):
            continue
        judged.add(file)
        removed += [c for c in stored.cases if c not in collected]
    return removed, judged, other


def _named(outcomes: list[CaseOutcome]) -> list[str]:
    """`OUTCOME nodeid` of each case, for a message."""
    return [f"{o.outcome.upper()} {o.nodeid}" for o in outcomes]


def _cases(count: int) -> str:
    return f"{count} regression case{'' if count == 1 else 's'}"


def _listed(cases: list[str]) -> str:
    return ", ".join(cases[:5]) + (" ..." if len(cases) > 5 else "")


def _keep_failed(session: pytest.Session, failing: list[str]) -> None:
    """A run judged failed stays failed: a hook that set its exit status to 0 after this
    plugin judged it (a conftest's pytest_unconfigure?) is overruled, and named."""
    if session.exitstatus == pytest.ExitCode.OK and failing:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        print(f"torch-regression: the exit status was set to 0 after the run was judged "
              f"(by a hook?), but {_cases(len(failing))} did not pass: "
              f"{_listed(failing)}", file=sys.stderr, flush=True)
