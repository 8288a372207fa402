"""RabbitMQ's management HTTP API, for the one figure AMQP does not give: how many messages a queue took in.

A quorum queue removes what its consumers acknowledge, and a passive declare tells only what it holds now. The
management plug-in keeps each queue's `message_stats.publish`, the messages routed into it, which is the broker's
own count of a cell's messages (as a Kafka topic's offsets or a stream's committed count are). Two limits, both
handled here:
- the figures are collected, not live (channels report every `collect_statistics_interval`, 250 ms on the local
  node, and the figures reached the API 0.2 to 4.9 s after a channel published), so a count is given once they
  have caught up with what AMQP says live (`published`);
- they live in the node's memory and start again at 0 with it: a node started again since the queues were made
  (its operating-system pid changed) gives no count, as a restarted Pulsar broker gives none.

The endpoint names the API by `management_url` (the local node's listener on 127.0.0.1; Amazon MQ's console URL);
without it there is no count. A local cluster's endpoint names every node's (`nodes`): any that answers serves.
"""

from __future__ import annotations

import base64
import json
import logging
import socket
import time
import urllib.error
import urllib.parse
import urllib.request

from .amqp import credentials, lane_queue

log = logging.getLogger(__name__)

SETTLE_WAIT_S = 20.0  # a count whose figures stop moving without settling is not given after this
SETTLE_MAX_S = 60.0  # nor one still moving after this (a node so busy its figures lag by a minute)
STABLE_S = 1.5  # a settled count reads the same this long: longer than the lag (1 s samples, 0.25 s collection)
POLL_S = 0.25
BUSY_STATUSES = (408, 429, 503)  # answers that say "not now" (a request that came too slowly, a busy node): asked again


class ManagementError(RuntimeError):
    def __init__(self, message: str, status: int | None = None, timed_out: bool = False) -> None:
        super().__init__(message)
        self.status = status  # the API's HTTP status when it answered with an error
        self.timed_out = timed_out  # no node's API answered in time, or one said not now (BUSY_STATUSES)


def _timed_out(exc: Exception) -> bool:
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    return isinstance(reason, (TimeoutError, socket.timeout))


def management_urls(endpoint: dict) -> list[str]:
    """The API's addresses: the endpoint's, then each other node's of a local cluster (any node answers for the
    whole cluster, so one that is down is passed over)."""
    urls = [endpoint["management_url"]]
    urls += [node["management_url"] for node in endpoint.get("nodes") or () if node.get("management_url")]
    return list(dict.fromkeys(url.rstrip("/") for url in urls))


def _get(endpoint: dict, path: str, timeout_s: float = 5.0):
    """GET `path` from the first node whose API answers, each given an equal part of `timeout_s` (a paused node's
    listener accepts and never answers)."""
    user, password = credentials(endpoint)
    urls = management_urls(endpoint)
    failures, timeouts = [], 0
    for url in urls:
        request = urllib.request.Request(url + path)
        request.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
        try:
            with urllib.request.urlopen(request, timeout=timeout_s / len(urls)) as answer:
                return json.loads(answer.read())
        except urllib.error.HTTPError as exc:  # an answer: the API's own (a queue that does not exist: 404)
            raise ManagementError(f"{path}: {exc}", exc.code, exc.code in BUSY_STATUSES) from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            failures.append(f"{url}: {exc}")
            timeouts += _timed_out(exc)
    raise ManagementError(f"{path}: {'; '.join(failures)}", timed_out=timeouts == len(urls))


def running_nodes(endpoint: dict, timeout_s: float = 5.0) -> list[str] | None:
    """The cluster's nodes the broker lists as running (a node down, or not yet joined, is not one), by their names;
    None when no node's API answers."""
    try:
        return [node["name"] for node in _get(endpoint, "/api/nodes", timeout_s) if node.get("running")]
    except ManagementError:
        return None


def cluster_size(endpoint: dict, timeout_s: float = 5.0) -> int | None:
    """The nodes of the broker's cluster, running or not, as its API lists them (1 for a single node); None without
    the API (`management_url`) or when it does not answer. A quorum queue or stream declared on a full cluster has a
    member on each."""
    if not endpoint.get("management_url"):
        return None
    try:
        return len(_get(endpoint, "/api/nodes", timeout_s)) or None
    except ManagementError:
        return None


def described_size(endpoint: dict) -> dict:
    """A driver's describe() part for the cluster's size: {"nodes": n} (what a confirm's majority is of: the
    plug-ins' durability), nothing when the API does not tell."""
    nodes = cluster_size(endpoint)
    return {"nodes": nodes} if nodes else {}


def queue(endpoint: dict, name: str, timeout_s: float = 5.0) -> dict | None:
    """The API's record of queue (or stream) `name` in the endpoint's vhost; None when it has none (404)."""
    vhost = urllib.parse.quote(endpoint.get("vhost", "/"), safe="")
    try:
        return _get(endpoint, f"/api/queues/{vhost}/{urllib.parse.quote(name, safe='')}", timeout_s)
    except ManagementError as exc:
        if exc.status == 404:
            return None
        raise


def node_pids(endpoint: dict, wait_s: float = SETTLE_WAIT_S) -> dict[str, int] | None:
    """Each running node's operating-system pid (a node started again has a new one), waiting up to `wait_s` for
    a node just started to report it (its first statistics: about 5 s here); None when the API does not answer:
    refuses the connection, answers an error, or has not answered within SETTLE_WAIT_S (a node too busy to answer
    within _get's timeout is asked again until then)."""
    started = time.monotonic()
    deadline = started + wait_s
    while True:
        try:
            nodes = [n for n in _get(endpoint, "/api/nodes") if n.get("running")]
        except ManagementError as exc:
            if exc.timed_out and time.monotonic() - started < SETTLE_WAIT_S:
                continue
            return None
        if nodes and all(n.get("os_pid") for n in nodes):
            return {n["name"]: str(n["os_pid"]) for n in nodes}
        if time.monotonic() >= deadline:
            return None
        time.sleep(POLL_S)


def published(endpoint: dict, topic: str, lanes: int, depth, stable_s: float = STABLE_S) -> int | None:
    """Messages routed into the cell's queues, summed over the lanes, once the collected figures have caught up:
    each lane's publish count equals what its consumers acknowledged plus what it holds now (`depth()`, per lane, live
    over AMQP; asked once no consumer is attached), and the sum has read the same for `stable_s`. The figures lag
    the channels by up to about 5 s on a quiet node (measured: 0.2 to 4.9 s), longer on a busy one, so an early
    reading would count too few. None when they stop moving without catching up for SETTLE_WAIT_S (a consumer
    that left messages unacknowledged and gone, say), or have not caught up after SETTLE_MAX_S; a request the
    API did not answer in time is asked again (a busy node), one it refused or answered with an error is not."""
    start = time.monotonic()
    settled, last, moved = None, None, start  # settled: (total, since); last: the figures as last read, and when
    while time.monotonic() - moved < SETTLE_WAIT_S and time.monotonic() - start < SETTLE_MAX_S:
        held = depth()
        try:
            stats = _lane_stats(endpoint, topic, lanes)
        except ManagementError as exc:
            if not exc.timed_out:
                log.warning("no count of %s: %s", topic, exc)
                return None
            time.sleep(POLL_S)
            continue
        if stats is None:
            log.warning("no count of %s: a lane's queue is gone", topic)
            return None
        figures = (held, [(s.get("publish"), s.get("ack", 0)) for s in stats])
        if figures != last:
            last, moved = figures, time.monotonic()
        caught_up = held is not None and all(
            s.get("publish") is not None and s["publish"] == s.get("ack", 0) + held[lane]
            for lane, s in enumerate(stats))
        total = sum(s.get("publish") or 0 for s in stats)
        if not caught_up:
            settled = None
        elif settled is None or settled[0] != total:
            settled = (total, time.monotonic())
        elif time.monotonic() - settled[1] >= stable_s:
            return total
        time.sleep(POLL_S)
    log.warning("no count of %s: the figures (held, [(publish, ack)] per lane) read %s after %.1f s, not caught up",
                topic, last, time.monotonic() - start)
    return None


def _lane_stats(endpoint: dict, topic: str, lanes: int) -> list[dict] | None:
    """Each lane's queue's `message_stats` as the API has collected them; None when a lane's queue is gone."""
    stats = []
    for lane in range(lanes):
        record = queue(endpoint, lane_queue(topic, lane))
        if record is None:
            return None
        stats.append(record.get("message_stats") or {})
    return stats
