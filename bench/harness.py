"""Harness self-check: is the load generator ever the bottleneck? Measured side by side on the local stack.

1. Kafka: the instrumented worker (raw, max rate, publish-only like the others) vs a bare confluent-kafka
   produce()+poll(0) loop vs Kafka's own ProducerPerformance, all with the same client settings.
2. Redis Streams: the worker (publish-only) vs redis-benchmark XADD with the same connections and
   pipeline depth. The produce+consume maximum of both is reported too.
3. Codecs: encode/decode ns per op and size of each codec vs the fastest available implementation
   of its format, on the same record.
4. Instrumentation: what the worker adds per message (clocks, header, histograms, accounting).
5. Rate accuracy: achieved vs target and publish delay p99 at 25%, 50% and 80% of the worker's max.
6. The machine's publish-delay floor: the native loop's schedule with nothing sent, idle and beside one
   busy process (on a shared VM the floor under load is what bounds the delay figures).

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
import subprocess
import sys
import threading
import time
from array import array
from pathlib import Path

import numpy as np

from brokerbench import histogram, native
from brokerbench.codecs import get_codec
from brokerbench.drivers import get_driver
from brokerbench.events import new_run_id
from brokerbench.events.dynamodb import DynamoEventStore
from brokerbench.local.install import lib_dir
from brokerbench.local.stack import LocalStack
from brokerbench.reports.results import build_results
from brokerbench.spec import expand, validate
from brokerbench.worker import run_cell
from brokerbench.worker.consumer import PROCESS_EVERY, Accounting
from brokerbench.worker.framing import HEADER, unpack_many
from brokerbench.worker.payloads import payload_pool

CLIENT = {"acks": "1", "linger_ms": 5, "batch_bytes": 1048576, "compression": "none", "pipeline_depth": 100,
          "read_count": 1000}


# -- the worker ----------------------------------------------------------------------------------
def worker_cell(endpoints, store, broker: str, size: int, rate, seconds: float, consumers: int = 1) -> dict:
    spec = validate({"brokers": [broker], "sizes": [size], "rates": [rate], "formats": ["raw"], "duration_s": seconds,
                     "warmup_s": 1, "drain_timeout_s": 30, "client": CLIENT, "consumers": consumers})
    cell = expand(spec)[0]
    run_id = new_run_id()
    from brokerbench.runner import run_requested_events

    store.append(run_requested_events(run_id, spec, [cell], "harness"))
    run_cell(run_id, cell, endpoints[broker], store)
    return build_results(store.read(run_id, interval_histograms=False))["cells"][0]


# -- Kafka ---------------------------------------------------------------------------------------
def new_topic(bootstrap: str, prefix: str) -> str:
    topic = f"{prefix}-{new_run_id()}"
    get_driver("kafka", {"bootstrap_servers": bootstrap}, CLIENT).create_topic(topic, 1)
    return topic


def bare_kafka(bootstrap: str, size: int, seconds: float) -> float:
    from confluent_kafka import Producer

    topic = new_topic(bootstrap, "bare")
    producer = Producer({"bootstrap.servers": bootstrap, "acks": CLIENT["acks"], "linger.ms": CLIENT["linger_ms"],
                         "batch.size": CLIENT["batch_bytes"], "compression.type": CLIENT["compression"],
                         "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1_048_576})
    payload = os.urandom(size)
    produce, poll = producer.produce, producer.poll
    sent = 0
    start = time.perf_counter()
    end = start + seconds
    while time.perf_counter() < end:
        for _ in range(1000):
            try:
                produce(topic, payload)
            except BufferError:
                poll(0.001)
                continue
            poll(0)
            sent += 1
    producer.flush(60)
    return sent / (time.perf_counter() - start)


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
def redis_benchmark(port: int, size: int, requests: int, pipeline: int) -> float:
    value, key = "v" * size, f"bench-{new_run_id()}"
    out = subprocess.run(["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", "1", "-P", str(pipeline),
                          "-n", str(requests), "-q", "XADD", key, "*", "f", value],
                         capture_output=True, text=True, timeout=600).stdout
    subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(port), "DEL", key], capture_output=True, timeout=60)
    return float(re.search(r"([\d.]+) requests per second", out.replace("\r", "\n")).group(1))


# -- codecs --------------------------------------------------------------------------------------
def _time_ns(fn, arg, rounds=7, calls=2000) -> float:
    """Best of several rounds: on a shared machine the minimum is the cost, the rest is interference."""
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter_ns()
        for _ in range(calls):
            fn(arg)
        best = min(best, (time.perf_counter_ns() - start) / calls)
    return best


def codec_candidates(record: dict) -> dict[str, dict[str, tuple]]:
    """Per format: implementation -> (encode fn, encode input, decode fn)."""
    import json as stdlib_json

    import fastavro
    import msgpack
    import msgspec
    import orjson
    import ormsgpack

    from brokerbench.paths import RECORD_AVRO_SCHEMA

    avro_schema = fastavro.parse_schema(json.loads(RECORD_AVRO_SCHEMA.read_text()))

    def fastavro_encode(r):
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, avro_schema, r)
        return buffer.getvalue()

    out = {
        "json": {"orjson": (orjson.dumps, record, orjson.loads),
                 "msgspec.json": (msgspec.json.encode, record, msgspec.json.decode),
                 "stdlib json": (lambda r: stdlib_json.dumps(r, separators=(",", ":")).encode(), record, stdlib_json.loads)},
        "msgpack": {"msgspec.msgpack": (msgspec.msgpack.encode, record, msgspec.msgpack.decode),
                    "msgpack": (msgpack.packb, record, msgpack.unpackb),
                    "ormsgpack": (ormsgpack.packb, record, ormsgpack.unpackb)},
        "avro": {"fastavro": (fastavro_encode, record, lambda b: fastavro.schemaless_reader(io.BytesIO(b), avro_schema, None))},
        "protobuf": {},
    }
    pb = get_codec("protobuf")
    out["protobuf"]["protobuf (upb)"] = (pb.encode, pb.prepare(record), pb.decode)
    return out


def codecs(size: int) -> dict:
    record = payload_pool("json", "record", size, count=1).objects[0]
    candidates = codec_candidates(record)
    ours = {"json": "orjson", "msgpack": "msgspec.msgpack", "avro": "fastavro", "protobuf": "protobuf (upb)"}
    result = {}
    for fmt, impls in candidates.items():
        codec = get_codec(fmt)
        obj = codec.prepare(record)
        data = codec.encode(obj)
        ours_ns = {"encode_ns": _time_ns(codec.encode, obj), "decode_ns": _time_ns(codec.decode, data), "bytes": len(data)}
        measured = {}
        for name, (encode, value, decode) in impls.items():
            encoded = encode(value)
            measured[name] = {"encode_ns": _time_ns(encode, value), "decode_ns": _time_ns(decode, encoded),
                              "bytes": len(encoded)}
        fastest = min(measured, key=lambda n: measured[n]["encode_ns"] + measured[n]["decode_ns"])
        best = measured[fastest]["encode_ns"] + measured[fastest]["decode_ns"]
        result[fmt] = {"brokerbench": {"library": ours[fmt], **ours_ns}, "implementations": measured,
                       "fastest": fastest, "ratio_to_fastest": (ours_ns["encode_ns"] + ours_ns["decode_ns"]) / best}
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
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", help="write the results as JSON")
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--trials", type=int, default=3, help="capacity figures are the best of this many runs, "
                                                               "for the worker and the tools alike")
    args = parser.parse_args()
    stack = LocalStack()
    started = [s for s, info in stack.status().items() if info["state"] != "running"]
    endpoints = stack.up(log=lambda m: print(m, file=sys.stderr))
    try:
        store = DynamoEventStore(endpoints["dynamodb"]["table"], endpoint_url=endpoints["dynamodb"]["endpoint_url"])
        store.ensure_table()
        step = lambda name: print(f"· {name}", file=sys.stderr, flush=True)  # noqa: E731
        # The bare loop and the native tools only publish: the worker is compared publish-only too
        # (consumers: 0); its produce+consume maximum is the base of the rate-accuracy runs. Trials
        # interleave the worker and the tools, so a slow spell of the shared machine hits them alike.
        kafka = endpoints["kafka"]["bootstrap_servers"]
        redis_port = endpoints["redis-streams"]["port"]
        trials = {name: [] for name in ("kafka_publish", "kafka_worker", "kafka_bare", "kafka_native",
                                        "redis_publish", "redis_worker", "redis_native")}
        for trial in range(1, args.trials + 1):
            step(f"trial {trial}/{args.trials}: kafka worker (publish-only, produce+consume), bare loop, "
                 "ProducerPerformance")
            trials["kafka_publish"].append(worker_cell(endpoints, store, "kafka", args.size, "max", args.seconds,
                                                       consumers=0))
            trials["kafka_bare"].append(bare_kafka(kafka, args.size, args.seconds))
            trials["kafka_native"].append(producer_performance(
                kafka, args.size, int(max(trials["kafka_bare"][-1], 50_000) * args.seconds)))
            trials["kafka_worker"].append(worker_cell(endpoints, store, "kafka", args.size, "max", args.seconds))
            step(f"trial {trial}/{args.trials}: redis worker (publish-only, produce+consume), redis-benchmark")
            trials["redis_publish"].append(worker_cell(endpoints, store, "redis-streams", args.size, "max", args.seconds,
                                                       consumers=0))
            trials["redis_native"].append(redis_benchmark(redis_port, args.size, 500_000, CLIENT["pipeline_depth"]))
            trials["redis_worker"].append(worker_cell(endpoints, store, "redis-streams", args.size, "max",
                                                      args.seconds))
        best_cell = lambda name: max(trials[name], key=lambda c: c["rate_achieved"])  # noqa: E731
        kafka_publish, kafka_worker = best_cell("kafka_publish"), best_cell("kafka_worker")
        redis_publish, redis_worker = best_cell("redis_publish"), best_cell("redis_worker")
        kafka_bare, kafka_native, redis_native = (max(trials[n]) for n in ("kafka_bare", "kafka_native", "redis_native"))
        paired = {  # each trial's own ratio: the spread the best-of figures hide
            "kafka_vs_bare": [c["rate_achieved"] / b for c, b in zip(trials["kafka_publish"], trials["kafka_bare"])],
            "kafka_vs_native": [c["rate_achieved"] / b for c, b in zip(trials["kafka_publish"], trials["kafka_native"])],
            "redis_vs_native": [c["rate_achieved"] / b for c, b in zip(trials["redis_publish"], trials["redis_native"])],
        }
        step("codecs")
        codec_results = codecs(args.size)
        step("schedule floor (no broker): idle, and beside one busy process")
        floor = schedule_floor()
        step("instrumentation")
        instrumentation = instrumentation_ns()
        accuracy = []
        for broker, worker in (("kafka", kafka_worker), ("redis-streams", redis_worker)):
            for share in (0.25, 0.5, 0.8):
                rate = max(1, int(worker["rate_achieved"] * share))
                step(f"rate accuracy: {broker} at {share:.0%} ({rate:,} msgs/s)")
                with FloorProbe(seconds=args.seconds + 2) as floor_during:  # an empty schedule beside the cell
                    cell = worker_cell(endpoints, store, broker, args.size, rate, args.seconds)
                accuracy.append({"broker": broker, "share_of_max": share, "rate_target": rate,
                                 "rate_achieved": cell["rate_achieved"],
                                 "rate_error": abs(cell["rate_achieved"] - rate) / rate,
                                 "publish_delay_p99_ms": cell["publish_delay_us"]["p99"] / 1000,
                                 "floor_p99_ms": floor_during.result.get("p99_ms"),
                                 "lost": cell["lost"]})
    finally:
        if started:
            stack.down(started, log=lambda m: None)
    result = {
        "kafka_vs_bare": kafka_publish["rate_achieved"] / kafka_bare,
        "kafka_vs_native": kafka_publish["rate_achieved"] / kafka_native,
        "redis_vs_native": redis_publish["rate_achieved"] / redis_native,
        "codec_vs_fastest_worst": max(c["ratio_to_fastest"] for c in codec_results.values()),
        "instrumentation_ns_per_msg": instrumentation["total_ns"],
        "rate_error_worst": max(a["rate_error"] for a in accuracy),
        "publish_delay_p99_ms_worst": max(a["publish_delay_p99_ms"] for a in accuracy),
        "machine": {"cpu": platform.processor() or _cpu(), "cores": os.cpu_count(), "python": platform.python_version()},
        "size_bytes": args.size,
        "trials": args.trials,
        "kafka": {"worker_publish_only_msgs_per_s": kafka_publish["rate_achieved"],
                  "worker_produce_consume_msgs_per_s": kafka_worker["rate_achieved"], "worker_lost": kafka_worker["lost"],
                  "bare_msgs_per_s": kafka_bare, "producer_performance_msgs_per_s": kafka_native},
        "redis": {"worker_publish_only_msgs_per_s": redis_publish["rate_achieved"],
                  "worker_produce_consume_msgs_per_s": redis_worker["rate_achieved"], "worker_lost": redis_worker["lost"],
                  "redis_benchmark_msgs_per_s": redis_native, "connections": 1, "pipeline": CLIENT["pipeline_depth"]},
        "send_loop": kafka_publish.get("send_loop", "python"),
        "paired_trial_ratios": paired,
        "schedule_floor": floor,
        "codecs": codec_results,
        "instrumentation": instrumentation,
        "rate_accuracy": accuracy,
    }
    print(json.dumps({k: result[k] for k in list(result)[:7]}, indent=2))
    for fmt, c in codec_results.items():
        print(f"{fmt:9} ours {c['brokerbench']['library']:16} {c['brokerbench']['encode_ns']:8.0f}/{c['brokerbench']['decode_ns']:8.0f} ns"
              f"  fastest {c['fastest']:16} ×{c['ratio_to_fastest']:.2f}")
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
