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


REFERENCE_FOR = "REGRESSION_REFERENCE_FOR"
"""Set by the workflow to the event it chose the reference for (`${{ github.event_name }}`):
a check run then says which reference it used and why, in its log and step summary."""
PULL_REQUEST = "pull_request"
WHY_BY_EVENT = {
    "push": "on a push",
    "schedule": "on the schedule",
    "workflow_dispatch": "on a manual run",
}


def reference_why(given: str | None) -> str | None:
    """Why the run checks against its reference, from $REGRESSION_REFERENCE_FOR and whether
    --reference was given; None when the variable is unset (outside the workflow)."""
    event = os.environ.get(REFERENCE_FOR, "")
    if not event:
        return None
    if event == PULL_REQUEST:
        if given is None:
            raise ConfigError(f"${REFERENCE_FOR}", f"{PULL_REQUEST!r} says the reference is the "
                              "pull request's base commit, but no --reference was given: pass "
                              "it, e.g. --reference \"$REFERENCE\" with REFERENCE set to "
                              "${{ github.event.pull_request.base.sha }}")
        return "the pull request's base commit, so this job says what the pull request changes"
    when = WHY_BY_EVENT.get(event, f"on a {event} event")
    if given is None:
        return f"config.yaml's reference {when}, so this job says what changed since it"
    if event == "workflow_dispatch":
        return f"the manual run's reference input ({given})"
    return f"--reference {given} {when}"


def tell_reference(label: str, given: str | None) -> None:
    """Say which reference this run checks against and why, in the log and the step
    summary, when the workflow set $REGRESSION_REFERENCE_FOR."""
    why = reference_why(given)
    if why is None:
        return
    print(f"reference {label}: {why}")
    if os.environ.get(STEP_SUMMARY):
        append(STEP_SUMMARY, f"**Reference:** `{label}`: {why}.\n\n")
