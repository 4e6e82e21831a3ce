"""The files GitHub Actions gives a step to append to: its outputs and its summary."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from regression.errors import ConfigError

OUTPUT = "GITHUB_OUTPUT"
STEP_SUMMARY = "GITHUB_STEP_SUMMARY"


def append(name: str, text: str) -> None:
    """Append `text` to the file that $`name` names (made if missing, as Actions makes it);
    with "" only prove that it can be. Never blocks on a pipe with no reader."""
    path = os.environ.get(name, "")
    try:
        handle = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK, 0o644)
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
    except OSError as exc:
        raise ConfigError(f"${name}", f"{path!r} cannot be appended to: {_why(exc, path)}. "
                                      "GitHub Actions sets it to a file of its own in every "
                                      f"step; outside Actions unset it (`unset {name}`)") from None


def _why(error: OSError, path: str) -> str:
    """What an OSError of opening `path` means, in words."""
    if error.errno == errno.ENOENT:
        return f"its folder {Path(path).parent} does not exist"
    if error.errno == errno.EISDIR:
        return "it is a folder, not a file"
    if error.errno == errno.ENOTDIR:
        return "a part of its path is a file, not a folder"
    if error.errno == errno.ENXIO:
        return "it is a pipe that nothing reads"
    return error.strerror or str(error)
