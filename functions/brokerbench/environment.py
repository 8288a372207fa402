"""The run's environment record: host, code version, client and codec library versions, and what the run's
settings mean on each target."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib.metadata import PackageNotFoundError, version

from . import __version__, native
from .registry import for_target, plugins
from .codecs import codecs
from .paths import PACKAGE_DIR

CORE_LIBRARIES = ("hdrhistogram", "numpy", "boto3")


def client_libraries() -> tuple[str, ...]:
    """The distributions whose versions a run records: each broker's client, each codec's library, the core's."""
    found = [name for plugin in plugins().values() for name in plugin.libraries]
    found += [codec.library for codec in codecs().values() if codec.library != "none"]
    return tuple(dict.fromkeys([*found, *CORE_LIBRARIES]))


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def code_version() -> str:
    """The package version plus the git commit when running from a checkout."""
    try:
        commit = subprocess.run(["git", "-C", str(PACKAGE_DIR), "describe", "--always", "--dirty"],
                                capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        commit = ""
    return f"{__version__}+{commit}" if commit else __version__


def _library_versions() -> dict[str, str]:
    out = {}
    for name in client_libraries():
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            pass
    return out


def collect() -> dict:
    return {
        "host": {
            "hostname": platform.node(),
            "cpu_model": _cpu_model(),
            "cores": os.cpu_count(),
            "memory_bytes": _memory_bytes(),
            "os": f"{platform.system()} {platform.release()}",
        },
        "python": platform.python_version(),
        "code_version": code_version(),
        "libraries": _library_versions(),
        "send_loop": {"choice": os.environ.get("BROKERBENCH_SEND_LOOP", "auto"), "native_built": _native_built()},
    }


def _native_built() -> bool:
    return native._sendloop is not None


# -- what the run's settings mean on each target (TargetsReady's `settings`) -------------------
def broker_settings(broker: str, endpoint: dict, client: dict) -> dict:
    """The acks in force, what batch and single mode mean on `broker`, and its persistence.

    Brokers have no common knob for either, so the record says what each one does instead of
    pretending they match (the broker's plug-in describes itself).
    """
    return for_target(broker, endpoint).settings_in_force(endpoint, client)


def with_settings(described: dict, endpoints: dict, client: dict) -> dict:
    """describe_targets' result with each answering broker's `settings` added."""
    return {broker: {**info, "settings": broker_settings(broker, endpoints[broker], client)}
            for broker, info in described.items()}
