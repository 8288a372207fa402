"""How late a client library stamps a reply, against the kernel's own trace of the segment that brought it.

Where the worker reads its own sockets it stamps a reply with the kernel's receive time (SO_TIMESTAMPNS); where a
client library owns the socket the stamp is taken in the library's thread or callback (a cell records it as
`client:LIBRARY`). This bench measures those library paths against the kernel: `perf record -k CLOCK_MONOTONIC -e
tcp:tcp_probe` traces every data segment a TCP socket receives (tcp_rcv_established; `sport` is the receiving
socket's own port, `dport` its peer's), on the clock of time.monotonic_ns. Each path runs in a process of its own
(so the connections it holds are its client's alone: /proc/self/fd and /proc/net/tcp name them), one message in
flight at a low rate (each reply one segment, nothing waiting behind a send), and each stamp is matched to the
latest data segment that reached one of its connections to the broker before it: the lag is stamp − that arrival.

Paths: Kafka acknowledgements in librdkafka's delivery report on the Python loop (a thread waiting in librdkafka's
poll: the producer without the plugin), on librdkafka's broker thread on the Python loop (the native extension as
librdkafka's plugin, read back in the delivery report: kafka/driver.py stamped_producer) and on the native loop
(sendloop.c on_acknowledgement, read back in on_delivery); Kafka deliveries as the consumer's poll returns (the
consumer without the plugin) and at the read of the latest Fetch response before it (the plugin's on_response_received
on librdkafka's broker thread: kafka/driver.py fetch_stamped_consumer), with how many polls could have their messages
from that one response only and the spread of the rest (worker/consumer.py ArrivalBound); Pulsar
deliveries as pulsar-client's receive returns (the consumer where the one that speaks the protocol cannot serve) and
as the kernel received them (wire_consumer.py, `pulsar-wire-delivery`); Pulsar acknowledgements in pulsar-client's send callback (the Python
loop where wire.py cannot serve) and in the C API's callback (the native loop's `capi` path); the Python loop's
fallbacks on the other brokers were measured on plain TCP to one node while they served: nats-py's PubAck callback (a
NATS TLS endpoint's producer, until TLS was spoken over the driver's own socket) and rstream's confirm callback (a
RabbitMQ stream producer that followed a failover, until it spoke the stream protocol itself there too); no producer
uses either now, and client_stamp_lag_fallbacks.json keeps that run. The control is a path
the worker stamps itself, Redis's producer on the Python loop (SO_TIMESTAMPNS of the same segment): tcp_probe fires
in the socket's receive path a little after the skb was stamped, so its lag is near 0 and slightly negative.

    PYTHONPATH=functions .venv/bin/python bench/client_stamp_lag.py [--paths a,b] [--trials 3] [--seconds 4]
        [--rate 200] [--priority normal|realtime|both] [--out bench/results/client_stamp_lag.json]

--priority realtime runs each path's processes (the client, a delivery path's sender) and the broker's under
SCHED_FIFO as a rated cell's are (worker/priority.py); both interleaves the two ways in every trial.

The committed results: the seven Kafka, Pulsar and control paths with --trials 5 (client_stamp_lag.json; and
client_stamp_lag_busy.json, on a busy host, matched with SLACK_NS on every path before a library's stamp was matched
without it), --paths redis-python-ack,nats-py-ack,rstream-ack --trials 5 (client_stamp_lag_fallbacks.json, when this
script still measured those two paths), and
--paths redis-python-ack,kafka-delivery,kafka-fetch-delivery --trials 5 (client_stamp_lag_fetch.json), and
--paths redis-python-ack,kafka-python-broker-ack,kafka-native-ack,kafka-fetch-delivery --trials 5 before and after
librdkafka's reads carried the kernel's receive time (client_stamp_lag_produce_read.json: acknowledgements stamped at
their Produce response's read on the broker thread; client_stamp_lag_arrival.json: at its arrival, sendloop.c
rdkafka_recvmsg), and --paths redis-python-ack,kafka-native-ack,kafka-tls-python-broker-ack,kafka-tls-native-ack
--trials 5 (client_stamp_lag_tls.json: the acknowledgements over the local Kafka's TLS listener, made for the run:
OpenSSL's reads within librdkafka, sendloop.c rdkafka_read), and --paths
redis-python-ack,kafka-fetch-delivery,kafka-tls-fetch-delivery --trials 5 (client_stamp_lag_tls_fetch.json: the
deliveries over TLS).
Starts the brokers its paths need (a state folder of its own, removed at the end) and perf, and stops them. Needs
root (perf with tracepoints) and the tcp:tcp_probe tracepoint.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # tests/certificates.py, shared with the tests
RESULTS = Path(__file__).parent / "results" / "client_stamp_lag.json"
SECOND_NS = 1_000_000_000
WARMUP_S = 1.0  # each path's first second is left out (connections, metadata, the JIT of the first sends)
SIZE = 1024
# path -> (broker, what is stamped, how the cell records it)
PATHS = {
    "redis-python-ack": ("redis-streams", "acknowledgement", "arrival"),
    "kafka-python-ack": ("kafka", "acknowledgement", "client:librdkafka-report"),
    "kafka-python-broker-ack": ("kafka", "acknowledgement", "arrival"),  # client:librdkafka before its reads were stamped
    "kafka-native-ack": ("kafka", "acknowledgement", "arrival"),
    # the same two over TLS (the local node's TLS listener, stack setting kafka_tls: OpenSSL's reads within librdkafka)
    "kafka-tls-python-broker-ack": ("kafka", "acknowledgement", "arrival"),
    "kafka-tls-native-ack": ("kafka", "acknowledgement", "arrival"),
    "kafka-delivery": ("kafka", "delivery", "client:librdkafka"),
    "kafka-fetch-delivery": ("kafka", "delivery", "client:librdkafka-fetch-arrival"),
    "kafka-tls-fetch-delivery": ("kafka", "delivery", "client:librdkafka-fetch-arrival"),  # OpenSSL's reads
    "pulsar-delivery": ("pulsar", "delivery", "client:pulsar-client"),  # pulsar-client's consumer (the fallback)
    "pulsar-wire-delivery": ("pulsar", "delivery", "arrival"),  # the consumer that speaks the protocol itself
    "pulsar-client-ack": ("pulsar", "acknowledgement", "client:pulsar-client"),
    "pulsar-capi-ack": ("pulsar", "acknowledgement", "client:pulsar-c"),
}
CONTROL = "redis-python-ack"
SERVICE = {"redis-streams": "redis", "kafka": "kafka", "pulsar": "pulsar"}
# A stamp taken from the skb (SO_TIMESTAMPNS: the control) comes a little before tcp_probe fires for the same segment
# (on loopback the skb is stamped as netif_rx queues it, the probe runs in the softirq after): a segment up to SLACK_NS
# after such a stamp is its segment. A library's stamp never comes before the probe (it reads what TCP took in), so
# it is matched to the latest segment before it, with no slack: a slack would match a delivery polled just before the
# next message came to that next message's segment.
SLACK_NS = 100_000
# The stamps taken from the skb (SO_TIMESTAMPNS), matched with SLACK_NS: the worker's own sockets', and Kafka's deliveries
# at the arrival of the latest Fetch response (librdkafka's reads through the extension's recvmsg)
KERNEL_STAMPED = ("arrival", "client:librdkafka-fetch-arrival")
PROBE = re.compile(rb"^\s*(\d+)\.(\d{9}):\s.*?src=\S*:(\d+) dest=\S*:(\d+) .*?data_len=(\d+)")


# ---- in the child: one path's client, its stamps and its connections -----------------------------------------------

def over_tls(path: str) -> bool:
    return path.startswith("kafka-tls-")


def path_endpoint(path: str, endpoint: dict) -> dict:
    """The endpoint a path's client is given: a TLS path's reaches the node's TLS listener (kafka_tls)."""
    return {**endpoint, "bootstrap_servers": endpoint["tls_bootstrap_servers"], "tls": True} if over_tls(path) \
        else endpoint


def broker_port(broker: str, endpoint: dict) -> int:
    """The port the client connects to (every Kafka, Pulsar or Redis connection of a one-node local broker)."""
    text = {"kafka": endpoint.get("bootstrap_servers"), "pulsar": endpoint.get("service_url")}.get(broker)
    if text:
        return int(str(text).split(",")[0].rstrip("/").rpartition(":")[2])
    return int(endpoint["port"])


def own_connections(port: int) -> set[int]:
    """The local ports of this process's TCP connections to `port` (its sockets in /proc/self/fd, their addresses
    in /proc/net/tcp and tcp6)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                fields = line.split()
                local, remote, inode = fields[1], fields[2], fields[9]
                if inode in inodes and int(remote.rpartition(":")[2], 16) == port:
                    found.add(int(local.rpartition(":")[2], 16))
    return found


def paced(count: int, rate: int, send_one) -> None:
    """send_one(seq) at `rate` per second, each after the previous one's reply (send_one waits for it)."""
    period = SECOND_NS / rate
    start = time.monotonic_ns()
    for seq in range(count):
        due = start + int(seq * period)
        while (now := time.monotonic_ns()) < due:
            time.sleep(max(0.0, (due - now) / SECOND_NS - 0.0002))
        send_one(seq)


def python_acks(producer, acks: list, count: int, rate: int, payload: bytes) -> None:
    from brokerbench.worker.framing import HEADER

    def send_one(seq: int) -> None:
        had = len(acks)
        producer.send(HEADER.pack(1, seq, time.monotonic_ns()), payload, 0)
        deadline = time.monotonic() + 5
        while len(acks) == had and time.monotonic() < deadline:
            producer.poll(0.05)

    paced(count, rate, send_one)
    producer.flush(5)


def native_acks(sender, count: int, rate: int, payload: bytes, port: int) -> tuple[list[int], set[int]]:
    """The native loop's sends on its own schedule (single mode: each after the previous one's acknowledgement);
    the acknowledgements' stamps, and the sender's connections, read before it closes them."""
    import numpy as np

    base = time.monotonic_ns() + 10_000_000
    period = SECOND_NS / rate
    sender.configure([payload], None, 1, base, period)
    far = base + int(count * period) + 30 * SECOND_NS
    sender.send_until(0, count, far, far)
    sender.flush(10)
    _started, _handed, _seq, acked_ns, _failed = sender.take()
    ports = own_connections(port)
    sender.close()
    return np.frombuffer(acked_ns, dtype=np.int64).tolist(), ports


def child(path: str, endpoint: dict, client: dict, rate: int, seconds: float, topic: str) -> dict:
    """Run one path in this process; its stamps (after the warm-up) and the local ports of its connections."""
    from brokerbench.registry import get_driver
    from brokerbench.worker.consumer import ArrivalBound

    broker, _what, _recorded = PATHS[path]
    port = broker_port(broker, endpoint)
    named, path = path, path.replace("kafka-tls-", "kafka-")  # over TLS (the endpoint says so), as over plain TCP
    driver = get_driver(broker, endpoint, client)
    driver.create_topic(topic, 1)
    payload = os.urandom(SIZE)
    count = int((seconds + WARMUP_S) * rate)
    began = time.monotonic_ns()
    ports: set[int] = set()
    stamps: list[int] = []
    fetched: list[tuple] = []  # (stamp, responses, spread) of each poll stamped at a Fetch response
    extra: dict = {}
    try:
        if path.endswith("-delivery"):
            if path == "kafka-delivery":  # the consumer without the plugin: stamped as its poll returns
                from brokerbench import native

                def unsupported():
                    raise native.Unsupported("the poll's return measured")

                native.kafka_fetch_stamps = unsupported
            if path == "pulsar-delivery":  # pulsar-client's consumer, as where the wire consumer cannot serve
                driver._one_broker = lambda _names: None
            consumer = driver.consumer(topic, f"g-{topic}", [0])
            ready = time.monotonic() + 3  # subscribed and fetching before the first message is sent
            while time.monotonic() < ready:
                consumer.poll(0.1)
            ports |= own_connections(port)
            sender = subprocess.Popen([sys.executable, __file__, "--send", json.dumps(
                {"broker": broker, "endpoint": endpoint, "client": client, "topic": topic, "rate": rate,
                 "count": count})], env={**os.environ})
            received, quiet_since = 0, None
            clock = time.monotonic_ns
            while True:
                messages = consumer.poll(0.1)
                polled = clock()
                if messages:  # as worker/consumer.py stamps a poll: its return, or where the consumer read it
                    arrived = getattr(consumer, "arrived_ns", None)
                    stamps.append(min(arrived, polled) if arrived else polled)
                    if arrived:  # the responses its messages can have come from (counted after the warm-up)
                        fetched.append((stamps[-1], getattr(consumer, "arrival_responses", None),
                                        getattr(consumer, "arrival_spread_ns", None)))
                    received += len(messages)
                    if len(stamps) % 50 == 1:
                        ports |= own_connections(port)
                if sender.poll() is not None:  # the producer is done: the rest, or 2 s without a message
                    quiet_since = quiet_since or polled
                    if received >= count or polled - quiet_since > 2 * SECOND_NS:
                        break
            ports |= own_connections(port)
            extra = {"received": received, "polls": len(stamps), "stamps_as": getattr(consumer, "stamps", None)}
            consumer.close()
        elif path == "pulsar-capi-ack":
            sender = driver.native_failover_sender(topic, 1, "single")
            extra = {"sender_path": getattr(sender, "path", None), "stamps_as": getattr(sender, "stamps", None)}
            stamps, ports = native_acks(sender, count, rate, payload, port)
        elif path == "kafka-native-ack":
            sender = driver.native_sender(topic, 1, "single")
            stamps, ports = native_acks(sender, count, rate, payload, port)
            extra = {"stamps_as": getattr(sender, "stamps", None)}  # after its acknowledgements: how they were
            # how many were stamped on librdkafka's broker thread (its on_acknowledgement interceptor), not as served
            extra["handled_stamps"] = getattr(sender, "handled_stamps", None)
        else:
            acks: list[int] = []

            def on_ack(_header: bytes, ok: bool, at_ns: int) -> None:
                if ok:
                    acks.append(at_ns)

            if path == "pulsar-client-ack":  # the Python loop's fallback (TLS, authentication, several brokers)
                from brokerbench.brokers.pulsar.driver import PulsarProducer, _client

                pulsar_client = _client(endpoint)
                producers = [pulsar_client.create_producer(name, **driver.producer_settings("single"))
                             for name in driver.partitions_of(topic, range(1))]
                producer = PulsarProducer(pulsar_client, producers, on_ack)
            elif path == "kafka-python-ack":  # the producer without the plugin: each report stamped as served
                from brokerbench.brokers.kafka.driver import LOGGED, KafkaProducer
                from confluent_kafka import Producer

                producer = KafkaProducer(Producer({**driver.producer_config("single"), **LOGGED}), topic, on_ack)
            else:
                producer = driver.producer(topic, 1, "single", on_ack)
            python_acks(producer, acks, count, rate, payload)
            extra = {"stamps_as": getattr(producer, "stamps", None), "producer": type(producer).__name__}
            ports |= own_connections(port)
            producer.close()
            if path.startswith("kafka-python"):  # stamped on librdkafka's broker thread (None: no plugin)
                extra["handled_stamps"] = producer.handled_stamps
            stamps = acks
        ports |= own_connections(port)
    finally:
        driver.delete_topic(topic, 1)
    if not ports:  # the native senders' sockets are this process's too; a closed one is gone from /proc
        raise RuntimeError(f"{path}: no connection to port {port} found in /proc/self/fd")
    measured = [s for s in stamps if s >= began]
    measured = measured[int(WARMUP_S * rate):] if not path.endswith("-delivery") else \
        [s for s in measured if s >= measured[0] + int(WARMUP_S * SECOND_NS)] if measured else []
    if path.endswith("-delivery") and fetched and measured:
        bound = ArrivalBound()
        for stamp, responses, spread_ns in fetched:
            if stamp >= measured[0]:
                bound.add(responses, spread_ns)
        extra["bound"] = bound.record()
    return {"path": named, "began_ns": began, "ended_ns": time.monotonic_ns(), "broker_port": port,
            "local_ports": sorted(ports), "stamps_ns": measured, **extra}


PRIORITY_VARIABLE = "BROKERBENCH_STAMP_LAG_PRIORITY"  # a path's processes take real-time priority when "realtime"


def take_priority() -> None:
    """This process under SCHED_FIFO as a rated cell's processes are, where its path runs at real-time priority."""
    if os.environ.get(PRIORITY_VARIABLE) == "realtime":
        from brokerbench.worker import priority

        priority.Grant(None)


def send_only(spec: dict) -> None:
    """The delivery paths' producer, in a process of its own: `count` messages at `rate`, one in flight."""
    from brokerbench.registry import get_driver

    take_priority()
    driver = get_driver(spec["broker"], spec["endpoint"], spec["client"])
    acks: list[int] = []
    producer = driver.producer(spec["topic"], 1, "single", lambda _h, ok, at: acks.append(at))
    python_acks(producer, acks, spec["count"], spec["rate"], os.urandom(SIZE))
    producer.close()


# ---- in the parent: perf, the trials, the matching -----------------------------------------------------------------

def tls_setting(state: Path) -> dict:
    """The local Kafka's TLS listener (stack setting kafka_tls) with a certificate for 127.0.0.1 made for this run
    (trustme), its authority trusted by the paths' processes through SSL_CERT_FILE (the Kafka driver gives it to
    librdkafka as ssl.ca.location)."""
    from certificates import local_certificate  # trustme, a dev dependency: only where a TLS path runs

    files = local_certificate(state, "tls-")
    os.environ["SSL_CERT_FILE"] = str(files["ca"])  # the paths' processes start with this environment
    return {"kafka_tls": {"cert": str(files["cert"]), "key": str(files["key"])}}


def start_perf(out: Path, ports: list[int]) -> subprocess.Popen:
    ports_filter = " || ".join(f"dport == {p}" for p in ports)
    perf = subprocess.Popen(["perf", "record", "-q", "-k", "CLOCK_MONOTONIC", "-a", "-e", "tcp:tcp_probe",
                             "--filter", f"data_len > 0 && ({ports_filter})", "-o", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(2)  # perf opens its buffers on each CPU before the first path
    if perf.poll() is not None:
        raise RuntimeError(f"perf record ended at once: {perf.stderr.read().decode(errors='replace')[-500:]}")
    return perf


def stop_perf(perf: subprocess.Popen) -> None:
    if perf.poll() is None:
        perf.send_signal(signal.SIGINT)
        try:
            perf.wait(30)
        except subprocess.TimeoutExpired:
            perf.kill()
            perf.wait()


def lost_events(data: Path) -> int:
    """The events perf could not write (its buffers full): a segment it lost would be matched to no stamp."""
    stats = subprocess.run(["perf", "report", "-i", str(data), "--stats"], capture_output=True, text=True).stdout
    return sum(int(m) for m in re.findall(r"LOST events:\s+(\d+)", stats))


def read_probes(data: Path) -> dict[tuple[int, int], list[int]]:
    """(local port, broker port) -> the monotonic times of the data segments that connection received, in order."""
    out = subprocess.run(["perf", "script", "-i", str(data), "-F", "time,trace", "--ns"], capture_output=True,
                         check=True).stdout
    segments: dict[tuple[int, int], list[int]] = {}
    for line in out.splitlines():
        m = PROBE.match(line)
        if m and int(m.group(5)) > 0:
            segments.setdefault((int(m.group(3)), int(m.group(4))), []).append(int(m.group(1)) * SECOND_NS
                                                                             + int(m.group(2)))
    for times in segments.values():
        times.sort()
    return segments


def lags_of(row: dict, segments: dict) -> tuple[list[int], int, int]:
    """Each stamp − the latest data segment on the path's connections before it (or up to SLACK_NS after it, for a
    stamp taken from the skb: `stamps_as` in KERNEL_STAMPED); the
    stamps with none; and the stamps matched to the same segment as the stamp before them (at one message in flight
    each reply has a segment of its own: a segment the trace missed would show here)."""
    import bisect

    times = sorted(t for p in row["local_ports"] for t in segments.get((p, row["broker_port"]), [])
                   if row["began_ns"] <= t <= row["ended_ns"])
    slack = SLACK_NS if row.get("stamps_as") in KERNEL_STAMPED else 0
    lags, unmatched, shared, last = [], 0, 0, None
    for stamp in row["stamps_ns"]:
        i = bisect.bisect_right(times, stamp + slack)
        if i == 0:
            unmatched += 1
            continue
        lags.append(stamp - times[i - 1])
        shared += i == last
        last = i
    return lags, unmatched, shared


def quantiles_us(lags: list[int]) -> dict:
    if not lags:
        return {"n": 0}
    ordered = sorted(lags)

    def q(p: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(p * len(ordered)))] / 1000, 1)

    return {"n": len(ordered), "p1_us": q(0.01), "p50_us": q(0.5), "p90_us": q(0.9), "p99_us": q(0.99),
            "max_us": round(ordered[-1] / 1000, 1), "min_us": round(ordered[0] / 1000, 1),
            "negative": sum(x < 0 for x in ordered)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--paths", default=",".join(PATHS))
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4)
    parser.add_argument("--rate", type=int, default=200)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--priority", choices=("normal", "realtime", "both"), default="normal",
                        help="the paths' processes and the broker at normal or real-time priority, or both ways")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--send", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.send:
        send_only(json.loads(args.send))
        return 0
    if args.child:
        spec = json.loads(args.child)
        take_priority()
        print(json.dumps(child(spec["path"], spec["endpoint"], spec["client"], spec["rate"], spec["seconds"],
                               spec["topic"])))
        return 0
    paths = args.paths.split(",")
    unknown = [p for p in paths if p not in PATHS]
    if unknown:
        parser.error(f"--paths: {', '.join(unknown)} not among {', '.join(PATHS)}")
    if args.trials < 1 or args.rate < 1 or args.seconds <= 0:
        parser.error("--trials, --rate and --seconds: positive numbers")
    probe = Path("/sys/kernel/tracing/events/tcp/tcp_probe")
    if not probe.exists() and not Path("/sys/kernel/tracing/events").exists():  # tracefs not mounted: mount it
        subprocess.run(["mount", "-t", "tracefs", "nodev", "/sys/kernel/tracing"], capture_output=True)
    if not probe.exists():
        parser.error(f"the kernel has no tcp:tcp_probe tracepoint ({probe}; tracefs mounted at /sys/kernel/tracing?)")

    import brokerbench
    from brokerbench.local.stack import LocalStack
    from brokerbench.spec import expand, validate
    from brokerbench.worker import priority

    ways = ["normal", "realtime"] if args.priority == "both" else [args.priority]
    runs = [(path, way) for path in paths for way in ways]

    state = Path(tempfile.mkdtemp(prefix="client-stamp-lag-"))
    stack = LocalStack(state, **tls_setting(state) if any(over_tls(p) for p in paths) else {})
    brokers = sorted({PATHS[p][0] for p in paths})
    stack.up(services=sorted({SERVICE[b] for b in brokers}), log=print)
    perf = None
    rows = []
    loads = os.getloadavg()
    try:
        endpoints = {b: stack.endpoint(SERVICE[b]) for b in brokers}
        clients = {b: expand(validate({"brokers": [b], "sizes": [SIZE], "rates": [args.rate], "formats": ["raw"],
                                       "modes": ["single"], "duration_s": args.seconds}))[0]["client"]
                   for b in brokers}
        perf = start_perf(state / "perf.data", sorted({broker_port(PATHS[p][0], path_endpoint(p, endpoints[PATHS[p][0]]))
                                                       for p in paths}))
        for trial in range(args.trials):
            shift = trial % len(runs)
            for path, way in runs[shift:] + runs[:shift]:  # interleaved: each trial starts one path later
                broker = PATHS[path][0]
                spec = {"path": path, "endpoint": path_endpoint(path, endpoints[broker]), "client": clients[broker],
                        "rate": args.rate,
                        "seconds": args.seconds, "topic": f"bb-lag-{path}-{way}-{trial}-{os.getpid()}"}
                grant = priority.BrokerGrant(endpoints[broker]["pids"], None if way == "realtime" else way)
                try:
                    done = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)],
                                          capture_output=True, text=True, timeout=180,
                                          env={**os.environ, PRIORITY_VARIABLE: way})
                finally:
                    grant.restore()
                if done.returncode != 0:
                    raise RuntimeError(f"{path} ({way}) trial {trial} failed:\n{done.stderr[-3000:]}")
                if way == "realtime" and grant.policy != "realtime":
                    raise RuntimeError(f"the broker could not run at real-time priority: {grant.why_normal}")
                row = json.loads(done.stdout.strip().splitlines()[-1])
                row.update(trial=trial, priority=way, load_average_1min=round(os.getloadavg()[0], 2))
                rows.append(row)
                print(f"{path:>18} trial {trial}: {len(row['stamps_ns'])} stamps, ports {row['local_ports']} "
                      f"(load {row['load_average_1min']})", flush=True)
        time.sleep(1)
    finally:
        if perf is not None:
            stop_perf(perf)
        stack.down(log=print)
    segments = read_probes(state / "perf.data")
    lost = lost_events(state / "perf.data")
    shutil.rmtree(state, ignore_errors=True)  # the brokers' data and the trace
    found = []
    for path, way in runs:
        broker, what, recorded = PATHS[path]
        trials, pooled = [], []
        for row in (r for r in rows if r["path"] == path and r.get("priority", "normal") == way):
            lags, unmatched, shared = lags_of(row, segments)
            pooled += lags
            trials.append({"trial": row["trial"], "stamps": len(row["stamps_ns"]), "unmatched": unmatched,
                           "shared": shared,
                           "local_ports": row["local_ports"], "load_average_1min": row["load_average_1min"],
                           **{k: row[k] for k in ("stamps_as", "sender_path", "producer", "received", "polls",
                                                    "handled_stamps", "bound")
                              if k in row}, **quantiles_us(lags)})
        summary = quantiles_us(pooled)
        found.append({"path": path, "priority": way, "broker": broker, "stamps": what, "recorded_as": recorded,
                      "control": path == CONTROL, **summary,
                      "p50_per_trial_us": [t.get("p50_us") for t in trials],
                      "p99_per_trial_us": [t.get("p99_us") for t in trials], "trials": trials})
        print(f"{path:>18} ({way}): n {summary['n']}, p50 {summary.get('p50_us')} µs, p90 {summary.get('p90_us')}, "
              f"p99 {summary.get('p99_us')}, max {summary.get('max_us')} (per trial p50 "
              f"{[t.get('p50_us') for t in trials]})", flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(brokerbench.__file__).parent).stdout.strip()
    args.out.write_text(json.dumps({
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "host": platform.node(), "code": commit,
        "kernel": platform.release(), "cpus": os.cpu_count(), "rate": args.rate, "seconds": args.seconds,
        "warmup_s": WARMUP_S, "size": SIZE, "trials": args.trials, "slack_us": SLACK_NS / 1000,
        "perf_lost_events": lost,
        "load_average_1_5_15": {"before": [round(x, 2) for x in loads],
                                "after": [round(x, 2) for x in os.getloadavg()]},
        "priority": args.priority,
        "median_trial_p50_us": {p["path"] + ("" if len(ways) == 1 else f"@{p['priority']}"):
                                statistics.median(x for x in p["p50_per_trial_us"] if x is not None)
                                for p in found if any(x is not None for x in p["p50_per_trial_us"])},
        "paths": found}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
