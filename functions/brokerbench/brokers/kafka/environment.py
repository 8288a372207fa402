"""What a run's client settings mean on Kafka: recorded with the targets (TargetsReady) and in report captions."""

from __future__ import annotations

from ...drivers import BrokerUnavailable

ACKS_MEANING = {"0": "none: a message counts as sent once written to the socket",
                "1": "the partition leader has appended it",
                "all": "every in-sync replica has it"}


def settings_in_force(endpoint: dict, client: dict) -> dict:
    """Kafka batches by time and size (linger.ms, batch.size) with many messages in flight; single mode
    is one message in flight. The replication in force is asked of the broker (its broker count, its
    min.insync.replicas) unless the client settings fix it."""
    from .driver import MAX_IN_FLIGHT, KafkaDriver  # the client library, loaded when a target is described

    driver = KafkaDriver(endpoint, client)
    try:
        replicas, in_sync, nodes = driver.replication_factor(), driver.min_insync_replicas(), driver.brokers()
    except BrokerUnavailable:  # nothing answers: unknown, not guessed
        replicas = in_sync = nodes = None
    finally:
        driver.close()
    replication = (f"replication factor {replicas or 'unknown'}, min.insync.replicas {in_sync or 'unknown'}; "
                   f"{nodes or 'unknown'} broker(s)")
    topics = client.get("topics", 1)
    # Stated only when a cell has several topics: one topic is what every earlier run had.
    spread = {"topics": {"per_cell": topics,
                         "meaning": f"each cell has {topics} topics of the cell's partitions each; every producer "
                                    f"sends round-robin over all {topics} x partitions, the consumers read them all "
                                    "(Python send loop)"}} if topics > 1 else {}
    return {
        "acks": client["acks"],
        "acks_meaning": ACKS_MEANING[client["acks"]] + f" (topics have {replication})",
        "compression": client["compression"],
        "idempotence": bool(client.get("kafka_idempotence")),
        "modes": {
            "batch": {"linger_ms": client["linger_ms"], "batch_bytes": client["batch_bytes"],
                      "in_flight": f"many: librdkafka's queue, {MAX_IN_FLIGHT} requests in flight per broker",
                      "meaning": f"librdkafka batches per partition for up to {client['linger_ms']} ms or "
                                 f"{client['batch_bytes']:,} B; many messages in flight"},
            "single": {"linger_ms": 0, "in_flight": 1,
                       "meaning": "one message in flight: each send waits for its acknowledgement; linger.ms 0"},
        },
        "persistence": {"replication_factor": replicas, "min_insync_replicas": in_sync, "nodes": nodes,
                        "flush_messages": client.get("kafka_flush_messages"), "flush": flush_text(client)},
        **spread,
    }


def flush_text(client: dict) -> str:
    flush = client.get("kafka_flush_messages")
    if flush is None:
        return "the broker's defaults (acknowledged from the page cache, no fsync per message)"
    if flush == 1:
        return "flush.messages 1: the leader fsyncs every message before it answers"
    return f"flush.messages {flush}: the leader fsyncs after every {flush:,} messages"


def durability(client: dict, recorded: dict) -> dict:
    """What a send's acknowledgement waits for: the leader's append (acks=1), every in-sync replica's (acks=all),
    nothing (acks=0); a disk sync only when the topic's flush.messages asks for one (Kafka's default leaves the
    log in the page cache: log.flush.interval.messages is unlimited)."""
    acks, flush = client.get("acks", "all"), client.get("kafka_flush_messages")
    persistence = (recorded.get("settings") or {}).get("persistence") or {}
    replicas = recorded.get("replication_factor", persistence.get("replication_factor"))
    in_sync = recorded.get("min_insync_replicas", persistence.get("min_insync_replicas"))
    if acks == "0":
        return {"fsync": False, "replicas": 0, "memory_only": True,
                "text": "acks=0: nothing waits, a message counts as sent once written to the socket",
                "failover": {"promised": False, "text": "acks=0: Kafka promises nothing for a message it never "
                                                        "acknowledged"}}
    waits = None if replicas is None else (replicas - 1 if acks == "all" else 0)
    fsync = False if flush is None else True if flush == 1 else "interval"
    copies = ("the partition leader's append" if acks == "1" else
              f"every in-sync replica of {replicas or '?'} (min.insync.replicas {in_sync or '?'}: fewer in sync "
              "fails the send)")
    sync = ("no fsync (page cache; Kafka's log.flush.interval.messages is unlimited by default)" if flush is None
            else "the leader fsyncs each message first (flush.messages 1)" if flush == 1
            else f"the leader fsyncs every {flush:,} messages (flush.messages)")
    return {"fsync": fsync, "replicas": waits, "memory_only": False, "text": f"acks={acks}: {copies}; {sync}",
            "failover": failover(acks, replicas, in_sync)}


def failover(acks: str, replicas: int | None, in_sync: int | None) -> dict:
    """What Kafka's documentation (Design: Replication) promises for an acknowledged record when its leader fails:
    with acks=all a record is committed once every in-sync replica has it, min.insync.replicas bounds how few
    those may be, and unclean leader election (off by default) is what would elect a replica without it. So with
    acks=all and min.insync.replicas of 2 or more, the loss of one node keeps every acknowledged record."""
    if acks == "all" and in_sync is not None and in_sync >= 2 and (replicas or 0) >= in_sync:
        return {"promised": True,
                "text": f"acks=all with min.insync.replicas {in_sync} of {replicas} replicas: Kafka promises that "
                        "an acknowledged record survives the loss of one node (unclean leader election off)"}
    if acks == "all" and (in_sync is None or replicas is None):
        return {"promised": None, "text": "acks=all, but the topic's replicas or min.insync.replicas were not "
                                          "recorded: whether one node's loss keeps a record is unknown"}
    why = (f"acks={acks}: the leader acknowledges alone" if acks != "all"
           else f"min.insync.replicas {in_sync}: an acks=all record may be on the leader alone")
    return {"promised": False, "text": f"{why}; Kafka promises nothing for such a record when the leader dies "
                                       "before a follower fetched it"}


def caption(mode: str, client: dict, recorded: dict) -> str:
    if mode == "batch":
        batch = client.get("batch_bytes")
        meaning = (f"batch = linger.ms {client.get('linger_ms', '?')} / batch.size "
                   f"{f'{batch:,}' if isinstance(batch, int) else '?'} B")
    else:
        meaning = "single = one send in flight, acknowledged before the next"
    replicas = f", RF {recorded['replication_factor']}" if recorded.get("replication_factor") else ""
    topics = client.get("topics", 1)
    spread = f", {topics} topics x the cell's partitions" if topics > 1 else ""
    return f"{meaning}, acks={client.get('acks', '?')}{replicas}{spread}"
