"""Local processes on 127.0.0.1: free ports, probes, spawning a service with its log, and stopping it."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from ..worker.processes import pid_exists
from .install import DEBIAN_PACKAGES

HOST = "127.0.0.1"


class StackError(RuntimeError):
    """A local service cannot be started, or is not there."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def port_free(port: int) -> bool:
    """Whether `port` on HOST can be bound now (nothing listens on it or holds it)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the services' own listeners do
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def port_answers(port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=timeout):
            return True
    except OSError:
        return False


def pid_alive(pid: int) -> bool:
    if not pid_exists(pid):
        return False
    # A zombie child (started by this process, not yet reaped) is not alive.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return True


def require(program: str, package: str | None = None) -> str:
    """The path of `program`, or a StackError that says it is missing and how to get it (`package`: the
    Debian package that has it, when install.py does not list it)."""
    found = shutil.which(program)
    if found:
        return found
    package = package or DEBIAN_PACKAGES.get(program)
    how = f"run `make setup` (it installs Debian's {package})" if package else "run `make setup`"
    raise StackError(f"{program} is not installed or not on PATH: {how}, or put {program} on PATH")


def spawn(cmd: list[str], cwd: Path, log: Path, env: dict | None = None) -> int:
    """Start `cmd` in its own session (so stop() ends it with its children), output appended to `log`."""
    require(cmd[0])
    with open(log, "ab") as log_file:
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=env)
    return proc.pid


def tail(path: str | Path, lines: int = 20) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def stop(pid: int, timeout_s: float = 15) -> None:
    """SIGTERM the process group, then SIGKILL whatever is left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        except PermissionError:
            os.kill(pid, sig)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            if not pid_alive(pid):
                return
            time.sleep(0.1)
