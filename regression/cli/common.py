"""What every invoke task shares: this folder's settings, the one place a RegressionError
becomes an exit code, the checks of flag values, and the refusal of arguments after `--`."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any, Callable, TypeVar

from invoke.collection import Collection
from invoke.context import Context
from invoke.exceptions import Exit
from invoke.tasks import Task

from regression.config.settings import DEVICE_ENV, DEVICES, Settings, load_settings
from regression.config.paths import find_config
from regression.errors import RegressionError

T = TypeVar("T")


REFERENCE_HELP = "revision (tag, branch, SHA, HEAD~n) or a name from config.yaml's references"


def current_settings() -> Settings:
    return load_settings(find_config(Path.cwd()))


def translated(work: Callable[[], T], device: str | None = None) -> T:
    try:
        choose_device(device)
        return work()
    except RegressionError as exc:
        raise Exit(f"torch-regression: {exc}", code=getattr(exc, "exit_code", 2)) from None


HELP_TOKENS = ("--help", "-h")


def refusing_remainder(collection: Collection, prefix: str = "") -> Collection:
    """Every task of `collection` (its sub-collections' too) refuses arguments after `--`:
    invoke hands them to no one, and a user who meant them for pytest (`-- -x`, `--
    --regression-strict`) would take them to have worked."""
    for name, found in collection.tasks.items():
        found.body = _refusing(prefix + name, found.body)
    for name, sub in collection.collections.items():
        refusing_remainder(sub, f"{prefix}{name}.")
    return collection


def _refusing(name: str, body: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(body)
    def refusing(c: Context, *args: Any, **kwargs: Any) -> Any:
        if c.remainder:
            raise Exit(f"torch-regression: `invoke {name}` passes nothing after `--` to "
                       f"pytest, so {c.remainder!r} would do nothing: use the task's own "
                       f"flags (`invoke {name} --help`) or PYTEST_ADDOPTS", code=2)
        return body(c, *args, **kwargs)
    return refusing


def help_if_asked(asked: Task[Any], *positionals: str) -> bool:
    """`invoke explain --help`: invoke hands --help to a task's positional argument; show the help.

    `asked` is the task itself, shown from a collection of its own: a task's help reads
    nothing of the others, and this module imports no task module (they import it)."""
    if not any(value in HELP_TOKENS for value in positionals):
        return False
    from invoke.collection import Collection
    from invoke.program import Program

    Program(namespace=Collection(asked), name="invoke", binary="invoke").run(
        ["invoke", "--help", asked.name], exit=False)
    return True


def choose_device(device: str | None) -> None:
    """--device: config.yaml's `device` overridden for this run and every process it starts."""
    if device is None:
        return
    if device not in DEVICES:
        raise RegressionError(f"--device {device!r}: give one of {', '.join(DEVICES)}")
    os.environ[DEVICE_ENV] = device


DEVICE_HELP = "cpu or cuda: where the cases run, instead of config.yaml's device (in the key)"


def require_filled(*flags: tuple[str, str | list[str] | None], required: str = "") -> None:
    """Refuse a flag given as '': in CI that is an unset variable, which would otherwise
    quietly mean "left out" (every case, the default reference). `required`: the flag that
    cannot be left out."""
    for flag, value in flags:
        values = value if isinstance(value, list) else [value]
        if any(v is not None and not v.strip() for v in values):
            instead = "" if flag == required else f", or leave {flag} out"
            raise RegressionError(f"{flag} '' is empty (an unset variable in CI?): give a "
                                  f"value{instead}")


def report_path(flag: str, text: str, example: str) -> Path:
    """Where --junitxml or --html writes, checked before the run, whose end is too late to
    say it: a file, in a folder that exists or that can be made."""
    path = Path(text).resolve()
    if path.is_dir():
        raise RegressionError(f"{flag} {text}: that is a folder; name a file in it, e.g. "
                              f"{flag} {Path(text) / example}")
    folder = path.parent
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        why = "is not a folder" if not folder.is_dir() else "cannot be written"
        raise RegressionError(f"{flag} {text}: {folder} {why}, so the report cannot be "
                              "written there; name a file in a folder you can write")
    return path
