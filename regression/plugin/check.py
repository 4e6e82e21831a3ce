"""Check mode: the plugin that readies the run before the first case (finds the reference,
narrows the run to its shard, has what is missing recorded, refuses a run that cannot be
checked). Check mode's plugins share one `CheckState` (plugin/state.py) and import none of
each other; run/entry.py registers them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Generator, NoReturn

import pytest

from regression.errors import RegressionError
from regression.plugin.common import report_reason, uses_fixture
from regression.plugin.hints import subject_not_importable
from regression.plugin.worker_messages import REFUSAL, in_worker
from regression.plugin.state import CheckState, ReadyReferences
from regression.outcomes import ERROR, CaseOutcome
from regression.report import generation_lines
from regression.run.types import CheckResult

if TYPE_CHECKING:
    from regression.config.settings import Settings


class Check:
    """A pytest plugin: readies the reference and this run's cases before the first runs."""

    def __init__(self, state: CheckState) -> None:
        self.state = state
        self.config = state.config
        self.job = state.job
        self.ledger = state.ledger
        self.deselected: dict[str, pytest.Item] = {}
        self.items: dict[str, pytest.Item] = {}
        """Every item collected, also those a hook later drops without deselecting them."""
        self.collect_skips: dict[str, str] = {}
        """Collectors (files, folders) skipped at collection, with the reason."""

    def start(self) -> None:
        """Before conftests load, in a run started by invoke: the determinism settings that
        record mode applies before importing the subject, and the subject's origin (compare)."""
        if self.job is None:
            return
        from regression.plugin.importer import install_redirect
        from regression.plugin.step_summary import require_step_summary

        state = self.state
        try:
            if not state.gen_only:
                require_step_summary()
            settings = state.read_settings()
            state.prepare_device()
            state.recorder.start_early(self.job, settings, self.config.known_args_namespace)
            state.apply_determinism()  # torch loads here: after the early recording started
            if state.subject_root:
                install_redirect(settings.subject_packages, state.subject_root, strict=True)
        except RegressionError as exc:
            state.recorder.cancel_early()
            self._refuse(exc)

    @pytest.hookimpl(trylast=True)
    def pytest_configure(self, config: pytest.Config) -> None:
        """`invoke gen` runs no test: pytest's own report would only say so; ours remains."""
        if self.state.gen_only:
            reporter = config.pluginmanager.get_plugin("terminalreporter")
            if reporter is not None:
                config.pluginmanager.unregister(reporter)

    def _settings(self) -> Settings:
        """config.yaml's settings; a run without usable ones is refused."""
        try:
            return self.state.read_settings()
        except RegressionError as exc:
            self._refuse(exc)

    def _refuse(self, error: RegressionError) -> NoReturn:
        """Stop the run with `error`: data for the invoke task, a usage error for pytest;
        an xdist worker's goes to its controller, which stops the run."""
        if self.job is not None:
            self.job.write_error(error)
        self.state.refusal = f"torch-regression: {error}"
        if in_worker(self.config):
            self.state.relay.send(REFUSAL, self.state.refusal)
        raise self._refusal_error()

    def _refusal_error(self) -> pytest.UsageError:
        """No traceback; where invoke drives the run, the task says why (from the job's
        result), so pytest does not say it a second time."""
        return pytest.UsageError() if self.job is not None \
            else pytest.UsageError(self.state.refusal)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Generator[None, object, object]:
        """xdist's controller: once the workers are down, a refusal ends the run as it would
        without xdist (no case ran: the worker that refused collected none)."""
        result = yield
        if self.state.refusal and not in_worker(self.config):
            raise self._refusal_error()
        return result

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """`invoke gen` has no terminal report: say which files failed to collect, and why;
        and when the subject itself is what could not be imported, say how to fix that."""
        if report.skipped:
            self.collect_skips[report.nodeid] = report_reason(report)
        if report.passed and report.nodeid.endswith(".py") and "::" not in report.nodeid:
            self.ledger.modules.add(report.nodeid)
        if not report.failed:
            return
        if self.state.gen_only:
            self.state.relay.echo(f"error collecting {report.nodeid or 'the tests'}:\n"
                                  f"{report.longreprtext.rstrip()}")
        settings = self.state.settings_if_any()
        hint = subject_not_importable(report.longreprtext,
                                      settings.subject_packages if settings else (),
                                      settings.root if settings else None)
        if hint and hint not in self.ledger.errors:
            self.ledger.errors.append(hint)
            if self.state.gen_only:
                self.state.relay.echo(hint)

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        self.deselected.update((i.nodeid, i) for i in items)
        self.ledger.deselected.update(i.nodeid for i in items)

    def pytest_itemcollected(self, item: pytest.Item) -> None:
        self.items[item.nodeid] = item

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config,
                                      items: list[pytest.Item]) -> None:
        """Narrow to the shard and record what is missing, before the first case runs. An
        xdist worker that refuses runs nothing: its controller stops the run."""
        try:
            self._select(config, items)
        except pytest.UsageError:
            if not in_worker(config) or not self.state.refusal:
                raise
            config.hook.pytest_deselected(items=list(items))
            items[:] = []

    def _select(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        kept = {i.nodeid for i in items}
        dropped = {n for n in self.items if n not in kept and n not in self.deselected}
        everything = [*items, *self.deselected.values(), *(self.items[n] for n in dropped)]
        self.items = {}  # the run keeps its items; this plugin needs them no more
        self.ledger.dropped = dropped
        self.ledger.collected = {i.nodeid for i in everything}
        if self.job is not None:
            self._refuse_unknown_declarations(everything)
            self.ledger.expected = self._expected(everything)
            if self.job.selection:  # what the user left out is not missed
                self.ledger.expected -= set(self.deselected)
        if not any(uses_fixture(i) for i in everything):
            self.state.write_result()
            return
        if config.option.collectonly and not self.state.gen_only:
            return
        try:
            references = self._prepare_in_turn(everything, {i.nodeid for i in items})
        except RegressionError as exc:
            self._refuse(exc)
        self.state.references = references
        self.ledger.label = references.label
        keep = [i for i in items if (i.nodeid in references.chosen if uses_fixture(i)
                                     else references.others) and not self.state.gen_only]
        keeping = set(keep)  # a list would cost time in the square of the items
        left_out = [i for i in items if i not in keeping]
        if left_out:
            config.hook.pytest_deselected(items=left_out)
        items[:] = keep
        if self.job is None:  # plain pytest: the cases it selected must each end judged
            self.ledger.expected = {i.nodeid for i in keep if uses_fixture(i)}
        self._judge_collect_skips()
        self.state.write_result()

    def _refuse_unknown_declarations(self, everything: list[pytest.Item]) -> None:
        """A declaration in regression-changes.yaml that names no case stops the run: its
        test file is gone, or was collected here without it."""
        from regression.declarations import FILE, PRUNE, unknown
        from regression.errors import ConfigError

        assert self.job is not None
        if not self.job.declarations:
            return
        cases = {i.nodeid for i in everything if uses_fixture(i)}
        files = {i.nodeid.split("::")[0] for i in everything}
        found = unknown(self.job.declarations, cases, files, self._settings().root)
        if found:
            first = found[0]
            self._refuse(ConfigError(
                str(self._settings().root / FILE),
                f"declares {first.case}, which is no regression case (renamed or removed?). "
                f"Fix: delete its entry, or `{PRUNE}`, which drops the entries that name no "
                "case", "case", first.line))

    def _judge_collect_skips(self) -> None:
        """A file or folder skipped as it was collected (importorskip or skip at module
        level) whose cases the reference recorded: each such case is an error, not absent."""
        if not self.collect_skips or self.state.references is None or self._user_selected() \
                or self.state.gen_only:
            return
        for nodeid, skipped in self._recorded_under(self.collect_skips):
            message = (f"skipped as {skipped} was collected, but the reference {self.state.label} "
                       f"recorded this case: {self.collect_skips[skipped]}")
            self.ledger.judge(CaseOutcome(nodeid, ERROR, message))

    def _user_selected(self) -> bool:
        """Whether the user chose cases (-k, -m, node ids): the rest are not missed."""
        option = self.config.option
        return bool(option.keyword or option.markexpr or (self.job and self.job.selection))

    def _recorded_under(self, collectors: dict[str, str]) -> list[tuple[str, str]]:
        """(case, collector) for each case the entry holds as recorded, under one of
        `collectors`, with the harness its test file has now: it exists, and it did run."""
        from regression.store.record import RECORDED
        from regression.store.files import load_verified

        references = self.state.references
        assert references is not None
        found = []
        for path in references.entry.stored_cases():
            try:
                body = load_verified(path)
            except RegressionError:
                continue
            nodeid = str(body.get("nodeid"))
            under = [c for c in collectors if nodeid.startswith((f"{c}::", f"{c}/"))
                     or not c]
            file = self.config.rootpath / nodeid.split("::")[0]
            if under and body.get("status") == RECORDED and file.is_file() \
                    and body.get("harness") == references.harness.of(file):
                found.append((nodeid, under[0] or "the rootdir"))
        return sorted(found)

    def _expected(self, everything: list[pytest.Item]) -> set[str]:
        """The regression cases this driven run must run: its shard's, or all of them."""
        from regression.run.types import shard_cases

        assert self.job is not None
        try:
            return shard_cases(self._settings(), (i.nodeid for i in everything
                                                  if uses_fixture(i)), self.job.shard)
        except RegressionError as exc:
            self._refuse(exc)

    def _prepare_in_turn(self, everything: list[pytest.Item], selected: set[str]
                         ) -> ReadyReferences:
        """xdist's workers of a driven run prepare one at a time: the first records what is
        missing and says so; the others find it recorded, or refuse with its error at once
        instead of recording again."""
        if self.job is None or not in_worker(self.config):
            return self._prepare(everything, selected)
        from filelock import FileLock

        with FileLock(Path(self.job.result).with_name("prepare.lock")):
            error = self.job.read_error()
            if error is not None:
                self._refuse(error)
            earlier = self.job.read_result()
            references = self._prepare(everything, selected, quiet=earlier is not None)
            # written before the next worker takes the lock: it finds this one's work done
            self.job.write_result(CheckResult(references.generation))
            return references

    def _prepare(self, everything: list[pytest.Item], selected: set[str],
                 quiet: bool = False) -> ReadyReferences:
        from regression.run.types import resolve

        state = self.state
        settings = self._settings()
        state.prepare_device()  # its variables are part of the key
        reference = self.job.resolved if self.job is not None else \
            resolve(settings, self.config.getoption("regression_reference"))
        # `invoke gen` records whatever addopts says: recording is all it is asked to do.
        no_gen = bool(self.config.getoption("regression_no_gen")) and not state.gen_only
        references = state.recorder.ready(reference, self.job, everything, selected,
                                          self.config.rootpath, state.relay.echo,
                                          record=not no_gen, in_worker=in_worker(self.config),
                                          modules=self.ledger.modules)
        generation = references.generation
        if generation is not None and not state.gen_only and \
                not (quiet and not generation.recorded and not generation.absent):
            for line in generation_lines(generation):
                state.relay.echo(line)
        state.apply_determinism()
        return references

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        if uses_fixture(item) and self.state.references is not None:
            from regression.environment import determinism

            determinism.apply(self.state.settings.determinism)
