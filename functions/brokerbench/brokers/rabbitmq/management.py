"""RabbitMQ's management HTTP API, for the one figure AMQP does not give: how many messages a queue took in.

A quorum queue removes what its consumers acknowledge, and a passive declare tells only what it holds now. The
management plug-in keeps each queue's `message_stats.publish`, the messages routed into it, which is the broker's
own count of a cell's messages (as a Kafka topic's offsets or a stream's committed count are). Two limits, both
handled here:
- the figures are collected, not live (channels report every `collect_statistics_interval`, 1 s on the local
  node, and the figures reached the API 0.2 to 4.9 s after a channel published), so a count is given once they
  have caught up with what AMQP says live (`published`);
- they live in the node's memory and start again at 0 with it: a node started again since the queues were made
  (its operating-system pid changed) gives no count, as a restarted Pulsar broker gives none.

The endpoint names the API by `management_url` (the local node's listener on 127.0.0.1; Amazon MQ's console URL);
without it there is no count.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.parse
import urllib.request

from .amqp import credentials, lane_queue

SETTLE_WAIT_S = 20.0  # a count that does not settle within this is not given
STABLE_S = 1.5  # a settled count reads the same this long: longer than the lag (1 s samples, 0.25 s collection)
POLL_S = 0.25


class ManagementError(RuntimeError):
    pass


def _get(endpoint: dict, path: str, timeout_s: float = 5.0):
    user, password = credentials(endpoint)
    request = urllib.request.Request(endpoint["management_url"].rstrip("/") + path)
    request.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:
            return json.loads(answer.read())
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise ManagementError(f"{path}: {exc}") from None


def node_pids(endpoint: dict, wait_s: float = SETTLE_WAIT_S) -> dict[str, int] | None:
    """Each running node's operating-system pid (a node started again has a new one), waiting up to `wait_s` for
    a node just started to report it (its first statistics: about 5 s here); None when the API does not answer."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            nodes = [n for n in _get(endpoint, "/api/nodes") if n.get("running")]
        except ManagementError:
            return None
        if nodes and all(n.get("os_pid") for n in nodes):
            return {n["name"]: str(n["os_pid"]) for n in nodes}
        if time.monotonic() >= deadline:
            return None
        time.sleep(POLL_S)


def published(endpoint: dict, topic: str, lanes: int, depth) -> int | None:
    """Messages routed into the cell's queues, summed over the lanes, once the collected figures have caught up:
    each lane's publish count equals what its consumers acknowledged plus what it holds now (`depth()`, per lane, live
    over AMQP; asked once no consumer is attached), and the sum has read the same for STABLE_S. The figures lag
    the channels by up to about 5 s (measured: 0.2 to 4.9 s), so an early reading would count too few. None when
    they do not settle within SETTLE_WAIT_S (a consumer that left messages unacknowledged and gone, say)."""
    vhost = urllib.parse.quote(endpoint.get("vhost", "/"), safe="")
    deadline, settled = time.monotonic() + SETTLE_WAIT_S, None  # (total, since)
    while time.monotonic() < deadline:
        held = depth()
        stats = []
        for lane in range(lanes):
            try:
                queue = _get(endpoint, f"/api/queues/{vhost}/{urllib.parse.quote(lane_queue(topic, lane), safe='')}")
            except ManagementError:
                return None
            stats.append(queue.get("message_stats") or {})
        caught_up = held is not None and all(
            s.get("publish") is not None and s["publish"] == s.get("ack", 0) + held[lane]
            for lane, s in enumerate(stats))
        total = sum(s.get("publish") or 0 for s in stats)
        if not caught_up:
            settled = None
        elif settled is None or settled[0] != total:
            settled = (total, time.monotonic())
        elif time.monotonic() - settled[1] >= STABLE_S:
            return total
        time.sleep(POLL_S)
    return None
