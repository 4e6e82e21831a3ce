"""Collect mode: writes the regression cases, their harness digests and the fingerprint."""

from __future__ import annotations

from pathlib import Path

import pytest

from regression.errors import RegressionError
from regression.environment.fingerprint import environment_parts
from regression.environment.harness import HarnessDigests, extra_harness_files
from regression.plugin.importer import install_redirect, verify_origins
from regression.run.job import CollectJob
from regression.run.types import CollectResult
from regression.plugin.common import pytest_settings, uses_fixture


def register(config: pytest.Config, job: CollectJob) -> None:
    """The one plugin of a collect run."""
    from regression.plugin import MODE_PLUGIN

    collector = Collector(job)
    config.pluginmanager.register(collector, MODE_PLUGIN)
    collector.start()


class Collector:
    """A pytest plugin: lists every regression case pytest collects, deselected ones too
    (a -k or -m in addopts must not shrink what a run is expected to check)."""

    def __init__(self, job: CollectJob) -> None:
        self.job = job
        self.settings = job.settings
        self.deselected: list[pytest.Item] = []

    def start(self) -> None:
        """Before conftests load: kernel settings that are part of the key, and the
        candidate's subject origin, for `invoke compare`."""
        from regression.environment import determinism

        try:
            determinism.prepare_process(self.settings.device)
            if self.job.subject_root:
                install_redirect(self.settings.subject_packages, Path(self.job.subject_root),
                                 strict=True)
        except RegressionError as exc:
            self.job.write_error(exc)
            raise pytest.UsageError(str(exc)) from None

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        self.deselected += items

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config,
                                      items: list[pytest.Item]) -> None:
        if self.job.subject_root:
            try:
                verify_origins(self.settings.subject_packages, Path(self.job.subject_root))
            except RegressionError as exc:
                self.job.write_error(exc)
                return
        extra = extra_harness_files(self.settings.root, self.settings.harness)
        digests = HarnessDigests(config.rootpath, extra, pytest_settings(config))
        cases = {i.nodeid: digests.of(i.path) for i in [*items, *self.deselected]
                 if uses_fixture(i)}
        selected = [i.nodeid for i in items if uses_fixture(i)]
        parts = environment_parts(self.settings, self.job.resolved.code)
        self.job.write_result(CollectResult(dict(sorted(cases.items())), selected, parts))

    def fixture(self, item: pytest.Item) -> object:
        pytest.fail("the regression fixture does not run while collecting", pytrace=False)
