"""Harness self-check: is the load generator ever the bottleneck? Measured side by side on the local stack.

1. Kafka: the instrumented worker (raw, max rate, publish-only like the others) vs a bare confluent-kafka
   produce()+poll(0) loop with the worker's own producer configuration (KafkaDriver.producer_config: the
   same acks, linger, batch, buffer and in-flight limits, the same payloads and 20-byte key) vs Kafka's own
   ProducerPerformance with the same acks, linger, batch and compression.
2. Redis Streams: the worker (publish-only) vs a bare Python loop of the worker's XADDs (pre-packed, written
   and answered `pipeline_depth` at a time on one connection) and vs redis-benchmark XADD with the same
   connection count and pipeline depth. The produce+consume maximum is reported too.
3. Codecs: encode/decode ns per op and size of each codec vs the fastest available implementation
   of its format, on the same record dict, beside the timing loop's own cost around a no-op (the net
   figures subtract it; the ratio to the fastest is of net encode + decode).
4. Instrumentation: what the worker adds per message (clocks, header, histograms, accounting).
5. Rate accuracy: achieved vs target and publish delay p99 at 25%, 50% and 80% of the worker's max.
6. The machine's publish-delay floor: the native loop's schedule with nothing sent, idle and beside one
   busy process (on a shared VM the floor under load is what bounds the delay figures).

A cell that fails (or a tool that errs) is reported under "failed" with its reason, and the figures that
needed it are null; the other figures still come out.

usage: .venv/bin/python bench/harness.py [--out FILE] [--size 1024] [--seconds 5]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from array import array
from pathlib import Path

import numpy as np

from brokerbench import histogram, native
from brokerbench.codecs import get_codec
from brokerbench.events import new_run_id
from brokerbench.events.dynamodb import DynamoEventStore
from brokerbench.local.install import lib_dir
from brokerbench.local.stack import EVENT_STORE, LocalStack
from brokerbench.registry import get_driver
from brokerbench.reports.results import build_results
from brokerbench.spec import expand, validate
from brokerbench.worker.cell import run_cell
from brokerbench.worker.consumer import PROCESS_EVERY, Accounting
from brokerbench.worker.framing import HEADER, unpack_many
from brokerbench.worker.payloads import payload_pool

SERVICES = ("kafka", "redis", EVENT_STORE.name)  # what the harness runs on (started if not running, then stopped)
WARMUP_S = 1  # the worker's warm-up, which the bare loops skip alike before they count
CLIENT = {"acks": "1", "linger_ms": 5, "batch_bytes": 1048576, "compression": "none", "pipeline_depth": 100,
          "read_count": 1000}


# -- the worker ----------------------------------------------------------------------------------
def worker_cell(endpoints, store, broker: str, size: int, rate, seconds: float, consumers: int = 1) -> dict:
    spec = validate({"brokers": [broker], "sizes": [size], "rates": [rate], "formats": ["raw"], "duration_s": seconds,
                     "warmup_s": WARMUP_S, "drain_timeout_s": 30, "client": CLIENT, "consumers": consumers})
    cell = expand(spec)[0]
    run_id = new_run_id()
    from brokerbench.events.run import run_requested_events

    store.append(run_requested_events(run_id, spec, [cell], "harness"))
    run_cell(run_id, cell, endpoints[broker], store)
    return build_results(store.read(run_id, interval_histograms=False))["cells"][0]


# -- Kafka ---------------------------------------------------------------------------------------
def new_topic(bootstrap: str, prefix: str) -> str:
    topic = f"{prefix}-{new_run_id()}"
    get_driver("kafka", {"bootstrap_servers": bootstrap}, CLIENT).create_topic(topic, 1)
    return topic


def bare_kafka(bootstrap: str, size: int, seconds: float) -> float:
    """A bare produce()+poll(0) loop over the worker's own producer configuration and payloads. Counted as the
    worker counts a publish-only cell: what was acknowledged from the end of the warm-up on (the messages
    still unacknowledged then, and every one produced after), over the time to the last acknowledgement."""
    from confluent_kafka import Producer

    topic = new_topic(bootstrap, "bare")
    config = get_driver("kafka", {"bootstrap_servers": bootstrap}, CLIENT).producer_config("batch")
    producer = Producer(config)
    payloads = payload_pool("raw", "wire", size).objects
    pool, key = len(payloads), HEADER.pack(1, 0, 0)  # the worker's key is its 20-byte header
    produce, poll = producer.produce, producer.poll
    sent, counted_from = 0, None
    begin = time.perf_counter()
    start, end = begin + WARMUP_S, begin + WARMUP_S + seconds
    while (now := time.perf_counter()) < end:
        if counted_from is None and now >= start:
            start, counted_from = now, sent - len(producer)  # from here on every acknowledgement counts
        for _ in range(1000):
            try:
                produce(topic, payloads[sent % pool], key, 0)
            except BufferError:
                poll(0.001)
                continue
            poll(0)
            sent += 1
    if producer.flush(60):
        raise RuntimeError("the bare loop's messages were not all acknowledged within 60 s")
    return (sent - counted_from) / (time.perf_counter() - start)


def producer_performance(bootstrap: str, size: int, records: int) -> float:
    topic = new_topic(bootstrap, "perf")
    cmd = ["java", "-Xmx512m", "-cp", f"{lib_dir('kafka')}/*", "org.apache.kafka.tools.ProducerPerformance",
           "--topic", topic, "--num-records", str(records), "--record-size", str(size), "--throughput", "-1",
           "--producer-props", f"bootstrap.servers={bootstrap}", f"acks={CLIENT['acks']}",
           f"linger.ms={CLIENT['linger_ms']}", f"batch.size={CLIENT['batch_bytes']}",
           f"compression.type={CLIENT['compression']}"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600).stdout
    last = [line for line in out.splitlines() if "records sent" in line][-1]
    return float(re.search(r"([\d.]+) records/sec", last).group(1))


# -- Redis ---------------------------------------------------------------------------------------
def bare_redis(port: int, size: int, seconds: float, depth: int) -> float:
    """The worker's XADDs (key, header field, payload) pre-packed once, written `depth` at a time and their
    replies read before the next batch: the least Python can do per message at that pipeline depth. Counted
    from the end of the worker's warm-up on."""
    import hiredis

    key = f"bare-{new_run_id()}-0".encode()
    payloads = payload_pool("raw", "wire", size).objects
    batch = b"".join(hiredis.pack_command((b"XADD", key, b"*", b"h", HEADER.pack(1, i, 0), b"p",
                                           payloads[i % len(payloads)])) for i in range(depth))
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    reader = hiredis.Reader()
    sent, counted_from = 0, None
    try:
        begin = time.perf_counter()
        start, end = begin + WARMUP_S, begin + WARMUP_S + seconds
        while (now := time.perf_counter()) < end:
            if counted_from is None and now >= start:  # after the worker's warm-up, as the worker counts
                start, counted_from = now, sent
            sock.sendall(batch)
            answered = 0
            while answered < depth:
                reply = reader.gets()
                if reply is False:
                    reader.feed(sock.recv(1 << 16))
                    continue
                if isinstance(reply, Exception):
                    raise reply
                answered += 1
            sent += depth
        elapsed = time.perf_counter() - start
        sent -= counted_from
        sock.sendall(hiredis.pack_command((b"DEL", key)))
        reader.feed(sock.recv(1 << 10))
    finally:
        sock.close()
    return sent / elapsed


def redis_benchmark(port: int, size: int, requests: int, pipeline: int) -> float:
    value, key = "v" * size, f"bench-{new_run_id()}"
    out = subprocess.run(["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", "1", "-P", str(pipeline),
                          "-n", str(requests), "-q", "XADD", key, "*", "f", value],
                         capture_output=True, text=True, timeout=600).stdout
    subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(port), "DEL", key], capture_output=True, timeout=60)
    return float(re.search(r"([\d.]+) requests per second", out.replace("\r", "\n")).group(1))


# -- codecs --------------------------------------------------------------------------------------
def _time_ns(fn, arg, calls: int) -> float:
    """One round: mean ns per call of `fn(arg)` in a plain loop."""
    start = time.perf_counter_ns()
    for _ in range(calls):
        fn(arg)
    return (time.perf_counter_ns() - start) / calls


def _best_ns(timings: dict, rounds: int = 61, round_ns: float = 500_000) -> dict:
    """Best of many short rounds (about `round_ns` each) per (fn, arg), the entries taking turns within each
    round. On a shared machine the minimum is the cost and the rest is interference: short rounds often
    run without being preempted, and a slow spell hits every implementation alike."""
    calls = {name: max(10, int(round_ns / max(1.0, _time_ns(fn, arg, 50)))) for name, (fn, arg) in timings.items()}
    best = dict.fromkeys(timings, float("inf"))
    for _ in range(rounds):
        for name, (fn, arg) in timings.items():
            best[name] = min(best[name], _time_ns(fn, arg, calls[name]))
    return best


def codec_candidates(record: dict) -> dict[str, dict[str, tuple]]:
    """Per format: implementation -> (encode fn, decode fn), every encode starting from the record dict and
    every decode giving back all of its fields."""
    import json as stdlib_json

    import fastavro
    import msgpack
    import msgspec
    import orjson
    import ormsgpack

    from brokerbench.codecs.telemetry_pb2 import TelemetryRecord
    from brokerbench.paths import RECORD_AVRO_SCHEMA

    avro_schema = fastavro.parse_schema(json.loads(RECORD_AVRO_SCHEMA.read_text()))

    def fastavro_encode(r):
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, avro_schema, r)
        return buffer.getvalue()

    def protobuf_setters(r):
        message = TelemetryRecord()
        for name in _PB_SCALARS:
            setattr(message, name, r[name])
        message.samples.extend(r["samples"])
        return message.SerializeToString()

    pb = get_codec("protobuf")
    return {
        "json": {"orjson": (orjson.dumps, orjson.loads),
                 "msgspec.json": (msgspec.json.Encoder().encode, msgspec.json.Decoder().decode),
                 "stdlib json": (lambda r: stdlib_json.dumps(r, separators=(",", ":")).encode(), stdlib_json.loads)},
        "msgpack": {"msgspec.msgpack": (msgspec.msgpack.Encoder().encode, msgspec.msgpack.Decoder().decode),
                    "msgpack": (msgpack.packb, msgpack.unpackb),
                    "ormsgpack": (ormsgpack.packb, ormsgpack.unpackb)},
        "avro": {"fastavro": (fastavro_encode, lambda b: fastavro.schemaless_reader(io.BytesIO(b), avro_schema, None))},
        "protobuf": {"protobuf (upb) keywords": (lambda r: TelemetryRecord(**r).SerializeToString(), pb.decode),
                     "protobuf (upb) setters": (protobuf_setters, pb.decode)},
    }


_PB_SCALARS = ("device_id", "ts_ms", "seq", "site", "kind", "value", "count", "ok", "note")
OURS = {"json": "orjson", "msgpack": "msgspec.msgpack", "avro": "fastavro", "protobuf": "protobuf (upb) keywords"}


def codecs(size: int) -> dict:
    """Each format's codec and the other implementations of it on one record, with the loop's own cost around
    a no-op (`loop_floor_ns`, as codecs.floor does for the worker) and every figure net of it."""
    record = payload_pool("json", "record", size, count=1).objects[0]
    candidates = codec_candidates(record)
    result = {}
    for fmt, impls in candidates.items():
        codec = get_codec(fmt)
        obj = codec.prepare(record)
        data = codec.encode(obj)
        timings = {("floor", "encode"): (callable, obj), ("floor", "decode"): (callable, data),
                   ("ours", "encode"): (codec.encode, obj), ("ours", "decode"): (codec.decode, data)}
        sizes = {"ours": len(data)}
        for name, (encode, decode) in impls.items():
            encoded = encode(record)
            timings[(name, "encode")], timings[(name, "decode")] = (encode, record), (decode, encoded)
            sizes[name] = len(encoded)
        best = _best_ns(timings)
        floor = {"encode_ns": best[("floor", "encode")], "decode_ns": best[("floor", "decode")]}

        def figures(name: str) -> dict:
            out = {f"{op}_ns": best[(name, op)] for op in ("encode", "decode")}
            out.update({f"{op}_net_ns": max(0.0, best[(name, op)] - floor[f"{op}_ns"]) for op in ("encode", "decode")})
            return {**out, "bytes": sizes[name]}

        ours = figures("ours")
        measured = {name: figures(name) for name in impls}
        net = lambda f: f["encode_net_ns"] + f["decode_net_ns"]  # noqa: E731
        fastest = min(measured, key=lambda n: net(measured[n]))
        result[fmt] = {"brokerbench": {"library": OURS[fmt], **ours}, "implementations": measured,
                       "loop_floor_ns": floor, "fastest": fastest,
                       "ratio_to_fastest": net(ours) / max(1.0, net(measured[fastest]))}
    return result


# -- instrumentation -----------------------------------------------------------------------------
def instrumentation_ns(n: int = 200_000) -> dict:
    """What the worker adds per message beyond encode, send, receive and decode: the producer's loop
    bookkeeping (clocks, header, timestamp and acknowledgement records; the native loop's own code
    where it is built), the consumer's step around decode (with `len` standing in for decode, so the
    call is counted too), and their bulk steps (framing, accounting, histograms) amortized."""
    loop = "python" if native.choice() == "python" or native._sendloop is None else "native"
    if loop == "native":
        producer_ns = min(native.module().instrumentation_ns(n) for _ in range(3))
    else:
        producer_ns = _python_producer_ns(n)
    base = time.monotonic_ns()
    messages = [(HEADER.pack(1, seq, base + seq), b"x" * 64, 0) for seq in range(n)]
    timed_decode = native.timed_decode_function()
    consumer_ns = float("inf")
    for _ in range(3):
        headers: list[bytes] = []
        start = time.perf_counter_ns()
        chunks = [timed_decode(len, messages[i:i + 1000], headers) for i in range(0, n, 1000)]
        consumer_ns = min(consumer_ns, (time.perf_counter_ns() - start) / n)
    start = time.perf_counter_ns()  # bulk steps: framing, accounting, derived values, histograms
    accounting = Accounting()
    values = []
    records = np.frombuffer(b"".join(chunks), dtype=np.int64).reshape(-1, 4)
    for chunk in range(0, n, PROCESS_EVERY):
        framed = unpack_many(headers[chunk:chunk + PROCESS_EVERY])
        part = records[chunk:chunk + PROCESS_EVERY]
        fresh = accounting.add_many(framed["producer"].astype(np.int64), framed["seq"].astype(np.int64), part[:, 2])
        values.append((part[:, 1] - framed["intended_ns"].astype(np.int64))[fresh])
    seqs = np.arange(n, dtype=np.int64)
    started = base + seqs * 3
    handed, acked = started + 1000, started + 50_000
    intended = base + seqs
    for metric_values in (started - intended, handed - started, np.concatenate(values), acked - handed,
                          records[:, 1] - records[:, 0]):
        histogram.encode(histogram.from_values(metric_values // 1000))
    bulk_ns = (time.perf_counter_ns() - start) / n
    return {"loop": loop, "producer_ns": producer_ns, "consumer_ns": consumer_ns, "bulk_ns": bulk_ns,
            "total_ns": producer_ns + consumer_ns + bulk_ns}


def _python_producer_ns(n: int) -> float:
    """The Python send loop's statements and its delivery callback, with a sender that drops the message."""
    clock = time.monotonic_ns
    pack = HEADER.pack
    start_ns, send_ns, acked_ns = array("q"), array("q"), array("q")
    acked: list[bytes] = []
    keep_start, keep_send = start_ns.append, send_ns.append
    period, base = 1.0, clock()
    start = time.perf_counter_ns()
    for seq in range(n):
        now = clock()
        intended = base + int(seq * period)
        t0 = clock()
        t1 = clock()
        keep_start(t0)
        keep_send(t1)
        header = pack(1, seq, intended)
        acked.append(header)  # on_ack
        acked_ns.append(clock())
    del now
    return (time.perf_counter_ns() - start) / n


# -- the machine's floor ---------------------------------------------------------------------------
def _probe(rate: float, seconds: float) -> dict:
    """Lateness of an empty send schedule on a thread raised like the worker's send thread."""
    result = {}

    def run():
        try:
            os.setpriority(os.PRIO_PROCESS, 0, -10)  # this thread only, as in the worker
        except OSError:
            pass
        result["late"] = np.frombuffer(native.module().schedule_probe(rate, seconds), dtype=np.int64) / 1e6

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    late = result["late"]
    return {"p50_ms": float(np.percentile(late, 50)), "p99_ms": float(np.percentile(late, 99)),
            "max_ms": float(late.max())}


class FloorProbe:
    """A light empty schedule (2,000 ticks/s) running beside whatever the with-block runs: how late
    any sender on this machine would have been at the same moment."""

    def __init__(self, seconds: float, rate: float = 2000) -> None:
        self.seconds, self.rate, self.result = seconds, rate, {}

    def __enter__(self) -> FloorProbe:
        if native._sendloop is not None:
            self.thread = threading.Thread(target=lambda: self.result.update(_probe(self.rate, self.seconds)))
            self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if native._sendloop is not None:
            self.thread.join()


def schedule_floor(rate: int = 100_000, seconds: float = 3) -> dict:
    """The publish-delay floor of this machine: the native loop's schedule and waits with nothing sent,
    on a send thread raised like the worker's, on an idle machine and beside one busy process."""
    if native._sendloop is None:
        return {}
    idle = _probe(rate, seconds)
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.2)
        busy = _probe(rate, seconds)
    finally:
        hog.kill()
        hog.wait()
    return {"rate": rate, "seconds": seconds, "idle": idle, "one_core_busy": busy}


# -- main ----------------------------------------------------------------------------------------
class Trials:
    """Every measurement's trials by name; a cell that did not complete or a tool that erred is kept as None
    and listed in `failed` with its reason, so one bad trial costs its figures, not the whole harness."""

    def __init__(self) -> None:
        self.values: dict[str, list] = {}
        self.failed: list[dict] = []

    def run(self, name: str, trial: int, fn, *args, **kwargs):
        try:
            value = fn(*args, **kwargs)
            reason = None if not isinstance(value, dict) or value.get("status") == "completed" else \
                f"{value.get('status', 'no status')}: {value.get('reason', 'no reason given')}"
        except Exception as exc:  # noqa: BLE001 (any failure of a trial is reported, not raised)
            value, reason = None, f"{type(exc).__name__}: {exc}"
        if reason is not None:
            self.failed.append({"name": name, "trial": trial, "reason": reason})
            print(f"  ! {name} (trial {trial}) failed: {reason}", file=sys.stderr, flush=True)
            value = None
        self.values.setdefault(name, []).append(value)
        return value

    def rates(self, name: str) -> list[float | None]:
        return [rate_of(v) for v in self.values.get(name, [])]

    def best(self, name: str):
        """The trial with the highest rate (a cell or a figure), None if every trial failed."""
        done = [v for v in self.values.get(name, []) if v is not None]
        return max(done, key=rate_of) if done else None


def rate_of(value) -> float | None:
    if value is None:
        return None
    return value["rate_achieved"] if isinstance(value, dict) else float(value)


def ratio(a, b) -> float | None:
    a, b = rate_of(a), rate_of(b)
    return None if a is None or not b else a / b


def run_trials(args, endpoints, store, step) -> Trials:
    """The bare loop and the native tools only publish: the worker is compared publish-only too
    (consumers: 0); its produce+consume maximum is the base of the rate-accuracy runs. Trials
    interleave the worker and the tools, so a slow spell of the shared machine hits them alike."""
    kafka, redis_port, depth = endpoints["kafka"]["bootstrap_servers"], endpoints["redis-streams"]["port"], \
        CLIENT["pipeline_depth"]
    trials = Trials()
    for trial in range(1, args.trials + 1):
        step(f"trial {trial}/{args.trials}: kafka worker (publish-only, produce+consume), bare loop, "
             "ProducerPerformance")
        trials.run("kafka_publish", trial, worker_cell, endpoints, store, "kafka", args.size, "max", args.seconds,
                   consumers=0)
        bare = trials.run("kafka_bare", trial, bare_kafka, kafka, args.size, args.seconds)
        trials.run("kafka_native", trial, producer_performance, kafka, args.size,
                   int(max(bare or 0, 50_000) * args.seconds))
        trials.run("kafka_worker", trial, worker_cell, endpoints, store, "kafka", args.size, "max", args.seconds)
        step(f"trial {trial}/{args.trials}: redis worker (publish-only, produce+consume), bare loop, redis-benchmark")
        trials.run("redis_publish", trial, worker_cell, endpoints, store, "redis-streams", args.size, "max",
                   args.seconds, consumers=0)
        trials.run("redis_bare", trial, bare_redis, redis_port, args.size, args.seconds, depth)
        trials.run("redis_native", trial, redis_benchmark, redis_port, args.size, 500_000, depth)
        trials.run("redis_worker", trial, worker_cell, endpoints, store, "redis-streams", args.size, "max",
                   args.seconds)
    return trials


def rate_accuracy(args, endpoints, store, step, trials: Trials) -> list[dict]:
    accuracy = []
    for broker, name in (("kafka", "kafka_worker"), ("redis-streams", "redis_worker")):
        worker = trials.best(name)
        if worker is None:
            step(f"rate accuracy: {broker} skipped (no produce+consume maximum: every trial failed)")
            continue
        for share in (0.25, 0.5, 0.8):
            rate = max(1, int(worker["rate_achieved"] * share))
            step(f"rate accuracy: {broker} at {share:.0%} ({rate:,} msgs/s)")
            with FloorProbe(seconds=args.seconds + 2) as floor_during:  # an empty schedule beside the cell
                cell = trials.run(f"accuracy_{broker}_{share}", 1, worker_cell, endpoints, store, broker, args.size,
                                  rate, args.seconds)
            if cell is None:
                continue
            accuracy.append({"broker": broker, "share_of_max": share, "rate_target": rate,
                             "rate_achieved": cell["rate_achieved"],
                             "rate_error": abs(cell["rate_achieved"] - rate) / rate,
                             "publish_delay_p99_ms": cell["publish_delay_us"]["p99"] / 1000,
                             "floor_p99_ms": floor_during.result.get("p99_ms"),
                             "lost": cell["lost"]})
    return accuracy


def _worst(values) -> float | None:
    values = [v for v in values if v is not None]
    return max(values) if values else None


def summary(args, trials: Trials, codec_results: dict, floor: dict, instrumentation: dict, accuracy: list) -> dict:
    best = {name: trials.best(name) for name in trials.values}
    kafka_publish, kafka_worker = best.get("kafka_publish"), best.get("kafka_worker")
    redis_publish, redis_worker = best.get("redis_publish"), best.get("redis_worker")
    paired = {  # each trial's own ratio: the spread the best-of figures hide
        f"{a.split('_')[0]}_vs_{b.split('_')[1]}": [ratio(x, y) for x, y in zip(trials.values.get(a, []),
                                                                               trials.values.get(b, []))]
        for a, b in (("kafka_publish", "kafka_bare"), ("kafka_publish", "kafka_native"),
                     ("redis_publish", "redis_bare"), ("redis_publish", "redis_native"))}
    field = lambda cell, key: None if cell is None else cell[key]  # noqa: E731
    paired_median = {name: (float(np.median(done)) if (done := [r for r in ratios if r is not None]) else None)
                     for name, ratios in paired.items()}
    return {
        "kafka_vs_bare": ratio(kafka_publish, best.get("kafka_bare")),
        "kafka_vs_native": ratio(kafka_publish, best.get("kafka_native")),
        "redis_vs_bare": ratio(redis_publish, best.get("redis_bare")),
        "redis_vs_native": ratio(redis_publish, best.get("redis_native")),
        "codec_vs_fastest_worst": max(c["ratio_to_fastest"] for c in codec_results.values()),
        "instrumentation_ns_per_msg": instrumentation["total_ns"],
        "rate_error_worst": _worst(a["rate_error"] for a in accuracy),
        "publish_delay_p99_ms_worst": _worst(a["publish_delay_p99_ms"] for a in accuracy),
        "failed": trials.failed,
        "machine": {"cpu": platform.processor() or _cpu(), "cores": os.cpu_count(), "python": platform.python_version()},
        "size_bytes": args.size,
        "trials": args.trials,
        "seconds": args.seconds,
        "client": CLIENT,
        "kafka": {"worker_publish_only_msgs_per_s": rate_of(kafka_publish),
                  "worker_produce_consume_msgs_per_s": rate_of(kafka_worker), "worker_lost": field(kafka_worker, "lost"),
                  "bare_msgs_per_s": rate_of(best.get("kafka_bare")),
                  "bare_config": "the worker's (KafkaDriver.producer_config)",
                  "producer_performance_msgs_per_s": rate_of(best.get("kafka_native"))},
        "redis": {"worker_publish_only_msgs_per_s": rate_of(redis_publish),
                  "worker_produce_consume_msgs_per_s": rate_of(redis_worker), "worker_lost": field(redis_worker, "lost"),
                  "bare_msgs_per_s": rate_of(best.get("redis_bare")),
                  "redis_benchmark_msgs_per_s": rate_of(best.get("redis_native")), "connections": 1,
                  "pipeline": CLIENT["pipeline_depth"]},
        "send_loop": field(kafka_publish, "send_loop"),
        "trial_rates": {name: trials.rates(name) for name in trials.values},
        "paired_trial_ratios": paired,
        "paired_trial_ratio_medians": paired_median,  # steadier than best ÷ best when trials vary this much
        "schedule_floor": floor,
        "codecs": codec_results,
        "instrumentation": instrumentation,
        "rate_accuracy": accuracy,
    }


def conditions(when: str, load_before: float, load_after: float) -> dict:
    """When the run started and the machine's 1-min load average before and after it (docs/performance.md's column)."""
    return {"when": when, "load": f"load average {load_before:.1f} before, {load_after:.1f} after",
            "load_average_1min": {"before": round(load_before, 2), "after": round(load_after, 2)}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", help="write the results as JSON")
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--trials", type=int, default=3, help="capacity figures are the best of this many runs, "
                                                               "for the worker and the tools alike")
    args = parser.parse_args()
    when, load_before = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), os.getloadavg()[0]
    stack = LocalStack()
    started = [s for s in SERVICES if stack.status()[s]["state"] != "running"]
    endpoints = stack.up(SERVICES, log=lambda m: print(m, file=sys.stderr))
    step = lambda name: print(f"· {name}", file=sys.stderr, flush=True)  # noqa: E731
    try:
        store = DynamoEventStore(endpoints["dynamodb"]["table"], endpoint_url=endpoints["dynamodb"]["endpoint_url"])
        store.ensure_table()
        trials = run_trials(args, endpoints, store, step)
        step("codecs")
        codec_results = codecs(args.size)
        codecs_larger = codecs(10 * args.size)  # the ranking at a larger record too
        step("schedule floor (no broker): idle, and beside one busy process")
        floor = schedule_floor()
        step("instrumentation")
        instrumentation = instrumentation_ns()
        accuracy = rate_accuracy(args, endpoints, store, step, trials)
    finally:
        if started:
            stack.down(started, log=lambda m: None)
    result = summary(args, trials, codec_results, floor, instrumentation, accuracy)
    result["codecs_at_10x_size"] = codecs_larger
    result["conditions"] = conditions(when, load_before, os.getloadavg()[0])
    result["codec_vs_fastest_worst"] = max(c["ratio_to_fastest"] for r in (codec_results, codecs_larger)
                                           for c in r.values())
    print(json.dumps({k: result[k] for k in list(result)[:9]}, indent=2))
    for fmt, c in [*codec_results.items(), *((f"{fmt} ×10", c) for fmt, c in codecs_larger.items())]:
        ours = c["brokerbench"]
        print(f"{fmt:13} ours {ours['library']:24} {ours['encode_ns']:8.0f}/{ours['decode_ns']:8.0f} ns "
              f"(net {ours['encode_net_ns']:.0f}/{ours['decode_net_ns']:.0f})  fastest {c['fastest']:24} "
              f"×{c['ratio_to_fastest']:.2f}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2))


def _cpu() -> str:
    with open("/proc/cpuinfo") as f:
        return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "unknown")


if __name__ == "__main__":
    if not shutil.which("redis-benchmark"):
        sys.exit("redis-benchmark is missing: make setup installs redis-tools")
    main()
