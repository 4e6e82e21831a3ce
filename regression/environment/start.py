"""The environment a pytest run started with, before any conftest, fixture or subject code
ran: what the recordings a check run starts are given, and where the value of a variable
the subject read is taken (environment/harness.py). A leaf: a plain pytest run loads it."""

from __future__ import annotations

import os
from typing import Mapping

_START: list[tuple[int, dict[str, str]]] = []


def keep_start_environment() -> None:
    """Keep this process's environment as its pytest run starts (run/entry.py, before any
    conftest loads), so that what the user's code sets as it runs (a default, a fixture's
    `HF_HUB_OFFLINE`) is neither handed to the reference's recording nor taken for a
    change. Each run takes it anew; a fork takes its own."""
    _START[:] = [(os.getpid(), dict(os.environ))]


def forget_start_environment() -> None:
    """The run has ended (run/entry.py): what this process starts from now on gets its
    environment as it is."""
    _START.clear()


def start_environment() -> Mapping[str, str]:
    """This process's environment as its pytest run started; as it is now outside a run
    (the invoke process)."""
    return _START[0][1] if _START and _START[0][0] == os.getpid() else os.environ
