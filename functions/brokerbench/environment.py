"""The run's environment record: host, code version, client and codec library versions."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib.metadata import PackageNotFoundError, version

from . import __version__
from .paths import PACKAGE_DIR

CLIENT_LIBRARIES = ("confluent-kafka", "redis", "hiredis", "orjson", "msgspec", "fastavro", "protobuf",
                    "hdrhistogram", "numpy", "boto3")


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
    for name in CLIENT_LIBRARIES:
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
    from . import native

    return native._sendloop is not None


# -- what the run's settings mean on each broker (TargetsReady's `settings`) -------------------
KAFKA_REPLICATION_FACTOR = 1  # the driver creates each cell's topic with one replica


def broker_settings(broker: str, endpoint: dict, client: dict) -> dict:
    """The acks in force, what batch and single mode mean on `broker`, and its persistence.

    The two brokers have no common knob for either, so the record says what each one does instead of
    pretending they match: Kafka batches by time and size (linger.ms, batch.size) with many messages in
    flight, Redis pipelines up to pipeline_depth XADDs; single mode is one message in flight on both.
    """
    if broker == "kafka":
        return {
            "acks": client["acks"],
            "acks_meaning": {"0": "none: a message counts as sent once written to the socket",
                             "1": "the partition leader has appended it",
                             "all": "every in-sync replica has it"}[client["acks"]]
            + f" (topics have replication factor {KAFKA_REPLICATION_FACTOR})",
            "compression": client["compression"],
            "modes": {
                "batch": {"linger_ms": client["linger_ms"], "batch_bytes": client["batch_bytes"],
                          "in_flight": "many (librdkafka's queue; max.in.flight 1,000,000)",
                          "meaning": f"librdkafka batches per partition for up to {client['linger_ms']} ms or "
                                     f"{client['batch_bytes']:,} B; many messages in flight"},
                "single": {"linger_ms": 0, "in_flight": 1,
                           "meaning": "one message in flight: each send waits for its acknowledgement; linger.ms 0"},
            },
            "persistence": {"replication_factor": KAFKA_REPLICATION_FACTOR,
                            "flush": "the broker's defaults (acknowledged from the page cache, no fsync per message)"},
        }
    if broker == "redis-streams":
        depth = client["pipeline_depth"]
        return {
            "acks": "XADD reply",
            "acks_meaning": "Redis has appended the entry in memory; durability follows its AOF policy (persistence)",
            "compression": "none (Redis Streams does not compress)",
            "modes": {
                "batch": {"pipeline_depth": depth, "in_flight": depth,
                          "meaning": f"up to {depth} XADDs in flight (pipelined), each answered on its own"},
                "single": {"pipeline_depth": 1, "in_flight": 1,
                           "meaning": "one XADD in flight: each send waits for its reply"},
            },
            "consumer": {"read_count": client["read_count"],
                         "xack": "a batch's XACKs go out with the next XREADGROUP, after its receive timestamps"},
            "persistence": redis_persistence(endpoint, client),
        }
    return {}


def redis_persistence(endpoint: dict, client: dict) -> dict | None:
    """AOF on or off and its appendfsync policy, as the running Redis reports them (None when it does not answer).

    CONFIG GET where allowed; managed Redis (ElastiCache) refuses CONFIG, so INFO persistence gives
    at least whether AOF is on.
    """
    from redis.exceptions import RedisError, ResponseError

    from .drivers import get_driver

    try:
        connection = get_driver("redis-streams", endpoint, client).connect()
    except Exception:  # noqa: BLE001 (a target whose password cannot be fetched: nothing to read)
        return None
    try:
        try:
            config = connection.config_get("append*")
            return {"appendonly": _text(config.get("appendonly")), "appendfsync": _text(config.get("appendfsync")),
                    "source": "CONFIG GET"}
        except ResponseError:
            info = connection.info("persistence")
            return {"appendonly": "yes" if info.get("aof_enabled") else "no", "appendfsync": None,
                    "source": "INFO persistence (CONFIG is not allowed)"}
    except (RedisError, OSError):
        return None
    finally:
        connection.close()


def _text(value) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


def with_settings(described: dict, endpoints: dict, client: dict) -> dict:
    """describe_targets' result with each answering broker's `settings` added."""
    return {broker: {**info, "settings": broker_settings(broker, endpoints[broker], client)}
            for broker, info in described.items()}
