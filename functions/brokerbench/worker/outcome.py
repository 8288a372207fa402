"""What a cell adds up to, from its processes' final reports: pure rules, no broker and no store.

Message accounting (measured messages only; warm-up is counted apart):
    sent = received + late + undelivered + lost + send_errors + unacknowledged
- send_errors: the client reported the send as failed, and the message was not delivered all the same;
- unacknowledged: no report at all by the end of the producer's flush, and not delivered all the same (a
  broker that stored a message and died before answering: its consumers say which of these arrived);
- received: delivered before the drain deadline (distinct; duplicates are counted apart);
- late: delivered after the drain deadline, during the short late window;
- undelivered: still queued at the broker when the drain ended (its own backlog says so): a consumer
  that could not keep up, not a broker that dropped them;
- lost: acknowledged by the broker, never delivered, and no longer queued there.
When the broker cannot tell its backlog (a Kafka or admin error, Redis without a lag, a non-persistent
Pulsar topic), undelivered and lost are unknown (None): only their sum is, `undelivered_or_lost`. A
consumer that fell behind is never shown as a broker that lost messages.

`residual` is what the classes leave over, unclamped: sent - (received + late + undelivered_or_lost +
send_errors + unacknowledged). It is 0 when the accounting holds; anything else (a consumer that counted
more than was sent, a warm-up message counted as measured) is an accounting error, shown, not hidden.

`missing` is every measured message sent and not received in time (sent - received: late, undelivered,
lost, send errors, unacknowledged). Latency percentiles count them at +infinity (reports.results).

Throughput is what was delivered over the time it took to deliver it: the measured messages delivered in
time, over the window from the first measured message's intended send time (or, when the broker was still
delivering warm-up messages then, from the last of those) to the last measured delivery (to the last measured
acknowledgement for a publish-only cell), never to the moment the client library accepted the last message.
Warm-up messages are in neither the count nor the window.
"""

from __future__ import annotations

SECOND_NS = 1_000_000_000


def totals(producers: list[dict], consumers: list[dict], measured: dict, consumed: bool,
           queued: int | None = None) -> dict:
    """The cell's counts. `measured` holds the summed interval counters (acks and send errors of
    measured messages, bytes); `queued` is the broker's backlog for the cell's group after the drain."""
    sent = sum(p["sent"] for p in producers)
    send_errors = measured["send_errors"]
    unacknowledged = sum(p["unacked"] for p in producers)
    out = {
        "sent": sent,
        "acked": measured["acked"],
        "send_errors": send_errors,
        "unacked": unacknowledged,
        "received": None, "late": None, "undelivered": None, "lost": None, "duplicated": None, "out_of_order": None,
        "bytes_sent": measured["bytes_sent"],
        "bytes_received": measured["bytes_received"],
    }
    if consumed:
        received = sum(c["received"] for c in consumers)
        late = sum(c["late"] for c in consumers)
        # A message delivered although its acknowledgement never came (the broker stored it, the answer was lost)
        # is counted as delivered only: it leaves the unacknowledged class, then the send errors.
        arrived = delivered_not_acked(consumers)
        unacknowledged, arrived = max(0, unacknowledged - arrived), max(0, arrived - unacknowledged)
        send_errors = max(0, send_errors - arrived)
        out.update(send_errors=send_errors, unacked=unacknowledged)
        remainder = sent - send_errors - unacknowledged - received - late  # below 0: an accounting error
        not_delivered = max(0, remainder)
        # Measured messages come after the warm-up in every partition, so the broker's backlog holds the
        # missing ones first. A backlog the broker cannot tell leaves both classes unknown, unless none is missing.
        undelivered = None if queued is None and not_delivered else min(not_delivered, queued or 0)
        out.update(received=received, late=late, undelivered=undelivered,
                   lost=None if undelivered is None else not_delivered - undelivered,
                   undelivered_or_lost=not_delivered, missing=max(0, sent - received),  # more received: residual
                   duplicated=sum(c["duplicated"] for c in consumers),
                   out_of_order=sum(c["out_of_order"] for c in consumers))
    out["residual"] = residual(out)
    return out


def residual(counts: dict) -> int:
    """sent minus every class, unclamped: 0 when each measured message is in exactly one class."""
    classes = ("received", "late", "undelivered_or_lost", "send_errors", "unacked")
    return counts["sent"] - sum(counts.get(name) or 0 for name in classes) if counts.get("received") is not None \
        else counts["sent"] - counts["acked"] - counts["send_errors"] - counts["unacked"]


def delivered_not_acked(consumers: list[dict]) -> int:
    """Measured messages never acknowledged that the consumers received all the same: the broker stored them."""
    return sum(c.get("delivered_not_acked", 0) for c in consumers)


def has_loss(counts: dict) -> bool:
    """Any measured message not received in time (an unknown split of undelivered and lost included)."""
    return any(counts.get(name) for name in ("lost", "late", "undelivered", "undelivered_or_lost", "send_errors",
                                             "unacked"))


WARM_WINDOW_SHARE = 0.2  # publish-only: the share of the window that must remain after the last warm-up acknowledgement


def delivery(producers: list[dict], consumers: list[dict], consumed: bool, measure_start_ns: int,
             measured: dict) -> dict:
    """What the broker delivered of the measured messages, and over which window.

    Consumed cells: the measured messages received in time (`measured`: the summed interval counters, the same
    population as the per-second series), at the rate they came: those after each consumer's first poll that
    brought any, over the time from the first such poll to the last delivery. The first poll's own messages are
    counted over the same share of time (the window reaches back before it at that rate), as they were delivered
    before it: a broker still busy with a warm-up backlog (a consumer behind a quota gets it in throttled bursts)
    hands over its first measured messages in a burst with the warm-up's last ones, and counting them over no
    time overstated the rate. The window never starts before the earliest intended send time among the measured
    messages (none was delivered before it was due). With every measured message in first polls the rate is
    unknown, and the window runs from that earliest intended time, which can only understate it.

    Publish-only cells: the measured acknowledgements from the start of measurement (or the last warm-up
    acknowledgement, when at least a fifth of the window remains after it: the producer was still being
    answered for the warm-up) to the last of them, their bytes at the measured messages' mean size.

    Warm-up messages are in neither the count nor the window."""
    if consumed:
        count, size = measured["received"], measured["bytes_received"]
        lasts = [c["last_delivery_ns"] for c in consumers if c["last_delivery_ns"] is not None]
        if not lasts:
            return {"delivered": count, "bytes_delivered": size, "window_start_ns": measure_start_ns,
                    "window_s": None}
        last = max(lasts)
        firsts = [c["first_delivery_ns"] for c in consumers if c.get("first_delivery_ns") is not None]
        first_polls = sum(c.get("first_poll_measured", 0) for c in consumers if c["last_delivery_ns"] is not None)
        intended = [c.get("first_intended_ns") for c in consumers if c.get("first_intended_ns") is not None]
        earliest = min(intended) if intended else measure_start_ns
        start = earliest
        if firsts and last > min(firsts) and count > first_polls:
            span = last - min(firsts)
            # never before the earliest intended send: no measured message was delivered before it was due
            start = max(earliest, min(firsts) - span * first_polls / (count - first_polls))
        return {"delivered": count, "bytes_delivered": size, "window_start_ns": round(start),
                "window_s": max(1e-9, (last - start) / SECOND_NS)}
    lasts = [p["last_ack_ns"] for p in producers if p["last_ack_ns"] is not None]
    warm = [p.get("last_warmup_ack_ns") for p in producers if p.get("last_warmup_ack_ns") is not None]
    start = measure_start_ns
    count = measured["acked"]
    size = round(count * measured["bytes_sent"] / measured["sent"]) if measured.get("sent") else 0
    if warm and lasts and max(lasts) - max(warm) >= WARM_WINDOW_SHARE * (max(lasts) - start) and max(warm) > start:
        start = max(warm)  # still answering for the warm-up: its time is no more the measured messages' than its count
    return {
        "delivered": count,
        "bytes_delivered": size,
        "window_start_ns": start,
        "window_s": max(1e-9, (max(lasts) - start) / SECOND_NS) if lasts else None,
    }


def failure_reason(counts: dict, consumed: bool) -> str | None:
    """Why a cell that measured nothing usable must fail rather than report zeros as figures."""
    detail = (f"sent {counts['sent']:,}, acknowledged {counts['acked']:,}, send errors {counts['send_errors']:,}, "
              f"unacknowledged {counts['unacked']:,}")
    if not counts["sent"]:
        return "no message was sent in the measured window"
    if consumed and not counts["received"]:
        return f"no message was delivered ({detail}, late {counts['late']:,}, {not_delivered_text(counts)})"
    if not consumed and not counts["acked"]:
        return f"no message was acknowledged ({detail})"
    return None


def not_delivered_text(counts: dict) -> str:
    """Undelivered and lost, or their sum when the broker's backlog was unknown."""
    if counts.get("undelivered") is None and counts.get("lost") is None:
        return f"undelivered or lost {counts.get('undelivered_or_lost') or 0:,} (broker backlog unknown)"
    return f"still queued at the broker {counts['undelivered']:,}, lost {counts['lost']:,}"


def expected_at_broker(producers: list[dict]) -> int:
    """Messages the broker acknowledged over the whole cell, warm-up included: what it should hold."""
    return sum(p["acked_total"] for p in producers)


def broker_count(observed: int | None, producers: list[dict], probes: int = 0,
                 consumers: list[dict] = ()) -> dict | None:
    """The broker's own count (end offsets, XLEN) beside what it is known to hold: what the producers were told
    was stored, the readiness probes, and the messages whose acknowledgement never came but which the consumers
    received all the same (a broker that stored them and died before answering, a producer that gave up waiting
    and sent them as it closed)."""
    if observed is None:
        return None
    arrived = delivered_not_acked(consumers)
    expected = expected_at_broker(producers) + probes + arrived
    return {"observed": observed, "expected": expected, "difference": observed - expected,
            **({"delivered_not_acknowledged": arrived} if arrived else {})}


def startup(cell: dict, attach_ns: int, t_start: int, records: list[dict], at_attach: dict | None) -> dict:
    """A startup backlog's figures: the consumers attach at `attach_ns` to the messages sent before it.

    first_delivery_s: from attaching to the first message delivered; backlog_read_s: to the delivery of the
    backlog's last message (None unless every backlog message was delivered); at_attach: the broker's own
    count of what it held then (its backlog for the group, and the messages in the topic)."""
    backlog = cell["backlog"]
    received = sum(r["backlog_received"] for r in records)
    firsts = [r["first_delivery_ns"] for r in records if r["first_delivery_ns"] is not None]
    lasts = [r["backlog_last_ns"] for r in records if r["backlog_last_ns"] is not None]
    read_s = (max(lasts) - attach_ns) / SECOND_NS if lasts and received >= backlog["messages"] else None
    return {"messages": backlog["messages"], "rate": backlog["rate"],
            "attach_s": round((attach_ns - t_start) / SECOND_NS, 6), "received": received,
            "first_delivery_s": (min(firsts) - attach_ns) / SECOND_NS if firsts else None,
            "backlog_read_s": read_s,
            "read_rate_msgs_per_s": received / read_s if read_s else None,
            "at_attach": at_attach}


def bursts(cell: dict, windows: list[tuple[int, int, int]], records: list[dict]) -> dict:
    """Periodic bursts' figures: for each measured burst (cycle, first due, last due), how many of its
    messages were delivered and how long from its first message's due time to its last delivery
    (delivered_in_ms; None for a burst not wholly delivered)."""
    burst = cell["burst"]
    expected = burst["messages"]
    rows = []
    for cycle, first, last in windows:
        got = [r["bursts"].get(cycle) for r in records]
        count = sum(g[0] for g in got if g)
        delivered_at = max((g[1] for g in got if g), default=None)
        rows.append({"cycle": cycle, "due_s": round((last - first) / SECOND_NS, 6), "received": count,
                     "delivered_in_ms": (delivered_at - first) / 1e6 if count >= expected and delivered_at else None})
    return {"every_s": burst["every_s"], "messages": expected, "over_s": burst["over_s"], "cycles": rows}
