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

Throughput is what was delivered over the time it took to deliver it: the delivery window runs
from the start of measurement to the last measured delivery (to the last acknowledgement for a
publish-only cell), never to the moment the client library accepted the last message.
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
        missing = max(0, sent - send_errors - unacknowledged - received - late)
        # Measured messages come after the warm-up in every partition, so the broker's backlog holds the
        # missing ones first.
        undelivered = min(missing, queued or 0)
        out.update(received=received, late=late, undelivered=undelivered, lost=missing - undelivered,
                   duplicated=sum(c["duplicated"] for c in consumers),
                   out_of_order=sum(c["out_of_order"] for c in consumers))
    return out


def delivered_not_acked(consumers: list[dict]) -> int:
    """Measured messages never acknowledged that the consumers received all the same: the broker stored them."""
    return sum(c.get("delivered_not_acked", 0) for c in consumers)


def has_loss(counts: dict) -> bool:
    return any(counts.get(name) for name in ("lost", "late", "undelivered", "send_errors", "unacked"))


def delivery(producers: list[dict], consumers: list[dict], consumed: bool, measure_start_ns: int) -> dict:
    """What the broker delivered from the start of measurement to the last measured delivery (to the
    last acknowledgement when nothing consumes), and that window's length. Deliveries of warm-up
    messages inside the window count: at max rate the broker is still working through them."""
    sources = consumers if consumed else producers
    lasts = [s["last_delivery_ns" if consumed else "last_ack_ns"] for s in sources]
    lasts = [t for t in lasts if t is not None]
    return {
        "delivered": sum(s["delivered"] for s in sources),
        "bytes_delivered": sum(s["bytes_delivered"] for s in sources),
        "window_s": max(1e-9, (max(lasts) - measure_start_ns) / SECOND_NS) if lasts else None,
    }


def failure_reason(counts: dict, consumed: bool) -> str | None:
    """Why a cell that measured nothing usable must fail rather than report zeros as figures."""
    detail = (f"sent {counts['sent']:,}, acknowledged {counts['acked']:,}, send errors {counts['send_errors']:,}, "
              f"unacknowledged {counts['unacked']:,}")
    if not counts["sent"]:
        return "no message was sent in the measured window"
    if consumed and not counts["received"]:
        return (f"no message was delivered ({detail}, late {counts['late']:,}, still queued at the broker "
                f"{counts['undelivered']:,}, lost {counts['lost']:,})")
    if not consumed and not counts["acked"]:
        return f"no message was acknowledged ({detail})"
    return None


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
