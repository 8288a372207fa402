"""What a run's client settings mean on Redis Streams, and the persistence the running Redis reports:
recorded with the targets (TargetsReady) and in report captions."""

from __future__ import annotations

from redis.exceptions import RedisError, ResponseError

from .cluster import ask, fields
from .driver import WAIT_TIMEOUT_MS, RedisStreamsDriver


def settings_in_force(endpoint: dict, client: dict) -> dict:
    """Redis pipelines up to pipeline_depth XADDs; single mode is one XADD in flight. Redis has no acks
    setting and no compression: the record says what it does instead."""
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
        "persistence": persistence(endpoint, client),
        "replication": replication(endpoint, client),
    }


def replication(endpoint: dict, client: dict) -> dict:
    """The replicas and failover the cell ran with, as Sentinel reports them (SENTINEL MASTER: its replicas, the
    quorum and timings in force), and the WAIT each write ended with. One node without Sentinel: no replica."""
    wait = client.get("redis_wait_replicas") or 0
    waited = ({"wait_replicas": wait, "wait_timeout_ms": client.get("redis_wait_timeout_ms", WAIT_TIMEOUT_MS)}
              if wait else {"wait_replicas": 0})
    if not endpoint.get("sentinels"):
        return {"replicas": 0, "failover": None, **waited}
    for sentinel in endpoint["sentinels"]:
        try:
            view = fields(ask(sentinel["host"], sentinel["port"], "SENTINEL", "MASTER", endpoint["master_name"]))
        except (OSError, ValueError):
            continue
        return {"replicas": int(view["num-slaves"]), "asynchronous": True,
                "failover": {"by": "Redis Sentinel", "sentinels": int(view["num-other-sentinels"]) + 1,
                             "quorum": int(view["quorum"]),
                             "down_after_ms": int(view["down-after-milliseconds"]),
                             "failover_timeout_ms": int(view["failover-timeout"])},
                **waited}
    return {"replicas": len(endpoint.get("nodes", [])) - 1, "asynchronous": True, "failover": "Redis Sentinel "
            "(no Sentinel answered: its settings are not recorded)", **waited}


def persistence(endpoint: dict, client: dict) -> dict | None:
    """AOF on or off and its appendfsync policy, as the running Redis reports them (None when it does not answer).

    CONFIG GET where allowed; managed Redis (ElastiCache) refuses CONFIG, so INFO persistence gives
    at least whether AOF is on.
    """
    try:
        connection = RedisStreamsDriver(endpoint, client).connect()
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


FSYNC = {"always": True, "everysec": "interval", "no": False}
FSYNC_TEXT = {"always": "Redis fsyncs the AOF before it replies (appendfsync always)",
              "everysec": "written to the AOF before the reply, fsynced once a second in the background "
                          "(appendfsync everysec: a power loss may lose about the last second)",
              "no": "written to the AOF before the reply, never fsynced by Redis (appendfsync no: the OS writes "
                    "it back)"}


def durability(client: dict, recorded: dict) -> dict:
    """An XADD is answered once the entry is in memory and, with AOF on, written to the AOF (Redis writes the AOF
    before it sends replies); a replica is waited for only with client.redis_wait_replicas (WAIT), else replicas
    are 0 (asynchronous replication: a failover may lose what was acknowledged)."""
    settings = _recorded_persistence(recorded)
    aof, fsync = settings.get("appendonly", settings.get("aof")), settings.get("appendfsync")
    waits = client.get("redis_wait_replicas") or 0
    copies = (f"WAIT {waits}: acknowledged once {waits} replica{'s have' if waits > 1 else ' has'} it (not a "
              "guarantee across a failover)" if waits else "no replica is waited for"
              + (" (replicated asynchronously: a failover may lose it)" if _replicas(recorded) else ""))
    promise = {"promised": False,
               "text": "Redis replicates asynchronously: its documentation (Replication; WAIT) says a failover may "
                       "lose acknowledged writes, WAIT included; a loss here is an expected finding"}
    if aof is None:
        return {"fsync": None, "replicas": waits, "memory_only": None, "failover": promise,
                "text": f"XADD reply: in memory; AOF policy not recorded (the server did not answer CONFIG or INFO); "
                        f"{copies}"}
    if str(aof).lower() in ("no", "false", "off", "0"):
        return {"fsync": False, "replicas": waits, "memory_only": not waits, "failover": promise,
                "text": f"XADD reply: in memory only (AOF off); {copies}"}
    return {"fsync": FSYNC.get(fsync), "replicas": waits, "memory_only": False, "failover": promise,
            "text": f"XADD reply: {FSYNC_TEXT.get(fsync, 'written to the AOF, fsync policy unknown')}; {copies}"}


def _replicas(recorded: dict) -> int:
    return int(((recorded.get("settings") or {}).get("replication") or {}).get("replicas") or 0)


def caption(mode: str, client: dict, recorded: dict) -> str:
    meaning = (f"batch = up to {client.get('pipeline_depth', '?')} XADDs in flight" if mode == "batch"
               else "single = one XADD at a time")
    return f"{meaning}, {_persistence_text(recorded)}{_replication_text(client, recorded)}"


def _replication_text(client: dict, recorded: dict) -> str:
    replicas = _replicas(recorded)
    if not replicas:
        return ""
    waits = client.get("redis_wait_replicas") or 0
    return (f", {replicas} replica{'s' if replicas > 1 else ''} (asynchronous) with Sentinel failover"
            + (f", WAIT {waits}" if waits else ""))


def _recorded_persistence(target: dict) -> dict:
    """TargetsReady's target with its settings and their persistence laid over it (older runs kept them apart)."""
    recorded = target.get("settings") or {}
    return {**target, **recorded, **(recorded.get("persistence") or {})}


def _persistence_text(target: dict) -> str:
    settings = _recorded_persistence(target)
    aof = settings.get("appendonly", settings.get("aof"))
    fsync = settings.get("appendfsync")
    if aof is None and fsync is None:
        return "persistence not recorded"
    if str(aof).lower() in ("no", "false", "off", "0"):
        return "AOF off"
    return "AOF on" + (f", appendfsync {fsync}" if fsync else "")
