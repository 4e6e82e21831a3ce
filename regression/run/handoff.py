"""The pipes between a check run and the recording that runs beside it (record and check at
once): the wanted cases go to the recording, which may have started before they were known;
each case comes back as soon as it is stored.

One JSON line per case: the body of its staged record, whose tensors are in the cache
entry's file it names, or (status "absent") why the case is not in the reference. A case
handed over is not yet proven the reference's: the recording proves that at its end, and a
check run whose recording fails is an error, whatever its cases' verdicts.
"""

from __future__ import annotations

import json
import os
import select
import threading
import time
from typing import Any, Callable, Mapping


def send_cases(fd: int, cases: Mapping[str, str], parts: Mapping[str, str]) -> bool:
    """Tell a recording started early which cases to record (node id -> harness digest) and
    the environment's key parts it must see; False when it is gone."""
    return hand_over(fd, {"cases": dict(cases), "parts": dict(parts)})


def receive_cases(fd: int) -> tuple[dict[str, str], dict[str, str]]:
    """In the recording: the wanted cases and the key's parts, once the check run sends
    them; no case when it closed the pipe instead (it needs nothing recorded, or it
    stopped). The pipe stays open: the check run answers `ask_shared` on it."""
    line = _read_line(fd)
    try:
        sent = json.loads(line) if line else {}
        cases, parts = sent.get("cases", {}), sent.get("parts", {})
    except (ValueError, AttributeError):
        return {}, {}
    if not isinstance(cases, dict) or not isinstance(parts, dict):
        return {}, {}
    return ({str(k): str(v) for k, v in cases.items()},
            {str(k): str(v) for k, v in parts.items()})


def _read_line(fd: int) -> bytes:
    """One line from the pipe, read in blocks: the other end writes nothing after it until
    it is asked again. b"" when the pipe ended first."""
    data = b""
    try:
        while not data.endswith(b"\n"):
            block = os.read(fd, 1 << 16)
            if not block:
                return b""
            data += block
    except OSError:
        return b""
    return data


def ask_shared(handoff: int, answers: int, touched: Mapping[str, list[str]]
               ) -> list[str] | None:
    """In the recording, once its cases have ended: tell the check run what it touched,
    and hear what of it the check run wrote meanwhile; None when the check run is gone."""
    if not hand_over(handoff, {"touched": dict(touched)}):
        return None
    line = _read_line(answers)
    try:
        shared = json.loads(line).get("shared") if line else None
    except (ValueError, AttributeError):
        return None
    return [str(s) for s in shared] if isinstance(shared, list) else None


def answer_shared(fd: int, shared: list[str]) -> None:
    """The check run's answer to `ask_shared`; the pipe then ends."""
    try:
        hand_over(fd, {"shared": shared})
    finally:
        os.close(fd)


def hand_over(fd: int, body: Mapping[str, object]) -> bool:
    """Write one case's body on the pipe; False when its reader is gone (nothing to do:
    the recording goes on, and stores what it records)."""
    data = memoryview((json.dumps(body, separators=(",", ":")) + "\n").encode())
    try:
        while data:
            data = data[os.write(fd, data):]
    except OSError:
        return False
    return True


class HandedOverCases:
    """The check run's end of the pipe: a thread keeps what arrives, so the recording never
    waits for the check run; `wait_for` waits for one case, or for the pipe's end."""

    def __init__(self, fd: int,
                 on_touched: Callable[[dict[str, Any]], None] | None = None) -> None:
        self._fd = fd
        self._on_touched = on_touched
        """Told, in the reader's thread, what the recording touched (`ask_shared`)."""
        self._bodies: dict[str, dict[str, Any]] = {}
        self._ended = False
        self._arrivals = 0
        self._stop = threading.Event()
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._read, name="torch-regression handoff",
                                        daemon=True)
        self._thread.start()

    def _read(self) -> None:
        """Read whole lines until the pipe ends or `close` says stop (a process the
        recording left behind may keep the pipe open): the thread alone closes it."""
        pending = b""
        poller = select.poll()  # select.select refuses descriptors from 1024 on
        poller.register(self._fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        try:
            while not self._stop.is_set():
                if not poller.poll(200):
                    continue
                chunk = os.read(self._fd, 1 << 16)
                if not chunk:
                    break
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    self._take(line)
        except (OSError, ValueError):
            pass  # the pipe broke: what arrived is kept, the rest waits for the end
        finally:
            os.close(self._fd)
            with self._changed:
                self._ended = True
                self._changed.notify_all()

    def _take(self, line: bytes) -> None:
        try:
            body = json.loads(line)
        except (ValueError, RecursionError):
            return  # not a body: the case waits for the recording's end
        if isinstance(body, dict) and isinstance(body.get("touched"), dict):
            if self._on_touched is not None:
                self._on_touched(body["touched"])
        elif isinstance(body, dict) and isinstance(body.get("nodeid"), str):
            with self._changed:
                self._bodies[body["nodeid"]] = body
                self._arrivals += 1
                self._changed.notify_all()

    def wait_for(self, nodeid: str, alive: Callable[[], bool], poll: float = 0.5,
                 stalled: Callable[[float], None] | None = None, patience: float = 60.0
                 ) -> dict[str, Any] | None:
        """The case's body once it is handed over (taken: asked once); None once the pipe
        ended, or `alive()` says the recording did, without it. `stalled(seconds)` is told,
        once, when nothing at all was handed over for `patience` seconds of the wait."""
        with self._changed:
            arrived, since = self._arrivals, time.monotonic()
            while nodeid not in self._bodies:
                if self._ended or not alive():
                    return None
                if self._arrivals != arrived:
                    arrived, since = self._arrivals, time.monotonic()
                elif stalled is not None and time.monotonic() - since >= patience:
                    stalled(time.monotonic() - since)
                    stalled = None
                self._changed.wait(poll)
            return self._bodies.pop(nodeid)

    def close(self) -> None:
        """After the recording ended: what is left in the pipe is read (briefly), then the
        thread stops and closes it."""
        self._thread.join(timeout=1.0)
        self._stop.set()
        self._thread.join(timeout=5.0)
