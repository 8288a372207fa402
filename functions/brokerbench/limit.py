"""What limited a cell's rate: its schedule, the broker, or the load generator (`client`). Pure.

A producer that keeps its schedule sends at the schedule's rate: the schedule set it. A producer at rate "max", or
one that fell behind its schedule, sends as fast as it can, and its rate is the slower of two: how fast the broker
takes messages, and how fast the producer itself hands them over (encode, framing, the client library's own work,
and the CPU the host gives it). Only the first is the broker's figure.

The producer's in-flight window tells them apart. Each producer keeps at most `window` messages unacknowledged (the
driver's `in_flight_window`); a broker slower than the producer fills it, and from then on the producer waits for
acknowledgements to make room: the broker holds it back. A broker faster than the producer answers about as fast as
messages come, and the producer seldom finds its window full. What the rule reads is the share of the producer's
sending time spent waiting for room (`window_wait_share`), not the share of sends that met a full window
(`window_full_share`) nor the mean in flight (`in_flight_mean_share`), which are recorded beside it: acknowledgements
that come in batches (a Kafka produce response reports a whole batch) free the window in steps, the producer refills
it at once, and only the send that fills it meets it full (measured: 0.2% of the sends of a Kafka cell whose producer
waited 97% of its time); and what is in flight grows with the broker's latency as well as with its load (a
client-bound Kafka JSON cell had 57% of its window in flight, its producer waiting 1.4% of its time). So
(`cell_limit`):

- kept its schedule (a rated cell whose publish delay did not fail the verdict, and that did not leave more of the
  messages due unsent than the verdict's not-sent rule allows): `schedule`;
- otherwise, a producer process at CPU_SATURATED_PCT of a core or more: `client`;
- otherwise, producers that waited for room WAIT_SHARE of their sending time or more: `broker`; less: `client`
  (the window was seldom full); and None when the window is unknown (a driver that does not say it) and the core
  was not saturated: nothing tells.

A `client` cell's rate is the load generator's: a lower bound of what the broker could take, never the broker's
figure, and it enters no comparison of brokers on throughput. A producer neither busy nor waiting (one that waited
for a core on a loaded host) is client-bound too: the generator, not the broker, set its pace.

The consumers' side (`consumer_limit`, stored as the limit's `consumers`): a cell whose consumers fell behind shows a
backlog that grows (the verdict's backlog rule: the broker's own consumer lag, or sent minus received where the
broker keeps none). Then either the broker delivered too slowly, and the consumers waited for messages in their polls,
or the consumers could not take them faster: their polls find messages waiting (a poll that brings several has no
wait to speak of; one that brings nothing or a single message waited for it: that is the consumer's idle time), or a
consumer process's core is saturated. So: a grown backlog with the consumers idle less than IDLE_SHARE of the
measured time, or a consumer process at CPU_SATURATED_PCT of a core or more: `consumer`,
marked `consumer-bound` (the end-to-end latency and the received rate are the generator's consumers', not the
broker's delivery); a grown backlog with consumers that did wait: `broker`; a backlog that did not grow: None.
"""

from __future__ import annotations

# A producer process at this share of one core or more had no time left to send faster: its send loop is one thread
# (the native loop, or Python's, held to one core by the interpreter lock), so one core is all it can use. Not 100:
# the figure is counted in 10 ms ticks, and a loop that is never idle still loses a few percent of its core to the
# scheduler on a shared host. (The process's other threads, a client library's I/O thread, count too: a producer
# whose library takes a core besides is as much the limit.)
CPU_SATURATED_PCT = 90.0
# A producer that waited for room this share of its sending time could have handed over at least a quarter more than
# the broker took (1 / (1 - 0.2)): five times the throughput claims' 5% floor, and beyond the run-to-run noise of a
# loaded host. Below it the producer's own work (or its wait for a core) took most of its time, and its rate is too
# close to what the generator could do alone to be the broker's. Measured on 1 KB cells at max rate on a 2-core host
# at a load of 4 to 6 (docs/methodology.md): producers held back by Kafka, Redis, RabbitMQ quorum queues and NATS
# waited 80-97% of their time, client-bound ones 0-12%; in between, RabbitMQ streams (23-26%) and, in other runs,
# Redis Avro and NATS JSON (18-23%: a small window, a host too busy to run the broker at once), where both limits met.
WAIT_SHARE = 0.2
BY = ("schedule", "broker", "client")
MARK = "client-bound"
# Consumers idle (in polls that brought nothing or one message) less than this share of the measured time had messages waiting at nearly
# every poll: the backlog that grew was theirs to read. The producers' WAIT_SHARE, for the same reason: a consumer held
# to a fraction of a core spends the rest runnable or stopped, never idle, and one that keeps up idles most of its time.
IDLE_SHARE = 0.2
CONSUMER_BY = ("broker", "consumer")
CONSUMER_MARK = "consumer-bound"
CONSUMER_LEGEND = ("the consumers, not the broker, fell behind: the backlog grew while they seldom waited for messages "
                   "(or a consumer's core was saturated); end-to-end latency and the received rate are theirs")
# What the mark means, where a table or a report shows it.
LEGEND = ("the load generator, not the broker, set the rate (its producers seldom waited for room in their in-flight "
          "windows, or a producer's core was saturated): a lower bound of what the broker could take, compared with no "
          "other broker")

RULE = (
    "What limited a cell: a producer that kept its schedule sent at the schedule's rate (`schedule`). One at rate "
    "max, or behind its schedule (its publish delay failed the verdict, or it left messages due unsent), sent as fast "
    "as it could, and its rate is "
    "the slower of the broker and the load generator. Each producer keeps at most a window of messages "
    "unacknowledged (Kafka: librdkafka's queue, in messages and payload bytes; Redis: pipeline_depth; Pulsar: pending "
    "messages per partition; RabbitMQ and NATS: their in-flight setting; single mode: one), and waits for room when "
    "it is full. `broker` when the producers waited for room at least {wait:.0%} of their sending time: the broker "
    "held them back. Otherwise, or when a producer process used {cpu:g}% of a core or more, the rate is the "
    "generator's: `client-bound`, a lower bound of what the broker could take. A client-bound cell enters no "
    "throughput comparison, and a rate search whose failed step above the rate found was client-bound reads "
    "≥ that rate."
).format(wait=WAIT_SHARE, cpu=CPU_SATURATED_PCT)


def cell_limit(*, kept_schedule: bool, window: int | None, window_full_share: float | None,
               in_flight_mean_share: float | None, window_wait_share: float | None, producer_cpu_pct: float | None,
               broker_cpu_pct: float | None) -> dict:
    """The verdict and its inputs, as CellCompleted's `limit` stores them. `producer_cpu_pct`: a producer process's
    share of one core over the measured sending (the producers' mean); `broker_cpu_pct` beside it, recorded, not
    judged on (a broker may use several cores, and a local one shares them with the workers)."""
    if kept_schedule:
        by = "schedule"
    elif producer_cpu_pct is not None and producer_cpu_pct >= CPU_SATURATED_PCT:
        by = "client"
    elif window is None or window_wait_share is None:
        by = None
    else:
        by = "broker" if window_wait_share >= WAIT_SHARE else "client"
    return {"by": by, "window": window, "window_full_share": _round(window_full_share),
            "in_flight_mean_share": _round(in_flight_mean_share), "window_wait_share": _round(window_wait_share),
            "producer_cpu_pct": _round(producer_cpu_pct, 1), "broker_cpu_pct": _round(broker_cpu_pct, 1)}


def consumer_limit(*, backlog_grew: bool | None, idle_share: float | None, consumer_cpu_pct: float | None) -> dict:
    """Whether the consumers were the limit (the module's rule), with its inputs. `backlog_grew`: the verdict's backlog
    rule found the backlog growing (None: not followed); `idle_share`: the consumers' time in empty polls over the
    measured span (their mean); `consumer_cpu_pct`: a consumer process's share of one core over it (their mean)."""
    saturated = consumer_cpu_pct is not None and consumer_cpu_pct >= CPU_SATURATED_PCT
    if not backlog_grew:
        by = None
    elif saturated or (idle_share is not None and idle_share < IDLE_SHARE):
        by = "consumer"
    elif idle_share is None:
        by = None  # grew, but nothing tells whose the backlog was
    else:
        by = "broker"
    return {"by": by, "backlog_grew": backlog_grew, "idle_share": _round(idle_share),
            "consumer_cpu_pct": _round(consumer_cpu_pct, 1)}


def consumer_bound(limit: dict | None) -> bool:
    """Whether a stored `limit` says the consumers fell behind (False for cells stored before it existed)."""
    return bool(limit) and (limit.get("consumers") or {}).get("by") == "consumer"


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(float(value), digits)


def client_bound(limit: dict | None) -> bool:
    """Whether a stored `limit` says the load generator set the rate (False for cells stored before it existed)."""
    return bool(limit) and limit.get("by") == "client"


def rate_found_text(rate: float, limit: dict | None) -> str:
    """A rate search's maximum: 'N msgs/s', or '≥ N msgs/s (client-bound)' when the load generator stopped it."""
    return f"≥ {rate:,.0f} msgs/s ({MARK})" if client_bound(limit) else f"{rate:,.0f} msgs/s"


def search_limit(steps: list[dict], high: float | None) -> dict | None:
    """What held a rate search below `high`, the lowest rate above the one found that did not stand (None: the search
    measured none above it). `steps`: the step summaries measured at `high`, each with the `limit` its cell recorded.
    `client` when any of its failed measurements was client-bound: the rate found is then only a lower bound of the
    broker's; `broker` when one was held back by the broker or kept its schedule (the broker's delivery, not the
    generator, failed it); None when none recorded a limit."""
    if high is None:
        return None
    failed = [s["limit"] for s in steps if s.get("verdict") != "sustainable" and (s.get("limit") or {}).get("by")]
    if not failed:
        return {"by": None, "rate": high}
    found = next((f for f in failed if client_bound(f)), failed[0])
    return {**found, "by": "client" if client_bound(found) else "broker", "rate": high}
