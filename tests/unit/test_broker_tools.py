"""bench/broker_tools.py reads each broker tool's output as the tool prints it (outputs captured from real runs on
the local stack), and docs/performance.md gets a table per broker from its result file."""

from pathlib import Path

import pytest

from bench_scripts import load

REPO = Path(__file__).parents[2]

# natscli v0.5.0 against the local stack's nats-server 2.15.1 (stdout; its progress lines go to stderr).
NATS_ASYNC = ("\nNATS JetStream asynchronous publisher stats: 70,838 msgs/sec ~ 69 MiB/sec ~ min: 7,082.62us ~ avg: "
              "14,108.24us ~ max: 30,889.67us ~ P50: 13,276.29us ~ P90: 20,152.63us ~ P99: 30,889.67us ~ P99.9: "
              "30,889.67us\n\n")
NATS_SYNC = ("\nNATS JetStream synchronous publisher stats: 17,115 msgs/sec ~ 17 MiB/sec ~ min: 23.00us ~ avg: 58.29us "
             "~ max: 5,267.01us ~ P50: 45.87us ~ P90: 81.63us ~ P99: 157.53us ~ P99.9: 1,654.91us\n\n")
NATS_FETCH = ("03:28:11 [1] Starting JetStream durable consumer (fetch), expecting 400,000 messages\n\nNATS "
              "JetStream durable consumer (fetch) stats: 32,148 msgs/sec ~ 31 MiB/sec ~ min: 32.18us ~ avg: 181.29us ~ "
              "max: 13,802.58us ~ P50: 65.77us ~ P90: 146.77us ~ P99: 2,244.82us ~ P99.9: 13,802.58us\n")
# bench/tools' Java loops against the local RabbitMQ 3.10.8 and Pulsar 4.0.7 (the Pulsar client's own log lines
# come before its JSON line when its log is not quieted).
STREAM_MAX = ('{"tool": "rabbitmq-stream-java", "mode": "max", "window": 1000, "size": 1024, "sent": 303964, '
              '"measured_sent": 256413, "acked": 256413, "failed": 0, "drained": true, "window_s": 2.912, '
              '"msgs_per_s": 88065.390, "publish_p50_us": null, "publish_p99_us": null, "client": "stream-client '
              '0.23.0"}\n')
AMQP_SINGLE = ('{"tool": "rabbitmq-amqp-java", "mode": "single", "window": 1, "size": 1024, "sent": 3858, '
               '"measured_sent": 3048, "acked": 3048, "failed": 0, "drained": true, "window_s": 3.000, '
               '"msgs_per_s": 1016.031, "publish_p50_us": 772.500, "publish_p99_us": 4358.031, "client": '
               '"amqp-client 5.37.1"}\n')
PULSAR_MAX = ('{"tool": "pulsar-java", "mode": "max", "window": 10000, "size": 1024, "sent": 599044, '
              '"measured_sent": 575007, "acked": 575007, "failed": 0, "drained": true, "window_s": 5.372, '
              '"msgs_per_s": 107046.463, "publish_p50_us": null, "publish_p99_us": null, "client": "pulsar-client '
              '4.0.7"}\n')
PULSAR_LOGGED = ("2026-11-28T11:38:27,687 - INFO  - [pulsar-client-io-1-1:ClientCnx@333] - [id: 0x612526a7, "
                 "L:/127.0.0.1:56340 ! R:127.0.0.1/127.0.0.1:45115] Disconnected\n")


@pytest.fixture(scope="module")
def broker_tools():
    return load("broker_tools")


def test_nats_bench_gives_its_rate_and_in_sync_mode_its_publish_p50(broker_tools):
    assert broker_tools.parse_nats_bench(NATS_SYNC) == {"msgs_per_s": 17115.0, "publish_p50_us": 45.87}
    # async: its latencies are per batch of 1,000, not per publish, so no p50 is taken from it
    assert broker_tools.parse_nats_bench(NATS_ASYNC) == {"msgs_per_s": 70838.0, "publish_p50_us": None}


def test_nats_bench_without_its_summary_is_an_error(broker_tools):
    with pytest.raises(ValueError, match="publisher stats"):
        broker_tools.parse_nats_bench("nats: error: context deadline exceeded\n")


def test_nats_bench_fetch_gives_its_consumers_rate_and_its_absence_is_an_error(broker_tools):
    assert broker_tools.parse_nats_consumer(NATS_FETCH) == 32148.0
    with pytest.raises(ValueError, match="consumer stats"):
        broker_tools.parse_nats_consumer(NATS_ASYNC)  # a publisher's summary is not a consumer's


def test_a_java_loops_json_line_is_read_after_whatever_the_client_logged(broker_tools):
    result = broker_tools.parse_java_tool(PULSAR_LOGGED + PULSAR_MAX + PULSAR_LOGGED)
    assert (result["msgs_per_s"], result["acked"], result["window"]) == (107046.463, 575007, 10000)
    streams = broker_tools.parse_java_tool(STREAM_MAX)
    assert (streams["msgs_per_s"], streams["publish_p50_us"], streams["failed"]) == (88065.39, None, 0)
    single = broker_tools.parse_java_tool(AMQP_SINGLE)
    assert (single["msgs_per_s"], single["publish_p50_us"], single["window"]) == (1016.031, 772.5, 1)


def test_a_java_loop_that_measured_nothing_or_was_not_all_acknowledged_is_an_error(broker_tools):
    with pytest.raises(ValueError, match="no JSON line"):
        broker_tools.parse_java_tool(PULSAR_LOGGED)
    with pytest.raises(ValueError, match="not all acknowledged"):
        broker_tools.parse_java_tool(STREAM_MAX.replace('"drained": true', '"drained": false'))
    with pytest.raises(ValueError, match="no acknowledgement"):
        broker_tools.parse_java_tool(STREAM_MAX.replace('"msgs_per_s": 88065.390', '"msgs_per_s": null'))


def test_each_brokers_window_is_its_plugins_setting(broker_tools):
    client = broker_tools.run_spec("nats-jetstream", "batch", 5)["client"]
    assert broker_tools.window("nats-jetstream", "batch", client) == client["nats_max_in_flight"]
    assert broker_tools.window("rabbitmq-quorum", "batch", client) == client["rabbitmq_in_flight"]
    assert broker_tools.window("pulsar", "batch", client) == 10_000  # the driver's max_pending_messages
    assert {broker_tools.window(b, "single", client) for b in broker_tools.BROKERS} == {1}


def test_the_performance_page_has_a_table_per_broker_from_the_result_file():
    performance = load("performance")
    results = performance.load_results(REPO / "bench" / "results")
    section = performance.render_section("broker_tools", results)
    brokers = results["broker_tools"]["brokers"]
    publishing = [b for b, r in brokers.items() if r.get("tool") is not None]  # Kafka, Redis: the consumer side only
    for broker in publishing:
        assert f"**{performance.TOOL_BROKERS[broker]}**" in section
    assert section.count("| max, batch |") == len(publishing)
    for broker in (b for b, r in brokers.items() if r.get("drain") and b != "nats-jetstream"):
        drain = brokers[broker]["drain"]  # a backlog row per broker read, with its ratio of medians
        assert drain["ratio"] == drain["worker_median"] / drain["tool_median"]
        assert f"| {performance.TOOL_BROKERS[broker]} ({drain['when']}, {drain['trials']} trials) | " \
               f"{drain['messages']:,} |" in section
    measured = [b for b, r in results["broker_tools"]["brokers"].items() if r.get("consume")]
    for broker in measured:  # a consumer row per broker measured, with its ratio of medians
        consume = results["broker_tools"]["brokers"][broker]["consume"]["figures"]
        assert consume["ratio"] == consume["worker_median"] / consume["tool_median"]
        assert f"| {performance.TOOL_BROKERS[broker]} (" in section
        assert f"**{performance.ratio(consume['ratio'])}**" in section
    others = [performance.TOOL_BROKERS[b] for b in results["broker_tools"]["brokers"] if b not in measured]
    if others:
        assert f"Not measured against a tool's consumer: {', '.join(others)}" in section
    del results["broker_tools"]
    assert "Not measured yet." in performance.render_section("broker_tools", results)


# ConsumerPerformance of the installed Kafka 4.1.1 (kafka-tools), its summary as printed (the values from a run here).
CONSUMER_PERFORMANCE = ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
                        "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec\n"
                        "2026-11-29 06:02:08:658, 2026-11-29 06:02:48:016, 292.9688, 7.4437, 300000, 7622.3385, 9900, "
                        "29458, 9.9453, 10183.9908\n")


def test_consumer_performance_gives_its_rate_once_it_joined_its_group(broker_tools):
    # fetch.nMsg.sec: 300,000 over the 29.458 s of fetching (nMsg.sec counts the 9.9 s group join too)
    assert broker_tools.parse_consumer_performance(CONSUMER_PERFORMANCE) == pytest.approx(300_000 / 29.458, rel=1e-4)
    with pytest.raises(ValueError, match="ConsumerPerformance summary"):
        broker_tools.parse_consumer_performance("WARN [Consumer clientId=perf-consumer-client] Connection refused\n")


# ProducerPerformance of the installed Kafka 4.1.1 (kafka-tools): a line every 5 s, then its summary, in the formats
# of its source (the values from the harness's run, bench/results/harness.json).
PRODUCER_PERFORMANCE = ("671354 records sent, 134243.9 records/sec (131.10 MB/sec), 118.3 ms avg latency, 412.0 ms "
                        "max latency.\n"
                        "750000 records sent, 136663.4 records/sec (133.46 MB/sec), 115.62 ms avg latency, 412.00 ms "
                        "max latency, 104 ms 50th, 260 ms 95th, 389 ms 99th, 410 ms 99.9th.\n")
# redis-benchmark 7.0.15 -q: progress lines ending in a carriage return, then its summary (the command as its name).
REDIS_COMMAND = "XADD tool-1-0 * h 00000000000000000000 d " + "v" * 1024
REDIS_SINGLE = (f"{REDIS_COMMAND}: rps=17712.0 (overall: 17712.0) avg_msec=0.050 (overall: 0.050)\r"
                f"{REDIS_COMMAND}: 17841.21 requests per second, p50=0.047 msec\n")
REDIS_PIPELINED = f"{REDIS_COMMAND}: 135648.39 requests per second, p50=0.615 msec\n"


def test_producer_performance_gives_its_summarys_rate_and_p50(broker_tools):
    assert broker_tools.parse_producer_performance(PRODUCER_PERFORMANCE) == {"msgs_per_s": 136663.4,
                                                                             "publish_p50_us": 104_000.0}
    with pytest.raises(ValueError, match="ProducerPerformance"):  # a window's line alone is no summary
        broker_tools.parse_producer_performance(PRODUCER_PERFORMANCE.splitlines()[0])


def test_redis_benchmark_gives_its_rate_and_one_at_a_time_its_p50(broker_tools):
    assert broker_tools.parse_redis_benchmark(REDIS_SINGLE, 1) == {"msgs_per_s": 17841.21, "publish_p50_us": 47.0}
    # pipelined: every request of a batch is timed to the batch's first reply, so no p50 is taken from it
    assert broker_tools.parse_redis_benchmark(REDIS_PIPELINED, 100) == {"msgs_per_s": 135648.39,
                                                                        "publish_p50_us": None}
    with pytest.raises(ValueError, match="requests per second"):
        broker_tools.parse_redis_benchmark("Could not connect to Redis at 127.0.0.1:6379: Connection refused\n", 1)


def test_kafka_and_redis_tools_publish_with_the_workers_settings(broker_tools):
    client = broker_tools.run_spec("kafka", "batch", 5)["client"]
    assert broker_tools.window("redis-streams", "batch", client) == client["pipeline_depth"]
    assert broker_tools.window("kafka", "batch", client) == 32 * 1024  # librdkafka's 32 MB buffer of 1 KB messages
    endpoint = {"bootstrap_servers": "127.0.0.1:9092"}
    batch = broker_tools.kafka_producer_props(endpoint, client, "batch")
    assert f"acks={client['acks']}" in batch and f"linger.ms={client['linger_ms']}" in batch
    assert "enable.idempotence=false" in batch  # as librdkafka's default, where the Java client's would be true
    assert "linger.ms=0" in broker_tools.kafka_producer_props(endpoint, client, "single")
    # redis-benchmark sends the worker's entry: its header field and its 1 KB payload field
    xadd = broker_tools.redis_xadd("k-0")
    assert xadd[:3] == ["XADD", "k-0", "*"] and xadd[3::2] == ["h", "d"] and len(xadd[-1]) == 1024
