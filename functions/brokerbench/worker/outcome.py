"""What a cell adds up to, from its processes' final reports: pure rules, no broker and no store.

Message accounting (measured messages only; warm-up is counted apart):
    due = sent + not_sent
    sent = received + late + undelivered + lost + send_errors + unacknowledged
- not_sent: due before the cell's end by the producer's schedule and never sent: the producer fell behind and
  stopped on time (worker.schedule.unsent). Never handed to the broker, so never lost by it; they count in
  end-to-end and publish-delay percentiles at no less than (cell end - intended time), as lower bounds
  (figures.NOT_SENT_RULE), and against the verdict (verdict.NOT_SENT_TOLERANCE);
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

`residual` is what the classes leave over, unclamped: due - (not_sent + received + late + undelivered_or_lost +
send_errors + unacknowledged) (due = sent + not_sent where nothing was due: an unthrottled cell). It is 0 when the accounting holds; anything else (a consumer that counted
more than was sent, a warm-up message counted as measured) is an accounting error, shown, not hidden.

`missing` is every measured message sent and not received in time (sent - received: late, undelivered,
lost, send errors, unacknowledged). Latency percentiles count them at +infinity (reports.results).

Throughput is what was delivered over the time it took to deliver it: the measured messages delivered in
time (acknowledged, for a publish-only cell), at the rate they came after the first of them was delivered,
over a window that ends at the last measured delivery (acknowledgement) and starts no earlier than the first
measured message's intended send time (`delivery`), never at the moment the client library accepted the last
message. Warm-up messages are in neither the count nor the window.

A window that ends at the last delivery holds only while the consumers delivered until there was nothing left for
them. Where the drain gave up with measured messages still queued at the broker for them (`waiting`: undelivered, by the
broker's own backlog), the consumers had those messages to read until then: the window
ends when the drain gave up (`drain_end`), not at the last delivery. Else a consumer that took a few thousand
messages in a fraction of a second and then stalled with hundreds of thousands waiting (seen: a Pulsar cell, 7,296
of 491,329 in 0.34 s) reads as a rate it never kept.
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
    dues = [p.get("due") for p in producers]
    out = {
        "due": sum(dues) if dues and all(d is not None for d in dues) else None,  # None: unthrottled
        "not_sent": sum(p.get("not_sent") or 0 for p in producers),
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
    """due minus not sent and every class of what was sent, unclamped: 0 when each measured message that was due is
    in exactly one class (due = sent + not_sent, where nothing was due or it was not counted)."""
    not_sent = counts.get("not_sent") or 0
    due = counts["sent"] + not_sent if counts.get("due") is None else counts["due"]
    classes = ("received", "late", "undelivered_or_lost", "send_errors", "unacked") \
        if counts.get("received") is not None else ("acked", "send_errors", "unacked")
    return due - not_sent - sum(counts.get(name) or 0 for name in classes)


def delivered_not_acked(consumers: list[dict]) -> int:
    """Measured messages never acknowledged that the consumers received all the same: the broker stored them."""
    return sum(c.get("delivered_not_acked", 0) for c in consumers)


def has_loss(counts: dict) -> bool:
    """Any measured message not received in time (an unknown split of undelivered and lost included)."""
    return any(counts.get(name) for name in ("lost", "late", "undelivered", "undelivered_or_lost", "send_errors",
                                             "unacked"))


def delivery(producers: list[dict], consumers: list[dict], consumed: bool, measure_start_ns: int,
             measured: dict, drain_end_ns: int | None = None) -> dict:
    """What the broker delivered of the measured messages, and over which window.

    One rule for both kinds of cell, on one population (the measured messages: the same as the per-second
    series'): the measured messages delivered (received in time; acknowledged, for a publish-only cell), at
    the rate they came: those after the first delivery over the time from it to the last delivery. The first
    delivery's companions (the messages of each consumer's first poll that brought any; the acknowledgements
    stamped within FIRST_ACKS_NS of each producer's first measured one, which one response brought) are
    counted over the same share of time: the window reaches back before the first delivery at that rate, as
    they were delivered before it. A broker still busy with a warm-up backlog (behind a quota, or saturated)
    answers for the warm-up first and hands over the first measured messages in a burst with its last ones:
    neither that backlog's time nor a burst counted over no time belongs in the figure. The window never
    starts before the earliest intended send time among the measured messages (none was delivered before it
    was due). With every measured message among the first ones the rate is unknown, and the window runs from
    that earliest intended time, which can only understate it.

    `drain_end_ns`: when the drain gave up with measured messages still waiting for the consumers (`waiting`): the
    window ends there when it is later than the last delivery (`window_end` "drain_end"; else "last_delivery").

    A publish-only cell's bytes are its acknowledged messages at the measured messages' mean size.
    Warm-up messages are in neither the count nor the window."""
    if consumed:
        count, size = measured["received"], measured["bytes_received"]
        takers, last_key, first_key, together_key = consumers, "last_delivery_ns", "first_delivery_ns", \
            "first_poll_measured"
    else:
        count = measured["acked"]
        size = round(count * measured["bytes_sent"] / measured["sent"]) if measured.get("sent") else 0
        takers, last_key, first_key, together_key = producers, "last_ack_ns", "first_ack_ns", "first_acks"
    lasts = [t[last_key] for t in takers if t.get(last_key) is not None]
    if not lasts:
        return {"delivered": count, "bytes_delivered": size, "window_start_ns": measure_start_ns, "window_s": None,
                "window_end": None}
    firsts = [t[first_key] for t in takers if t.get(first_key) is not None]
    together = sum(t.get(together_key) or 0 for t in takers if t.get(last_key) is not None)
    intended = [t["first_intended_ns"] for t in takers if t.get("first_intended_ns") is not None]
    start = window_start(count, min(firsts) if firsts else None, max(lasts), together,
                         min(intended) if intended else measure_start_ns)
    end, ends = max(lasts), "last_delivery"
    if consumed and drain_end_ns is not None and drain_end_ns > end:
        end, ends = drain_end_ns, "drain_end"
    return {"delivered": count, "bytes_delivered": size, "window_start_ns": round(start),
            "window_s": max(1e-9, (end - start) / SECOND_NS), "window_end": ends}


def waiting(counts: dict) -> bool:
    """Whether measured messages were still waiting for the consumers when the drain ended: undelivered, the broker's
    own backlog held them. Not when that backlog is unknown: lost messages (a fault) were never there to read, and
    only the delivered share (figures) tells the two apart then."""
    return bool(counts.get("undelivered"))


def window_start(count: int, first: int | None, last: int, together: int, earliest: int) -> float:
    """Where the delivery window starts: `together` of the `count` messages came with the first delivery at
    `first`, the rest by `last`; they are counted over the time the rest's rate gives them, never from before
    `earliest` (the first measured message's intended send time)."""
    if first is None or last <= first or count <= together:
        return earliest
    return max(earliest, first - (last - first) * together / (count - together))


def failure_reason(counts: dict, consumed: bool, sent_total: int = 0) -> str | None:
    """Why a cell that measured nothing usable must fail rather than report zeros as figures. `sent_total`: every
    message the producers sent, warm-up included (a message is measured by when it was due, not when it went)."""
    detail = (f"sent {counts['sent']:,}, acknowledged {counts['acked']:,}, send errors {counts['send_errors']:,}, "
              f"unacknowledged {counts['unacked']:,}")
    if not counts["sent"] and sent_total:
        return (f"no message due in the measured window was sent: the {sent_total:,} the producers sent were all due "
                "in the warm-up (they fell behind their schedule, or stopped)")
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
