"""What a run's client settings mean on Redis Streams, and the persistence the running Redis reports:
recorded with the targets (TargetsReady) and in report captions."""

from __future__ import annotations

from redis.exceptions import RedisError, ResponseError

from .driver import RedisStreamsDriver


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
    }


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


def caption(mode: str, client: dict, recorded: dict) -> str:
    meaning = (f"batch = up to {client.get('pipeline_depth', '?')} XADDs in flight" if mode == "batch"
               else "single = one XADD at a time")
    return f"{meaning}, {_persistence_text(recorded)}"


def _persistence_text(target: dict) -> str:
    recorded = target.get("settings") or {}
    settings = {**target, **recorded, **(recorded.get("persistence") or {})}
    aof = settings.get("appendonly", settings.get("aof"))
    fsync = settings.get("appendfsync")
    if aof is None and fsync is None:
        return "persistence not recorded"
    if str(aof).lower() in ("no", "false", "off", "0"):
        return "AOF off"
    return "AOF on" + (f", appendfsync {fsync}" if fsync else "")
