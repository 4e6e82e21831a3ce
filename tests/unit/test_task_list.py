"""Every task's line in `invoke --list`: one whole, short sentence."""

from __future__ import annotations

import inspect

import pytest
from invoke.collection import Collection
from invoke.tasks import Task
from invoke.util import helpline

from regression.cli.tasks import ns

MOST = 80
"""`invoke --list` wraps a longer line under the task's name."""


def _tasks(collection: Collection, prefix: str = "") -> dict[str, Task]:  # type: ignore[type-arg]
    found = {f"{prefix}{name}": task for name, task in collection.tasks.items()}
    for name, inner in collection.collections.items():
        found.update(_tasks(inner, f"{prefix}{name}."))
    return found


TASKS = _tasks(ns)


def test_every_task_of_the_collection_is_checked() -> None:
    assert {"gen", "test", "key", "explain", "bisect", "cache.list"} <= set(TASKS)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_the_first_line_of_each_task_s_help_is_one_short_whole_sentence(name: str) -> None:
    task = TASKS[name]
    line = helpline(task)
    assert line, f"{name} has no help"
    assert len(line) <= MOST, f"{name}: {len(line)} characters: {line!r}"
    assert line.endswith("."), f"{name}: cut mid-sentence: {line!r}"
    rest = inspect.getdoc(task.body).splitlines()[1:]  # type: ignore[union-attr]
    assert not rest or not rest[0].strip(), f"{name}: the sentence goes on: {rest[0]!r}"
