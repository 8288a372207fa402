"""client.topics on the session's real Kafka: one producer spreading a cell over several topics (Downard 2017's
topic fan-out), checked by a reader of our own that watches the broker while the cell runs (the cell deletes its
topics when it ends): which topics exist, and every message each one holds, decoded from the raw header."""

import secrets
import struct
import threading
import time
from collections import Counter

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from brokerbench.reports.results import build_results
from inline_run import execute_run

HEADER = struct.Struct("<IQQ")  # producer id, sequence, intended send time: the worker's framing, read here by hand
PROBE = 0xFFFFFFFF  # the readiness probe's producer id
SHORT = {"sizes": [100], "formats": ["raw"], "duration_s": 2, "warmup_s": 0.5, "warmup_until_steady": False,
         "drain_timeout_s": 5}


class TopicWatch(threading.Thread):
    """From the moment the run is known until told to stop: every topic named like the run's first cell, and
    every message those topics hold, read from the beginning by a consumer outside the code under test."""

    def __init__(self, bootstrap: str, expected: int) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.expected = bootstrap, expected
        self.prefix: str | None = None
        self.known = threading.Event()  # the run id (and so the topic names) is known
        self.stop = threading.Event()
        self.topics: set[str] = set()
        self.messages: list[tuple[str, int, int, int]] = []  # (topic, partition, producer, seq)
        self.error: BaseException | None = None

    def run_id(self, run_id: str) -> None:
        self.prefix = f"bb-{run_id}-c00000"
        self.known.set()

    def run(self) -> None:
        try:
            self._watch()
        except BaseException as exc:  # shown by the test, not lost in the thread
            self.error = exc

    def _watch(self) -> None:
        self.known.wait(30)
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        while not self.stop.is_set():  # until every topic of the cell exists
            listed = admin.list_topics(timeout=5).topics
            self.topics |= {name for name in listed if name.startswith(self.prefix)}
            if len(self.topics) >= self.expected:
                break
            time.sleep(0.05)
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"it-watch-{secrets.token_hex(4)}",
                             "enable.auto.commit": False, "auto.offset.reset": "earliest", "log_level": 0})
        consumer.assign([TopicPartition(name, 0, OFFSET_BEGINNING) for name in sorted(self.topics)])
        try:
            while not self.stop.is_set():
                for message in consumer.consume(1000, 0.05):
                    if message.error() is None:
                        producer, seq, _ = HEADER.unpack(message.key())
                        self.messages.append((message.topic(), message.partition(), producer, seq))
        finally:
            try:
                consumer.close()
            except KafkaException:
                pass


def watched_run(request, endpoints, store, topics):
    watch = TopicWatch(endpoints["kafka"]["bootstrap_servers"], topics)
    watch.start()
    try:
        outcome = execute_run(request, endpoints, store, on_run_id=watch.run_id)
    finally:
        time.sleep(0.5)
        watch.stop.set()
        watch.join(30)
    assert watch.error is None, watch.error
    events = store.read(outcome.run_id)
    return outcome, events, build_results(events), watch


def test_one_producer_spreads_its_messages_evenly_over_five_topics(endpoints, store):
    request = {"name": "it-topics", "brokers": ["kafka"], "rates": [500], "modes": ["batch"], "consumers": 1,
               "partitions": 1, "client": {"topics": 5}, **SHORT}
    outcome, events, results, watch = watched_run(request, endpoints, store, 5)
    assert outcome.status == "completed"
    (cell,) = results["cells"]
    assert cell["status"] == "completed", cell.get("reason")

    # The broker had the cell's five topics, and only those, while the cell ran.
    names = [f"{watch.prefix}-{j:04d}" for j in range(5)]
    assert watch.topics == set(names)

    # What the broker held, message by message: every topic's only partition, one probe each, and the
    # producer's messages each once, in order of sequence round-robin over the topics.
    assert {partition for _, partition, _, _ in watch.messages} == {0}
    probes = sorted((topic, seq) for topic, _, producer, seq in watch.messages if producer == PROBE)
    assert probes == [(name, j) for j, name in enumerate(names)]
    sent = [(topic, producer, seq) for topic, _, producer, seq in watch.messages if producer != PROBE]
    assert {producer for _, producer, _ in sent} == {0}
    seqs = sorted(seq for _, _, seq in sent)
    assert seqs == list(range(len(seqs)))  # no gap and no duplicate at the broker
    assert all(topic == names[seq % 5] for topic, _, seq in sent)
    per_topic = Counter(topic for topic, _, _ in sent)
    assert set(per_topic) == set(names)
    assert all(abs(count - len(sent) / 5) <= 1 for count in per_topic.values()), per_topic

    # The cell's own figures reconcile with the broker's: the count summed over the five topics, and
    # every measured message received once, none lost, none reordered.
    assert cell["broker_count"]["observed"] == cell["broker_count"]["expected"] == len(watch.messages)
    assert cell["sent"] == cell["received"] > 0
    assert cell["lost"] == cell["duplicated"] == cell["out_of_order"] == 0
    assert cell["sent"] <= len(sent)  # measured ones, after the warm-up's
    assert cell["send_loop"] == "python"  # the native loop sends to one topic
    settings = next(e for e in events if e["type"] == "TargetsReady")["data"]["targets"]["kafka"]["settings"]
    assert settings["topics"]["per_cell"] == 5


def test_a_publish_only_cell_over_three_topics_completes(endpoints, store):
    request = {"name": "it-topics-publish", "brokers": ["kafka"], "rates": ["max"], "modes": ["single"],
               "consumers": 0, "partitions": 1, "client": {"topics": 3}, **SHORT}
    outcome, _, results, watch = watched_run(request, endpoints, store, 3)
    assert outcome.status == "completed"
    (cell,) = results["cells"]
    assert cell["status"] == "completed", cell.get("reason")
    assert cell["throughput_msgs_per_s"] > 0
    assert watch.topics == {f"{watch.prefix}-{j:04d}" for j in range(3)}
    assert cell["broker_count"]["observed"] == cell["broker_count"]["expected"] > 0
    assert set(Counter(topic for topic, _, _, _ in watch.messages)) == watch.topics
