"""Records the commits a bisect tries, on demand, and notes which cases each is skipped for."""

from __future__ import annotations

from dataclasses import replace

from regression.diagnose.bisection import Bisection, Differences, Echo, Outputs, count
from regression.errors import RegressionError
from regression.references.recorder import find_nondeterministic, generate
from regression.run.types import Suite, at_commit
from regression.store.cache import Entry
from regression.store.record import ABSENT, NONDETERMINISTIC
from regression.store.inventory import BISECT
from regression.repository.gitcmd import short


def suite_at(suite: Suite, sha: str, cases: list[str]) -> Suite:
    """The suite recorded at `sha`, narrowed to `cases`."""
    reference = at_commit(suite.reference, sha)
    entry = Entry(suite.entry.directory.parent,
                  {**suite.entry.parts, "subject code": reference.code}, made_by=BISECT,
                  reference=sha)
    return replace(suite, reference=reference, entry=entry,
                   cases={c: suite.cases[c] for c in cases})


class Recorder:
    """Records commits on demand, each case once at each; notes for which cases a commit is
    skipped and why, and the cases stored as nondeterministic."""

    def __init__(self, suite: Suite, echo: Echo, result: Bisection) -> None:
        self.suite, self.echo, self.result = suite, echo, result
        self.failed = result.failed

    def outputs(self, sha: str, cases: list[str]) -> dict[str, Outputs]:
        """The outputs at `sha` of each of `cases` that can be judged there; the others are
        skipped at `sha` (all when the commit cannot be recorded) or nondeterministic."""
        wanted = [c for c in cases if c not in self.result.skipped.get(sha, {})
                  and c not in self.result.nondeterministic]
        if not wanted:
            return {}
        if sha not in self.failed:
            at = suite_at(self.suite, sha, wanted)
            try:
                generation = generate(at, echo=lambda line: self.echo(f"  {line}"))
                if generation.recorded or generation.absent:
                    self.result.recorded_at.add(sha)
                return self._loaded(at.entry, sha, wanted)
            except RegressionError as exc:
                self.failed[sha] = in_one_line(str(exc))
        for case in wanted:
            self._skip(sha, case, self.failed[sha])
        return {}

    def _loaded(self, entry: Entry, sha: str, cases: list[str]) -> dict[str, Outputs]:
        """The stored outputs of `cases` at `sha`; those absent there are skipped for."""
        found: dict[str, Outputs] = {}
        for case in cases:
            record = entry.load_case(case)
            if record is None or record.status == ABSENT:
                self._skip(sha, case, record.reason if record else "not recorded")
            elif record.status == NONDETERMINISTIC:
                self.result.nondeterministic[case] = f"at {short(sha)}: {record.reason}"
            else:
                found[case] = {o.name: o.value for o in record.outputs}
        return found

    def _skip(self, sha: str, case: str, why: str) -> None:
        self.result.skipped.setdefault(sha, {})[case] = why

    def required(self, name: str, sha: str, cases: list[str]) -> dict[str, Outputs]:
        """The outputs at good or bad, which must be recorded for some case at least."""
        found = self.outputs(sha, cases)
        skipped = self.result.skipped.get(sha, {})
        if sha in self.failed or (cases and all(c in skipped for c in cases)):
            why = self.failed.get(sha) or "; ".join(sorted(set(skipped.values())))
            raise RegressionError(f"the {name} commit {short(sha)} cannot be recorded "
                                  f"({why}); choose another")
        return found

    def reproduce(self, sha: str, cases: list[str]) -> None:
        """Record `cases` again at `sha` in a new process: those whose outputs differ from
        the first recording's are set aside as nondeterministic."""
        cases = [c for c in cases if c not in self.result.nondeterministic]
        if cases:
            found = find_nondeterministic(suite_at(self.suite, sha, cases), self.echo)
            self.result.nondeterministic.update(
                {case: f"at {short(sha)}: {how}" for case, how in found.items()})

    def progress(self, sha: str, cases: list[str]) -> None:
        """Say, briefly, for how many of `cases` the commit was skipped (why comes at the
        end, once)."""
        skipped = [c for c in cases if c in self.result.skipped.get(sha, {})]
        if skipped:
            whom = "every case" if sha in self.failed else count(len(skipped), "case")
            self.echo(f"  skipped for {whom} (why is listed at the end)")


def in_one_line(message: str) -> str:
    """An error in one line: its first, and when that ends in a colon, the last line of what
    follows that is not the fix (the exception itself)."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    first = lines[0]
    detail = [line for line in lines[1:] if not line.startswith("Fix")]
    return f"{first} {detail[-1]}" if first.endswith(":") and detail else first


def changed_cases(before: dict[str, Outputs], after: dict[str, Outputs]
                 ) -> dict[str, Differences]:
    """The cases of both whose outputs differ, each with every differing output's
    differences."""
    from regression.compare.outputs import compare_outputs

    found = {case: compare_outputs(outputs, after[case]) for case, outputs in before.items()
             if case in after}
    return {case: changed for case, changed in found.items() if changed}
