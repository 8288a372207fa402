"""Redis on the local stack: Debian's redis-server bound to 127.0.0.1, AOF on (appendfsync everysec) unless
the stack is made with redis_aof=False (`--no-aof`)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

from ...local.install import install_debian
from ...local.processes import HOST, require, spawn
from .. import Started

# Command -> the Debian package that provides it (redis-benchmark: the reference figures' tool).
DEBIAN_PACKAGES = {"redis-server": "redis-server", "redis-benchmark": "redis-tools"}
# Set when `local up` starts Redis: it then requires this AUTH password. The password goes to redis-server in a
# config file only its owner reads (not on its command line, which `ps` shows); the endpoint names the variable,
# never the value, so no event, log or report can hold it.
AUTH_ENV = "BROKERBENCH_REDIS_PASSWORD"


def _auth_config(folder: Path, password: str) -> Path:
    conf = folder / "auth.conf"
    conf.touch(mode=0o600)
    conf.chmod(0o600)
    quoted = password.replace("\\", "\\\\").replace('"', '\\"')
    conf.write_text(f'requirepass "{quoted}"\n')
    return conf


def _resp(*parts: str) -> bytes:
    return b"".join([f"*{len(parts)}\r\n".encode(), *(b"$%d\r\n%b\r\n" % (len(p.encode()), p.encode()) for p in parts)])


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
        server = require("redis-server", DEBIAN_PACKAGES["redis-server"])
        aof = bool(settings.get("redis_aof", True))
        version = self.installed_version() or "unknown"
        port = ports()
        password = os.environ.get(AUTH_ENV)
        cmd = [server, *([str(_auth_config(folder, password))] if password else []), "--bind", HOST, "--port", str(port), "--save", "", "--dir", str(folder / "data"),
               "--appendonly", "yes" if aof else "no", "--appendfsync", "everysec",
               "--daemonize", "no", "--protected-mode", "yes", "--logfile", ""]
        log = folder / "redis.log"
        endpoint = {"host": HOST, "port": port, "version": version, **({"auth_env": AUTH_ENV} if password else {})}
        return Started([spawn(cmd, folder, log)], port, endpoint, version, str(log), {"aof": aof})

    def ready(self, started: Started) -> bool:
        """PING answers PONG (Redis answers LOADING while it replays its AOF), after AUTH when it requires it."""
        password = os.environ.get(AUTH_ENV) if (started.endpoint or {}).get("auth_env") else None
        try:
            with socket.create_connection((HOST, started.port), timeout=1) as sock:
                if password:
                    sock.sendall(_resp("AUTH", password))
                    if not sock.recv(64).startswith(b"+OK"):
                        return False
                sock.sendall(b"PING\r\n")
                return sock.recv(64).startswith(b"+PONG")
        except OSError:
            return False
