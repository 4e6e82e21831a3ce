"""Check mode: its plugins, and the one that readies the run before the first case (finds
the reference, narrows the run to its shard, records what is missing, refuses a run that
cannot be checked)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Generator, NoReturn

import pytest

from regression.errors import RegressionError
from regression.plugin.common import report_reason, uses_fixture
from regression.plugin.hints import subject_not_importable
from regression.plugin.alongside import Alongside
from regression.plugin.ledger import Ledger
from regression.plugin.relay import LINE, REFUSAL, Relay, attach, in_worker
from regression.outcomes import ERROR, CaseOutcome
from regression.report import generation_lines
from regression.run.job import GEN_ONLY, CheckJob
from regression.run.types import CheckResult

if TYPE_CHECKING:  # the rest is imported once a run has regression cases: plain runs stay fast
    from regression.config.settings import Settings
    from regression.plugin.prepare import Prepared



def register(config: pytest.Config, job: CheckJob | None) -> None:
    """The plugins of a check run, one per concern; the judge serves the fixture."""
    from regression.plugin import MODE_PLUGIN
    from regression.plugin.finish import Finish
    from regression.plugin.judge import Judge
    from regression.plugin.summary import Summary

    check = Check(config, job, Ledger())
    judge = Judge(check)
    config.pluginmanager.register(check, "torch-regression-check")
    config.pluginmanager.register(check.alongside, "torch-regression-alongside")
    config.pluginmanager.register(judge, MODE_PLUGIN)
    config.pluginmanager.register(Finish(check, judge), "torch-regression-finish")
    config.pluginmanager.register(Summary(config, check.ledger, job.declarations if job else ()),
                                  "torch-regression-summary")
    check.start()


class Check:
    """A pytest plugin: readies the reference and this run's cases before the first runs."""

    def __init__(self, config: pytest.Config, job: CheckJob | None, ledger: Ledger) -> None:
        self.config = config
        self.job = job
        """Set when invoke started this run: the resolved reference, shard and gen policy."""
        self.ledger = ledger
        self.prepared: Prepared | None = None
        self.loaded_settings: Settings | None = None
        self.deselected: dict[str, pytest.Item] = {}
        self.items: dict[str, pytest.Item] = {}
        """Every item collected, also those a hook later drops without deselecting them."""
        self.collect_skips: dict[str, str] = {}
        """Collectors (files, folders) skipped at collection, with the reason."""
        self.subject_root = Path(job.subject_root).resolve() if job and job.subject_root \
            else None
        self.refusal = ""
        """Why the run stopped before any case ran (in xdist's controller: a worker's)."""
        self.relay: Relay = attach(config, self._relayed)
        self.alongside = Alongside(self)
        """The recording that may run beside this run's cases."""

    @property
    def label(self) -> str:
        return self.prepared.label if self.prepared else ""

    @property
    def gen_only(self) -> bool:
        return self.job is not None and self.job.gen == GEN_ONLY

    @property
    def strict(self) -> bool:
        return bool(self.config.getoption("regression_strict"))

    @property
    def settings(self) -> Settings:
        """config.yaml's settings, once the run is prepared."""
        assert self.loaded_settings is not None
        return self.loaded_settings

    def start(self) -> None:
        """Before conftests load, in a run started by invoke: the determinism settings that
        record mode applies before importing the subject, and the subject's origin (compare)."""
        if self.job is None:
            return
        from regression.environment import determinism
        from regression.plugin.importer import install_redirect
        from regression.plugin.summary import require_step_summary

        try:
            if not self.gen_only:
                require_step_summary()
            settings = self._settings()
            determinism.prepare_process(settings.device)
            self.alongside.start_early(settings)  # before torch loads here
            determinism.apply(settings.determinism)
            if self.subject_root:
                install_redirect(settings.subject_packages, self.subject_root, strict=True)
        except RegressionError as exc:
            self.alongside.cancel_early()
            self._refuse(exc)

    @pytest.hookimpl(trylast=True)
    def pytest_configure(self, config: pytest.Config) -> None:
        """`invoke gen` runs no test: pytest's own report would only say so; ours remains."""
        if self.gen_only:
            reporter = config.pluginmanager.get_plugin("terminalreporter")
            if reporter is not None:
                config.pluginmanager.unregister(reporter)

    def _settings(self) -> Settings:
        """config.yaml, read once per run."""
        if self.loaded_settings is not None:
            return self.loaded_settings
        if self.job is not None:  # invoke read it and handed it over in the job
            self.loaded_settings = self.job.settings
            return self.loaded_settings
        from regression.config.settings import load_settings
        from regression.config.paths import find_config

        try:
            self.loaded_settings = load_settings(find_config(self.config.rootpath))
            return self.loaded_settings
        except RegressionError as exc:
            self._refuse(exc)

    def settings_if_any(self) -> Settings | None:
        """config.yaml's settings, or None where there is no usable one (plain pytest in a
        project without it): for hints, never an error."""
        if self.loaded_settings is None and self.job is None:
            from regression.config.settings import load_settings
            from regression.config.paths import find_config

            try:
                self.loaded_settings = load_settings(find_config(self.config.rootpath))
            except RegressionError:
                return None
        return self.loaded_settings

    def _refuse(self, error: RegressionError) -> NoReturn:
        """Stop the run with `error`: data for the invoke task, a usage error for pytest;
        an xdist worker's goes to its controller, which stops the run."""
        if self.job is not None:
            self.job.write_error(error)
        self.refusal = f"torch-regression: {error}"
        if in_worker(self.config):
            self.relay.send(REFUSAL, self.refusal)
        raise self._refusal_error()

    def _refusal_error(self) -> pytest.UsageError:
        """No traceback; where invoke drives the run, the task says why (from the job's
        result), so pytest does not say it a second time."""
        return pytest.UsageError() if self.job is not None else pytest.UsageError(self.refusal)

    def _relayed(self, kind: str, text: str) -> None:
        """xdist's controller: a worker's line is shown; its refusal stops the run."""
        if kind == REFUSAL:
            self.refusal = self.refusal or text
        elif kind == LINE:
            self.relay.echo(text)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Generator[None, object, object]:
        """xdist's controller: once the workers are down, a refusal ends the run as it would
        without xdist (no case ran: the worker that refused collected none)."""
        result = yield
        if self.refusal and not in_worker(self.config):
            raise self._refusal_error()
        return result

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """`invoke gen` has no terminal report: say which files failed to collect, and why;
        and when the subject itself is what could not be imported, say how to fix that."""
        if report.skipped:
            self.collect_skips[report.nodeid] = report_reason(report)
        if not report.failed:
            return
        if self.gen_only:
            self.relay.echo(f"error collecting {report.nodeid or 'the tests'}:\n"
                            f"{report.longreprtext.rstrip()}")
        settings = self.settings_if_any()
        hint = subject_not_importable(report.longreprtext,
                                      settings.subject_packages if settings else (),
                                      settings.root if settings else None)
        if hint and hint not in self.ledger.errors:
            self.ledger.errors.append(hint)
            if self.gen_only:
                self.relay.echo(hint)

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
            if not in_worker(config) or not self.refusal:
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
            self.write_result()
            return
        if config.option.collectonly and not self.gen_only:
            return
        try:
            self.prepared = self._prepare_in_turn(everything, {i.nodeid for i in items})
        except RegressionError as exc:
            self._refuse(exc)
        self.ledger.label = self.prepared.label
        keep = [i for i in items if (i.nodeid in self.prepared.chosen if uses_fixture(i)
                                     else self.prepared.others) and not self.gen_only]
        keeping = set(keep)  # a list would cost time in the square of the items
        left_out = [i for i in items if i not in keeping]
        if left_out:
            config.hook.pytest_deselected(items=left_out)
        items[:] = keep
        if self.job is None:  # plain pytest: the cases it selected must each end judged
            self.ledger.expected = {i.nodeid for i in keep if uses_fixture(i)}
        self._judge_collect_skips()
        self.write_result()

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
        if not self.collect_skips or self.prepared is None or self._user_selected() \
                or self.gen_only:
            return
        for nodeid, skipped in self._recorded_under(self.collect_skips):
            message = (f"skipped as {skipped} was collected, but the reference {self.label} "
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

        assert self.prepared is not None
        found = []
        for path in self.prepared.entry.stored_cases():
            try:
                body = load_verified(path)
            except RegressionError:
                continue
            nodeid = str(body.get("nodeid"))
            under = [c for c in collectors if nodeid.startswith((f"{c}::", f"{c}/"))
                     or not c]
            file = self.config.rootpath / nodeid.split("::")[0]
            if under and body.get("status") == RECORDED and file.is_file() \
                    and body.get("harness") == self.prepared.harness.of(file):
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

    def _prepare_in_turn(self, everything: list[pytest.Item], selected: set[str]) -> Prepared:
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
            prepared = self._prepare(everything, selected, quiet=earlier is not None)
            # written before the next worker takes the lock: it finds this one's work done
            self.job.write_result(CheckResult(prepared.generation))
            return prepared

    def _prepare(self, everything: list[pytest.Item], selected: set[str],
                 quiet: bool = False) -> Prepared:
        from regression.environment import determinism
        from regression.plugin.prepare import prepare
        from regression.run.types import resolve

        settings = self._settings()
        determinism.prepare_process(settings.device)  # its variables are part of the key
        reference = self.job.resolved if self.job is not None else \
            resolve(settings, self.config.getoption("regression_reference"))
        # `invoke gen` records whatever addopts says: recording is all it is asked to do.
        no_gen = bool(self.config.getoption("regression_no_gen")) and not self.gen_only
        early = self.alongside.take_early()
        prepared = prepare(reference, self.job, everything, selected, self.config.rootpath,
                           self.relay.echo, record=not no_gen,
                           overlap=settings.record_beside_check and not self.gen_only
                           and not in_worker(self.config),
                           early=early)
        generation = prepared.generation
        if generation is not None and not self.gen_only and \
                not (quiet and not generation.recorded and not generation.absent):
            for line in generation_lines(generation):
                self.relay.echo(line)
        determinism.prepare_process(settings.device)
        determinism.apply(settings.determinism)  # once here: the first call takes seconds
        return prepared

    def write_result(self) -> None:
        if self.job is not None:
            prepared = self.prepared
            self.job.write_result(CheckResult(prepared.generation if prepared else None))

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        if uses_fixture(item) and self.prepared is not None:
            from regression.environment import determinism

            determinism.apply(self.settings.determinism)
