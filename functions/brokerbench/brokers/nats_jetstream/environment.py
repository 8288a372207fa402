"""What a run's client settings mean on NATS JetStream, and the durability in force: recorded with the targets
(TargetsReady) and in report captions."""

from __future__ import annotations

from ...drivers import BrokerUnavailable
from .driver import ACK_TIMEOUT_S, ERRORS, NatsJetStreamDriver, client_version
from .wire import PULL_REQUESTS

SYNC_MEANING = {
    "always": "the server syncs every write to disk before its PubAck (sync_interval: always)",
    "2m": "the server syncs its file store to disk every 2 minutes (sync_interval 2m, JetStream's default): a PubAck "
          "means written to the store file in the operating system's page cache, not yet on disk",
    None: "the server's sync_interval is not known (give it in the target's sync_interval)",
}


def acks_meaning(client: dict, sync: str | None) -> str:
    """What a PubAck says about a message, for these stream settings (`nats_replicas`: the stream's replicas in
    force, None when not known) and the server's sync policy."""
    replicas = client.get("nats_replicas")
    where = ("stored by a quorum of the stream's replicas (how many is not known)" if replicas is None else
             f"stored by a quorum of the stream's {replicas} replicas ({replicas // 2 + 1} of them)" if replicas > 1
             else "stored by the stream's one replica")
    if client["nats_storage"] == "memory":
        return f"{where}, in the server's memory (memory storage: nothing is written to disk)"
    return f"{where}, in its file store; {SYNC_MEANING.get(sync, SYNC_MEANING[None])}"


def replication(endpoint: dict, client: dict) -> tuple[int | None, int | None]:
    """(the replicas of each cell's stream, the servers of the cluster), as the servers tell them (the driver: the
    client setting, else 3 or the servers when fewer); (the client setting, None) when nothing answers."""
    driver = NatsJetStreamDriver(endpoint, client)
    try:
        return driver.replicas(), driver.server_count()
    except (*ERRORS, BrokerUnavailable):  # nothing answers: unknown, not guessed
        return client.get("nats_replicas"), None


def settings_in_force(endpoint: dict, client: dict) -> dict:
    """Batch mode is up to nats_max_in_flight publishes awaiting their PubAck, single mode one. JetStream has no acks
    setting: every publish to a stream is answered by a PubAck once stored (acks_meaning). The streams' replicas
    are asked of the servers (a cluster's size) unless the client settings fix them."""
    window, sync = client["nats_max_in_flight"], endpoint.get("sync_interval")
    replicas, nodes = replication(endpoint, client)
    client = {**client, "nats_replicas": replicas}
    return {
        "acks": "PubAck",
        "acks_meaning": acks_meaning(client, sync),
        "compression": "none",
        "client_version": client_version(),
        "modes": {
            "batch": {"in_flight": window,
                      "meaning": f"up to {window:,} publishes awaiting their PubAck, each answered on its own"},
            "single": {"in_flight": 1, "meaning": "one publish in flight: each send waits for its PubAck"},
        },
        "consumer": {"kind": "durable pull consumer per consumer process (filter subjects: its lanes)",
                     "fetch_batch": client["nats_fetch_batch"],
                     "pull_requests": PULL_REQUESTS,
                     "acknowledgement": "ack policy explicit: each message of a poll is acknowledged with the next "
                                        "poll, after its receive timestamps"},
        "unacknowledged": f"the client does not publish again a message whose PubAck did not come; after "
                          f"{ACK_TIMEOUT_S:g} s it stops waiting and the message counts as unacknowledged",
        "persistence": {"storage": client["nats_storage"], "replicas": replicas, "nodes": nodes,
                        "sync_interval": sync, "meaning": acks_meaning(client, sync)},
    }


def durability(client: dict, recorded: dict) -> dict:
    """What a PubAck waits for: the stream's replicas (a quorum of them; the others are not waited for), a write to
    its file store, and a disk sync only on a server with sync_interval: always (JetStream's default syncs every
    2 minutes); memory storage is never written to disk."""
    persistence = (recorded.get("settings") or {}).get("persistence") or {}
    storage = persistence.get("storage", client.get("nats_storage", "file"))
    replicas = persistence.get("replicas", client.get("nats_replicas", 1))
    sync = persistence.get("sync_interval", recorded.get("sync_interval"))
    # the other members of a quorum of `replicas`, the leader apart (None: the replicas are not known)
    waits = None if replicas is None else replicas // 2
    text = f"PubAck: {acks_meaning({'nats_replicas': replicas, 'nats_storage': storage}, sync)}"
    promise = failover(replicas)
    if storage == "memory":
        return {"fsync": False, "replicas": waits, "memory_only": True, "text": text, "failover": promise}
    fsync = True if sync == "always" else "interval" if sync else None
    return {"fsync": fsync, "replicas": waits, "memory_only": False, "text": text, "failover": promise}


def failover(replicas: int | None) -> dict:
    """JetStream's documentation (JetStream clustering): a PubAck is sent once a majority of the stream's replicas
    (its Raft group) have stored the message, and a stream of R replicas tolerates the loss of (R - 1) / 2 servers.
    R3 and more: one server's loss keeps every acknowledged message; R1: it is on that server alone."""
    if replicas is None:
        return {"promised": None, "text": "the stream's replica count was not recorded"}
    if replicas >= 3:
        return {"promised": True, "text": f"R{replicas}: NATS promises that a PubAck'd message, stored on a "
                                          "majority of the stream's replicas, survives the loss of one server"}
    return {"promised": False, "text": f"R{replicas}: no majority survives a server's loss; NATS promises nothing "
                                       "for a PubAck'd message then"}


def caption(mode: str, client: dict, recorded: dict) -> str:
    meaning = (f"batch = up to {client.get('nats_max_in_flight', '?')} publishes in flight" if mode == "batch"
               else "single = one publish in flight")
    return f"{meaning}, {_durability_text(client, recorded)}"


def _durability_text(client: dict, target: dict) -> str:
    """"PubAck: file storage, fsync always, 1 replica" from what TargetsReady recorded (else the request)."""
    persistence = (target.get("settings") or {}).get("persistence") or {}
    storage = persistence.get("storage", client.get("nats_storage", "file"))
    replicas = persistence.get("replicas", client.get("nats_replicas", 1))
    nodes = persistence.get("nodes")
    sync = persistence.get("sync_interval", target.get("sync_interval"))
    where = (f"{storage} storage, {replicas or '?'} replica{'s' if replicas != 1 else ''}"
             + (f" on a {nodes}-server cluster" if nodes and nodes > 1 else ""))
    if storage == "memory":
        return f"PubAck: {where}, in memory only"
    synced = {"always": "fsync before each PubAck", "2m": "fsync every 2 min"}.get(sync, "sync policy not recorded")
    return f"PubAck: {where}, {synced}"
