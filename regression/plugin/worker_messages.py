"""The xdist relay: what a pytest-xdist worker has to tell the user (warnings, progress,
refusals, errors) reaches it once, from the controller, as it happens.

A worker's own terminal output is never shown, and its `workeroutput` arrives only when it
ends, which a refused or crashed worker never does. pytest-xdist carries one thing live from
a worker to its controller for any plugin: the warnings it records. A message travels as a
`WorkerMessage` warning, and the controller takes it out of pytest's warnings summary.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

import pytest

PLUGIN = "torch-regression-relay"
LINE = "line"
"""A line for the terminal: a warning, a progress line, what a recording did."""
REFUSAL = "refusal"
"""Why the run stops before any case runs (exit 2 from the tasks, 4 from pytest)."""
ERROR = "error"
"""A recording's error, as JSON data (errors.error_data)."""

SOLO = "solo"
WORKER = "worker"
CONTROLLER = "controller"
"""The roles of a process in a run: alone, or a pytest-xdist worker or controller."""

Receive = Callable[[str, str], None]
WorkerDone = Callable[[Any, object], None]
"""In the controller: what a worker handed over when it ended (None if nothing), and the
error it ended with."""


class WorkerMessage(UserWarning):
    """A worker's message on its way to the controller; never a warning to the user."""

    def __init__(self, kind: str, text: str) -> None:
        super().__init__(kind, text)
        self.kind = kind
        self.text = text


def in_worker(config: pytest.Config) -> bool:
    """Whether this process is a pytest-xdist worker, whose output nobody sees."""
    return hasattr(config, "workerinput")


def role(config: pytest.Config) -> str:
    """SOLO, WORKER or CONTROLLER, as pytest-xdist's own plugin tells them apart (its
    controller's session plugin is registered at pytest_configure: ask no earlier)."""
    if in_worker(config):
        return WORKER
    return CONTROLLER if config.pluginmanager.has_plugin("dsession") else SOLO


class WorkerMessages:
    """A pytest plugin: sends from a worker; in the controller, hands each distinct message
    to `receive` once, whichever worker sent it and however often."""

    def __init__(self, config: pytest.Config, receive: Receive) -> None:
        self.config = config
        self.receive = receive
        self.seen: set[tuple[str, str]] = set()
        self.workers_done: dict[str, WorkerDone] = {}

    def echo(self, line: str) -> None:
        """A line for the user, now: a worker's is shown by its controller; where pytest
        shows no terminal (`invoke gen`), it is printed."""
        if in_worker(self.config):
            self.send(LINE, line)
            return
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            print(line, flush=True)
        else:
            reporter.ensure_newline()
            if reporter._width_of_current_line:  # xdist's dots name no file: ensure_newline
                reporter.line("")  # misses them, so the line would join them
            reporter.write_line(line)

    def hand_over(self, key: str, data: object) -> bool:
        """From a worker: `data` reaches the controller when the worker ends (JSON-able);
        False where this is no worker."""
        output = getattr(self.config, "workeroutput", None)
        if output is None:
            return False
        output[key] = data
        return True

    def on_worker_done(self, key: str, done: WorkerDone) -> None:
        """In the controller: `done` gets what each worker handed over under `key`."""
        self.workers_done[key] = done

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: object, error: object) -> None:
        output = getattr(node, "workeroutput", {})
        for key, done in self.workers_done.items():
            done(output.get(key), error)

    def send(self, kind: str, text: str) -> None:
        """From a worker: `text` goes to the controller now."""
        message = WorkerMessage(kind, text)
        record = warnings.WarningMessage(message, WorkerMessage, __file__, 0)
        self.config.hook.pytest_warning_recorded.call_historic(kwargs={
            "warning_message": record, "when": "collect", "nodeid": "", "location": None})

    @pytest.hookimpl(trylast=True)  # after the terminal listed it, so it can be unlisted
    def pytest_warning_recorded(self, warning_message: warnings.WarningMessage) -> None:
        message = warning_message.message
        if in_worker(self.config) or not isinstance(message, WorkerMessage):
            return
        self._unlist()
        if (message.kind, message.text) not in self.seen:
            self.seen.add((message.kind, message.text))
            self.receive(message.kind, message.text)

    def _unlist(self) -> None:
        """Out of pytest's warnings summary (and its count): the message is no warning."""
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return
        listed = reporter.stats.get("warnings", [])
        listed[:] = [w for w in listed if WorkerMessage.__name__ not in str(w.message)]
        if not listed:
            reporter.stats.pop("warnings", None)


def attach(config: pytest.Config, receive: Receive) -> WorkerMessages:
    """The relay of this run, registered so that a controller hears its workers."""
    relay = WorkerMessages(config, receive)
    config.pluginmanager.register(relay, PLUGIN)
    return relay
