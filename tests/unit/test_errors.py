"""Errors cross from a child process to its parent rebuilt through their constructors."""

from __future__ import annotations

import inspect
import json
import typing

import pytest

from regression.errors import ConfigError, RegressionError, error_data, error_from_data, \
    subclasses


def _sample(cls: type[RegressionError]) -> RegressionError:
    """An instance of `cls` made with a distinct value for every argument of its
    constructor, so that a lost or swapped attribute shows."""
    if "__init__" not in vars(cls) and cls.__init__ is Exception.__init__:
        return cls(f"the message of a {cls.__name__}")
    hints = typing.get_type_hints(cls.__init__)
    values: dict[str, object] = {}
    for number, name in enumerate(inspect.signature(cls.__init__).parameters):
        if name == "self":
            continue
        kind = hints.get(name, str)
        values[name] = 10 + number if kind in (int, int | None) else f"{name} {number}"
    return cls(**values)


ERRORS = subclasses(RegressionError)


def test_every_error_of_ours_is_walked() -> None:
    names = {cls.__name__ for cls in ERRORS}
    assert {"RegressionError", "ConfigError", "CacheWriteError", "ReadOnlyError",
            "RunIncompleteError", "GitError"} <= names


@pytest.mark.parametrize("cls", ERRORS, ids=lambda cls: cls.__name__)
def test_an_error_comes_back_of_its_class_with_every_attribute(
        cls: type[RegressionError]) -> None:
    error = _sample(cls)
    crossed = json.loads(json.dumps(error_data(error)))  # as it crosses a process
    rebuilt = error_from_data(crossed)
    assert type(rebuilt) is cls
    assert str(rebuilt) == str(error)
    assert vars(rebuilt) == vars(error)


def test_the_attributes_survive_with_keywords() -> None:
    error = ConfigError("/p/config.yaml", "must be an integer", key="determinism.seed", line=4)
    rebuilt = error_from_data(json.loads(json.dumps(error_data(error))))
    assert isinstance(rebuilt, ConfigError)
    assert (rebuilt.path, rebuilt.key, rebuilt.line) == ("/p/config.yaml", "determinism.seed", 4)


def test_an_error_of_no_known_class_or_arguments_keeps_its_message() -> None:
    unknown = error_from_data({"error": "Gone", "message": "said", "args": [], "kwargs": {}})
    assert type(unknown) is RegressionError and str(unknown) == "said"
    unfit = error_from_data({"error": "ConfigError", "message": "said", "args": [1, 2, 3, 4, 5],
                             "kwargs": {}})
    assert type(unfit) is RegressionError and str(unfit) == "said"
