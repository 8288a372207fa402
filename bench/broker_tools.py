"""Each broker's load generator against the broker's own benchmark tool, on one local server of that broker.

For each broker: the worker (a real cell through run_cell: raw 1,024-byte messages, one producer, publish-only, at
max in batch mode and in single mode, with the plug-in's own in-flight window) against the broker's own tool with the
same size and window on the same server:

- NATS JetStream: `nats bench js pub async|sync` (natscli 0.5.0, built with `go install` into .cache/bin), on a
  stream the worker's driver makes (its storage, `nats_storage`); async with `--batch` = nats_max_in_flight.
- Pulsar, RabbitMQ streams, RabbitMQ quorum queues: bare Java loops of the brokers' Java clients (bench/tools/:
  pulsar-perf and PerfTest are not served here), with the worker's producer settings and window.
- Kafka: at max the installed Kafka's ProducerPerformance with the worker's producer settings; in single mode, which
  ProducerPerformance has no way to run, bench/tools' KafkaPublish (the installed Kafka's Java client,
  send(record).get() per message, the same settings).
- Redis Streams: redis-benchmark XADD of the worker's entry (a header field and the payload) on one connection,
  pipeline_depth at a time at max (-P pipeline_depth -c 1), one at a time in single mode (-P 1 -c 1).

Trials interleave (worker, tool, worker, tool ...), so a slow spell of the shared machine hits both alike. Where the
worker's default send loop (BROKERBENCH_SEND_LOOP=auto) turns out native for a broker, the Python loop is run in the
same trials too. The machine's load average before and after each broker is kept with its results.

The consumer side (--consume, on by default), where the tool has a consumer (NATS: nats bench js fetch; Pulsar,
RabbitMQ streams and quorum queues: bench/tools' PulsarConsume, StreamConsume and AmqpConsume with the worker's
consumer settings; Kafka: ConsumerPerformance; Redis Streams: bench/tools' redis_consume): a worker cell with one
consumer at max against the tool's publisher and consumer run at once, interleaved; --drain N (NATS) reads a
preloaded backlog of N messages with the worker's consumer, with nats-py's fetch and with nats bench's consumer.

usage: .venv/bin/python bench/broker_tools.py [--brokers nats-jetstream,pulsar,rabbitmq-streams,rabbitmq-quorum,kafka,
           redis-streams]
           [--modes max,single] [--trials 2] [--seconds 5] [--out bench/results/broker_tools.json] [--merge]
           [--no-consume] [--drain 200000]

--merge keeps the other brokers' results of the file --out names and replaces those of the brokers measured; each
broker's results carry their own date, trials and machine load.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import nats

from brokerbench.events import new_run_id
from brokerbench.events.dynamodb import DynamoEventStore
from brokerbench.events.run import run_requested_events
from brokerbench.local.install import BIN_DIR, CACHE_DIR, REPO_DIR, go_install, install_debian, lib_dir
from brokerbench.local.stack import EVENT_STORE, LocalStack
from brokerbench.registry import get_driver
from brokerbench.reports.results import build_results
from brokerbench.spec import expand, validate
from brokerbench.worker.cell import run_cell
from brokerbench.worker.resources import ResourceSampler, summarize

BROKERS = ("nats-jetstream", "pulsar", "rabbitmq-streams", "rabbitmq-quorum", "kafka", "redis-streams")
SERVICE = {"nats-jetstream": "nats", "pulsar": "pulsar", "rabbitmq-streams": "rabbitmq", "rabbitmq-quorum": "rabbitmq",
           "kafka": "kafka", "redis-streams": "redis"}
MODES = {"max": "batch", "single": "single"}  # the CLI's names -> the run spec's delivery mode (both at rate max)
SIZE = 1024
WARMUP_S = 1
OWNER = "broker-tools"  # the services this script starts are marked so, and only those are stopped
NATSCLI = ("natscli", "github.com/nats-io/natscli/nats", "github.com/nats-io/natscli", "0.5.0")
TOOLS_DIR = Path(__file__).with_name("tools")

def _sources_digest() -> str:
    """A digest of bench/tools' pom, Java and C sources: each version of them is built into a folder of its own, so
    checkouts with different sources sharing one cache never run each other's builds."""
    digest = hashlib.sha256()
    for source in sorted([TOOLS_DIR / "pom.xml", *TOOLS_DIR.rglob("*.java"), *TOOLS_DIR.rglob("*.c")]):
        digest.update(source.relative_to(TOOLS_DIR).as_posix().encode() + b"\0" + source.read_bytes())
    return digest.hexdigest()[:12]


TOOLS_BUILD = CACHE_DIR / "tools" / f"broker-tools-{_sources_digest()}"
PULSAR_MAVEN_SETTINGS = REPO_DIR / "functions" / "brokerbench" / "brokers" / "pulsar" / "maven-settings.xml"
# What each broker's own tool is, as the results and the page name it.
TOOL_NAMES = {"nats-jetstream": "nats bench js pub (natscli 0.5.0)",
              "pulsar": "Pulsar Java client loop (pulsar-client 4.0.7)",
              "rabbitmq-streams": "stream-client loop (com.rabbitmq:stream-client 0.23.0)",
              "rabbitmq-quorum": "amqp-client loop (com.rabbitmq:amqp-client 5.37.1, confirms)",
              "kafka": "ProducerPerformance (kafka-tools 4.1.1, the installed Kafka's) at max; a Kafka Java client "
                       "loop (kafka-clients 4.1.1, send().get()) in single mode",
              "redis-streams": "redis-benchmark XADD (redis-tools 7.0.15), -c 1 -P <in flight>"}
# The consumer side's tools: the tool's publisher at max and its consumer at once.
CONSUMER_TOOL_NAMES = {"nats-jetstream": "nats bench js pub async + nats bench js fetch (natscli 0.5.0)",
                       "pulsar": "Pulsar Java client loops, publish + consume (pulsar-client 4.0.7)",
                       "rabbitmq-streams": "stream-client loops, publish + consume (com.rabbitmq:stream-client 0.23.0)",
                       "rabbitmq-quorum": "amqp-client loops, publish + consume, manual acks (com.rabbitmq:amqp-client "
                                          "5.37.1)"}
CONSUMER_TOOL_NAMES.update({
    "kafka": "ProducerPerformance + ConsumerPerformance (kafka-tools 4.1.1, the installed Kafka's)",
    "redis-streams": "redis-benchmark XADD + a bare XREADGROUP/XACK loop over hiredis (C, bench/tools)"})
# Kafka's bare Java loop, run at max beside ProducerPerformance (the tool of the table's row: Kafka's own).
KAFKA_LOOP = "bench/tools' KafkaPublish (kafka-clients 4.1.1, send() under a semaphore of the window)"
# The first guess of the Kafka and Redis tools' publishers (msgs/s) on the consumer side: they run a count, not a
# time; later trials take the last trial's rate.
COUNT_GUESS = {"kafka": 150_000, "redis-streams": 60_000}
# The same for the publish-only trials, per mode (ProducerPerformance and redis-benchmark run a count; Kafka's single
# mode is a timed loop).
PUBLISH_GUESS = {("kafka", "batch"): 150_000, ("redis-streams", "batch"): 130_000, ("redis-streams", "single"): 15_000}
REDIS_CONSUME_C = TOOLS_DIR / "src" / "main" / "c" / "redis_consume.c"
# The quorum-queue consume loop's acknowledgements: one `multiple` ack per this many deliveries (PerfTest's
# --multi-ack-every); the worker acknowledges each poll's deliveries in one, a poll bringing what the prefetch let come.
AMQP_ACK_EVERY = 100
# A consumer cell's producer at max sends for the cell's seconds faster than one consumer takes it: the cell waits up
# to this long for the rest, and its throughput counts what came in time over the time it took.
DRAIN_S = 30
# The first guess of nats bench's rate (msgs/s) per mode: it runs a count of messages, not a time; later trials
# take the last trial's rate.
NATS_GUESS = {"batch": 80_000, "single": 6_000}


def step(text: str) -> None:
    print(f"· {text}", file=sys.stderr, flush=True)


# -- the worker ----------------------------------------------------------------------------------
def run_spec(broker: str, mode: str, seconds: float, consumers: int = 0) -> dict:
    return validate({"brokers": [broker], "sizes": [SIZE], "rates": ["max"], "formats": ["raw"], "modes": [mode],
                     "duration_s": seconds, "warmup_s": WARMUP_S, "drain_timeout_s": DRAIN_S, "consumers": consumers})


def worker_cell(endpoint: dict, store, broker: str, mode: str, seconds: float, send_loop: str,
                consumers: int = 0) -> dict:
    """One cell at max (as bench/harness.py's worker_cell), publish-only or with `consumers`, with
    BROKERBENCH_SEND_LOOP=send_loop: each producer process takes the worker's environment of when it starts."""
    spec = run_spec(broker, mode, seconds, consumers)
    cell = expand(spec)[0]
    run_id = new_run_id()
    store.append(run_requested_events(run_id, spec, [cell], "broker-tools"))
    before = os.environ.get("BROKERBENCH_SEND_LOOP")
    os.environ["BROKERBENCH_SEND_LOOP"] = send_loop
    try:
        run_cell(run_id, cell, endpoint, store)
    finally:
        if before is None:
            os.environ.pop("BROKERBENCH_SEND_LOOP", None)
        else:
            os.environ["BROKERBENCH_SEND_LOOP"] = before
    return build_results(store.read(run_id, interval_histograms=False))["cells"][0]


def window(broker: str, mode: str, client: dict) -> int:
    """The messages a producer of the worker keeps in flight: its plug-in's setting (single mode: 1)."""
    if mode == "single":
        return 1
    if broker == "nats-jetstream":
        return client["nats_max_in_flight"]
    if broker == "pulsar":
        from brokerbench.brokers.pulsar.driver import MAX_PENDING_PER_PARTITION  # blocks when that many are pending

        return MAX_PENDING_PER_PARTITION
    if broker == "kafka":  # librdkafka's buffer: its byte bound (queue.buffering.max.kbytes) binds first at 1 KB
        from brokerbench.brokers.kafka.driver import PRODUCER_BUFFER_MESSAGES

        return min(PRODUCER_BUFFER_MESSAGES, kafka_buffer_bytes(client) // SIZE)
    if broker == "redis-streams":
        return client["pipeline_depth"]
    return client["rabbitmq_in_flight"]


def kafka_buffer_bytes(client: dict) -> int:
    """The worker's Kafka producer buffer in bytes (KafkaDriver._buffer_kb: 32 MB, or two batches if larger); the
    Java client's buffer.memory in the tools."""
    from brokerbench.brokers.kafka.driver import PRODUCER_BUFFER_KB

    return max(PRODUCER_BUFFER_KB, 2 * client["batch_bytes"] // 1024) * 1024


def worker_figures(cell: dict) -> dict:
    """What the results keep of a worker's cell."""
    resources = cell.get("resources") or {}
    return {"msgs_per_s": cell["rate_achieved"], "send_loop": cell["send_loop"],
            "publish_p50_us": (cell.get("publish_latency_us") or {}).get("p50"),
            "producer_cpu_pct": (resources.get("workers") or {}).get("cpu_pct_mean"),
            "broker_cpu_pct": (resources.get("broker") or {}).get("cpu_pct_mean"),
            "limit": cell.get("limit")}  # what the project's own rule says limited the rate (brokerbench.limit)


# -- the tools -----------------------------------------------------------------------------------
def build_java_tools(log=step) -> Path:
    """bench/tools' Java sources compiled (and the RabbitMQ clients copied) into .cache/tools/broker-tools-<digest of
    the sources>, once per version of them."""
    stamp = TOOLS_BUILD / "built"
    if stamp.is_file():
        return TOOLS_BUILD
    log("building bench/tools (mvn) ...")
    subprocess.run(["mvn", "-q", "-B", "-s", str(PULSAR_MAVEN_SETTINGS), "-f", str(TOOLS_DIR / "pom.xml"),
                    f"-Dbroker.tools.out={TOOLS_BUILD}", "clean", "compile", "dependency:copy-dependencies",
                    f"-DoutputDirectory={TOOLS_BUILD / 'lib'}", "-DincludeScope=runtime"],
                   check=True, capture_output=True, text=True)
    stamp.touch()
    return TOOLS_BUILD


def natscli(log=step) -> Path:
    name, package, module, version = NATSCLI
    return go_install(name, package, module, version, BIN_DIR / "nats", log)


def parse_nats_bench(out: str) -> dict:
    """nats bench's summary line ("NATS JetStream synchronous publisher stats: 17,115 msgs/sec ~ 17 MiB/sec ~ min:
    23.00us ~ ... ~ P50: 45.87us ~ ..."): the publisher's msgs/s and its latency p50 (sync: per publish; async: per
    batch, so not kept)."""
    line = re.search(r"publisher stats: ([\d,]+(?:\.\d+)?) msgs/sec(.*)", out)
    if not line:
        raise ValueError(f"no 'publisher stats: N msgs/sec' in nats bench's output: {out[-500:]!r}")
    p50 = re.search(r"P50: ([\d,]+(?:\.\d+)?)us", line.group(2))
    synchronous = "synchronous publisher" in out and "asynchronous publisher" not in out
    return {"msgs_per_s": float(line.group(1).replace(",", "")),
            "publish_p50_us": float(p50.group(1).replace(",", "")) if p50 and synchronous else None}


def parse_java_tool(out: str) -> dict:
    """A bench/tools loop's last line: one JSON object."""
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if not lines:
        raise ValueError(f"no JSON line in the tool's output: {out[-500:]!r}")
    result = json.loads(lines[-1])
    if result.get("msgs_per_s") is None:
        raise ValueError(f"the tool measured no acknowledgement: {lines[-1]}")
    if not result.get("drained", True):
        raise ValueError(f"the tool's messages were not all acknowledged within 60 s: {lines[-1]}")
    return result


def stopped(process: subprocess.Popen) -> None:
    """A tool's process ended: killed if it still runs."""
    if process.poll() is None:
        process.kill()
        process.wait()


def sampled(cmd: list[str], broker_pids: list[int], skip_s: float, timeout_s: float,
            others: dict[str, list[int]] | None = None) -> tuple[str, dict]:
    """Run a tool, sampling its CPU and the broker's (and `others`', each group's as <name>_cpu_pct) every 0.5 s
    after its first skip_s (start-up, warm-up). Its output goes to a file, read when it ends: a tool that prints as it
    goes (redis-benchmark's progress, even with -q) stopped once a pipe nobody read was full."""
    with tempfile.TemporaryFile("w+") as output:
        process = subprocess.Popen(cmd, stdout=output, stderr=subprocess.STDOUT, text=True)
        samples = _sample(process, cmd, broker_pids, skip_s, timeout_s, others)
        output.seek(0)
        out = output.read()
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} ... exited {process.returncode}: {out[-800:]}")
    cpu = summarize([{k: v for k, v in s.items() if v["rss_mb"] > 0} for s in samples[:-1]]) if len(samples) > 1 else {}
    return out, {f"{group}_cpu_pct": (cpu.get(group) or {}).get("cpu_pct_mean")
                 for group in ("tool", "broker", *(others or {}))}


def _sample(process: subprocess.Popen, cmd: list[str], broker_pids: list[int], skip_s: float, timeout_s: float,
            others: dict[str, list[int]] | None) -> list[dict]:
    """The CPU samples of `process` (sampled's), until it ends; killed and an error after timeout_s."""
    samples, sampler, deadline = [], None, time.monotonic() + timeout_s
    started = time.monotonic()
    while process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
        if sampler is None and time.monotonic() - started >= skip_s:
            sampler = ResourceSampler({"tool": [process.pid], "broker": broker_pids, **(others or {})})
        elif sampler is not None and process.poll() is None:
            samples.append(sampler.sample())
    if process.poll() is None:
        process.kill()
        process.wait()
        raise TimeoutError(f"{cmd[0]} did not end within {timeout_s:.0f} s")
    return samples


def nats_tool(endpoint: dict, client: dict, mode: str, seconds: float, guess: float) -> dict:
    driver = get_driver("nats-jetstream", endpoint, client)
    topic = f"tool-{new_run_id()}"
    driver.create_topic(topic, 1)  # the worker's stream: storage nats_storage, one subject
    from brokerbench.brokers.nats_jetstream.driver import stream_name, subject

    messages = max(1000, int(guess * seconds))
    how = ["async", "--batch", str(window("nats-jetstream", mode, client))] if mode == "batch" else ["sync"]
    cmd = [str(natscli()), "bench", "js", "pub", *how, subject(topic, 0), "-s", endpoint["url"], "--msgs",
           str(messages), "--size", str(SIZE), "--no-progress", "--stream", stream_name(topic)]
    try:
        out, cpu = sampled(cmd, endpoint.get("pids") or [], 0.5, 60 + 3 * seconds)
    finally:
        driver.delete_topic(topic, 1)
    summary = next((line for line in out.splitlines() if "publisher stats:" in line), out.strip()[-400:])
    return {**parse_nats_bench(out), **cpu, "messages": messages, "output": summary}


def parse_nats_consumer(out: str) -> float:
    """nats bench's consumer summary line ("NATS JetStream durable consumer (fetch) stats: 39,424 msgs/sec ~ ..."):
    the consumer's msgs/s."""
    line = re.search(r"consumer (?:\(\w+\) )?stats: ([\d,]+(?:\.\d+)?) msgs/sec", out)
    if not line:
        raise ValueError(f"no 'consumer stats: N msgs/sec' in nats bench's output: {out[-500:]!r}")
    return float(line.group(1).replace(",", ""))


def nats_consume_tool(endpoint: dict, client: dict, seconds: float, guess: float) -> dict:
    """nats bench's publisher (async, the worker's window) and its durable fetch consumer (batches of
    nats_fetch_batch, explicit acknowledgements, as the worker's consumer) on one stream at once, as a worker cell
    with one consumer at max runs its producer and its consumer: the consumer's msgs/s, from its first message to its
    last."""
    driver = get_driver("nats-jetstream", endpoint, client)
    topic = f"tool-{new_run_id()}"
    driver.create_topic(topic, 1)
    from brokerbench.brokers.nats_jetstream.driver import consumer_config, stream_name, subject

    durable, messages = f"tool-{topic}", max(1000, int(guess * seconds))
    common = ["-s", endpoint["url"], "--msgs", str(messages), "--size", str(SIZE), "--no-progress",
              "--stream", stream_name(topic)]
    publish = [str(natscli()), "bench", "js", "pub", "async", "--batch", str(window("nats-jetstream", "batch", client)),
               subject(topic, 0), *common]
    consume = [str(natscli()), "bench", "js", "fetch", "--batch", str(client["nats_fetch_batch"]), "--acks",
               "explicit", "--consumer", durable, *common]
    asyncio.run(_add_consumer(endpoint["url"], stream_name(topic), consumer_config(  # the worker's settings
        durable, [subject(topic, 0)], client["nats_fetch_batch"])))

    publisher = subprocess.Popen(publish, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, cpu = sampled(consume, endpoint.get("pids") or [], 0.5, 60 + 10 * seconds)
        published = publisher.communicate(timeout=60)[0]
    finally:
        stopped(publisher)
        driver.delete_topic(topic, 1)
    summary = next((line for line in out.splitlines() if "consumer" in line and "stats:" in line), out.strip()[-400:])
    return {"msgs_per_s": parse_nats_consumer(out), "publisher_msgs_per_s": parse_nats_bench(published)["msgs_per_s"],
            "consumer_cpu_pct": cpu["tool_cpu_pct"], "broker_cpu_pct": cpu["broker_cpu_pct"], "messages": messages,
            "output": summary}


def preload(endpoint: dict, client: dict, messages: int) -> str:
    """A stream the worker's driver makes, holding `messages` 1 KB messages (nats bench's publisher): its topic."""
    from brokerbench.brokers.nats_jetstream.driver import stream_name, subject

    topic = f"drain-{new_run_id()}"
    get_driver("nats-jetstream", endpoint, client).create_topic(topic, 1)
    subprocess.run([str(natscli()), "bench", "js", "pub", "async", "--batch", str(client["nats_max_in_flight"]),
                    subject(topic, 0), "-s", endpoint["url"], "--msgs", str(messages), "--size", str(SIZE),
                    "--no-progress", "--stream", stream_name(topic)], check=True, capture_output=True, timeout=300)
    return topic


def drained(endpoint: dict, client: dict, messages: int, how: str) -> dict:
    """A preloaded backlog read to its end by one consumer: `pull`, the worker's consumer (the driver's WireConsumer:
    NATS's protocol spoken on a socket of its own); `fetch`, the way it read first (nats-py's fetch of
    nats_fetch_batch, each message acknowledged at the next fetch, the header unframed); `tool`, nats bench js fetch
    on a durable made with the worker's consumer settings. msgs/s from the first poll to the last message, and this
    process's CPU per message (all its threads: nats-py's event loop, where one runs, has its own)."""
    from brokerbench.brokers.nats_jetstream.driver import consumer_config, stream_name, subject, unframe

    topic = preload(endpoint, client, messages)
    driver, batch = get_driver("nats-jetstream", endpoint, client), client["nats_fetch_batch"]
    try:
        if how == "tool":
            durable = f"tool-{topic}"
            asyncio.run(_add_consumer(endpoint["url"], stream_name(topic), consumer_config(
                durable, [subject(topic, 0)], batch)))
            out = subprocess.run([str(natscli()), "bench", "js", "fetch", "--batch", str(batch), "--acks", "explicit",
                                  "--consumer", durable, "-s", endpoint["url"], "--msgs", str(messages), "--size",
                                  str(SIZE), "--no-progress", "--stream", stream_name(topic)],
                                 capture_output=True, text=True, timeout=300)
            return {"msgs_per_s": parse_nats_consumer(out.stdout + out.stderr), "cpu_us_per_msg": None}
        if how == "pull":
            consumer = driver.consumer(topic, "drain", [0])
            got, cpu, start = 0, time.process_time(), time.perf_counter()
            while got < messages and time.perf_counter() - start < 300:
                got += len(consumer.poll(0.05))
            elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
            consumer.close()
        else:
            got, elapsed, cpu = asyncio.run(_fetch_loop(endpoint["url"], topic, messages, batch, unframe))
        if got < messages:
            raise RuntimeError(f"{how}: {got:,} of {messages:,} messages within 300 s")
        return {"msgs_per_s": got / elapsed, "cpu_us_per_msg": cpu / got * 1e6}
    finally:
        driver.delete_topic(topic, 1)


async def _add_consumer(url: str, stream: str, config) -> None:
    connection = await nats.connect(url)
    try:
        await connection.jetstream().add_consumer(stream, config)
    finally:
        await connection.close()


async def _fetch_loop(url: str, topic: str, messages: int, batch: int, unframe) -> tuple[int, float, float]:
    """The worker's NATS consumer as it read first: nats-py's fetch."""
    from brokerbench.brokers.nats_jetstream.driver import consumer_config, stream_name, subject

    connection = await nats.connect(url)
    try:
        js = connection.jetstream()
        await js.add_consumer(stream_name(topic), consumer_config("fetch", [subject(topic, 0)], batch))
        subscription = await js.pull_subscribe_bind(durable="fetch", stream=stream_name(topic))
        got, last, cpu, start = 0, [], time.process_time(), time.perf_counter()
        while got < messages and time.perf_counter() - start < 300:
            for message in last:
                await connection.publish(message.reply)
            try:
                last = await subscription.fetch(batch, timeout=0.05)
            except (asyncio.TimeoutError, nats.errors.TimeoutError):
                last = []
            for message in last:
                unframe(message.data)
            got += len(last)
        return got, time.perf_counter() - start, time.process_time() - cpu
    finally:
        await connection.close()


def measure_drain(endpoint: dict, trials_n: int, messages: int) -> dict:
    """The NATS consumer's ways of reading a backlog, interleaved trial by trial (see `drained`)."""
    client = run_spec("nats-jetstream", "batch", 1, 1)["client"]
    trials, before = Trials(), os.getloadavg()
    for trial in range(1, trials_n + 1):
        for how in ("fetch", "pull", "tool"):
            step(f"nats-jetstream drain {messages:,}: trial {trial}/{trials_n}: {how}")
            trials.run(how, trial, drained, endpoint, client, messages, how)

    def of(series: str, key: str) -> list:
        return [None if t is None else t.get(key) for t in trials.series.get(series, [])]

    return {"messages": messages, "fetch_batch": client["nats_fetch_batch"], "trials": trials_n,
            "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load_average_1_5_15": _load(before),
            **{f"{how}_msgs_per_s": of(how, "msgs_per_s") for how in ("fetch", "pull", "tool")},
            **{f"{how}_cpu_us_per_msg": of(how, "cpu_us_per_msg") for how in ("fetch", "pull")},
            "failed": trials.failed}


JVM = ["java", "-Xmx512m", "-XX:+UseG1GC", "-Dio.netty.tryReflectionSetAccessible=true",
       "--add-opens", "java.base/java.nio=ALL-UNNAMED", "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED"]


def installed_jvm(build: Path, service: str) -> list[str]:
    """The JVM's start for a loop of a client the project's install of `service` holds (Pulsar, Kafka): its jars,
    the client's log (log4j2) at warnings only."""
    quiet = build / "log4j2-warn.properties"
    quiet.write_text("rootLogger.level=WARN\nrootLogger.appenderRef.err.ref=ERR\nappender.err.type=Console\n"
                     "appender.err.name=ERR\nappender.err.target=SYSTEM_ERR\n"
                     "appender.err.layout.type=PatternLayout\nappender.err.layout.pattern=%p %m%n\n")
    return [*JVM, f"-Dlog4j2.configurationFile={quiet}", "-cp", f"{build / 'classes'}:{lib_dir(service)}/*"]


def java_publish(broker: str, endpoint: dict, client: dict, driver, topic: str, mode: str, seconds: float,
                 messages: int = 0) -> list:
    """The command of a bench/tools publish loop on `topic`'s one lane, with the worker's settings; with `messages`,
    a backlog of that many (no warm-up: every one counted, and the loop stops once they are acknowledged)."""
    build = build_java_tools()
    warmup = 0 if messages else WARMUP_S
    common = ["--mode", "max" if mode == "batch" else "single", "--size", str(SIZE), "--seconds", str(seconds),
              "--warmup", str(warmup), "--window", str(window(broker, mode, client)), "--messages", str(messages)]
    if broker == "pulsar":
        settings = driver.producer_settings("batch")
        return [*installed_jvm(build, "pulsar"), "bench.PulsarPublish", "--url", endpoint["service_url"],
                "--topic", driver.partitions_of(topic, range(1))[0],
                "--batch-delay-ms", str(settings["batching_max_publish_delay_ms"]),
                "--batch-bytes", str(settings["batching_max_allowed_size_in_bytes"]),
                "--batch-messages", str(settings["batching_max_messages"]), *common]
    if broker == "kafka":
        from brokerbench.brokers.kafka.driver import MAX_IN_FLIGHT

        return [*installed_jvm(build, "kafka"), "bench.KafkaPublish", "--bootstrap", endpoint["bootstrap_servers"],
                "--topic", topic, "--acks", str(client["acks"]), "--linger-ms", str(client["linger_ms"]),
                "--batch-bytes", str(client["batch_bytes"]), "--compression", client["compression"],
                "--idempotence", str(bool(client.get("kafka_idempotence"))).lower(),
                "--buffer-bytes", str(kafka_buffer_bytes(client)), "--requests-in-flight", str(MAX_IN_FLIGHT), *common]
    from brokerbench.brokers.rabbitmq.amqp import lane_queue

    classpath = ["-cp", f"{build / 'classes'}:{build / 'lib'}/*"]
    if broker == "rabbitmq-streams":
        return [*JVM, *classpath, "bench.StreamPublish", "--host", endpoint["host"], "--port",
                str(endpoint["stream_port"]), "--stream", lane_queue(topic, 0), *common]
    return [*JVM, *classpath, "bench.AmqpPublish", "--host", endpoint["host"], "--port", str(endpoint["amqp_port"]),
            "--queue", lane_queue(topic, 0), *common]


def java_tool(broker: str, endpoint: dict, client: dict, mode: str, seconds: float) -> dict:
    driver = get_driver(broker, endpoint, client)
    topic = f"tool-{new_run_id()}"
    driver.create_topic(topic, 1)  # as the worker's cell makes its topic: one lane
    try:
        cmd = java_publish(broker, endpoint, client, driver, topic, mode, seconds)
        out, cpu = sampled(cmd, endpoint.get("pids") or [], 1.5 + WARMUP_S, 120 + 2 * seconds)
    finally:
        driver.delete_topic(topic, 1)
    result = parse_java_tool(out)
    return {"msgs_per_s": result["msgs_per_s"], "publish_p50_us": result.get("publish_p50_us"), **cpu,
            "acked": result["acked"], "failed": result["failed"], "client": result.get("client"),
            "output": [line for line in out.splitlines() if line.startswith("{")][-1]}


def parse_producer_performance(out: str) -> dict:
    """ProducerPerformance's last line ("750000 records sent, 136663.4 records/sec (133.46 MB/sec), 95.31 ms avg
    latency, 412.00 ms max latency, 88 ms 50th, ..."; its lines every 5 s before it have no percentiles): its
    records/sec, from its first send to its last acknowledgement (the topic's metadata and the JIT's warm-up
    included), and its latency p50 (each record's send to its acknowledgement, whole milliseconds)."""
    lines = [line for line in out.splitlines() if "records sent" in line and "50th" in line]
    if not lines:
        raise ValueError(f"no 'N records sent, ... 50th' summary in ProducerPerformance's output: {out[-500:]!r}")
    rate, p50 = re.search(r"records sent, ([\d.]+) records/sec", lines[-1]), re.search(r"(\d+) ms 50th", lines[-1])
    if not rate or not p50:
        raise ValueError(f"ProducerPerformance's summary has no records/sec or 50th: {lines[-1]!r}")
    return {"msgs_per_s": float(rate.group(1)), "publish_p50_us": float(p50.group(1)) * 1000}


def kafka_producer_props(endpoint: dict, client: dict, mode: str) -> list[str]:
    """ProducerPerformance's --producer-props: the worker's producer settings (KafkaDriver.producer_config: linger
    only in batch mode, idempotence as the worker's where the Java client would turn it on under acks=all, its buffer
    and requests in flight, the Java client's defaults too)."""
    from brokerbench.brokers.kafka.driver import MAX_IN_FLIGHT

    return [f"bootstrap.servers={endpoint['bootstrap_servers']}", f"acks={client['acks']}",
            f"linger.ms={client['linger_ms'] if mode == 'batch' else 0}", f"batch.size={client['batch_bytes']}",
            f"compression.type={client['compression']}",
            f"enable.idempotence={str(bool(client.get('kafka_idempotence'))).lower()}",
            f"buffer.memory={kafka_buffer_bytes(client)}", f"max.in.flight.requests.per.connection={MAX_IN_FLIGHT}"]


def kafka_tool(endpoint: dict, client: dict, mode: str, seconds: float, guess: float) -> dict:
    """Kafka's own tool at max: the installed Kafka's ProducerPerformance (--throughput -1) with the worker's
    producer settings, on a new topic of one partition, as many records as the last trial sent in the trial's
    seconds. Single mode, which ProducerPerformance cannot run (it never waits for one record before the next):
    bench/tools' KafkaPublish, send(record).get() per message."""
    if mode == "single":
        return java_tool("kafka", endpoint, client, mode, seconds)
    driver = get_driver("kafka", endpoint, client)
    topic = f"tool-{new_run_id()}"
    driver.create_topic(topic, 1)
    records = max(1000, int(guess * seconds))
    cmd = ["java", "-Xmx512m", "-cp", f"{lib_dir('kafka')}/*", "org.apache.kafka.tools.ProducerPerformance", "--topic",
           topic, "--num-records", str(records), "--record-size", str(SIZE), "--throughput", "-1", "--producer-props",
           *kafka_producer_props(endpoint, client, mode)]
    try:
        out, cpu = sampled(cmd, endpoint.get("pids") or [], 1.5, 120 + 3 * seconds)
    finally:
        driver.delete_topic(topic, 1)
    result = parse_producer_performance(out)
    return {**result, **cpu, "messages": records,
            "output": [line for line in out.splitlines() if "records sent" in line and "50th" in line][-1]}


def redis_xadd(key: str) -> list[str]:
    """redis-benchmark's command: the worker's entry, its header field (20 bytes) and its payload field."""
    from brokerbench.brokers.redis_streams.driver import HEADER_FIELD, PAYLOAD_FIELD
    from brokerbench.worker.framing import HEADER

    return ["XADD", key, "*", HEADER_FIELD.decode(), "0" * HEADER.size, PAYLOAD_FIELD.decode(), "v" * SIZE]


def parse_redis_benchmark(out: str, pipeline: int) -> dict:
    """redis-benchmark -q's summary ("XADD ...: 135648.39 requests per second, p50=0.615 msec"; progress lines ending
    in a carriage return before it): its requests per second (all of its requests over the time from its first to its
    last reply) and, one request at a time (-P 1), its latency p50 (a request's write to its reply). With a pipeline
    every request of a batch is timed to the batch's first reply, so no p50 is taken from it."""
    lines = [line for line in out.replace("\r", "\n").splitlines() if "requests per second" in line]
    if not lines:
        raise ValueError(f"no 'N requests per second' in redis-benchmark's output: {out[-300:]!r}")
    rate, p50 = re.search(r"([\d.]+) requests per second", lines[-1]), re.search(r"p50=([\d.]+) msec", lines[-1])
    return {"msgs_per_s": float(rate.group(1)),
            "publish_p50_us": float(p50.group(1)) * 1000 if p50 and pipeline == 1 else None}


def redis_tool(endpoint: dict, client: dict, mode: str, seconds: float, guess: float) -> dict:
    """redis-benchmark's XADD of the worker's entry on one connection, the worker's window at a time (max:
    -P pipeline_depth; single: -P 1), on a new stream of the worker's key shape, as many as the last trial sent in
    the trial's seconds; the stream deleted after."""
    from brokerbench.brokers.redis_streams.driver import stream_key

    key, requests = stream_key(f"tool-{new_run_id()}", 0), max(1000, int(guess * seconds))
    host, port, depth = endpoint.get("host", "127.0.0.1"), str(endpoint["port"]), window("redis-streams", mode, client)
    cmd = ["redis-benchmark", "-h", host, "-p", port, "-c", "1", "-P", str(depth), "-n", str(requests), "-q",
           *redis_xadd(key)]
    try:
        out, cpu = sampled(cmd, endpoint.get("pids") or [], 0.5, 60 + 10 * seconds)
    finally:
        subprocess.run(["redis-cli", "-h", host, "-p", port, "DEL", key], capture_output=True, timeout=60)
    summary = [line for line in out.replace("\r", "\n").splitlines() if "requests per second" in line][-1:]
    return {**parse_redis_benchmark(out, depth), **cpu, "messages": requests,
            "output": f"redis-benchmark -c 1 -P {depth} -n {requests} XADD: "
                      + (summary[0].rsplit(": ", 1)[-1] if summary else "")}


def java_consume(broker: str, endpoint: dict, client: dict, driver, topic: str, seconds: float) -> list[str]:
    """The command of a bench/tools consume loop on `topic`'s one lane, with the worker's consumer settings."""
    build = build_java_tools()
    until = ["--idle", "3", "--limit", str(60 + 3 * seconds)]
    if broker == "pulsar":
        from brokerbench.brokers.pulsar.driver import POLL_MAX, RECEIVER_QUEUE

        return [*installed_jvm(build, "pulsar"), "bench.PulsarConsume", "--url", endpoint["service_url"],
                "--topic", driver.partitions_of(topic, range(1))[0], "--subscription", "tool",
                "--receiver-queue", str(RECEIVER_QUEUE), "--ack-every", str(POLL_MAX), *until]
    from brokerbench.brokers.rabbitmq.amqp import lane_queue

    classpath = ["-cp", f"{build / 'classes'}:{build / 'lib'}/*"]
    if broker == "rabbitmq-streams":
        return [*JVM, *classpath, "bench.StreamConsume", "--host", endpoint["host"], "--port",
                str(endpoint["stream_port"]), "--stream", lane_queue(topic, 0), "--credit",
                str(client["rabbitmq_prefetch"]), *until]
    return [*JVM, *classpath, "bench.AmqpConsume", "--host", endpoint["host"], "--port", str(endpoint["amqp_port"]),
            "--queue", lane_queue(topic, 0), "--prefetch", str(client["rabbitmq_prefetch"]),
            "--ack-every", str(AMQP_ACK_EVERY), *until]


def java_consume_tool(broker: str, endpoint: dict, client: dict, seconds: float) -> dict:
    """A bench/tools consume loop (the worker's consumer settings: java_consume) subscribed first, then the broker's
    publish loop at max (batch mode) on the same lane, as a worker cell with one consumer runs them: the consumer's
    msgs/s from its first message to its last, every acknowledged message received."""
    driver = get_driver(broker, endpoint, client)
    topic = f"tool-{new_run_id()}"
    driver.create_topic(topic, 1)
    consumer = subprocess.Popen(java_consume(broker, endpoint, client, driver, topic, seconds),
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = consumer.stdout.readline()  # after it subscribed: it reads from the first message sent
        if line.strip() != "subscribed":
            raise RuntimeError(f"the consume loop did not subscribe: {line!r}")
        publish = java_publish(broker, endpoint, client, driver, topic, "batch", seconds)
        published, cpu = sampled(publish, endpoint.get("pids") or [], 1.5 + WARMUP_S, 120 + 2 * seconds,
                                 {"consumer": [consumer.pid]})
        out = consumer.communicate(timeout=120)[0]
    finally:
        stopped(consumer)
        driver.delete_topic(topic, 1)
    result = json.loads([x for x in out.splitlines() if x.startswith("{")][-1])
    sent = parse_java_tool(published)
    if result["msgs_per_s"] is None or result["received"] < sent["acked"]:
        raise ValueError(f"the consume loop received {result['received']:,} of {sent['acked']:,} acknowledged: {out}")
    return {"msgs_per_s": result["msgs_per_s"], "publisher_msgs_per_s": sent["msgs_per_s"],
            "consumer_cpu_pct": cpu.get("consumer_cpu_pct"), "broker_cpu_pct": cpu["broker_cpu_pct"],
            "output": [x for x in out.splitlines() if x.startswith("{")][-1]}


def redis_consume_bin(log=step) -> Path:
    """bench/tools' C consume loop for Redis built (cc, Debian's libhiredis-dev) beside the Java loops."""
    binary = TOOLS_BUILD / "redis_consume"
    if not binary.is_file():
        install_debian({"cc": "gcc"}, log, {"/usr/include/hiredis/hiredis.h": "libhiredis-dev"})
        log("building bench/tools' redis_consume (cc -lhiredis) ...")
        TOOLS_BUILD.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cc", "-O2", "-o", str(binary), str(REDIS_CONSUME_C), "-lhiredis"], check=True,
                       capture_output=True, text=True)
    return binary


def parse_consumer_performance(out: str) -> float:
    """ConsumerPerformance's summary (a header "start.time, end.time, ..., fetch.nMsg.sec" and one CSV line): the
    consumer's msgs/s once it had joined its group (fetch.nMsg.sec; nMsg.sec counts the join too)."""
    lines = [line for line in out.splitlines() if line.count(",") >= 9]
    if len(lines) < 2 or "fetch.nMsg.sec" not in lines[-2]:
        raise ValueError(f"no ConsumerPerformance summary in its output: {out[-500:]!r}")
    fields = dict(zip((f.strip() for f in lines[-2].split(",")), (v.strip() for v in lines[-1].split(","))))
    return float(fields["fetch.nMsg.sec"])


def kafka_consume_tool(endpoint: dict, client: dict, seconds: float, guess: float) -> dict:
    """Kafka's own tools on one new topic of one partition at once: ConsumerPerformance (its group's consumer from
    the earliest offset, the worker's fetch sizes) started first, then ProducerPerformance at max with the worker's
    producer settings, as many records as the last trial's publisher sent in the trial's seconds."""
    driver = get_driver("kafka", endpoint, client)
    topic = f"tool-{new_run_id()}"
    driver.create_topic(topic, 1)
    bootstrap, records = endpoint["bootstrap_servers"], max(1000, int(guess * seconds))
    config = TOOLS_BUILD / f"consumer-{topic}.properties"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("fetch.max.bytes=67108864\nmax.partition.fetch.bytes=16777216\n")  # the worker's (driver.py)
    kafka_cp = ["java", "-Xmx512m", "-cp", f"{lib_dir('kafka')}/*"]
    consume = [*kafka_cp, "org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", bootstrap, "--topic",
               topic, "--messages", str(records), "--timeout", "30000", "--group", f"tool-{topic}",
               "--consumer.config", str(config)]
    publish = [*kafka_cp, "org.apache.kafka.tools.ProducerPerformance", "--topic", topic, "--num-records",
               str(records), "--record-size", str(SIZE), "--throughput", "-1", "--producer-props",
               f"bootstrap.servers={bootstrap}", f"acks={client['acks']}", f"linger.ms={client['linger_ms']}",
               f"batch.size={client['batch_bytes']}", f"compression.type={client['compression']}"]
    output = tempfile.TemporaryFile("w+")  # read when it ends (sampled)
    consumer = subprocess.Popen(consume, stdout=output, stderr=subprocess.STDOUT, text=True)
    try:
        published, cpu = sampled(publish, endpoint.get("pids") or [], 1.0, 120 + 3 * seconds,
                                 {"consumer": [consumer.pid]})
        consumer.wait(timeout=120)
        output.seek(0)
        out = output.read()
    finally:
        stopped(consumer)
        output.close()
        config.unlink(missing_ok=True)
        driver.delete_topic(topic, 1)
    if consumer.returncode != 0:
        raise RuntimeError(f"ConsumerPerformance exited {consumer.returncode}: {out[-800:]}")
    sent = [line for line in published.splitlines() if "records sent" in line][-1]
    return {"msgs_per_s": parse_consumer_performance(out),
            "publisher_msgs_per_s": float(re.search(r"([\d.]+) records/sec", sent).group(1)),
            "consumer_cpu_pct": cpu.get("consumer_cpu_pct"), "broker_cpu_pct": cpu["broker_cpu_pct"],
            "messages": records, "output": out.strip().splitlines()[-1]}


def redis_consume_tool(endpoint: dict, client: dict, seconds: float, guess: float) -> dict:
    """bench/tools' C XREADGROUP/XACK loop (COUNT read_count, a batch's XACK written with the next read, as the
    worker's consumer) on a new stream with its group made first, then redis-benchmark's XADD at once (one
    connection, pipeline_depth at a time, as the worker's producer), as many as the last trial's sent in the trial's
    seconds."""
    from brokerbench.brokers.redis_streams.driver import stream_key

    key, records = stream_key(f"tool-{new_run_id()}", 0), max(1000, int(guess * seconds))
    host, port = endpoint.get("host", "127.0.0.1"), str(endpoint["port"])
    consume = [str(redis_consume_bin()), host, port, key, "tool", str(client["read_count"]), "3",
               str(60 + 3 * seconds)]
    publish = ["redis-benchmark", "-h", host, "-p", port, "-c", "1", "-P", str(client["pipeline_depth"]), "-n",
               str(records), "-q", "XADD", key, "*", "f", "v" * SIZE]
    consumer = subprocess.Popen(consume, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = consumer.stdout.readline()
        if line.strip() != "subscribed":
            raise RuntimeError(f"redis_consume did not make its group: {line!r}")
        published, cpu = sampled(publish, endpoint.get("pids") or [], 0.5, 120 + 3 * seconds,
                                 {"consumer": [consumer.pid]})
        out = consumer.communicate(timeout=120)[0]
    finally:
        stopped(consumer)
        subprocess.run(["redis-cli", "-h", host, "-p", port, "DEL", key], capture_output=True, timeout=60)
    result = json.loads([x for x in out.splitlines() if x.startswith("{")][-1])
    rate = re.search(r"([\d.]+) requests per second", published.replace("\r", "\n"))
    if result["msgs_per_s"] is None or result["received"] < records:
        raise ValueError(f"redis_consume received {result['received']:,} of {records:,} sent: {out}")
    return {"msgs_per_s": result["msgs_per_s"], "publisher_msgs_per_s": float(rate.group(1)) if rate else None,
            "consumer_cpu_pct": cpu.get("consumer_cpu_pct"), "broker_cpu_pct": cpu["broker_cpu_pct"],
            "messages": records, "output": [x for x in out.splitlines() if x.startswith("{")][-1]}


def preload_backlog(broker: str, endpoint: dict, client: dict, driver, topic: str, messages: int) -> None:
    """`messages` 1 KB messages on `topic`'s one lane, every one acknowledged, by the broker's own publisher
    (ProducerPerformance, redis-benchmark with the worker's two fields, bench/tools' Java loops)."""
    if broker == "kafka":
        out = subprocess.run(["java", "-Xmx512m", "-cp", f"{lib_dir('kafka')}/*",
                              "org.apache.kafka.tools.ProducerPerformance", "--topic", topic, "--num-records",
                              str(messages), "--record-size", str(SIZE), "--throughput", "-1", "--producer-props",
                              f"bootstrap.servers={endpoint['bootstrap_servers']}", "acks=all"],
                             capture_output=True, text=True, timeout=600)
        if out.returncode != 0:
            raise RuntimeError(f"ProducerPerformance exited {out.returncode}: {out.stdout[-500:]}{out.stderr[-500:]}")
        return
    if broker == "redis-streams":
        from brokerbench.brokers.redis_streams.driver import stream_key

        host, port = endpoint.get("host", "127.0.0.1"), str(endpoint["port"])
        # the worker's entry: a header field and a payload field (its consumer reads both)
        subprocess.run(["redis-benchmark", "-h", host, "-p", port, "-c", "1", "-P", str(client["pipeline_depth"]),
                        "-n", str(messages), "-q", *redis_xadd(stream_key(topic, 0))], check=True,
                       capture_output=True, timeout=600)
        return
    cmd = java_publish(broker, endpoint, client, driver, topic, "batch", 600, messages)
    result = parse_java_tool(subprocess.run(cmd, capture_output=True, text=True, timeout=660).stdout)
    if result["acked"] < messages:
        raise RuntimeError(f"the backlog holds {result['acked']:,} acknowledged of {messages:,}")


def backlog_read(broker: str, endpoint: dict, client: dict, messages: int, how: str) -> dict:
    """A new topic preloaded with `messages` (preload_backlog), read to its end by one consumer, with no publisher
    running: `worker`, the worker's consumer (the driver's, through its polls, as a cell reads), or `tool`, the
    broker's tool's consumer (java_consume, ConsumerPerformance, redis_consume). msgs/s from the first delivery to
    the last (the messages after the first poll's; ConsumerPerformance: once it joined its group), and the worker's
    CPU per message (this process, every thread: a client library's I/O threads too)."""
    driver = get_driver(broker, endpoint, client)
    topic = f"drain-{new_run_id()}"
    driver.create_topic(topic, 1)
    try:
        preload_backlog(broker, endpoint, client, driver, topic, messages)
        if how == "tool":
            return {"msgs_per_s": _tool_reads(broker, endpoint, client, driver, topic, messages),
                    "cpu_us_per_msg": None}
        consumer = driver.consumer(topic, f"drain-{topic}", [0])
        try:
            got, first, last, cpu, start = 0, None, None, time.process_time(), time.perf_counter()
            while got < messages and time.perf_counter() - start < 300:
                batch = len(consumer.poll(0.05))
                if batch:
                    last = time.perf_counter()
                    first, first_poll = (last, batch) if first is None else (first, first_poll)
                    got += batch
            cpu = time.process_time() - cpu
        finally:
            consumer.close()
        if got < messages or last is None or last <= first:
            raise RuntimeError(f"the worker's consumer read {got:,} of {messages:,} within 300 s")
        return {"msgs_per_s": (got - first_poll) / (last - first), "cpu_us_per_msg": cpu / got * 1e6}
    finally:
        driver.delete_topic(topic, 1)


def _tool_reads(broker: str, endpoint: dict, client: dict, driver, topic: str, messages: int) -> float:
    """The broker's tool's consumer reading a preloaded backlog of `messages`: its msgs/s."""
    if broker == "kafka":
        out = subprocess.run(["java", "-Xmx512m", "-cp", f"{lib_dir('kafka')}/*",
                              "org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server",
                              endpoint["bootstrap_servers"], "--topic", topic, "--messages", str(messages),
                              "--timeout", "30000", "--group", f"tool-{topic}"],
                             capture_output=True, text=True, timeout=600)
        return parse_consumer_performance(out.stdout)
    if broker == "redis-streams":
        from brokerbench.brokers.redis_streams.driver import stream_key

        cmd = [str(redis_consume_bin()), endpoint.get("host", "127.0.0.1"), str(endpoint["port"]),
               stream_key(topic, 0), "tool", str(client["read_count"]), "3", "300"]
    else:
        cmd = java_consume(broker, endpoint, client, driver, topic, 300)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600).stdout
    result = json.loads([x for x in out.splitlines() if x.startswith("{")][-1])
    if result["msgs_per_s"] is None or result["received"] < messages:
        raise ValueError(f"the tool's consumer received {result['received']:,} of {messages:,}: {out[-500:]}")
    return result["msgs_per_s"]


def measure_backlog(broker: str, endpoint: dict, trials_n: int, messages: int) -> dict:
    """A backlog read by the worker's consumer and by the tool's, interleaved trial by trial (backlog_read)."""
    client = run_spec(broker, "batch", 1, 1)["client"]
    trials, before = Trials(), os.getloadavg()
    for trial in range(1, trials_n + 1):
        for how in ("worker", "tool"):
            step(f"{broker} drain {messages:,}: trial {trial}/{trials_n}: {how}")
            trials.run(how, trial, backlog_read, broker, endpoint, client, messages, how)

    def of(series: str, key: str) -> list:
        return [None if t is None else t.get(key) for t in trials.series.get(series, [])]

    worker, tool_rates = of("worker", "msgs_per_s"), of("tool", "msgs_per_s")
    return {"messages": messages, "trials": trials_n, "tool": CONSUMER_TOOL_NAMES[broker],
            "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load_average_1_5_15": _load(before),
            "worker_msgs_per_s": worker, "tool_msgs_per_s": tool_rates, "worker_median": median(worker),
            "tool_median": median(tool_rates), "ratio": _ratio(median(worker), median(tool_rates)),
            "worker_cpu_us_per_msg": of("worker", "cpu_us_per_msg"), "failed": trials.failed}


def tool(broker: str, endpoint: dict, client: dict, mode: str, seconds: float, guess: float) -> dict:
    if broker == "nats-jetstream":
        return nats_tool(endpoint, client, mode, seconds, guess)
    if broker == "kafka":
        return kafka_tool(endpoint, client, mode, seconds, guess)
    if broker == "redis-streams":
        return redis_tool(endpoint, client, mode, seconds, guess)
    return java_tool(broker, endpoint, client, mode, seconds)


# -- trials --------------------------------------------------------------------------------------
class Trials:
    """Each series' trials (None where one failed) and what failed with its reason."""

    def __init__(self) -> None:
        self.series: dict[str, list] = {}
        self.failed: list[dict] = []

    def run(self, name: str, trial: int, fn: Callable, *args) -> dict | None:
        try:
            value = fn(*args)
            if isinstance(value, dict) and value.get("status") not in (None, "completed"):
                raise RuntimeError(f"cell {value['status']}: {value.get('reason', 'no reason given')}")
        except Exception as exc:  # noqa: BLE001 (a failed trial is reported, not raised)
            self.failed.append({"name": name, "trial": trial, "reason": f"{type(exc).__name__}: {exc}"[:1000]})
            print(f"  ! {name} (trial {trial}) failed: {self.failed[-1]['reason'][:300]}", file=sys.stderr)
            value = None
        self.series.setdefault(name, []).append(value)
        return value


def median(values: list) -> float | None:
    done = [v for v in values if v is not None]
    return statistics.median(done) if done else None


def measure(broker: str, endpoint: dict, store, modes: list[str], trials_n: int, seconds: float) -> dict:
    """One broker's trials, interleaved per mode: worker (default send loop), tool, [Kafka at max: bench/tools'
    KafkaPublish too], [worker with the Python loop where the default was native] ..., then the figures per mode."""
    client = run_spec(broker, "batch", seconds)["client"]
    trials, out = Trials(), {}
    for name in modes:
        mode = MODES[name]
        guess = PUBLISH_GUESS.get((broker, mode), NATS_GUESS[mode])
        if broker == "nats-jetstream":  # nats bench runs a count: a 1 s run first sizes it (and warms it up)
            step(f"{broker} {name}: sizing nats bench's runs (1 s, not counted)")
            sizing = trials.run(f"{name}/tool_sizing", 0, tool, broker, endpoint, client, mode, 1.0, guess)
            guess = sizing["msgs_per_s"] if sizing else guess
        for trial in range(1, trials_n + 1):
            step(f"{broker} {name}: trial {trial}/{trials_n}: worker")
            cell = trials.run(f"{name}/worker", trial, worker_cell, endpoint, store, broker, mode, seconds, "auto")
            if cell is not None:
                trials.series[f"{name}/worker"][-1] = cell = worker_figures(cell)
            step(f"{broker} {name}: trial {trial}/{trials_n}: {TOOL_NAMES[broker]}")
            result = trials.run(f"{name}/tool", trial, tool, broker, endpoint, client, mode, seconds, guess)
            if result is not None:
                guess = result["msgs_per_s"]
            if broker == "kafka" and mode == "batch":  # the bare Java loop beside Kafka's own tool
                step(f"{broker} {name}: trial {trial}/{trials_n}: bench/tools' KafkaPublish")
                trials.run(f"{name}/tool_loop", trial, java_tool, broker, endpoint, client, mode, seconds)
            if cell is not None and cell["send_loop"] != "python":
                step(f"{broker} {name}: trial {trial}/{trials_n}: worker, BROKERBENCH_SEND_LOOP=python")
                python = trials.run(f"{name}/worker_python", trial, worker_cell, endpoint, store, broker, mode,
                                    seconds, "python")
                if python is not None:
                    trials.series[f"{name}/worker_python"][-1] = worker_figures(python)
        out[name] = figures(trials, name, mode, broker, client)
    return {"tool": TOOL_NAMES[broker], "modes": out, "failed": trials.failed}


def consumer_figures(cell: dict) -> dict:
    """What the results keep of a worker's cell with one consumer: what it delivered per second (the cell's
    throughput: the measured messages received, over the time it took to deliver them), what the producer sent,
    and what the project's own rule says of the consumer (brokerbench.limit.consumer_limit)."""
    resources = cell.get("resources") or {}
    consumers = (cell.get("limit") or {}).get("consumers") or {}
    return {"msgs_per_s": cell["rate_achieved"], "send_rate": cell["send_rate"], "send_loop": cell["send_loop"],
            "consumer_limit": consumers.get("by"), "consumer_idle_share": consumers.get("idle_share"),
            "consumer_cpu_pct": consumers.get("consumer_cpu_pct"),
            "broker_cpu_pct": (resources.get("broker") or {}).get("cpu_pct_mean"),
            # the counts behind the rate: what was sent and delivered in time, over which window
            **{k: cell.get(k) for k in ("sent", "received", "delivered", "undelivered", "undelivered_or_lost",
                                        "late", "delivery_window_s", "delivery_window_start_s")}}


def consume_tool(broker: str, endpoint: dict, client: dict, seconds: float, guess: float) -> dict:
    if broker == "nats-jetstream":
        return nats_consume_tool(endpoint, client, seconds, guess)
    if broker in ("pulsar", "rabbitmq-streams", "rabbitmq-quorum"):
        return java_consume_tool(broker, endpoint, client, seconds)
    if broker == "kafka":
        return kafka_consume_tool(endpoint, client, seconds, guess)
    if broker == "redis-streams":
        return redis_consume_tool(endpoint, client, seconds, guess)
    raise NotImplementedError(f"no consumer of {broker}'s own tool here")


def measure_consume(broker: str, endpoint: dict, store, trials_n: int, seconds: float) -> dict:
    """One broker's consumer trials, interleaved: the worker with one consumer at max (batch mode), the tool's
    publisher and consumer at once, ..., then the figures."""
    client = run_spec(broker, "batch", seconds)["client"]
    trials, guess = Trials(), COUNT_GUESS.get(broker, NATS_GUESS["batch"])
    for trial in range(1, trials_n + 1):
        step(f"{broker} consume: trial {trial}/{trials_n}: worker, consumers 1")
        cell = trials.run("consume/worker", trial, worker_cell, endpoint, store, broker, "batch", seconds, "auto", 1)
        if cell is not None:
            trials.series["consume/worker"][-1] = consumer_figures(cell)
        step(f"{broker} consume: trial {trial}/{trials_n}: {CONSUMER_TOOL_NAMES[broker]}")
        result = trials.run("consume/tool", trial, consume_tool, broker, endpoint, client, seconds, guess)
        if result is not None:
            guess = result["publisher_msgs_per_s"] or guess

    def of(series: str, key: str) -> list:
        return [None if t is None else t.get(key) for t in trials.series.get(series, [])]

    worker, tool_rates = of("consume/worker", "msgs_per_s"), of("consume/tool", "msgs_per_s")
    figures = {"mode": "batch", "rate": "max", "consumers": 1, "window": window(broker, "batch", client),
               "worker_msgs_per_s": worker, "tool_msgs_per_s": tool_rates,
               "worker_median": median(worker), "tool_median": median(tool_rates),
               "ratio": _ratio(median(worker), median(tool_rates)),
               "worker_send_msgs_per_s": of("consume/worker", "send_rate"),
               "worker_counts": [None if t is None else {k: t[k] for k in (
                   "sent", "received", "delivered", "undelivered", "undelivered_or_lost", "late", "delivery_window_s",
                   "delivery_window_start_s")} for t in trials.series.get("consume/worker", [])],
               "tool_publisher_msgs_per_s": of("consume/tool", "publisher_msgs_per_s"),
               "worker_consumer_limit": of("consume/worker", "consumer_limit"),
               "worker_consumer_idle_share": of("consume/worker", "consumer_idle_share"),
               "worker_consumer_cpu_pct": of("consume/worker", "consumer_cpu_pct"),
               "worker_broker_cpu_pct": of("consume/worker", "broker_cpu_pct"),
               "tool_consumer_cpu_pct": of("consume/tool", "consumer_cpu_pct"),
               "tool_broker_cpu_pct": of("consume/tool", "broker_cpu_pct"),
               "tool_output": of("consume/tool", "output")}
    if broker == "nats-jetstream":
        figures["fetch_batch"] = client["nats_fetch_batch"]
    return {"tool": CONSUMER_TOOL_NAMES[broker], "figures": figures, "failed": trials.failed}


def figures(trials: Trials, name: str, mode: str, broker: str, client: dict) -> dict:
    def of(series: str, key: str) -> list:
        return [None if t is None else t.get(key) for t in trials.series.get(series, [])]

    worker, tool_rates = of(f"{name}/worker", "msgs_per_s"), of(f"{name}/tool", "msgs_per_s")
    loops = sorted({loop for loop in of(f"{name}/worker", "send_loop") if loop})
    result = {
        "mode": mode, "rate": "max", "window": window(broker, mode, client),
        "worker_msgs_per_s": worker, "tool_msgs_per_s": tool_rates,
        "worker_median": median(worker), "tool_median": median(tool_rates),
        "ratio": _ratio(median(worker), median(tool_rates)),
        "send_loop": ", ".join(loops) or None,
        "worker_publish_p50_us": of(f"{name}/worker", "publish_p50_us"),
        "tool_publish_p50_us": of(f"{name}/tool", "publish_p50_us"),
        "worker_producer_cpu_pct": of(f"{name}/worker", "producer_cpu_pct"),
        "worker_broker_cpu_pct": of(f"{name}/worker", "broker_cpu_pct"),
        "worker_limit": of(f"{name}/worker", "limit"),
        "tool_cpu_pct": of(f"{name}/tool", "tool_cpu_pct"),
        "tool_broker_cpu_pct": of(f"{name}/tool", "broker_cpu_pct"),
        "tool_output": of(f"{name}/tool", "output"),
    }
    if f"{name}/worker_python" in trials.series:
        python = of(f"{name}/worker_python", "msgs_per_s")
        result.update(worker_python_msgs_per_s=python, worker_python_median=median(python),
                      ratio_python=_ratio(median(python), median(tool_rates)))
    if f"{name}/tool_loop" in trials.series:
        loop = of(f"{name}/tool_loop", "msgs_per_s")
        result.update(tool_loop=KAFKA_LOOP, tool_loop_msgs_per_s=loop, tool_loop_median=median(loop),
                      ratio_loop=_ratio(median(worker), median(loop)),
                      tool_loop_cpu_pct=of(f"{name}/tool_loop", "tool_cpu_pct"),
                      tool_loop_broker_cpu_pct=of(f"{name}/tool_loop", "broker_cpu_pct"))
    if broker in ("nats-jetstream", "kafka", "redis-streams"):  # the tools that run a count of messages
        result["tool_messages"] = of(f"{name}/tool", "messages")
    return result


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def _load(before: tuple) -> dict:
    """The host's load average (1, 5, 15 min) before a series of trials and now."""
    return {"before": [round(x, 2) for x in before], "after": [round(x, 2) for x in os.getloadavg()]}


def _cpu() -> str:
    with open("/proc/cpuinfo") as f:
        return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "unknown")


def run_services(stack: LocalStack, brokers: list[str], modes: list[str], args, log) -> dict:
    """DynamoDB Local, then one broker server at a time (RabbitMQ once for both of its rows): each broker's trials
    on it, then it is stopped."""
    results: dict = {}
    store_endpoint = stack.up([EVENT_STORE.name], owner=OWNER, log=log)["dynamodb"]
    try:
        store = DynamoEventStore(store_endpoint["table"], endpoint_url=store_endpoint["endpoint_url"])
        store.ensure_table()
        for service in dict.fromkeys(SERVICE[b] for b in brokers):
            try:
                stack.up([service], owner=OWNER, log=log)
            except Exception as exc:  # noqa: BLE001 (a server that does not start costs its brokers, not the run)
                for broker in (b for b in brokers if SERVICE[b] == service):
                    results[broker] = {"tool": TOOL_NAMES.get(broker), "modes": {}, "load_average_1_5_15": None,
                                       "failed": [{"name": f"{service} server", "trial": 0,
                                                   "reason": f"{type(exc).__name__}: {exc}"[:1000]}]}
                continue
            try:
                endpoint = stack.endpoint(service)  # with its pids: the cells and the tools sample its CPU
                for broker in (b for b in brokers if SERVICE[b] == service):
                    results[broker] = {"tool": TOOL_NAMES.get(broker), "modes": {}, "failed": [],  # None: consume only
                                       "server": {"service": service, "version": endpoint.get("version")}}
                    if modes and broker in TOOL_NAMES:
                        before = os.getloadavg()
                        results[broker].update(measure(broker, endpoint, store, modes, args.trials, args.seconds))
                        results[broker]["load_average_1_5_15"] = _load(before)
                    if args.drain and broker == "nats-jetstream":
                        results[broker]["drain"] = measure_drain(endpoint, args.trials, args.drain)
                    elif args.drain:
                        results[broker]["drain"] = measure_backlog(broker, endpoint, args.trials, args.drain)
                        results[broker]["failed"] += results[broker]["drain"]["failed"]
                    if args.consume and broker in CONSUMER_TOOL_NAMES:
                        before = os.getloadavg()
                        consume = measure_consume(broker, endpoint, store, args.trials, args.seconds)
                        results[broker]["consume"] = {**consume, "load_average_1_5_15": _load(before)}
                        results[broker]["failed"] += consume["failed"]
            finally:
                stack.down([service], owner=OWNER, log=log)
    finally:
        stack.down([EVENT_STORE.name], owner=OWNER, log=log)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--brokers", default=",".join(BROKERS))
    parser.add_argument("--modes", default="max,single", help="the publish-only modes ('' for none)")
    parser.add_argument("--consume", action=argparse.BooleanOptionalAction, default=True,
                        help="the consumer side too: the worker with one consumer against the tool's consumer")
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--drain", type=int, default=0, metavar="MESSAGES",
                        help="also read a preloaded backlog of this many messages with the worker's consumer and with "
                             "the tool's (NATS: nats-py's fetch too)")
    parser.add_argument("--out", default=str(REPO_DIR / "bench" / "results" / "broker_tools.json"))
    parser.add_argument("--merge", action="store_true",
                        help="keep the other brokers' results in --out; replace those of the brokers measured")
    args = parser.parse_args(argv)
    brokers, modes = args.brokers.split(","), [m for m in args.modes.split(",") if m]
    for name in brokers:
        if name not in SERVICE:
            parser.error(f"--brokers: {name!r} is not one of {', '.join(SERVICE)}")
    for name in modes:
        if name not in MODES:
            parser.error(f"--modes: {name!r} is not one of {', '.join(MODES)}")
    if "nats-jetstream" in brokers:
        natscli()
    if set(brokers) - {"nats-jetstream"}:
        build_java_tools()
    if "redis-streams" in brokers and args.consume:
        redis_consume_bin()
    when, load_before = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), os.getloadavg()
    log = lambda m: print(m, file=sys.stderr)  # noqa: E731
    with tempfile.TemporaryDirectory(prefix="brokerbench-tools-") as tmp:
        # A stack of its own (as bench/cell_overhead.py): another session's `local down` on the shared stack cannot
        # stop a server under a trial, and everything started here goes with the folder.
        stack = LocalStack(Path(tmp) / "local", startup_timeout_s=300)
        results = run_services(stack, brokers, modes, args, log)
    load_after = os.getloadavg()
    for result in results.values():
        result.update(when=when, trials=args.trials, seconds=args.seconds)
        if "consume" in result:
            result["consume"].update(when=when, trials=args.trials, seconds=args.seconds)
    if args.merge and Path(args.out).is_file():
        earlier = json.loads(Path(args.out).read_text())
        kept = {b: {"when": earlier["when"], "trials": earlier["trials"], "seconds": earlier["seconds"], **r}
                for b, r in earlier["brokers"].items() if b not in results}
        for broker, result in results.items():  # a side not measured again keeps its earlier figures and date
            before = earlier["brokers"].get(broker) or {}
            if not modes and before.get("modes"):
                result.update({k: before[k] for k in ("modes", "load_average_1_5_15", "when", "trials", "seconds")
                               if k in before})
                result["failed"] = [*(f for f in before.get("failed", []) if not f["name"].startswith("consume/")),
                                    *(f for f in result["failed"] if f["name"].startswith("consume/"))]
            if not args.consume and before.get("consume"):
                result["consume"] = before["consume"]
                result["failed"] += [f for f in before.get("failed", []) if f["name"].startswith("consume/")]
            if not args.drain and before.get("drain"):
                result["drain"] = before["drain"]
        order = [*BROKERS, *kept]
        results = {b: (results.get(b) or kept[b]) for b in order if b in results or b in kept}
    document = {
        "when": when, "size_bytes": SIZE, "warmup_s": WARMUP_S, "seconds": args.seconds, "trials": args.trials,
        "machine": {"cpu": _cpu(), "cores": os.cpu_count(), "python": platform.python_version()},
        "load_average_1_5_15": {"before": [round(x, 2) for x in load_before],
                                "after": [round(x, 2) for x in load_after]},
        "send_loop_env": os.environ.get("BROKERBENCH_SEND_LOOP", "auto"),
        "brokers": results,
        "failed": [{"broker": b, **f} for b, r in results.items() for f in r["failed"]],
    }
    for broker, r in results.items():
        for name, m in r["modes"].items():
            print(f"{broker:17} {name:6} worker {m['worker_median'] or 0:>10,.0f}  tool {m['tool_median'] or 0:>10,.0f}"
                  f"  ratio {m['ratio'] or 0:.2f}  ({m['send_loop']})")
        if "consume" in r:
            m = r["consume"]["figures"]
            print(f"{broker:17} consume worker {m['worker_median'] or 0:>10,.0f}  tool {m['tool_median'] or 0:>10,.0f}"
                  f"  ratio {m['ratio'] or 0:.2f}  (consumer limit {m['worker_consumer_limit']})")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(document, indent=2) + "\n")
    print(f"written: {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
