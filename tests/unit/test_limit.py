"""What limited a cell (brokerbench.limit): the rule on hand-made inputs, and its inputs worked out by hand from
hand-made send-loop records (the in-flight window's occupancy and the time spent waiting for room), each driver's
window as its code sets it, and where the verdict shows (claims, tables, a search's maximum)."""

import numpy as np
import pytest
from synthetic import claim_configuration

from brokerbench import limit
from brokerbench.brokers.kafka.driver import KafkaDriver
from brokerbench.brokers.pulsar.driver import PulsarDriver
from brokerbench.brokers.rabbitmq_quorum.driver import RabbitMQQuorumDriver
from brokerbench.brokers.rabbitmq_streams.driver import RabbitMQStreamsDriver
from brokerbench.brokers.redis_streams.driver import RedisStreamsDriver
from brokerbench.drivers import producer_window
from brokerbench.reports import markdown, rows
from brokerbench.reports.model import claims, run_noise
from brokerbench.reports.table import limit_note, verdict_cell
from brokerbench.spec import validate
from brokerbench.worker import search
from brokerbench.worker.producer_figures import InFlight, ProducerFigures, in_flight_at, window_shares

from test_producer_accounting import ints, through_pipe


# -- the rule ---------------------------------------------------------------------------------------
def judged(**inputs):
    given = {"kept_schedule": False, "window": 100, "window_full_share": 0.01, "in_flight_mean_share": 0.3,
             "window_wait_share": 0.0, "producer_cpu_pct": 40.0, "broker_cpu_pct": 60.0, **inputs}
    return limit.cell_limit(**given)


def test_a_producer_that_kept_its_schedule_was_limited_by_it():
    assert judged(kept_schedule=True, producer_cpu_pct=99.0)["by"] == "schedule"


def test_a_producer_seldom_waiting_for_room_is_the_limit_itself():
    assert judged(window_wait_share=0.0)["by"] == "client"
    assert judged(window_wait_share=0.199)["by"] == "client"
    # many sends met a full window, or much was in flight, but they waited little: still the generator's rate
    assert judged(window_full_share=0.5, in_flight_mean_share=0.9, window_wait_share=0.05)["by"] == "client"


def test_a_producer_held_back_by_the_broker_is_broker_bound():
    assert judged(window_wait_share=0.2)["by"] == "broker"
    # Kafka's delivery reports come a batch at a time: few sends meet the window full while the producer waits
    assert judged(window=32768, window_full_share=0.0015, in_flight_mean_share=0.96,
                  window_wait_share=0.9)["by"] == "broker"


def test_a_saturated_producer_core_is_client_bound_whatever_its_window():
    assert judged(window_wait_share=0.9, producer_cpu_pct=90.0)["by"] == "client"
    assert judged(window_wait_share=0.9, producer_cpu_pct=89.9)["by"] == "broker"


def test_without_a_window_only_a_saturated_core_tells():
    assert judged(window=None, window_wait_share=None)["by"] is None
    assert judged(window=None, window_wait_share=None, producer_cpu_pct=95.0)["by"] == "client"
    assert judged(window_wait_share=None, producer_cpu_pct=None)["by"] is None  # nothing measured


def test_the_inputs_are_recorded_with_the_verdict():
    assert judged(window_full_share=0.123456, in_flight_mean_share=0.5, window_wait_share=1 / 3,
                  producer_cpu_pct=41.26, broker_cpu_pct=None) == {
        "by": "broker", "window": 100, "window_full_share": 0.1235, "in_flight_mean_share": 0.5,
        "window_wait_share": 0.3333, "producer_cpu_pct": 41.3, "broker_cpu_pct": None}


# -- its inputs, by hand ----------------------------------------------------------------------------
def test_in_flight_as_each_message_is_handed_over_counts_it_and_what_came_back_before():
    # Messages 10-13 handed over at t = 100, 200, 300, 400; 8 acknowledgements or failures reported before this
    # interval, and this interval's acknowledgements stamped at 150, 250 and 260. In flight, itself included:
    # 11 - 8 - 0 = 3, 12 - 8 - 1 = 3, 13 - 8 - 3 = 2, 14 - 8 - 3 = 3.
    found = in_flight_at(10, np.array([100, 200, 300, 400]), np.array([150, 250, 260]), 8)
    assert found.tolist() == [3, 3, 2, 3]
    # an acknowledgement stamped at the very moment a message is handed over came after it
    assert in_flight_at(0, np.array([100]), np.array([100]), 0).tolist() == [1]


def test_single_mode_meets_a_full_window_at_every_send():
    # window 1: each message is handed over once the one before it was acknowledged
    handed, acked = np.array([10, 30, 50]), np.array([20, 40, 60])
    assert in_flight_at(0, handed, acked, 0).tolist() == [1, 1, 1]


def test_occupancy_and_the_wait_for_room_over_two_intervals():
    window = InFlight(window=3)
    # interval 0: messages taken up at 0, 10, 20 and handed over at 5, 15, 25, in flight 1, 3, 2: the second met
    # the window full and waited from 15 to the next message's start at 20 (5 ns)
    window.add(np.array([1, 3, 2]), np.array([0, 10, 20]), np.array([5, 15, 25]))
    # interval 1: in flight 3, 4 (an acknowledgement stamped after its report was taken: counted as the window), 1;
    # the last one of interval 0 did not wait; 3 waited from 35 to 50, 4 from 55 to 90
    window.add(np.array([3, 4, 1]), np.array([30, 50, 90]), np.array([35, 55, 95]))
    assert (window.sends, window.full, window.in_flight_sum, window.waited_ns) == (6, 3, 1 + 3 + 2 + 3 + 3 + 1, 55)
    shares = window_shares([window])
    assert shares.full == pytest.approx(3 / 6)
    assert shares.in_flight_mean == pytest.approx(13 / 6 / 3)
    assert shares.waited == pytest.approx(55 / 95)  # from the first taken up (0) to the last handed over (95)


def test_a_wait_that_spans_two_intervals_counts_whole():
    window = InFlight(window=2)
    window.add(np.array([1, 2]), np.array([0, 10]), np.array([5, 15]))  # the last one filled the window...
    window.add(np.array([1]), np.array([115]), np.array([120]))  # ...and the next was taken up 100 ns later
    assert window.waited_ns == 100 and window_shares([window]).waited == pytest.approx(100 / 120)


def test_the_shares_pool_producers_by_their_sends_and_time():
    a, b = InFlight(window=10), InFlight(window=10)
    a.add(np.array([10, 5]), np.array([0, 50]), np.array([10, 60]))  # waited 40 of 60
    b.add(np.array([1, 1, 1, 1]), np.array([0, 10, 20, 30]), np.array([5, 15, 25, 35]))  # never
    shares = window_shares([a, b, InFlight(window=None)])
    assert shares.full == pytest.approx(1 / 6)
    assert shares.in_flight_mean == pytest.approx((15 / 10 + 4 / 10) / 6)
    assert shares.waited == pytest.approx(40 / (60 + 35))
    assert window_shares([InFlight(window=None)]) == window_shares([])  # unknown: all None
    assert window_shares([]).waited is None


def test_the_parent_works_the_window_out_from_the_loop_records_it_receives():
    """Through a real pipe as a cell's producer sends them: the warm-up's acknowledgements count (they came before
    the measured messages were handed over), its messages do not."""
    items = [(-1, 0, ints(0, 10), ints(5, 15), ints(0), ints(12), ints(), 2),  # warm-up: 0 acknowledged at 12
             # measured: messages 2, 3, 4 handed over at 25, 35, 45; 1 acknowledged at 30, 2 at 40, 3 at 55
             (0, 2, ints(20, 30, 40), ints(25, 35, 45), ints(1, 2, 3), ints(30, 40, 55), ints(), 2)]
    figures = ProducerFigures(np.full(8, 100, dtype=np.int64), 8, None, window=2)
    for records in through_pipe(items):
        figures.add(records)
    done = figures.finish({"first_measured_seq": 2, "sent_total": 5, "sent": 3})
    # in flight at 25: 3 - 1 = 2 (full); at 35: 4 - 1 - 1 (ack at 30) = 2 (full); at 45: 5 - 1 - 2 = 2 (full)
    flight = done["in_flight"]
    assert (flight.sends, flight.full, flight.in_flight_sum) == (3, 3, 6)
    assert flight.waited_ns == (30 - 25) + (40 - 35)  # the last one's wait ends after the records
    assert window_shares([flight]).waited == pytest.approx(10 / (45 - 20))


# -- each driver's window, as its code sets it ---------------------------------------------------------
CLIENT = validate({"brokers": ["kafka"], "sizes": [1024], "rates": [1000], "formats": ["json"]})["client"]


@pytest.mark.parametrize("driver, lanes, payload, batch", [
    # librdkafka: 1,000,000 messages or 32 MiB of payloads (queue.buffering.max.kbytes), whichever is fewer
    (KafkaDriver({"bootstrap_servers": "127.0.0.1:1"}, CLIENT), 1, 1024, 32 * 1024),
    (KafkaDriver({"bootstrap_servers": "127.0.0.1:1"}, CLIENT), 4, 10, 1_000_000),
    (RedisStreamsDriver({"host": "127.0.0.1", "port": 1}, CLIENT), 4, 1024, CLIENT["pipeline_depth"]),
    # Pulsar: max_pending_messages per partition's producer, every producer sending to every lane
    (PulsarDriver({"service_url": "pulsar://127.0.0.1:1", "admin_url": "http://127.0.0.1:1"}, CLIENT), 3, 1024, 30_000),
    (RabbitMQStreamsDriver({"host": "127.0.0.1", "amqp_port": 1}, CLIENT), 2, 1024, CLIENT["rabbitmq_in_flight"]),
    (RabbitMQQuorumDriver({"host": "127.0.0.1", "amqp_port": 1}, CLIENT), 2, 1024, CLIENT["rabbitmq_in_flight"]),
])
def test_each_drivers_window_is_what_its_producer_waits_at(driver, lanes, payload, batch):
    assert producer_window(driver, "batch", lanes, payload) == batch
    assert producer_window(driver, "single", lanes, payload) == 1


def test_a_driver_that_states_no_window_has_none():
    assert producer_window(object(), "batch", 1, 1024) is None


# -- where it shows -----------------------------------------------------------------------------------
def test_a_search_stopped_by_the_generator_reads_at_least_the_rate_found():
    bound = {"by": "client", "window": 100, "window_wait_share": 0.01, "producer_cpu_pct": 97.0}
    steps = {1000: ("sustainable", {"by": "schedule"}), 1500: ("unsustainable", bound)}

    def measure(rate):
        verdict, limited = steps.get(rate, ("unsustainable", bound) if rate > 1000 else ("sustainable", None))
        return search.Step(rate, verdict, limit=limited, measured_s=5.0)

    found = search.search(measure, 1000, precision=0.6)
    record = found.record()
    assert record["max_sustainable_rate"] == 1000
    assert record["limit"] == {**bound, "by": "client", "rate": 1500}
    assert all(s["limit"] for s in record["steps"])
    assert limit.rate_found_text(1000, record["limit"]) == "≥ 1,000 msgs/s (client-bound)"
    cell = {"rate_target": "sustainable", "max_sustainable_rate": 1000, "search": record, "limit": record["limit"]}
    assert "max sustainable ≥ 1,000 msgs/s (client-bound)" in verdict_cell(cell)


def test_a_search_held_by_the_broker_reads_its_rate():
    held = {"by": "broker", "window": 100, "window_wait_share": 0.8}
    assert limit.search_limit([{"verdict": "unsustainable", "limit": held}], 1500) == {**held, "rate": 1500}
    # a step that kept its schedule and failed on delivery: the broker, not the generator, failed it
    assert limit.search_limit([{"verdict": "unsustainable", "limit": {"by": "schedule"}}], 1500)["by"] == "broker"
    assert limit.search_limit([{"verdict": "failed", "reasons": ["x"]}], 1500) == {"by": None, "rate": 1500}
    assert limit.search_limit([], None) is None  # nothing measured above the rate found
    assert limit.rate_found_text(1000, {"by": "broker"}) == "1,000 msgs/s"


def test_the_table_marks_a_client_bound_cell_and_says_what_the_mark_means():
    bound = {"rate_target": "max", "verdict": "max-rate", "limit": {"by": "client"}}
    held = {"rate_target": "max", "verdict": "max-rate", "limit": {"by": "broker"}}
    old = {"rate_target": "max", "verdict": "max-rate"}  # stored before the limit was kept
    assert "client-bound" in verdict_cell(bound)
    assert "client-bound" not in verdict_cell(held) + verdict_cell(old)
    assert limit_note({"cells": [held, old]}) is None
    assert limit_note({"cells": [held, bound]}).startswith("client-bound: the load generator, not the broker")


def test_the_reports_mark_a_client_bound_configuration():
    config = {"sustainability": {"verdict": "max-rate", "reasons": []}, "status": "completed",
              "limit": {"by": ["client", "broker", "client"], "client_bound": 2}}
    assert markdown.verdict_text(rows.config(config)) == "max-rate · client-bound (2 of 3 repeats)"
    config["limit"] = {"by": ["broker"], "client_bound": 0}
    assert markdown.verdict_text(rows.config(config)) == "max-rate"
    assert markdown.client_bound_text(rows.section({"configurations_client_bound": ["a", "b"]})).startswith(
        "Client-bound in 2 configuration(s): the load generator")


def grid(client_bound: dict) -> list[dict]:
    """Kafka and Redis × json and avro at max rate, 5 repeats; Redis's throughput twice Kafka's, beyond any noise."""
    rng = np.random.default_rng(7)
    configs = []
    for broker in ("kafka", "redis-streams"):
        for fmt in ("json", "avro"):
            level = 2000 * (2.0 if broker == "redis-streams" else 1.0) * (0.5 if fmt == "avro" else 1.0)
            values = {"throughput_msgs_per_s": list(level * np.exp(rng.normal(0, 0.01, 5))),
                      "end_to_end_p99_us": list(3000 * np.exp(rng.normal(0, 0.01, 5)))}
            configs.append(claim_configuration(broker, fmt, values, verdict_name="max-rate",
                                               client_bound=client_bound.get((broker, fmt), 0)))
    return configs


def throughput_claims(configs) -> tuple[list[tuple], list[str]]:
    groups = [{"title": "1,024 B · max rate · batch", "cells": configs}]
    found, _ = claims(groups, {"format": "json", "broker": "kafka"}, run_noise(configs))
    best = [c["key"] for c in configs if "throughput_msgs_per_s" in c.get("best", [])]
    return [(h["cell"], h["reference"], h["axis"]) for h in found if h["metric"] == "throughput_msgs_per_s"], best


def test_a_client_bound_cell_enters_no_comparison_of_brokers_on_throughput():
    said, best = throughput_claims(grid({}))
    assert ("redis-streams|json", "kafka|json", "broker") in said and best == ["redis-streams|json"]
    # one repeat of Redis JSON client-bound: no broker claim and no "best" rests on it; its format claim stands
    said, best = throughput_claims(grid({("redis-streams", "json"): 1}))
    assert not [c for c in said if "redis-streams|json" in c[:2] and c[2] == "broker"]
    assert "redis-streams|json" not in best
    assert ("redis-streams|avro", "redis-streams|json", "format") in said


def test_a_reports_search_lines_say_the_generator_stopped_it():
    bound = {"by": "client", "window": 100, "window_wait_share": 0.01, "producer_cpu_pct": 97.0, "rate": 1500}
    search_record = {"max_sustainable_rate": 1000, "sustainable_for_s": 10.0, "ended": "bracketed within 60%",
                     "limit": bound, "steps": [{"rate": 1000, "verdict": "sustainable", "limit": {"by": "schedule"}},
                                               {"rate": 1500, "verdict": "unsustainable", "limit": bound,
                                                "host": {"busy": True, "reasons": ["CPU pressure 61% > 50%"]}}]}
    config = {"broker": "redis-streams", "format": "avro", "repeat_numbers": [0], "searches": [search_record],
              "max_sustainable_rate": {"median": 1000.0}, "status": "completed",
              "sustainability": {"verdict": "search", "reasons": []}, "limit": {"by": ["client"], "client_bound": 1}}
    assert markdown.verdict_text(rows.config(config)) == "max sustainable ≥ 1,000 msgs/s (client-bound) (held 10 s)"
    [line] = markdown.search_lines(rows.group({"cells": [config]}))[:1]
    assert "maximum sustainable rate ≥ 1,000 msgs/s (client-bound), sustainable for 10 s" in line
    assert "the step at 1,500 msgs/s was client-bound: its producers waited for room 1% of their time" in line
    assert "1,500 ✗ unsustainable (client-bound) (host busy)" in line  # the step's own host, as its cell judged it
    assert "1,000 ✓," in line  # a step whose host was not read or not busy carries no mark


def test_the_event_schema_takes_the_limit_and_cells_stored_before_it():
    from brokerbench.events import InvalidEvent, make_event, new_run_id

    completed = {"cell_id": "c", "attempt": 0, "measured_s": 3.0, "encoded_bytes": 1024.0, "intervals": 3,
                 "totals": {"sent": 1, "received": 1, "lost": 0, "duplicated": 0, "out_of_order": 0, "send_errors": 0,
                            "unacked": 0, "bytes_sent": 1024, "bytes_received": 1024}, "histograms": {}}
    def event(data):
        return make_event(new_run_id(), "CellCompleted", data, cell_index=0)

    event(completed)  # stored before the limit existed
    event({**completed, "limit": judged(window=None, window_wait_share=None)})
    event({**completed, "limit": {**judged(), "rate": 1500.0}})
    with pytest.raises(InvalidEvent, match="limit.by"):
        event({**completed, "limit": {**judged(), "by": "host"}})


def consumers(**given) -> dict:
    return limit.consumer_limit(**{"backlog_grew": True, "idle_share": 0.05, "consumer_cpu_pct": 40.0, **given})


def test_a_grown_backlog_with_consumers_that_seldom_waited_is_consumer_bound():
    found = consumers()
    assert found == {"by": "consumer", "backlog_grew": True, "idle_share": 0.05, "consumer_cpu_pct": 40.0}
    assert limit.consumer_bound({"by": "schedule", "consumers": found})


def test_a_saturated_consumer_core_is_consumer_bound_however_idle():
    assert consumers(idle_share=0.5, consumer_cpu_pct=limit.CPU_SATURATED_PCT)["by"] == "consumer"


def test_a_grown_backlog_with_consumers_that_waited_is_the_brokers():
    assert consumers(idle_share=limit.IDLE_SHARE)["by"] == "broker"
    assert consumers(idle_share=None, consumer_cpu_pct=None)["by"] is None  # nothing tells whose it was


def test_consumers_that_kept_up_limited_nothing():
    for grew in (False, None):  # not grown, or not followed
        found = consumers(backlog_grew=grew, idle_share=0.0, consumer_cpu_pct=100.0)
        assert found["by"] is None and not limit.consumer_bound({"consumers": found})
    assert not limit.consumer_bound({"by": "client"}) and not limit.consumer_bound(None)  # stored before it existed


def test_the_event_schema_takes_the_consumers_limit():
    from brokerbench.events import InvalidEvent, make_event, new_run_id

    completed = {"cell_id": "c", "attempt": 0, "measured_s": 3.0, "encoded_bytes": 1024.0, "intervals": 3,
                 "totals": {"sent": 1, "received": 1, "lost": 0, "duplicated": 0, "out_of_order": 0, "send_errors": 0,
                            "unacked": 0, "bytes_sent": 1024, "bytes_received": 1024}, "histograms": {}}
    make_event(new_run_id(), "CellCompleted", {**completed, "limit": {**judged(), "consumers": consumers()}},
               cell_index=0)
    with pytest.raises(InvalidEvent, match="consumers"):
        make_event(new_run_id(), "CellCompleted",
                   {**completed, "limit": {**judged(), "consumers": {**consumers(), "by": "client"}}}, cell_index=0)
