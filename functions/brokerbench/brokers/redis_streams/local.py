"""Redis on the local stack: Debian's redis-server bound to 127.0.0.1, AOF on (appendfsync everysec) unless
the stack is made with redis_aof=False (`--no-aof`)."""

from __future__ import annotations

import shutil
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

from ...local.install import install_debian
from ...local.processes import HOST, StackError, spawn
from .. import Started

# Command -> the Debian package that provides it (redis-benchmark: the reference figures' tool).
DEBIAN_PACKAGES = {"redis-server": "redis-server", "redis-benchmark": "redis-tools"}


class RedisService:
    name = "redis"
    startup_timeout_s = 30.0

    def installed_version(self) -> str | None:
        server = shutil.which("redis-server")
        if not server:
            return None
        out = subprocess.run([server, "--version"], capture_output=True, text=True).stdout
        return next((p.split("=")[1] for p in out.split() if p.startswith("v=")), "unknown")

    def install(self, log) -> None:
        install_debian(DEBIAN_PACKAGES, log)

    def start(self, folder: Path, ports: Callable[[], int], settings: dict) -> Started:
        server = shutil.which("redis-server")
        if not server:
            raise StackError("redis-server is missing: run `make setup` (or apt-get install redis-server)")
        aof = bool(settings.get("redis_aof", True))
        version = self.installed_version() or "unknown"
        port = ports()
        cmd = [server, "--bind", HOST, "--port", str(port), "--save", "", "--dir", str(folder / "data"),
               "--appendonly", "yes" if aof else "no", "--appendfsync", "everysec",
               "--daemonize", "no", "--protected-mode", "yes", "--logfile", ""]
        log = folder / "redis.log"
        return Started([spawn(cmd, folder, log)], port, {"host": HOST, "port": port, "version": version}, version,
                       str(log), {"aof": aof})

    def ready(self, started: Started) -> bool:
        """PING answers PONG (Redis answers LOADING while it replays its AOF)."""
        try:
            with socket.create_connection((HOST, started.port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(64).startswith(b"+PONG")
        except OSError:
            return False
