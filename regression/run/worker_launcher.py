"""Starts an xdist worker as a fork of the fork server (regression.run.forkserver).

xdist starts each worker as `PYTHON -u -c CODE`, where PYTHON is what its spec names; the
fork server's process names this script (run with -I -S: nothing but the standard library,
a few milliseconds), which asks the server named in REGRESSION_FORK_SERVER for a fork set up
as that Python would start here: this folder, this environment, these standard streams.
It waits for the worker, passing SIGTERM and SIGHUP on (Ctrl-C reaches the worker itself),
and ends as the worker did; if it is killed, the server kills the worker. Where there is no
server (it ended, or none was named), it becomes that Python itself.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys

ADDRESS_ENV = "REGRESSION_FORK_SERVER"  # as regression.run.forkserver names it
PASSED_ON = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
"""Held while the worker is asked for; then SIGTERM and SIGHUP are passed on to it (SIGINT:
Ctrl-C reaches it itself, in the same process group)."""


def main(argv: list[str]) -> int:
    """Ask for the worker `python ARGV` would start; start it so where none is served."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, PASSED_ON)  # until the pid is known
    try:
        served = _ask(argv)
    except Exception:  # noqa: BLE001 - whatever went wrong asking: Python starts the worker
        served = None
    if served is None:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)  # exec keeps a mask: Python's own
        os.execv(sys.executable, [sys.executable, *argv])
    channel, pid = served
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the worker, in our group
    for number in PASSED_ON:
        if number != signal.SIGINT:
            signal.signal(number, lambda number, _frame: _pass_on(pid, number))
    signal.pthread_sigmask(signal.SIG_SETMASK, held)  # one that came meanwhile is passed on
    message = channel.recv(256)
    status = int(json.loads(message)["status"]) if message else -signal.SIGKILL  # no server
    if status < 0:  # ended by a signal: so does this process, as xdist would see the worker
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    return status if status >= 0 else 128 - status


def _ask(argv: list[str]) -> tuple[socket.socket, int] | None:
    """The server's connection and the worker's pid; None where no worker was forked."""
    address = os.environ.get(ADDRESS_ENV)
    if not address or "-c" not in argv:
        return None
    at = argv.index("-c")
    if at + 2 != len(argv) or any(flag not in ("-u", "-B") for flag in argv[:at]):
        return None  # not as xdist starts a worker: Python itself runs it
    request = {"flags": argv[:at], "code": argv[at + 1], "cwd": os.getcwd(),
               "env": dict(os.environ)}
    channel = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        channel.connect("\0" + address)
        socket.send_fds(channel, [json.dumps(request).encode()], [0, 1, 2])
        said = channel.recv(256)
    except OSError:
        channel.close()
        return None
    if not said:
        channel.close()
        return None
    return channel, int(json.loads(said)["pid"])


def _pass_on(pid: int, number: int) -> None:
    try:
        os.kill(pid, number)
    except ProcessLookupError:
        pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
