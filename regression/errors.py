"""The exception hierarchy: every message says what failed and what to do next."""

from __future__ import annotations

from typing import Any, TypeVar

E = TypeVar("E", bound="RegressionError")
Scalar = str | int | float | bool | None


class RegressionError(Exception):
    """Base of every error torch-regression raises on purpose.

    Each error keeps the arguments it was made with, so that `error_data` and
    `error_from_data` rebuild it through its constructor in another process, with every
    attribute (`path`, `fix`, `key`, ...) its constructor sets.
    """

    arguments: tuple[tuple[Any, ...], dict[str, Any]]

    def __new__(cls: type[E], *args: Any, **kwargs: Any) -> E:
        error = super().__new__(cls, *args)
        error.arguments = (args, kwargs)
        return error


class ConfigError(RegressionError):
    """config.yaml, or a setting from the environment, is missing, unreadable or invalid."""

    def __init__(self, path: str, message: str, key: str | None = None,
                 line: int | None = None) -> None:
        self.path = path
        self.key = key
        self.line = line
        where = f"{path}:{line}: " if line else f"{path}: "
        super().__init__(where + (f"{key}: " if key else "") + message)


class RevisionError(RegressionError):
    """A revision cannot be resolved or checked out."""

    def __init__(self, revision: str, message: str) -> None:
        self.revision = revision
        super().__init__(message)


class GitError(RegressionError):
    """A git command failed where nothing this tool was told could explain it."""

    def __init__(self, command: str, where: str, stderr: str) -> None:
        self.command = command
        self.stderr = stderr
        super().__init__(f"`{command}` failed in {where}: {stderr or 'git gave no message'}. "
                         f"Fix: run the command yourself in {where} to see why; "
                         "`git fsck` checks the repository for damage.")


class CollectionError(RegressionError):
    """pytest could not collect the regression cases."""


class SubjectImportError(RegressionError):
    """The subject package failed to import at the reference revision."""


class ImportRedirectError(RegressionError):
    """A subject module was imported from outside the reference worktree."""


class CacheError(RegressionError):
    """A cache entry is missing, stale, foreign or corrupt."""


class StoreError(CacheError):
    """A stored file cannot be read back exactly as written."""


class CacheWriteError(CacheError):
    """A file or folder could not be written or removed; `path` names it, `fix` says what to do."""

    def __init__(self, path: str, reason: str, fix: str = "") -> None:
        self.path = path
        self.reason = reason
        self.fix = fix
        super().__init__(f"{reason}\nFix: {fix}" if fix else reason)


class NoSpaceError(CacheWriteError):
    """The disk (or quota) holding a file is full."""


class ReadOnlyError(CacheWriteError):
    """A folder cannot be written: a read-only mount, or another user's files."""


class ShardError(RegressionError):
    """A shard specification is malformed."""


class DeterminismError(RegressionError):
    """torch no longer runs with the determinism settings of config.yaml."""


class StrayImportError(RegressionError):
    """A module of the user's working tree was imported while recording at the reference."""


class RunIncompleteError(RegressionError):
    """A check run did not report, at its very end, that it judged every case and passed;
    `exit_code` is what the task exits with (a test failure or an early end)."""

    def __init__(self, message: str, exit_code: int) -> None:
        self.exit_code = exit_code
        super().__init__(message)


def error_data(error: RegressionError) -> dict[str, object]:
    """An error as JSON-ready data, to cross from a child process to its parent: its class
    and the arguments of its constructor (a Path as text), and its message as a fallback."""
    args, kwargs = getattr(error, "arguments", ((str(error),), {}))
    return {"error": type(error).__name__, "message": str(error),
            "args": [_scalar(a) for a in args],
            "kwargs": {str(k): _scalar(v) for k, v in kwargs.items()}}


def _scalar(value: object) -> Scalar:
    """A constructor argument as JSON can hold it: as it is, or as its text (a Path)."""
    return value if value is None or isinstance(value, (str, int, float, bool)) else str(value)


def error_from_data(data: dict[str, object]) -> RegressionError:
    """The error that `error_data` describes, rebuilt through its constructor; one whose
    class is not ours, or whose arguments no longer fit it, as a RegressionError with the
    same message."""
    kinds = {cls.__name__: cls for cls in subclasses(RegressionError)}
    cls = kinds.get(str(data.get("error")))
    args, kwargs = data.get("args"), data.get("kwargs")
    if cls is not None and isinstance(args, list) and isinstance(kwargs, dict):
        try:
            return cls(*args, **kwargs)
        except TypeError:  # written by another version of this class
            pass
    return RegressionError(str(data.get("message", "")))


def subclasses(cls: type[RegressionError]) -> list[type[RegressionError]]:
    """`cls` and every class below it, however deep."""
    found = [cls]
    for child in cls.__subclasses__():
        found += subclasses(child)
    return found
