"""What a run's client settings mean on Pulsar, and the storage settings the running broker reports: recorded
with the targets (TargetsReady) and in report captions."""

from __future__ import annotations

import pulsar

from .admin import Admin, AdminError
from .driver import MAX_PENDING_PER_PARTITION, RECEIVER_QUEUE

QUORUM = ("managedLedgerDefaultEnsembleSize", "managedLedgerDefaultWriteQuorum", "managedLedgerDefaultAckQuorum")


def settings_in_force(endpoint: dict, client: dict) -> dict:
    """Batch mode is the client's batching, single mode is no batching with one message in flight. Pulsar has
    no acks setting: a message is acknowledged once stored (persistent) or taken in (non-persistent)."""
    delay, size, count = client["pulsar_batch_delay_ms"], client["pulsar_batch_bytes"], client["pulsar_batch_messages"]
    config = broker_config(endpoint)
    return {
        "acks": "send receipt",
        "acks_meaning": ("the broker has written the message to its ack quorum of bookies (persistence)"
                         if client["pulsar_topic_type"] == "persistent" else
                         "the broker has taken the message in; a non-persistent topic stores nothing"),
        "compression": "none",
        "client_version": pulsar.__version__,
        "modes": {
            "batch": {"batching": True, "batch_delay_ms": delay, "batch_bytes": size, "batch_messages": count,
                      "in_flight": f"up to {MAX_PENDING_PER_PARTITION:,} per partition",
                      "meaning": f"the client batches per partition for up to {delay} ms, {size:,} B or {count:,} "
                                 "messages; many messages in flight"},
            "single": {"batching": False, "in_flight": 1,
                       "meaning": "no batching, one message in flight: each send waits for its receipt"},
        },
        "consumer": {"subscription": "Exclusive, one consumer per partition, from the earliest message",
                     "receiver_queue": RECEIVER_QUEUE,
                     "acknowledgement": "cumulative per partition, with the next poll: written at once where the "
                                        "consumer speaks the protocol itself (one broker serves every partition at "
                                        "a plain pulsar:// address); pulsar-client's groups them for up to 100 ms"},
        # How soon a caught-up subscription learns of a new entry (the broker's default polls every 10 ms).
        "new_entries_check_delay_ms": _number(config, "managedLedgerNewEntriesCheckDelayInMillis"),
        "persistence": {**persistence(client, config), "journal_sync_data": endpoint.get("journal_sync_data")},
    }


def broker_config(endpoint: dict) -> dict | None:
    """The broker's configuration in force (None where the admin API does not allow reading it)."""
    try:
        config = Admin(endpoint["admin_url"], timeout_s=5).call("GET", "/admin/v2/brokers/configuration/runtime")
    except (AdminError, OSError):
        return None
    return config if isinstance(config, dict) else None


def _number(config: dict | None, key: str) -> int | None:
    try:
        return int(config[key]) if config else None
    except (KeyError, ValueError):
        return None


def persistence(client: dict, config: dict | None) -> dict:
    """The topic type, and for persistent topics the bookie quorums the broker writes with (None when its
    configuration cannot be read)."""
    if client["pulsar_topic_type"] != "persistent":
        return {"topic_type": "non-persistent",
                "meaning": "never stored; messages no consumer can take are dropped; no broker-side backlog or count"}
    quorum = {key: _number(config, key) for key in QUORUM} if config else None
    return {"topic_type": "persistent", "ledger_quorum": quorum,
            "meaning": "written to the ack quorum of bookies before the send receipt; whether a bookie fsyncs "
                       "first is its journalSyncData (off in the local stack's standalone)"}


def durability(client: dict, recorded: dict) -> dict:
    """A persistent topic's send receipt waits for the ack quorum of bookies to write the entry to their journal;
    whether a bookie fsyncs the journal first is its journalSyncData (the local stack's standalone: false; another
    Pulsar's bookies are not asked, so unknown). A non-persistent topic stores nothing."""
    persistence = (recorded.get("settings") or {}).get("persistence") or {}
    if (persistence.get("topic_type") or client.get("pulsar_topic_type")) == "non-persistent":
        return {"fsync": False, "replicas": 0, "memory_only": True,
                "text": "send receipt: taken in by the broker; a non-persistent topic stores nothing"}
    ack_quorum = (persistence.get("ledger_quorum") or {}).get("managedLedgerDefaultAckQuorum")
    sync = persistence.get("journal_sync_data")
    sync_text = {True: "each bookie fsyncs its journal first (journalSyncData true)",
                 False: "the bookies write their journal without fsync (journalSyncData false, the local stack's)",
                 None: "whether the bookies fsync their journal is their journalSyncData (not reported by the broker)"}
    return {"fsync": sync, "replicas": None if ack_quorum is None else ack_quorum - 1, "memory_only": False,
            "text": f"send receipt: {ack_quorum or '?'} bookie(s) of the ack quorum have written it; {sync_text[sync]}"}


def caption(mode: str, client: dict, recorded: dict) -> str:
    if mode == "batch":
        meaning = (f"batch = batching for {client.get('pulsar_batch_delay_ms', '?')} ms / "
                   f"{client.get('pulsar_batch_messages', '?')} messages")
    else:
        meaning = "single = no batching, one send in flight"
    return f"{meaning}, {client.get('pulsar_topic_type', 'persistent')} topics"
