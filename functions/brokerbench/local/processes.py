"""Local processes on 127.0.0.1: free ports, probes, spawning a service with its log, and stopping it."""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from ..worker.processes import pid_exists, signal_group
from .install import DEBIAN_PACKAGES

HOST = "127.0.0.1"


class StackError(RuntimeError):
    """A local service cannot be started, or is not there."""


EPHEMERAL_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"
LISTEN_PORTS = (10000, 65535)  # where listeners are chosen: above the well-known and most registered services' ports
_handed: set[int] = set()  # ports this process has handed out: never twice, even before a service binds one


def certificate_files(settings: dict, name: str, files: tuple[str, ...]) -> dict[str, str]:
    """A stack setting that names a broker's TLS files (`name` = {file: PEM path} with every one of `files`), each
    one there; StackError naming the setting otherwise."""
    given = settings.get(name)
    if not isinstance(given, dict) or not set(files) <= given.keys():
        raise StackError(f"{name}: {{{', '.join(repr(f) for f in files)}: PEM files}}, not {given!r}")
    for file in files:
        if not Path(given[file]).is_file():
            raise StackError(f"{name}: the {file} file {given[file]} does not exist")
    return {file: str(given[file]) for file in files}


def ephemeral_range(path: str = EPHEMERAL_RANGE) -> tuple[int, int]:
    """The kernel's range of ports for outgoing connections (its default 32768-60999 where the file is missing)."""
    try:
        low, high = (int(v) for v in Path(path).read_text().split()[:2])
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def listen_candidates(ephemeral: tuple[int, int]) -> list[int]:
    """The ports a listener may be given: LISTEN_PORTS less the kernel's ephemeral range. A port in that range can
    be taken by any outgoing connection between the moment it is chosen and the moment the service binds it (a
    RabbitMQ stream listener given one failed with eaddrinuse while other processes connected out); one outside it
    can only be taken by another listener. Empty when the ephemeral range covers them all."""
    low, high = ephemeral
    return [p for p in range(LISTEN_PORTS[0], LISTEN_PORTS[1] + 1) if not low <= p <= high]


def free_port() -> int:
    """A port on HOST that nothing holds now, outside the kernel's ephemeral range (listen_candidates), never one
    this process handed out before; chosen at random, so that processes choosing at once rarely meet (a service
    that still finds its port taken is started again on fresh ones: LocalStack). Where the ephemeral range leaves
    no room, the kernel's choice."""
    candidates = listen_candidates(ephemeral_range())
    for _ in range(200 if candidates else 0):
        port = random.choice(candidates)
        if port not in _handed and port_free(port, reuse=False):
            _handed.add(port)
            return port
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port = sock.getsockname()[1]
    _handed.add(port)
    return port


def port_free(port: int, reuse: bool = True) -> bool:
    """Whether `port` on HOST can be bound now (nothing listens on it or holds it; with `reuse`, as a listener
    with SO_REUSEADDR binds it, past connections of its own still closing)."""
    with socket.socket() as sock:
        if reuse:
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


def stop(pid: int, timeout_s: float = 15, graceful: bool = True) -> None:
    """SIGTERM the process group, then SIGKILL whatever is left; not `graceful`: SIGKILL at once. Returns once the
    process and the rest of its group are gone (or the timeout passed): a child that outlives the process a moment
    still holds its listener (a killed Kafka's port answered after its recorded process had gone)."""
    for sig in (signal.SIGTERM, signal.SIGKILL) if graceful else (signal.SIGKILL,):
        if not signal_group(pid, sig):
            return
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            if not pid_alive(pid) and not _group_alive(pid):
                return
            time.sleep(0.1)


def _group_alive(pgid: int) -> bool:
    """Whether any process of the group is left (one whose parent has not reaped it yet counts, for a moment)."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True
