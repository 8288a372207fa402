"""docs/performance.md: written from bench/results/*.json and the prose beside this script (bench/performance/*.md).

Each section is a Markdown template (bench/performance/NN-name.md, `$name` placeholders, string.Template) and a function
here of the same name that renders the section's figures and tables from the result files it names. No figure of the
page is typed by hand: change a result file, then write the page again.

    .venv/bin/python bench/performance.py            # writes docs/performance.md
    .venv/bin/python bench/performance.py --check    # exit 1 and print a diff when the page differs from the results
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import statistics
import sys
from pathlib import Path
from string import Template

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
TEMPLATES = REPO / "bench" / "performance"
OUT = REPO / "docs" / "performance.md"
BROKERS = {"kafka": "Kafka", "redis-streams": "Redis"}
NOTICE = ("<!-- Written by bench/performance.py from bench/results/*.json and bench/performance/*.md: "
          "edit those and run it, not this page. -->")


# ---- number formats -------------------------------------------------------------------------------------------------

def count(x: float) -> str:
    """344k, 47.4k, 980: a rate or a count as the page writes it."""
    if x >= 100_000:
        return f"{x / 1000:.0f}k"
    return f"{x / 1000:.1f}k" if x >= 10_000 else f"{x:,.0f}"


def ratio(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}"


def pct(x: float, digits: int = 1) -> str:
    return f"{100 * x:.{digits}f}%"


def change(x: float) -> str:
    """-0.4924 → '−49%': a relative change with its sign."""
    return f"{100 * x:+.0f}%".replace("-", "−")


def ms(x: float) -> str:
    """Milliseconds with about two significant digits (0.46, 2.3, 52, 3,629)."""
    if x < 1:
        return f"{x:.2f}"
    return f"{x:.1f}" if x < 10 else f"{x:,.0f}"


def secs(x: float, digits: int = 2) -> str:
    return f"{x:.{digits}f}"


def minutes(x: float) -> str:
    """1916 → '31 min 56 s'."""
    total = round(x)
    return f"{total // 60} min {total % 60} s"


def spread(values: list[float], fmt=ratio) -> str:
    """'0.67–1.09': the range of some figures, or one figure when they agree."""
    low, high = fmt(min(values)), fmt(max(values))
    return low if low == high else f"{low}–{high}"


def table(header: list[str], rows: list[list[str]], align: list[str] | None = None) -> str:
    rule = align or ["---"] * len(header)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(rule) + "|"]
    return "\n".join(lines + ["| " + " | ".join(map(str, row)) + " |" for row in rows])


def load_average(values: list) -> float:
    return float(values[0])


# ---- harness (bench/harness.py) -------------------------------------------------------------------------------------

def _vs(h: dict, figure: str, worker: float, other: float) -> str:
    trials = ", ".join(ratio(r) for r in h["paired_trial_ratios"][figure])
    median = ratio(h["paired_trial_ratio_medians"][figure])
    return f"**{ratio(h[figure])}** ({count(worker)} vs {count(other)} msgs/s; per trial {trials}; median {median})"


def _codecs(h: dict) -> str:
    behind = [f"{fmt}: {c['brokerbench']['library']} (fastest {c['fastest']})"
              for fmt, c in {**h["codecs"], **h["codecs_at_10x_size"]}.items()
              if c["brokerbench"]["library"] != c["fastest"]]
    which = ", ".join(f"{fmt} {c['brokerbench']['library']}" for fmt, c in h["codecs"].items())
    told = "every codec is its format's fastest" if not behind else "not the fastest: " + "; ".join(behind)
    return f"**{ratio(h['codec_vs_fastest_worst'])}** ({told}: {which})"


def _accuracy(h: dict, figure) -> str:
    by_broker: dict[str, list[str]] = {}
    for cell in h["rate_accuracy"]:
        by_broker.setdefault(BROKERS.get(cell["broker"], cell["broker"]), []).append(figure(cell))
    return "; ".join(f"{broker} {' / '.join(values)}" for broker, values in by_broker.items())


def _cell_name(cell: dict) -> str:
    return f"{BROKERS.get(cell['broker'], cell['broker'])} at {cell['share_of_max']:.0%}"


def _signed_error(cell: dict) -> str:
    error = cell["rate_achieved"] / cell["rate_target"] - 1
    return f"{pct(abs(error), 2 if abs(error) < 0.01 else 1)} {'over' if error > 0 else 'short'}"


def _harness_column(h: dict) -> list[str]:
    k, r, i = h["kafka"], h["redis"], h["instrumentation"]
    floor = h["schedule_floor"]
    worst = max(h["rate_accuracy"], key=lambda c: c["publish_delay_p99_ms"])
    return [
        _vs(h, "kafka_vs_bare", k["worker_publish_only_msgs_per_s"], k["bare_msgs_per_s"]),
        _vs(h, "redis_vs_bare", r["worker_publish_only_msgs_per_s"], r["bare_msgs_per_s"]),
        _vs(h, "kafka_vs_native", k["worker_publish_only_msgs_per_s"], k["producer_performance_msgs_per_s"]),
        _vs(h, "redis_vs_native", r["worker_publish_only_msgs_per_s"], r["redis_benchmark_msgs_per_s"]),
        _codecs(h),
        f"**{i['total_ns']:,.0f} ns** (producer {i['producer_ns']:.0f}, consumer {i['consumer_ns']:.0f}, "
        f"bulk {i['bulk_ns']:.0f})",
        f"**{pct(h['rate_error_worst'])}** (at 25/50/80%: {_accuracy(h, _signed_error)})",
        f"**{ms(h['publish_delay_p99_ms_worst'])} ms** ({_cell_name(worst)}). "
        f"At 25/50/80%: {_accuracy(h, lambda c: ms(c['publish_delay_p99_ms']))} ms",
        f"{_accuracy(h, lambda c: ms(c['floor_p99_ms']))} ms",
        f"idle **{ms(floor['idle']['p99_ms'])} ms**; "
        f"beside one busy process **{ms(floor['one_core_busy']['p99_ms'])} ms** "
        f"(max {ms(floor['one_core_busy']['max_ms'])} ms)",
    ]


HARNESS_ROWS = [
    ("`kafka_vs_bare`: worker (publish-only, max rate) ÷ bare confluent-kafka produce()+poll(0) loop, same producer "
     "config", "≥ 1.0"),
    ("`redis_vs_bare`: worker (publish-only) ÷ bare Python loop of the same XADDs, pipeline 100", "≥ 1.0"),
    ("`kafka_vs_native`: worker ÷ Kafka's ProducerPerformance, same acks, linger, batch, compression", "≥ 1.0"),
    ("`redis_vs_native`: worker (publish-only) ÷ redis-benchmark XADD, 1 connection, pipeline 100", "≥ 0.8"),
    ("`codec_vs_fastest_worst`: each codec ÷ the fastest Python implementation of its format (net encode + decode, "
     "1 KB and 10 KB)", "≤ 1.2"),
    ("`instrumentation_ns_per_msg`: clocks, header, ack and receive bookkeeping, bulk accounting and histograms",
     "≤ 1 µs"),
    ("`rate_error_worst`: delivered vs target at 25/50/80% of the produce+consume maximum", "≤ 1%"),
    ("`publish_delay_p99_ms_worst`", "< 1 ms"),
    ("`floor_p99_ms` of each rate-accuracy run: an empty schedule (2,000 ticks/s, same thread priority) running beside "
     "the cell", "(the machine's floor)"),
    ("`schedule_floor`: the same empty schedule at 100k ticks/s, alone", ""),
]


def _run_title(h: dict) -> str:
    """The run's column title: when, at what load (bench/harness.py's `conditions`), how many trials."""
    told = h.get("conditions") or {"when": "a run", "load": "time and load not recorded"}
    return f"{told['when']} ({told['load']}, {h['trials']} trials of {h['seconds']:g} s)"


def _implementations(codec: dict) -> str:
    return ", ".join(f"{name} {c['encode_net_ns']:,.0f} / {c['decode_net_ns']:,.0f}"
                     for name, c in codec["implementations"].items())


def harness(results: dict) -> dict:
    runs = [results["harness"]] + ([results["harness_loaded"]] if "harness_loaded" in results else [])
    columns = [_harness_column(h) for h in runs]
    rows = [[name, *(c[n] for c in columns), target] for n, (name, target) in enumerate(HARNESS_ROWS)]
    h = runs[0]
    worst = max(h["rate_accuracy"], key=lambda c: c["publish_delay_p99_ms"])
    maxima = "; ".join(f"{_run_title(run)}: Kafka {count(run['kafka']['worker_produce_consume_msgs_per_s'])} msgs/s, "
                       f"Redis Streams {count(run['redis']['worker_produce_consume_msgs_per_s'])}" for run in runs)
    return {
        "conditions": "; ".join(_run_title(run) for run in runs),
        "trials": str(h["trials"]),
        "machine": f"{h['machine']['cpu']}, {h['machine']['cores']} cores, Python {h['machine']['python']}",
        "table": table(["figure", *(_run_title(run) for run in runs), "target"], rows),
        "loop_floor_ns": f"{h['codecs']['json']['loop_floor_ns']['encode_ns']:.0f}",
        "maxima": maxima,
        "msgpack_1kb": _implementations(h["codecs"]["msgpack"]),
        "msgpack_10kb": _implementations(h["codecs_at_10x_size"]["msgpack"]),
        "protobuf_1kb": _implementations(h["codecs"]["protobuf"]),
        "kafka_trials": ", ".join(ratio(r) for r in h["paired_trial_ratios"]["kafka_vs_bare"]),
        "redis_trials": ", ".join(ratio(r) for r in h["paired_trial_ratios"]["redis_vs_bare"]),
        "worst_delay": f"{_cell_name(worst)}: {ms(worst['publish_delay_p99_ms'])} ms "
                       f"delay p99 beside a floor p99 of {ms(worst['floor_p99_ms'])} ms",
        "idle_floor": ms(h["schedule_floor"]["idle"]["p99_ms"]),
        "busy_floor": ms(h["schedule_floor"]["one_core_busy"]["p99_ms"]),
        "sleeping_loop": _sleeping_loop(results["latency_truth_before"]),
    }


def _sleeping_loop(before: dict) -> str:
    cell = next(c for c in before["cells"] if c["rate"] == 1000)
    return (f"{cell['publish_p50_us']:,.0f} µs at {cell['rate']:,} msgs/s for a {cell['end_to_end_p50_us']:,.0f} µs "
            f"end-to-end p50")


# ---- each broker's load generator against its own tool (bench/broker_tools.py) ------------------------------------

TOOL_BROKERS = {"nats-jetstream": "NATS JetStream", "pulsar": "Pulsar", "rabbitmq-streams": "RabbitMQ streams",
                "rabbitmq-quorum": "RabbitMQ quorum queues", "kafka": "Kafka", "redis-streams": "Redis Streams"}


def _trials(values: list) -> str:
    """'118k, 96.1k': each trial's figure ('failed' where it did)."""
    return ", ".join("failed" if v is None else count(v) for v in values)


def _p50(values: list) -> str:
    done = [v for v in values if v is not None]
    return "–" if not done else spread(done, lambda x: f"{x:,.0f}")


def _cpu_pair(ours: list, broker: list) -> str:
    """'95 / 80': mean CPU % (100 = one core) of the load generator and of the broker, medians over the trials."""
    def mid(values):
        done = sorted(v for v in values if v is not None)
        return "–" if not done else f"{done[len(done) // 2]:.0f}"
    return f"{mid(ours)} / {mid(broker)}"


def _tool_row(name: str, m: dict, load: dict) -> list[str]:
    worker = f"{_trials(m['worker_msgs_per_s'])} (median **{count(m['worker_median'])}**)" \
        if m["worker_median"] is not None else _trials(m["worker_msgs_per_s"])
    tool = f"{_trials(m['tool_msgs_per_s'])} (median **{count(m['tool_median'])}**)" \
        if m["tool_median"] is not None else _trials(m["tool_msgs_per_s"])
    python = "–"
    if "worker_python_msgs_per_s" in m:
        python = f"{_trials(m['worker_python_msgs_per_s'])} (÷ tool {ratio(m['ratio_python'])})"
    mode = "max, batch" if m["mode"] == "batch" else "max, single"
    return [mode, f"{m['window']:,}", worker, tool, f"**{ratio(m['ratio'])}**", m["send_loop"] or "–", python,
            f"{_p50(m['worker_publish_p50_us'])} / {_p50(m['tool_publish_p50_us'])}" if m["mode"] == "single"
            else "–",
            f"{_cpu_pair(m['worker_producer_cpu_pct'], m['worker_broker_cpu_pct'])} · "
            f"{_cpu_pair(m['tool_cpu_pct'], m['tool_broker_cpu_pct'])}",
            f"{load['before'][0]:.1f} → {load['after'][0]:.1f}"]


def _tool_loop(m: dict) -> str:
    """A bare loop of the broker's client run in the same trials beside its own tool (Kafka at max: KafkaPublish
    beside ProducerPerformance)."""
    loop = f"{_trials(m['tool_loop_msgs_per_s'])}"
    if m["tool_loop_median"] is not None:
        loop += f" (median **{count(m['tool_loop_median'])}**; the worker ÷ it **{ratio(m['ratio_loop'])}**)"
    return (f"\n\nIn the same trials at max, {m['tool_loop']}: {loop} msgs/s, CPU % loop / broker "
            f"{_cpu_pair(m['tool_loop_cpu_pct'], m['tool_loop_broker_cpu_pct'])}.")


def _consume_row(broker: str, c: dict) -> list[str]:
    m, load = c["figures"], c["load_average_1_5_15"]
    worker = f"{_trials(m['worker_msgs_per_s'])} (median **{count(m['worker_median'])}**)" \
        if m["worker_median"] is not None else _trials(m["worker_msgs_per_s"])
    tool = f"{_trials(m['tool_msgs_per_s'])} (median **{count(m['tool_median'])}**)" \
        if m["tool_median"] is not None else _trials(m["tool_msgs_per_s"])
    limits = ", ".join("–" if v is None else ("consumer-bound" if v == "consumer" else v)
                       for v in m["worker_consumer_limit"])
    return [f"{TOOL_BROKERS.get(broker, broker)} ({c['when']}, {c['trials']} × {c['seconds']:g} s)", c["tool"],
            worker, tool, f"**{ratio(m['ratio'])}**", limits,
            f"{_trials(m['worker_send_msgs_per_s'])} · {_trials(m['tool_publisher_msgs_per_s'])}",
            f"{_cpu_pair(m['worker_consumer_cpu_pct'], m['worker_broker_cpu_pct'])} · "
            f"{_cpu_pair(m['tool_consumer_cpu_pct'], m['tool_broker_cpu_pct'])}",
            f"{load['before'][0]:.1f} → {load['after'][0]:.1f}"]


def median(values: list) -> float:
    return statistics.median(v for v in values if v is not None)


# A consumer below the goal is said to be so; the page does not guess why (a profile is needed to say).
UNDER_GOAL = ", below the 0.8 the load generators are held to"


def _nats_consumer_change(bt: dict) -> str:
    """The NATS consumer's two ways of fetching, each draining the same preloaded backlog (the result file's
    NATS `drain`, bench/broker_tools.py --drain), beside nats bench's consumer on it."""
    d = (bt["brokers"].get("nats-jetstream") or {}).get("drain")
    if not d:
        return ""
    return (f"Draining a backlog of {d['messages']:,} messages ({d['when']}, {d['trials']} trials each, interleaved, "
            f"load average (1 min) {d['load_average_1_5_15']['before'][0]:.1f} → "
            f"{d['load_average_1_5_15']['after'][0]:.1f}): with `fetch` "
            f"{_trials(d['fetch_msgs_per_s'])} msgs/s (median **{count(median(d['fetch_msgs_per_s']))}**, "
            f"{median(d['fetch_cpu_us_per_msg']):.1f} µs of the consumer's CPU per message), speaking the protocol itself "
            f"{_trials(d['pull_msgs_per_s'])} (median **{count(median(d['pull_msgs_per_s']))}**, "
            f"{median(d['pull_cpu_us_per_msg']):.1f} µs), `nats bench js fetch` {_trials(d['tool_msgs_per_s'])} "
            f"(median **{count(median(d['tool_msgs_per_s']))}**): the worker's consumer reads a backlog at "
            f"**{ratio(median(d['pull_msgs_per_s']) / median(d['tool_msgs_per_s']))}** of nats bench's "
            f"(with `fetch` {ratio(median(d['fetch_msgs_per_s']) / median(d['tool_msgs_per_s']))})"
            f"{'' if median(d['pull_msgs_per_s']) >= 0.8 * median(d['tool_msgs_per_s']) else UNDER_GOAL}.")


def _consume_tables(bt: dict) -> str:
    """One row per broker whose tool has a consumer measured; the others named, with why not."""
    header = ["broker (measured, trials)", "tool", "worker delivered msgs/s (trials)", "tool consumer msgs/s (trials)",
              "worker ÷ tool (medians)", "worker's consumer limit (trials)", "sent msgs/s, worker · tool publisher",
              "CPU % consumer / broker, worker · tool", "load average (1 min)"]
    align = ["---", "---", "---:", "---:", "---:", "---", "---:", "---", "---"]
    rows = [_consume_row(broker, b["consume"]) for broker, b in bt["brokers"].items() if b.get("consume")]
    missing = [TOOL_BROKERS.get(broker, broker) for broker, b in bt["brokers"].items() if not b.get("consume")]
    text = table(header, rows, align) if rows else "Not measured yet."
    if missing:
        text += f"\n\nNot measured against a tool's consumer: {', '.join(missing)} (no trials in the result file)."
    drains = [_drain_row(broker, b["drain"]) for broker, b in bt["brokers"].items()
              if b.get("drain") and broker != "nats-jetstream"]  # NATS's three ways are told above
    if drains:
        header = ["broker (measured, trials)", "messages", "tools (the publisher makes the backlog)",
                  "worker msgs/s (trials)", "tool msgs/s (trials)", "worker ÷ tool (medians)",
                  "worker's CPU µs per message", "load average (1 min)"]
        text += ("\n\nReading a preloaded backlog, no publisher running (`--drain N`), interleaved trial by trial:\n\n"
                 + table(header, drains, ["---", "---:", "---", "---:", "---:", "---:", "---:", "---"]))
    return text


def _drain_row(broker: str, d: dict) -> list[str]:
    """One broker's backlog reads (bench/broker_tools.py measure_backlog)."""
    def with_median(values: list, middle) -> str:
        return f"{_trials(values)} (median **{count(middle)}**)" if middle is not None else _trials(values)

    cpu = [v for v in d["worker_cpu_us_per_msg"] if v is not None]
    load = d["load_average_1_5_15"]
    return [f"{TOOL_BROKERS.get(broker, broker)} ({d['when']}, {d['trials']} trials)", f"{d['messages']:,}", d["tool"],
            with_median(d["worker_msgs_per_s"], d["worker_median"]),
            with_median(d["tool_msgs_per_s"], d["tool_median"]), f"**{ratio(d['ratio'])}**",
            f"{statistics.median(cpu):.1f}" if cpu else "–", f"{load['before'][0]:.1f} → {load['after'][0]:.1f}"]


def broker_tools(results: dict) -> dict:
    bt = results.get("broker_tools")
    if bt is None:
        return {"conditions": "not measured yet", "machine": "–", "tables": "Not measured yet.", "failed": "none",
                "consume_tables": "Not measured yet.", "nats_consumer_change": ""}
    header = ["mode", "in flight", "worker msgs/s (trials)", "tool msgs/s (trials)", "worker ÷ tool (medians)",
              "worker send loop", "worker, Python loop (trials)", "publish p50 µs, worker / tool",
              "CPU % worker / broker · tool / broker", "load average (1 min)"]
    align = ["---", "---:", "---:", "---:", "---:", "---", "---:", "---:", "---", "---"]
    tables = []
    for broker, b in bt["brokers"].items():
        if b.get("tool") is None and not b["modes"]:  # measured on the consumer side only
            continue
        if not b["modes"]:
            tables.append(f"**{TOOL_BROKERS.get(broker, broker)}**: not measured (see Failed below).")
            continue
        rows = [_tool_row(name, m, b["load_average_1_5_15"]) for name, m in b["modes"].items()]
        server = b.get("server") or {}
        measured = (f", measured {b['when']}, {b['trials']} trials of {b['seconds']:g} s" if "when" in b else "")
        tables.append(f"**{TOOL_BROKERS.get(broker, broker)}** ({server.get('service', '')} "
                      f"{server.get('version', '')}{measured}) against {b['tool']}:\n\n{table(header, rows, align)}"
                      + "".join(_tool_loop(m) for m in b["modes"].values() if m.get("tool_loop")))
    failed = "; ".join(f"{f['broker']} {f['name']} trial {f['trial']}: {f['reason'][:200]}" for f in bt["failed"])
    machine = bt["machine"]
    loads = bt["load_average_1_5_15"]
    return {"conditions": f"{bt['when']}, {bt['trials']} trials of {bt['seconds']:g} s after a {bt['warmup_s']} s "
                          f"warm-up, load average (1 min) {loads['before'][0]:.1f} before, "
                          f"{loads['after'][0]:.1f} after",
            "machine": f"{machine['cpu']}, {machine['cores']} cores, Python {machine['python']}",
            "tables": "\n\n".join(tables), "failed": failed or "none", "consume_tables": _consume_tables(bt),
            "nats_consumer_change": _nats_consumer_change(bt)}


# ---- cell overhead (bench/cell_overhead.py) -------------------------------------------------------------------------

PHASES = [
    ("CellStarted read + write", ["cell_started_written"]),
    ("driver, broker check, topic creation", ["driver", "check", "create_topic"]),
    ("processes: start to first line", ["spawn", "processes_began"]),
    ("processes: connect, payload pool (ready)", ["processes_ready"]),
    ("readiness probe, after ready", ["probe", "probe_acknowledged", "probe_received"]),
    ("codec floor, lead to t_start", ["codec_floor", "go", "t_start"]),
    ("producers' flush after t_end", ["producers_done"]),
    ("drain and consumers' close", ["processes_done"]),
    ("cell end (broker counts, verdict, CellCompleted)", ["complete"]),
    ("stop processes, delete topic, close", ["processes_stopped", "delete_topic", "driver_closed", "end"]),
]


def _phase(summary: dict, keys: list[str]) -> str:
    return secs(sum(summary["phases_s_median"].get(k, 0.0) for k in keys))


def _label_columns(co: dict, labels: list[str]) -> list[tuple[str, dict]]:
    return [(f"{BROKERS[b]} {label}", co[label]["summary"][b]) for b in BROKERS for label in labels]


def _spec(spec: dict) -> str:
    """'kafka and redis-streams × raw, 1,024 B at 1,000 msgs/s, 1 s warm-up, 2 s measured, 4 repeats'."""
    return (f"{' and '.join(spec['brokers'])} × {', '.join(spec['formats'])}, "
            f"{', '.join(f'{x:,}' for x in spec['sizes'])} B at {', '.join(f'{x:,}' for x in spec['rates'])} msgs/s, "
            f"{spec['warmup_s']} s warm-up, {spec['duration_s']} s measured, {spec['repeats']} repeats")


def cell_overhead(results: dict) -> dict:
    co = results["cell_overhead"]
    columns = _label_columns(co, ["before", "after"])
    figures = [("overhead per cell", "overhead_s_median", ""),
               ("of which past the warm-up the cell used", "overhead_beyond_warmup_used_s_median", "**"),
               ("warm-up used (adaptive, `warmup_s` = 1)", "warmup_used_s_median", "")]
    summary = [[name] + [f"{bold}{s[key]:.1f} s{bold}" for _, s in columns] for name, key, bold in figures]
    phases = [[name] + [_phase(s, keys) for _, s in columns] for name, keys in PHASES]
    loads = [load_average(co[label][when]) for label in ("before", "after")
             for when in ("load_average_before", "load_average_after")]
    once = co["after_main_once"]["summary"]
    writes = [s["event_writes_s_median"] for _, s in columns]
    return {
        "spec": _spec(co["after"]["spec"]),
        "summary_table": table([""] + [c for c, _ in columns], summary),
        "phase_table": table(["phase"] + [c for c, _ in columns], phases),
        "load": f"{min(loads):.0f} to {max(loads):.0f}",
        "event_writes": f"{min(writes):.2f} to {max(writes):.2f} s",
        "first_line": " and ".join(f"{_phase(once[b], ['spawn', 'processes_began'])} s ({name})"
                                   for b, name in BROKERS.items()),
        "past_warmup": " and ".join(f"**{once[b]['overhead_beyond_warmup_used_s_median']:.2f} s**" for b in BROKERS),
        "once_load": f"{load_average(co['after_main_once']['load_average_before']):.0f}",
        "warmup_bound": f"{max(c['warmup']['max_s'] for c in co['after']['cells']):.0f} s",
        **latency_truth_overhead(co),
    }


LATENCY_TRUTH_LABELS = ("latency_truth_before", "latency_truth_after")
LATENCY_TRUTH_PHASES = [
    ("cell end (broker counts, verdict, CellCompleted)", ["complete"]),
]
# From the schedule's end until every process said "done" (the producers' flush and wait, the drain, the consumers'
# close): the producers' end and t_end come in either order, so the span is taken whole, less the measured seconds.
UNTIL_DONE = ["producers_done", "t_end", "processes_done"]


def _until_done(summary: dict, measured_s: float) -> str:
    return secs(sum(summary["phases_s_median"].get(k, 0.0) for k in UNTIL_DONE) - measured_s)


def latency_truth_overhead(co: dict) -> dict:
    """`--targets latency-truth`: each broker's overhead per cell before and after, with the phases that moved."""
    before, after = (co[label] for label in LATENCY_TRUTH_LABELS)
    rows = []
    for target in after["summary"]:
        b, a = before["summary"][target], after["summary"][target]
        measured = after["spec"]["duration_s"]
        rows.append([target.removesuffix("-direct"), f"{b['overhead_s_median']:.2f} s",
                     f"**{a['overhead_s_median']:.2f} s**",
                     f"{_until_done(b, measured)} → {_until_done(a, measured)}"]
                    + [f"{_phase(b, keys)} → {_phase(a, keys)}" for _, keys in LATENCY_TRUTH_PHASES]
                    + [f"{_phase(b, ['check'])} → {_phase(a, ['check'])}"])
    loads = [load_average(co[label][when]) for label in LATENCY_TRUTH_LABELS
             for when in ("load_average_before", "load_average_after")]
    return {"latency_truth_spec": _spec(after["spec"]).replace(" and ", ", "),
            "latency_truth_table": table(["target", "before", "after", "from t_end until the processes are done"]
                                         + [n for n, _ in LATENCY_TRUTH_PHASES]
                                         + ["broker check"], rows),
            "latency_truth_load": f"{min(loads):.1f} to {max(loads):.1f}"}


# ---- run overhead (bench/run_overhead.py) ---------------------------------------------------------------------------

QUICK_LABELS = {
    "before": "before",
    "after_fork_server_probe_offset0": "fork server, early probe, Kafka offset 0",
    "after_main_module_once": "and the main module imported once",
    "after_main_module_once_second_run": "the same code again",
}


def _rest_of_cell(quick: dict) -> float:
    phases = quick["phases_s_median"]
    return sum(v for k, v in phases.items() if k not in ("measure_start", "t_end"))


def _quick_row(label: str, q: dict) -> list[str]:
    cell = q["per_cell"]
    phased = "phases_s_median" in q
    return [QUICK_LABELS.get(label, label), f"{q['wall_s']:.0f} s", f"×{q['ratio']:.2f}",
            f"×{cell['cell_time_over_schedule_median']:.2f} / ×{cell['cell_time_over_schedule_max']:.2f}",
            f"{q['phases_s_median']['measure_start']:.1f} s" if phased else "",
            f"{_rest_of_cell(q):.2f} + {cell['between_cells_s_median']:.2f} s" if phased else "",
            f"{cell['run_requested_to_first_cell_s']:.0f} s" if phased else "",
            f"{load_average(q['load_average_before']):.0f}"]


def _run_row(name: str, r: dict) -> list[str]:
    cell = r["per_cell"]
    return [name, str(r["cells"]), f"**{r['wall_s']:.1f} s**", f"{r['scheduled_s']} s", f"×{r['ratio']:.2f}",
            f"×{cell['cell_time_over_schedule_median']:.2f} / ×{cell['cell_time_over_schedule_max']:.2f}"]


def run_overhead(results: dict) -> dict:
    quick = {label: entry["quick"] for label, entry in results["quick_overhead"].items()}
    last = list(quick.values())[-1]
    runs = results["run_overhead"]
    return {
        "quick_table": table(["quick suite", "wall time", "ratio", "per cell (median / max)", "warm-up used (median)",
                              "rest of a cell + between cells", "before the first cell", "load at the start"],
                             [_quick_row(label, q) for label, q in quick.items()]),
        "quick_cells": str(last["cells"]),
        "quick_scheduled": f"{last['scheduled_s']}",
        "rest": f"{_rest_of_cell(last):.2f} s",
        "between": f"{last['per_cell']['between_cells_s_median']:.2f} s",
        "warmup": f"{last['phases_s_median']['measure_start']:.1f} s",
        "run_table": table(["run", "cells", "wall time", "scheduled", "ratio", "per cell (median / max)"],
                           [_run_row("quick suite (`make run`) of an earlier, 5 s-cell suite", runs["quick"]),
                            _run_row("multi-consumer", runs["multi_consumer"])]),
    }


# ---- the test suite (bench/test_suite.py) ---------------------------------------------------------------------------

def _result(row: dict) -> str:
    counts = [f"{row[k]} {k}" for k in ("passed", "failed", "errors", "skipped") if row.get(k)]
    done = ", ".join(counts) or "no result"
    return done if row.get("finished", True) else f"stopped unfinished: {done}"


def _load(row: dict) -> str:
    start, end = row.get("load_start"), row.get("load_end")
    note = row.get("load_note")
    if start is None:
        return note or "not recorded"
    return f"{start:g} → {end:g}" + (f" ({note})" if note else "")


def _wall(seconds: float | None, bold: bool = False) -> str:
    if seconds is None:
        return "–"
    return f"**{minutes(seconds)}**" if bold else minutes(seconds)


def _suite_row(row: dict) -> list[str]:
    return [row["how"], _load(row), _wall(row.get("pytest_wall_s"), row.get("finished", True)),
            _wall(row.get("make_test_wall_s")), _wall(row.get("cpu_s")), _result(row), _when(row)]


def _when(row: dict) -> str:
    when = f"{row['date']}, {row.get('commit') or 'code not recorded'}"
    return when + (f"; {row['note']}" if row.get("note") else "")


def test_suite(results: dict) -> dict:
    rows = results["test_suite"]["rows"]
    return {"table": table(["how", "machine's load (1-min average, start → end)", "wall time of pytest",
                            "whole `make test`", "CPU time (user + system)", "result", "date, code"],
                           [_suite_row(r) for r in rows])}


# ---- the first run (bench/first_run.py, setup_first_run.json) -------------------------------------------------------

def _first_run_row(row: dict) -> list[str]:
    return [row["label"], row["how"], _wall(row.get("setup_wall_s")), _wall(row.get("run_wall_s"), True),
            _wall(row.get("total_wall_s")), str(row.get("exit_code", "–")), _load(row),
            _when(row)]


def _before_after(figure: dict) -> list[str]:
    return [minutes(figure["before"]), minutes(figure["after"])]


def _setup_table(setup: dict) -> str:
    brokers = setup["skipped_by_make_setup"]["cache_mb"]
    return table(["", "before", "after"], [
        ["`make setup` wall time", *_before_after(setup["make_setup_wall_s"])],
        ["of which `pip install`", *_before_after(setup["pip_install_s"])],
        ["broker install step", *_before_after(setup["broker_step_s"])],
        ["broker install step alone (shared venv)", *_before_after(setup["broker_step_alone_s"])],
        ["installed brokers (MB)", str(brokers["before"]), str(brokers["after"])]])


def first_run(results: dict) -> dict:
    rows = results.get("first_run", {}).get("rows", [])
    setup = results["setup_first_run"]
    header = ["label", "how", "`make setup`", "`make run`", "together", "exit code", "load (start → end)",
              "date, code"]
    body = [_first_run_row(r) for r in rows] or [["not measured yet"] + [""] * (len(header) - 1)]
    skipped = setup["skipped_by_make_setup"]
    return {
        "table": table(header, body),
        "setup_what": setup["what"],
        "setup_date": setup["date"],
        "setup_table": _setup_table(setup),
        "skipped": f"ZooKeeper-mode Kafka {skipped['kafka_zookeeper_fetch_s']} s, Pulsar {skipped['pulsar_fetch_s']} s "
                   f"and its class-data archive {skipped['pulsar_class_archive_s']} s",
        "cold": "; ".join(f"{name} {c['seconds']} s ({c['repository_mb']} MB)"
                          for name, c in setup["cold_maven_download"].items() if isinstance(c, dict)),
    }


# ---- reports (bench/report_build.py) --------------------------------------------------------------------------------

def _report_row(r: dict, how: str) -> list[str]:
    what = (f"comparison report of a {r['cells']:,}-cell run with {r['intervals_per_cell']} intervals per cell "
            f"({r['events']:,} events stored, {r['events_read']:,} read)")
    figure = (f"**{r['total_s']:.2f} s** (read {r['read_s']:.2f} s, model {r['model_s']:.2f} s, Markdown + HTML "
              f"{r['render_s']:.2f} s; HTML {r['html_kb'] / 1000:.1f} MB); {r['machine']}, {r['date']}")
    return [what, figure, "< 5 s", how]


def reports(results: dict) -> dict:
    rows = [_report_row(results["report_build"], "`.venv/bin/python bench/report_build.py` "
                                                 "(`bench/results/report_build.json`)"),
            _report_row(results["report_build_2000"], "`.venv/bin/python bench/report_build.py --cells 2000 "
                                                      "--repeat 1` (`bench/results/report_build_2000.json`)")]
    big = results["report_build_2000"]
    return {"table": table(["what", "figure", "target", "how"], rows),
            "cells_2000": f"{big['cells']:,}", "setup_2000": f"{big['setup_s']:.0f} s"}


# ---- reading a run's events through their types (bench/event_decode.py) --------------------------------------------

DECODE_ROWS = {"dynamodb": "DynamoDB items, with the interval histograms",
               "dynamodb_no_histograms": "DynamoDB items, without them (a report's read)",
               "memory": "the memory store's JSON"}


def event_decode(results: dict) -> dict:
    d = results["event_decode"]
    rows = [[what, f"{d[key]['before_s']:.2f} s", f"{d[key]['after_s']:.2f} s",
             f"{1e6 * d[key]['after_s'] / d['events']:.0f} µs", ratio(d[key]["ratio"])]
            for key, what in DECODE_ROWS.items()]
    return {"table": table(["the run's events, read from", "json.loads (before)", "typed (after)",
                            "after, per event", "after / before (median of passes)"], rows),
            "events": f"{d['events']:,}", "intervals": f"{d['intervals']:,}",
            "interval_bytes": f"{d['interval_json_bytes']:,}",
            "interval_bytes_bare": f"{d['interval_json_bytes_no_histograms']:,}", "repeat": str(d["repeat"]),
            "previous": d["previous"], "code": d["code_version"], "date": d["date"],
            "load": f"{d['load_average_1min']['before']:.1f} to {d['load_average_1min']['after']:.1f}"}


# ---- the HTTP API under load (bench/api_load.py) --------------------------------------------------------------------

ROUTES = {"list_runs": "`GET /runs?limit=20`", "get_run": "`GET /runs/{id}`", "report_published": "report, published",
          "report_built": "report, built from events"}


def _latency(x: float) -> str:
    return f"{x / 1000:.2f} s" if x >= 1000 else f"{x:.0f} ms"


def _api_row(name: str, r: dict, bold: bool = False) -> list[str]:
    b = "**" if bold else ""
    lat = r["latency_ms"]
    return [name, str(r["requests"]), f"{b}{r['errors']}{b}", f"{b}{r['throughput_req_per_s']}{b}",
            f"{b}{_latency(lat['p50'])}{b}", _latency(lat["p90"]), f"{b}{_latency(lat['p99'])}{b}",
            _latency(lat["max"])]


def api_load(results: dict) -> dict:
    a = results["api_load"]
    s, alone = a["setup"], a["one_client"]
    rows = [_api_row("all requests", a["overall"], True)]
    rows += [_api_row(ROUTES[k], r) for k, r in a["routes"].items()]
    rows.append(_api_row(f"one client alone ({alone['elapsed_s']:.0f} s, first)", alone["overall"]))
    runs = s["stored_runs"]
    return {
        "clients": str(s["clients"]), "seconds": str(s["seconds"]),
        "runs": str(len(runs)), "cells": str(runs[0]["cells"]), "events": str(runs[0]["events"]),
        "published": str(sum(1 for r in runs if r["published"])),
        "unpublished": str(sum(1 for r in runs if not r["published"])),
        "load": f"{a['machine']['load_average_1min']['before']:.1f} before, "
                f"{a['machine']['load_average_1min']['after']:.1f} after",
        "elapsed": f"{a['elapsed_s']:.0f} s",
        "table": table([f"{s['clients']} clients, {s['seconds']} s", "requests", "errors", "req/s", "p50", "p90", "p99",
                        "max"], rows),
        "little": f"{s['clients']} clients ÷ {a['overall']['throughput_req_per_s']} req/s = "
                  f"{s['clients'] / a['overall']['throughput_req_per_s']:.1f} s",
        "alone": ", ".join(f"{ROUTES[k]} {_latency(r['latency_ms']['p50'])}" for k, r in alone["routes"].items()),
    }


# ---- false claims in A/A reports (bench/false_claims.py) ------------------------------------------------------------

NOISE = {"lognormal": "lognormal", "heavy": "heavy-tailed (t, 3 df)", "shared": "shared offset per repeat"}


def _noise_range(simulated_noise: dict, figure: str) -> str:
    low, high = (math.exp(x) - 1 for x in simulated_noise[figure]["log_sd_range"])
    return f"{100 * low:.0f}–{100 * high:.0f}%" if round(low, 2) != round(high, 2) else f"{100 * low:.0f}%"


def _simulated_row(s: dict) -> list[str]:
    return [NOISE.get(s["noise"], s["noise"]), str(s["repeats"]), f"**{pct(s['false_claim_rate'])}**",
            pct(s["previous_rule_false_claim_rate"]), pct(s["detection_rate"])]


def false_claims(results: dict) -> dict:
    f = results["false_claims"]
    sim, real, noise = f["simulated"], f["real"], f["simulated_noise"]
    runs = real["runs"]
    spreads = [v for run in runs for v in run["p99_repeat_spread"].values()]
    walls = [r["wall_s"] for r in real["run_list"]]
    early = f["real_3s_cells"]
    return {
        "reports": f"{sim[0]['reports']:,}", "comparisons": str(sim[0]["comparisons_per_report"]),
        "p99_noise": _noise_range(noise, "end_to_end_p99_us"),
        "p999_noise": _noise_range(noise, "end_to_end_p999_us"),
        "p50_noise": _noise_range(noise, "end_to_end_p50_us"),
        "delivery_noise": _noise_range(noise, "delivery_p99_us"),
        "throughput_noise": _noise_range(noise, "throughput_msgs_per_s"),
        "table": table(["noise", "repeats", "reports with any false claim", "previous rule", "doubled p99 claimed"],
                       [_simulated_row(s) for s in sim], ["---", "---:", "---:", "---:", "---:"]),
        "detect_3": spread([s["detection_rate"] for s in sim if s["repeats"] == 3], pct),
        "detect_5": spread([s["detection_rate"] for s in sim if s["repeats"] == 5], pct),
        "another": spread([s["with_doubled_p99_reports_with_another_false_claim"] / s["reports"] for s in sim], pct),
        "real_runs": str(len(runs)), "real_repeats": str(real["spec"]["repeats"]),
        "half": str(real["spec"]["repeats"] // 2), "splits": spread([r["splits"] for r in runs], lambda x: f"{x}"),
        "real_spec": f"{real['spec']['sizes'][0]:,} B at {real['spec']['rates'][0]:,} msgs/s, "
                     f"{real['spec']['duration_s']} s after a {real['spec']['warmup_s']} s warm-up",
        "real_wall": f"{min(walls):.0f}–{max(walls):.0f} s",
        "real_comparisons": str(real["comparisons_per_report"]),
        "real_false": f"**{real['reports_with_a_false_claim']} of {real['reports']} reports carried a false claim**",
        "real_claims": "; ".join(f"`{c}`" for c in real["false_claims"]),
        "real_spread": f"{100 * min(spreads):.0f}–{100 * max(spreads):.0f}%",
        "eligible": spread([r["eligible_for_latency_claims"] for r in runs], lambda x: f"{x:.0f}"),
        "configurations": str(len(runs[0]["p99_repeat_spread"])),
        "doubled": f"{real['doubled_p99_detected']} of {real['doubled_p99_trials']}",
        "early": f"{early['reports_with_a_false_claim']} of {early['reports']}",
        "early_claims": "; ".join(f"`{c}`" for c in early["false_claims"]),
        "early_duration": f"{early['spec']['duration_s']} s",
    }


# ---- regression checks in A/A (bench/aa_regression.py) --------------------------------------------------------------

VERDICTS = ("regression", "improvement", "unstable", "unchanged")


def _verdicts(block: dict) -> str:
    v = block["by_verdict"]
    return ", ".join(f"{v[k]} `{k}`" for k in VERDICTS if v[k])


def _injected(inj: dict, *figures: str) -> dict:
    """The quota run's verdicts on the Kafka cells' `figures`."""
    return {k: v for k, v in inj["per_verdict"].items() if k.startswith("kafka") and k.endswith(figures)}


def _tally(per: dict, verdict: str) -> str:
    return f"{sum(v[verdict] for v in per.values())} of {sum(v[k] for v in per.values() for k in VERDICTS)}"


def _aa_rows(aa: dict) -> list[list[str]]:
    new, old, seq, alone = aa["new_rule"], aa["old_rule"], aa["in_sequence"], aa["pairs_without_history"]
    return [
        [f"A/A: comparisons with any `regression` or `improvement` ({new['comparisons']} comparisons × "
         f"{new['verdicts'] // new['comparisons']} verdicts)",
         f"**{new['comparisons_with_any_alarm']} of {new['comparisons']}** ({_verdicts(new)})",
         f"{old['comparisons_with_any_alarm']} of {old['comparisons']}"],
        [f"each A/A run against the runs before it, as CheckRegression does ({seq['comparisons']} checks with a "
         f"baseline)", f"{seq['comparisons_with_any_alarm']} alarms ({seq['cannot_tell']} of {seq['verdicts']} "
         f"verdicts \"cannot tell\")", "–"],
        [f"the same {alone['comparisons']} pairs with no history", f"{alone['comparisons_with_any_alarm']} alarms "
         f"({alone['cannot_tell']} of {alone['verdicts']} \"cannot tell\")", ""],
    ]


def _quota_rows(inj: dict) -> list[list[str]]:
    quota = f"quota {inj['quota_bytes_per_s']:,} B/s"
    throughput = _injected(inj, "throughput_msgs_per_s")
    p99 = _injected(inj, "end_to_end_p99_us", "publish_latency_p99_us")
    repeats = [x for r in inj["kafka_repeats"] for x in r["throughput_per_repeat"]]
    return [
        [f"{quota}: Kafka throughput ({spread([v['median_change'] for v in throughput.values()], change)}; repeats "
         f"{spread(repeats, lambda x: f'{x:,.0f}')} msgs/s)", f"**regression in {_tally(throughput, 'regression')}**",
         ""],
        [f"{quota}: Kafka p99 (×{spread([v['median_change'] + 1 for v in p99.values()], lambda x: f'{x:.0f}')}, "
         "end-to-end and publish)", f"`unstable` in {_tally(p99, 'unstable')}", ""],
        [f"{quota}: any alarm on the Redis cells", f"{inj['redis_false_alarms']} in {inj['comparisons']} comparisons",
         ""],
    ]


def aa_regression(results: dict) -> dict:
    a = results["aa_regression"]
    aa, inj, spec = a["aa"], a["injected"][0], a["spec"]
    walls = [r["wall_s"] for r in aa["runs"]]
    p99_repeat = [v["repeat_spread"] for k, v in aa["noise"].items() if k.endswith("p99_us")]
    return {
        "runs": str(len(aa["runs"])), "quick": "a `--quick` session" if a["quick"] else "a session",
        "spec": f"{spec['sizes'][0]:,} B at {spec['rates'][0]:,} msgs/s, {spec['warmup_s']} s warm-up, "
                f"{spec['duration_s']} s cells, {spec['repeats']} repeats",
        "walls": f"{min(walls):.0f}–{max(walls):.0f} s per run",
        "when": a["when"][:10],
        "table": table(["", "new rule", "previous rule (Mann–Whitney over per-second intervals)"],
                       _aa_rows(aa) + _quota_rows(inj)),
        "detectable": f"÷{aa['detectable']['throughput_msgs_per_s']:.1f}",
        "p99_repeat": f"{100 * min(p99_repeat):.0f}–{100 * max(p99_repeat):.0f}%",
        "workflow": "; ".join(c for w in inj["workflow_checks"] for c in w["regressions"]),
    }


# ---- the nightly schedule in A/A (bench/aa_schedule.py) -------------------------------------------------------------

def _counts(counts: dict, names=VERDICTS) -> str:
    return ", ".join(f"{counts[k]} {k}" for k in names if counts.get(k))


def _schedule_run_row(number: int, r: dict) -> list[str]:
    return [str(number), f"`{r['run_id']}`", f"{r['wall_s']:.0f}", str(r["history_runs"]),
            f"{r['series_searched']} of {r['series']}", _counts(r["verdicts"]) or "–", _counts(r["flips"]) or "–",
            f"**{len(r['alerts'])}**", str(r["failed_cells"])]


def _sd(m: dict | None) -> str:
    return "–" if m is None else f"{100 * m['sd_repeat']:.1f}% / {100 * m['sd_run']:.1f}%"


def _noise_row(config: dict) -> list[str]:
    m = config["metrics"]
    return [config["cell"]] + [_sd(m.get(k)) for k in ("throughput_msgs_per_s", "end_to_end_p99_us",
                                                       "publish_latency_p99_us")]


def _share(told: int, of: int) -> str:
    return f"{told:,} of {of:,} ({100 * told / of:.1f}%)" if of else "–"


def _false_row(label: str, f: dict) -> list[str]:
    phases = f["by_phase"]
    return [label, f"**{_share(f['nights_with_an_alert'], f['nights'])}**",
            _share(phases.get("pairwise", {}).get("with_an_alert", 0), phases.get("pairwise", {}).get("nights", 0)),
            _share(phases.get("series", {}).get("with_an_alert", 0), phases.get("series", {}).get("nights", 0)),
            ", ".join(f"{n} {m}" for m, n in sorted(f["alerts_by_metric"].items())) or "–"]


def _step_row(d: dict) -> list[str]:
    what = {"end_to_end_p99_us": "end-to-end p99", "throughput_msgs_per_s": "throughput"}[d["metric"]]
    return [f"{what} × {d['factor']:g} in one configuration", f"**{_share(d['told'], d['trials'])}**",
            _share(d["established_told"], d["established_trials"]),
            f"{d['by_source']['pairwise']} pairwise, {d['by_source']['change_point']} change points"
            + (f" ({d['by_found']['newest']} by the newest runs' test)" if "by_found" in d else ""),
            str(d["other_alerts"])]


def _broker_share(d: dict, noise: dict, broker: str) -> str:
    told = [v for k, v in d["by_configuration"].items()
            if noise["configurations"][k]["cell"].split()[0] == broker]
    return _share(sum(t for t, _ in told), sum(n for _, n in told))


def _first_night(d: dict, without: dict | None) -> dict:
    """The steps on a schedule's first night after its baseline, and the same step on schedules without one (a
    single run the first night: the steps on its first night never told)."""
    told, trials = d["by_start"].get("1", [0, 0])
    out = {"first_night": f"{told} of {trials} told", "without_baseline": "(not simulated)",
           "first_night_without": "(not simulated)", "without_established": "(not simulated)"}
    if without is not None:
        w_told, w_trials = without["by_start"].get("1", [0, 0])
        out.update(without_baseline=_share(without["told"], without["trials"]),
                   first_night_without=f"{w_told} of {w_trials} told",
                   without_established=_share(without["established_told"], without["established_trials"]))
    return out


def _brokers(noise: dict) -> list[str]:
    return sorted({c["cell"].split()[0] for c in noise["configurations"].values()})


def _sweep_row(d: dict, noise: dict, sim: dict) -> list[str]:
    """A row of the p99 sweep, with the A/A nights and the minutes a night takes at the row's repeats (the
    simulation's own where the row has none: the suite's repeats)."""
    repeats = d.get("repeats_per_run", noise["repeats_per_run"])
    false = d.get("false_alerts", sim["false_alerts"])
    minutes_ = d.get("night_minutes", sim.get("night_minutes"))
    night = "–" if minutes_ is None else f"{minutes_:.0f} min"
    return ([f"× {d['factor']:g}", str(repeats),
             f"**{_share(d['told'], d['trials'])}**", _share(d["established_told"], d["established_trials"])]
            + [_broker_share(d, noise, b) for b in _brokers(noise)]
            + [_share(false["nights_with_an_alert"], false["nights"]), night])


def _bound_row(row: dict, noise: dict, key: str, goal: float) -> list[str]:
    m = noise["configurations"][key]["metrics"]["end_to_end_p99_us"]
    return [row["cell"], f"{100 * m['sd_repeat']:.0f}%", f"{100 * m['sd_repeat_robust']:.0f}%",
            f"{100 * m['sd_run_robust']:.0f}%", f"{100 * row['power']:.0f}%",
            f"× {row['smallest_step']:.2f}", str(row["repeats_needed"]) if row["repeats_needed"] else "over 200"]


def _tail(noise: dict, broker: str) -> str:
    """A broker's end-to-end p99 repeats: the robust spread of the bulk and the share read 2x its centre or more."""
    metrics = [c["metrics"]["end_to_end_p99_us"] for c in noise["configurations"].values()
               if c["cell"].split()[0] == broker and "residuals" in c["metrics"].get("end_to_end_p99_us", {})]
    if not metrics:
        return f"{broker}: (not recorded)"
    residuals = [r for m in metrics for r in m["residuals"]]
    robust = sorted(m["sd_repeat_robust"] for m in metrics)
    return (f"{broker}: the bulk within {100 * robust[len(robust) // 2]:.0f}% (robust standard deviation of the log, "
            f"median over its configurations), {sum(r >= math.log(2) for r in residuals)} of {len(residuals)} repeats "
            f"at 2x their configuration's median or more")


def _median_sd(noise: dict, metric: str, which: str) -> str:
    values = sorted(c["metrics"][metric][which] for c in noise["configurations"].values() if metric in c["metrics"])
    return f"{100 * values[len(values) // 2]:.1f}% ({100 * values[0]:.1f}–{100 * values[-1]:.1f}%)"


def aa_schedule(results: dict) -> dict:
    a = results["aa_schedule"]
    real, noise, sim, rules = a["real"], a["noise"], a["simulated"], a["rules"]
    walls = [r["wall_s"] for r in real["runs"]]
    s = real["summary"]
    false_rows = [_false_row(f"A/A nights, repeats unsustainable at the real rate ({pct(noise['unsustainable_rate'])})",
                             sim["false_alerts"])]
    if "false_alerts_stressed" in sim:
        stressed = sim["false_alerts_stressed"]
        false_rows.append(_false_row(f"the same at {pct(stressed['unsustainable_rate'])} (7 of 72, the project's "
                                     "earlier A/A data)", stressed))
    return {
        # the day of the first run (its id begins with it): --reuse and --simulate-only write the bench's own day
        "runs": str(s["runs"]), "when": _run_day(real["runs"][0]["run_id"]) or a["when"][:10], "walls": f"{min(walls):.0f}–{max(walls):.0f} s",
        "fit": (f" ({real['stack']['runs_asked']} were asked; the bench's time budget of "
                f"{minutes(real['stack']['budget_s'])} held {s['runs']})" if real["stack"].get("stopped_by_budget")
                else ""),
        "alerts": f"**{s['alerts']} alerts over {s['runs']} runs**",
        "notify": f"{s['runs_that_notify']} of {s['runs']}", "workflow": str(s["workflow_alerts"]),
        "by_source": f"{s['alerts_by_source']['pairwise']} pairwise ({s['flip_alerts']} of them sustainability flips), "
                     f"{s['alerts_by_source']['change_point']} change points",
        "verdicts": _counts(s["verdicts"]), "flips": _counts(s["flips"]),
        "real_table": table(["run", "id", "wall (s)", "history runs", "series searched", "pairwise verdicts",
                             "of them flips", "alerts", "failed cells"],
                            [_schedule_run_row(i, r) for i, r in enumerate(real["runs"], 1)],
                            ["---:", "---", "---:", "---:", "---:", "---", "---", "---:", "---:"]),
        "repeats": f"{noise['quiet_repeats']:,} quiet repeats of {noise['repeats']:,}",
        "unsustainable": f"{noise['unsustainable']} unsustainable ({pct(noise['unsustainable_rate'])})",
        "inconclusive": f"{noise['inconclusive']} inconclusive ({pct(noise['inconclusive_rate'])})",
        "busy": f"{noise['busy']} measured on a busy host ({pct(noise['busy_rate'])})",
        "noise_table": table(["configuration", "throughput", "end-to-end p99", "publish p99"],
                             [_noise_row(c) for c in noise["configurations"].values()]),
        "p99_run": _median_sd(noise, "end_to_end_p99_us", "sd_run"),
        "p99_repeat": _median_sd(noise, "end_to_end_p99_us", "sd_repeat"),
        "tp_run": _median_sd(noise, "throughput_msgs_per_s", "sd_run"),
        "tp_repeat": _median_sd(noise, "throughput_msgs_per_s", "sd_repeat"),
        "early": _share(sum(n for start, (_, n) in sim["detection"]["p99"]["by_start"].items()
                            if _step_run(sim, start) < rules["min_series"]), sim["detection"]["p99"]["trials"]),
        "early_told": _early_told(sim, rules["min_series"]),
        "baseline_runs": str(sim.get("baseline_runs", 1)),
        "baseline_minutes": (f"{sim['night_minutes'] * sim.get('baseline_runs', 1):.0f} min"
                             if "night_minutes" in sim else "–"),
        "tp_told": _share(sim["detection"]["throughput"]["told"], sim["detection"]["throughput"]["trials"]),
        "newest_min": str(rules.get("newest_min", rules["min_series"])),
        "nights": f"{sim['false_alerts']['nights']:,}", "per_schedule": str(sim["nights_per_schedule"]),
        "trials": str(sim["detection"]["p99"]["trials"]), "min_series": str(rules["min_series"]),
        "min_history": str(rules["min_history"]), "sim_wall": minutes(sim["wall_s"]),
        "false_table": table(["simulated", "nights with an alert", f"nights under {rules['min_series']} runs "
                              "(pairwise)", "nights with a series", "alerts by metric"], false_rows),
        **_aa_power(noise, sim, rules["min_series"]), "figure_spread": _figure_spread(noise),
        "p99_told": _share(sim["detection"]["p99"]["told"], sim["detection"]["p99"]["trials"]),
        "kafka_told": _broker_share(sim["detection"]["p99"], noise, "kafka"),
        "redis_told": _broker_share(sim["detection"]["p99"], noise, "redis-streams"),
        **_first_night(sim["detection"]["p99"], sim.get("detection_without_baseline", {}).get("p99")),
        "false_sim": _share(sim["false_alerts"]["nights_with_an_alert"], sim["false_alerts"]["nights"]),
        "best_sized": _best_sized(sim),
        "run_wall": f"{noise['run_wall_s']:.0f} s" if "run_wall_s" in noise else "–",
        "median_repeats": str(rules.get("median_repeats", "–")),
        "step_table": table(["step at a random night", "told within 2 nights at its run ± 1",
                             f"steps at run {rules['min_series']} or later", "told by", "other alerts in those nights"],
                            [_step_row(d) for d in sim["detection"].values()]
                            + [_step_row(d) for d in sim.get("p99_sweep", [])]),
    }


def _step_run(sim: dict, night: str) -> int:
    """The run a step at `night` began with: night 0 is the schedule's baseline runs."""
    return int(night) + sim.get("baseline_runs", 1) - 1


def _early_told(sim: dict, min_series: int) -> str:
    """The steps at runs before a series is searched that were told within two nights (aa_schedule's detection)."""
    d = sim["detection"]["p99"]
    early = [(t, n) for s, (t, n) in d["by_start"].items() if _step_run(sim, s) < min_series]
    return _share(sum(t for t, _ in early), sum(n for _, n in early))


def _run_day(run_id: str) -> str | None:
    """2026-11-28 of a run id 20261128T154057Z-2afab2 (None for an id of another form)."""
    day = run_id[:8]
    return f"{day[:4]}-{day[4:6]}-{day[6:]}" if day.isdigit() and run_id[8:9] == "T" else None


def _best_sized(sim: dict) -> str:
    """The repeats per run that told the +30% p99 step most often within two nights, with its A/A nights."""
    sized = sim.get("repeats_sweep") or []
    if not sized:
        return "(not simulated)"
    d = max(sized, key=lambda d: d["rate"])
    return (f"{_share(d['told'], d['trials'])} at {d['repeats_per_run']} repeats per run "
            f"({d['night_minutes']:.0f} min a night), with false alerts on "
            f"{_share(d['false_alerts']['nights_with_an_alert'], d['false_alerts']['nights'])} of its A/A nights")


def _figure_spread(noise: dict) -> str:
    """How far a run's p99 moves between the identical runs, by how the run's figure is made (aa_schedule.FIGURES)."""
    spread = noise.get("figure_spread")
    if not spread:
        return "(not recorded: `bench/aa_schedule.py --reuse` records it from the runs' event store)"
    names = {"end_to_end_p99_us": "end-to-end p99", "publish_latency_p99_us": "publish p99"}
    return "; ".join(f"{names[metric]}: " + ", ".join(f"{100 * s[kind]:.0f}% as the {kind}" if kind != "merged" else
                                                      f"{100 * s[kind]:.0f}% merged"
                                                      for kind in ("geometric mean", "median", "merged"))
                     for metric, s in spread.items()) + \
        f" (the median over {next(iter(spread.values()))['configurations']} configurations)"


def _aa_power(noise: dict, sim: dict, min_series: int) -> dict:
    """What the +30% p99 goal asks of these runs: the sweep of step sizes and of repeats per run (simulated, by
    broker), and the bound on what a test of these runs can tell (aa_schedule.power_table)."""
    shape = (
        "A drawn repeat is one of its configuration's real repeats (its log less the configuration's median) picked "
        "at random, plus a run effect (the robust spread of the real runs' medians beyond what repeats picked so "
        "give): the real noise as it came." if sim.get("shape") == "empirical" else
        "A drawn repeat is normal on the log scale with the standard deviations above (this result predates the "
        "draw from the real repeats themselves: `bench/aa_schedule.py --simulate-only` makes it again).")
    power = sim.get("power")
    if power is None:
        return {"sweep_table": "(not simulated)", "bound_table": "(not simulated)", "bound_mean": "–",
                "watch_t": "–", "newest_t": "–", "newest_t_prior": "–", "bound_best": "–", "smallest_overall": "–", "shape_text": shape,
                "tails": "; ".join(_tail(noise, b) for b in _brokers(noise))}
    rows = [_sweep_row(d, noise, sim) for d in [sim["detection"]["p99"]] + sim.get("p99_sweep", [])
            + sim.get("repeats_sweep", [])]
    told = [d for d in [sim["detection"]["p99"]] + sim.get("p99_sweep", []) if d["rate"] >= power["power_goal"]]
    sweep = sim.get("p99_sweep", [])
    configurations = power["configurations"]
    best = max(configurations.values(), key=lambda r: r["power"])
    return {
        "sweep_table": table(["end-to-end p99 step", "repeats per run", "told within 2 nights at its run ± 1",
                              f"steps at run {min_series} or later"]
                             + [f"in {b} configurations" for b in _brokers(noise)]
                             + ["A/A nights with an alert", "a night of the suite"], rows,
                             ["---", "---:", "---:", "---:"] + ["---:"] * (len(_brokers(noise)) + 2)),
        "bound_table": table(["configuration", "sd of a repeat (log)", "robust sd of a repeat", "run effect (robust)",
                              f"bound: +{power['step'] - 1:.0%} told at most", f"bound: smallest step told at "
                              f"{power['power_goal']:.0%}", f"repeats per run for +{power['step'] - 1:.0%} at "
                              f"{power['power_goal']:.0%} (bound)"],
                             [_bound_row(r, noise, k, power["power_goal"]) for k, r in configurations.items()],
                             ["---", "---:", "---:", "---:", "---:", "---:", "---:"]),
        "tails": "; ".join(_tail(noise, b) for b in _brokers(noise)), "shape_text": shape,
        "bound_mean": f"{100 * power['mean_power']:.0f}%",
        "bound_best": f"{100 * best['power']:.0f}% ({best['cell'].split(' · ')[0]})",
        "watch_t": f"{power['watch_critical_t']:.1f} (at {power['watch_series']} runs: {power['watch_series'] - 2} "
                   f"degrees of freedom, half of ALPHA {power['alpha']:g} over {power['family']} series × "
                   f"{power['splits']} splits)",
        "newest_t": f"{power['newest_critical_t']:.1f}" if "newest_critical_t" in power else "–",
        "newest_t_prior": f"{power['newest_critical_t_prior']:.1f}" if "newest_critical_t_prior" in power else "–",
        "smallest_overall": (f"× {min(d['factor'] for d in told):g}" if told else
                             f"none of the steps simulated (up to × {max([d['factor'] for d in sweep] or [1.3]):g})"),
    }


# ---- publish against end-to-end latency (bench/latency_truth.py) ----------------------------------------------------

def _truth_rows(run: dict, which: str) -> list[list[str]]:
    return [[which, run["code"], str(c.get("repeat", "–")), f"{c['rate']:,}", c["status"], f"{c['sent']:,}",
             f"{c['publish_p50_us']:,.0f}", f"{c['end_to_end_p50_us']:,.0f}", f"{c['publish_delay_p50_us']:,.0f}",
             f"{c['load_average_per_core']:.1f}" if "load_average_per_core" in c else "–"] for c in run["cells"]]


def latency_truth(results: dict) -> dict:
    before, now = results["latency_truth_before"], results["latency_truth"]
    rows = _truth_rows(before, "replies stamped when the loop woke") + _truth_rows(now, "replies stamped on arrival")
    return {"table": table(["code", "commit", "repeat", "msgs/s", "status", "sent", "publish p50 (µs)",
                            "end-to-end p50 (µs)", "publish delay p50 (µs)", "load per core"], rows,
                           ["---", "---", "---:", "---:", "---", "---:", "---:", "---:", "---:", "---:"]),
            "before_at": before["measured_at"], "now_at": now["measured_at"]}


# ---- the interval close (bench/interval_close.py) -------------------------------------------------------------------

def _close_row(cell: dict) -> list[str]:
    figures = [f"{cell['format']}", cell["status"], f"{cell['sent']:,} / {cell['received']:,}"]
    for kind in ("end_to_end_latency_us", "delivery_latency_us", "publish_delay_us"):
        f = cell[kind]
        figures.append(f"{ms(f['p99'] / 1000)} / {ms(f['max'] / 1000)} / {ms(f['interval_max_median'] / 1000)}")
    return figures


def interval_close(results: dict) -> dict:
    ic = results["interval_close"]
    loads = ic["load_average_1_5_15"]
    return {"rate": f"{ic['rate']:,}", "seconds": str(ic["seconds"]), "size": f"{ic['size']:,}",
            "load": f"{loads['before'][0]:.0f} before, {loads['after'][0]:.0f} after",
            "table": table(["format", "status", "sent / received", "end-to-end (ms)", "delivery (ms)",
                            "publish delay (ms)"], [_close_row(c) for c in ic["cells"]])}


# ---- how late the Python loops stamp (bench/stamp_lag.py) -----------------------------------------------------------

def _lag_run(run: dict, prefix: str) -> dict:
    """When, where and at what load a stamp_lag run was measured, as `prefix`_when, _code and _load."""
    loads = run["load_average_1_5_15"]
    return {f"{prefix}when": run["measured_at"][:16].replace("T", " "), f"{prefix}code": run["code"],
            f"{prefix}load": f"{loads['before'][0]:.1f} before, {loads['after'][0]:.1f} after"}


def stamp_lag(results: dict) -> dict:
    lag, again, quiet, read, before = (results[name] for name in ("stamp_lag", "stamp_lag_again", "stamp_lag_quiet",
                                                                  "stamp_lag_read", "stamp_lag_before"))
    other = [{b["broker"]: b for b in run["brokers"]} for run in (again, quiet, read, before)]
    rows = [[b["broker"], f"{b['native_p50_us']:,.0f}", f"{b['python_p50_us']:,.0f}", f"{b['lag_median_us']:+,.0f}",
             ", ".join(f"{x:+,.0f}" for x in b["lag_per_trial_us"]),
             *(f"{run[b['broker']]['lag_median_us']:+,.0f}" if b["broker"] in run else "–" for run in other),
             _row_measured(lag, b)]
            for b in lag["brokers"]]
    return {"rate": f"{lag['rate']:,}", "seconds": f"{lag['seconds']:g}", "goal": str(lag["goal_us"]),
            "trials": str(len(lag["brokers"][0]["lag_per_trial_us"])), "host": lag["host"],
            **_lag_run(lag, ""), **_lag_run(again, "again_"), **_lag_run(quiet, "quiet_"), **_lag_run(read, "read_"),
            **_lag_run(before, "before_"), "quiet_trials": str(len(quiet["brokers"][0]["lag_per_trial_us"])),
            **client_stamp_lag(results),
            "table": table(["broker", "native publish p50 (µs)", "Python publish p50 (µs)",
                            "Python − native, median (µs)", "per trial (µs)", "again (µs)", "quiet (µs)",
                            "stamped at the read (µs)", "before (µs)", "measured"], rows,
                           ["---", "---:", "---:", "---:", "---", "---:", "---:", "---:", "---:", "---"])}


CLIENT_PATHS = {"redis-python-ack": "Redis acknowledgement, Python loop (control)",
                "kafka-python-ack": "Kafka acknowledgement, Python loop (delivery report: without the plugin)",
                "kafka-python-broker-ack": "Kafka acknowledgement, Python loop (on librdkafka's broker thread)",
                "kafka-native-ack": "Kafka acknowledgement, native loop (on librdkafka's broker thread)",
                "kafka-tls-python-broker-ack": "Kafka acknowledgement over TLS, Python loop (on librdkafka's broker thread)",
                "kafka-tls-native-ack": "Kafka acknowledgement over TLS, native loop (on librdkafka's broker thread)",
                "kafka-delivery": "Kafka delivery, as the poll returns (without the plugin)",
                "kafka-fetch-delivery": "Kafka delivery, at the Fetch response (on librdkafka's broker thread)",
                "kafka-tls-fetch-delivery": "Kafka delivery over TLS, at the Fetch response's arrival",
                "pulsar-delivery": "Pulsar delivery, pulsar-client (the consumer's fallback)",
                "pulsar-wire-delivery": "Pulsar delivery, the consumer that speaks the protocol (socket of its own)",
                "pulsar-client-ack": "Pulsar acknowledgement, pulsar-client (Python loop's fallback)",
                "pulsar-capi-ack": "Pulsar acknowledgement, C API (native loop's fallback)",
                "nats-py-ack": "NATS acknowledgement, nats-py (Python loop on TLS)",
                "rstream-ack": "RabbitMQ streams acknowledgement, rstream (Python loop following a failover)"}


def _us(x: float) -> str:
    return f"{x:+,.0f}".replace("-", "−") if abs(x) >= 10 else f"{x:+.1f}".replace("-", "−")


def client_stamp_lag(results: dict) -> dict:
    """bench/client_stamp_lag.py: each library path's stamp against the kernel's trace of the segment it stamps, with
    an earlier run on a busy host beside it (client_stamp_lag_busy: its p50, p99 and max)."""
    run, busy_run = results["client_stamp_lag"], results["client_stamp_lag_busy"]
    paths, busy = {p["path"]: p for p in run["paths"]}, {p["path"]: p for p in busy_run["paths"]}

    def loads(run_: dict) -> str:
        return spread([t["load_average_1min"] for p in run_["paths"] for t in p["trials"]], lambda x: f"{x:.1f}")

    def library(run_: dict) -> list[dict]:
        return [p for p in run_["paths"] if not p["control"]]

    def handled(path: str) -> str:  # handled_stamps counts the warm-up's acknowledgements too: of every one sent
        return (f"{sum(t.get('handled_stamps') or 0 for t in paths[path]['trials']):,} of "
                f"{round(run['trials'] * (run['seconds'] + run['warmup_s']) * run['rate']):,}")

    rows = []
    for p in run["paths"]:
        b = busy.get(p["path"])  # a path added after the busy host's run has none
        rows.append([CLIENT_PATHS.get(p["path"], p["path"]), f"`{p['trials'][0].get('stamps_as') or p['recorded_as']}`",
                     f"{p['n']:,}", _us(p["p50_us"]), _us(p["p90_us"]), _us(p["p99_us"]), _us(p["max_us"]),
                     ", ".join(_us(x) for x in p["p50_per_trial_us"]),
                     spread([t["load_average_1min"] for t in p["trials"]], lambda x: f"{x:.1f}"),
                     f"{_us(b['p50_us'])} / {_us(b['p99_us'])} / {_us(b['max_us'])}" if b else "—"])
    control, busy_control = paths["redis-python-ack"], busy["redis-python-ack"]
    busy_negative = [sum(t.get("negative", 0) for t in p["trials"]) for p in library(busy_run)]
    return {"client_when": run["measured_at"][:16].replace("T", " "), "client_code": run["code"],
            "client_kernel": run["kernel"], "client_rate": f"{run['rate']:,}", "client_seconds": f"{run['seconds']:g}",
            "client_trials": str(run["trials"]), "client_size": f"{run['size']:,}", "client_load": loads(run),
            "client_busy_when": busy_run["measured_at"][:16].replace("T", " "), "client_busy_code": busy_run["code"],
            "client_busy_load": loads(busy_run), "client_busy_trials": str(busy_run["trials"]),
            "client_busy_negative": f"{sum(busy_negative)} of {sum(p['n'] for p in library(busy_run)):,}",
            "client_control": f"{_us(control['min_us'])} to {_us(control['max_us'])}",
            "client_control_p50": _us(control["p50_us"]),
            "client_control_busy": f"{_us(busy_control['min_us'])} to {_us(busy_control['max_us'])}",
            "client_lost": str(run["perf_lost_events"] + busy_run["perf_lost_events"]),
            "client_p50_range": spread([p["p50_us"] for p in library(run)], lambda x: f"{x:,.0f}"),
            "client_p99_range": spread([p["p99_us"] for p in library(run)], lambda x: f"{x:,.0f}"),
            "client_max_range": spread([p["max_us"] / 1000 for p in library(run)], lambda x: f"{x:,.1f}"),
            "client_p50_busy": spread([p["p50_us"] for p in library(busy_run)], lambda x: f"{x:,.0f}"),
            "client_p99_busy": spread([p["p99_us"] for p in library(busy_run)], lambda x: f"{x:,.0f}"),
            "client_busy_max_range": spread([p["max_us"] / 1000 for p in library(busy_run)], lambda x: f"{x:,.0f}"),
            "client_shared": f"{sum(t['shared'] for t in busy_control['trials'])} of {busy_control['n']:,}",
            "client_handled": handled("kafka-native-ack"),
            "client_python_handled": handled("kafka-python-broker-ack"),
            "client_table": table(["path", "stamped as", "stamps", "p50 (µs)", "p90 (µs)", "p99 (µs)", "max (µs)",
                                   "p50 per trial (µs)", "load (1 min)", "busy host: p50 / p99 / max (µs)"], rows,
                                  ["---", "---", "---:", "---:", "---:", "---:", "---:", "---", "---:", "---:"]),
            **_client_fallbacks(results["client_stamp_lag_fallbacks"]),
            **_client_fetch([results["client_stamp_lag_fetch"], results["client_stamp_lag_fetch_again"],
                             results["client_stamp_lag_fetch_quiet"]]),
            **_client_pulsar(results["client_stamp_lag_pulsar"]),
            **_client_priority(results["client_stamp_lag_priority"]),
            **_client_arrival(results["client_stamp_lag_produce_read"], results["client_stamp_lag_arrival"]),
            **_client_tls(results["client_stamp_lag_tls"]),
            **_client_tls_fetch(results["client_stamp_lag_tls_fetch"])}


def _client_run(run: dict, key: str) -> dict:
    """A run of its own of some paths beside the control (the fallbacks' table's columns): when, code, perf's lost
    events, the table, the trials and the load, each under `client_<key>_`."""
    fill = _client_fallbacks(run)
    return {f"client_{key}_when": fill["client_fallback_when"], f"client_{key}_code": fill["client_fallback_code"],
            f"client_{key}_lost": fill["client_fallback_lost"], f"client_{key}_table": fill["client_fallback_table"],
            f"client_{key}_trials": str(run["trials"]),
            f"client_{key}_load": spread([t["load_average_1min"] for p in run["paths"] for t in p["trials"]],
                                         lambda x: f"{x:.1f}")}


def _client_tls(run: dict) -> dict:
    """Kafka's acknowledgements over TLS on both loops, beside the same over plain TCP and the control, in a run of
    their own (the local node's TLS listener)."""
    paths = {p["path"]: p for p in run["paths"]}
    tls = [paths[p] for p in ("kafka-tls-python-broker-ack", "kafka-tls-native-ack")]
    return {**_client_run(run, "tls"), "client_tls_p50": " and ".join(_us(p["p50_us"]) for p in tls),
            "client_tls_p99": " and ".join(_us(p["p99_us"]) for p in tls)}


def _client_tls_fetch(run: dict) -> dict:
    """Kafka's deliveries over TLS beside the same over plain TCP and the control, in a run of their own."""
    tls = {p["path"]: p for p in run["paths"]}["kafka-tls-fetch-delivery"]
    return {**_client_run(run, "tls_fetch"),
            "client_tls_fetch_p50": _us(tls["p50_us"]), "client_tls_fetch_p99": _us(tls["p99_us"]),
            "client_tls_fetch_max": _us(tls["max_us"]),
            "client_tls_fetch_stamped": ", ".join(sorted({t.get("stamps_as") or tls["recorded_as"]
                                                         for t in tls["trials"]}))}


def _client_arrival(read_run: dict, arrival_run: dict) -> dict:
    """The Kafka paths after librdkafka's reads were given the kernel's receive time (sendloop.c rdkafka_recvmsg),
    beside the run before it in which an acknowledgement was stamped at its Produce response's read on the broker
    thread (on_response_received, without the kernel's time): each a run of its own with the control."""
    before, after = ({p["path"]: p for p in run["paths"]} for run in (read_run, arrival_run))

    def figures(p: dict | None) -> str:
        return "—" if p is None else (f"`{p['trials'][0].get('stamps_as') or p['recorded_as']}`: {_us(p['p50_us'])} / "
                                      f"{_us(p['p90_us'])} / {_us(p['p99_us'])} / {_us(p['max_us'])} (n {p['n']:,})")

    rows = [[CLIENT_PATHS.get(path, path), figures(before.get(path)), figures(after.get(path))]
            for path in dict.fromkeys([*before, *after])]
    fill = {}
    for key, run in (("read", read_run), ("arrival", arrival_run)):
        fill.update({f"{key}_when": run["measured_at"][:16].replace("T", " "), f"{key}_code": run["code"],
                     f"{key}_trials": str(run["trials"]), f"{key}_lost": str(run["perf_lost_events"]),
                     f"{key}_load": spread([t["load_average_1min"] for p in run["paths"] for t in p["trials"]],
                                           lambda x: f"{x:.1f}")})
    def between(values: list[float]) -> str:
        low, high = _us(min(values)), _us(max(values))
        return low if low == high else f"{low} to {high}"

    acks = [after[p] for p in ("kafka-python-broker-ack", "kafka-native-ack")]
    thread_acks = [before[p] for p in ("kafka-python-broker-ack", "kafka-native-ack")]
    return {**{f"client_{k}": v for k, v in fill.items()},
            "client_arrival_ack_p50": between([p["p50_us"] for p in acks]),
            "client_read_ack_p50": between([p["p50_us"] for p in thread_acks]),
            "client_read_ack_p99": between([p["p99_us"] for p in thread_acks]),
            "client_arrival_ack_p99": between([p["p99_us"] for p in acks]),
            "client_arrival_ack_max": between([p["max_us"] for p in acks]),
            "client_arrival_shared": _shared_text(after),
            "client_arrival_control_p50": _us(after["redis-python-ack"]["p50_us"]),
            "client_arrival_fetch_p50": _us(after["kafka-fetch-delivery"]["p50_us"]),
            "client_arrival_fetch_p99": _us(after["kafka-fetch-delivery"]["p99_us"]),
            "client_arrival_fetch_p90": _us(after["kafka-fetch-delivery"]["p90_us"]),
            "client_read_fetch_p90": _us(before["kafka-fetch-delivery"]["p90_us"]),
            "client_read_fetch_p50": _us(before["kafka-fetch-delivery"]["p50_us"]),
            "client_read_fetch_p99": _us(before["kafka-fetch-delivery"]["p99_us"]),
            "client_arrival_table": table(["path", "at the response's read on the broker thread: p50 / p90 / p99 / "
                                           "max (µs)", "at the kernel's receive time: p50 / p90 / p99 / max (µs)"],
                                          rows)}


def _shared_text(paths: dict) -> str:
    """A sentence on the stamps of a run's acknowledgement and control paths matched to the segment of the stamp after
    them (client_stamp_lag's `shared`), or none."""
    found = {path: p for path, p in paths.items() if not path.startswith("kafka-fetch")
             and sum(t["shared"] for t in p["trials"])}
    if not found:
        return ""
    count = sum(t["shared"] for p in found.values() for t in p["trials"])
    maxima = ", ".join(f"{CLIENT_PATHS.get(path, path)} {_us(p['max_us'])}" for path, p in found.items())
    return f" The largest in the table ({maxima}) are {count} stamps matched to the segment of the stamp after them (the bench's `shared`)."


def _client_priority(run: dict) -> dict:
    """The Kafka paths with their processes and the broker at normal and at real-time priority (worker/priority.py),
    interleaved in one run (--priority both)."""
    by = {(p["path"], p["priority"]): p for p in run["paths"]}
    rows = []
    for path in dict.fromkeys(p["path"] for p in run["paths"]):
        row = [CLIENT_PATHS.get(path, path)]
        for way in ("normal", "realtime"):
            p = by.get((path, way))
            row.append("—" if p is None else f"{_us(p['p50_us'])} / {_us(p['p90_us'])} / {_us(p['p99_us'])} / "
                                             f"{_us(p['max_us'])} (n {p['n']:,})")
        rows.append(row)
    loads = [t["load_average_1min"] for p in run["paths"] for t in p["trials"]]
    return {"priority_when": run["measured_at"][:16].replace("T", " "), "priority_code": run["code"],
            "priority_trials": str(run["trials"]), "priority_rate": f"{run['rate']:,}",
            "priority_load": spread(loads, lambda x: f"{x:.1f}"),
            "priority_table": table(["path", "normal priority: p50 / p90 / p99 / max (µs)",
                                     "real-time priority: p50 / p90 / p99 / max (µs)"], rows)}


def _client_pulsar(run: dict) -> dict:
    """Pulsar's deliveries on the consumer that speaks the protocol (the kernel's receive time) and on pulsar-client's
    (as its receive returns), interleaved beside the control in a run of their own."""
    paths = {p["path"]: p for p in run["paths"]}
    wire_path, client_path = paths["pulsar-wire-delivery"], paths["pulsar-delivery"]
    return {**_client_run(run, "pulsar"),
            "client_pulsar_wire_p50": _us(wire_path["p50_us"]), "client_pulsar_wire_p99": _us(wire_path["p99_us"]),
            "client_pulsar_wire_max": _us(wire_path["max_us"]),
            "client_pulsar_client_p50": _us(client_path["p50_us"]),
            "client_pulsar_client_p99": _us(client_path["p99_us"])}


def _client_fetch(runs: list[dict]) -> dict:
    """Kafka's deliveries as the poll returns and at the Fetch response's read, interleaved beside the control, in two
    runs (the host busy with other work, then quieter), with how often the Fetch response stamped was the only one a
    poll's messages could have come from (the bound a cell records: worker/consumer.py ArrivalBound) and how much later
    it came at most in the other polls."""
    rows, fill = [], {}
    for key, run in zip(("", "_again", "_quiet"), runs):
        paths = {p["path"]: p for p in run["paths"]}
        fetch, old = paths["kafka-fetch-delivery"], paths["kafka-delivery"]
        bounds = [t["bound"] for t in fetch["trials"] if t.get("bound")]
        polls, single = sum(b["polls"] for b in bounds), sum(b["single_response_polls"] for b in bounds)
        spreads = [b["spread_max_us"] for b in bounds if b["spread_max_us"] is not None]
        load = spread([t["load_average_1min"] for p in run["paths"] for t in p["trials"]], lambda x: f"{x:.1f}")
        when = run["measured_at"][:16].replace("T", " ")
        rows += [[when, CLIENT_PATHS.get(p["path"], p["path"]),
                  f"`{p['trials'][0].get('stamps_as') or p['recorded_as']}`", f"{p['n']:,}", _us(p["p50_us"]),
                  _us(p["p90_us"]), _us(p["p99_us"]), _us(p["max_us"]), ", ".join(_us(x) for x in p["p50_per_trial_us"]),
                  spread([t["load_average_1min"] for t in p["trials"]], lambda x: f"{x:.1f}")] for p in run["paths"]]
        fill.update({f"client_fetch{key}_when": when, f"client_fetch{key}_code": run["code"],
                     f"client_fetch{key}_lost": str(run["perf_lost_events"]),
                     f"client_fetch{key}_trials": str(run["trials"]), f"client_fetch{key}_load": load,
                     f"client_fetch{key}_p50": _us(fetch["p50_us"]), f"client_fetch{key}_p99": _us(fetch["p99_us"]),
                     f"client_poll{key}_p50": _us(old["p50_us"]), f"client_poll{key}_p99": _us(old["p99_us"]),
                     f"client_fetch{key}_single": f"{single:,} of {polls:,}",
                     f"client_fetch{key}_spread": spread([x / 1000 for x in spreads], lambda x: f"{x:,.1f}") + " ms"
                     if spreads else "none (every poll after one response)"})
    return {**fill, "client_fetch_table": table(
        ["run", "path", "stamped as", "stamps", "p50 (µs)", "p90 (µs)", "p99 (µs)", "max (µs)", "p50 per trial (µs)",
         "load (1 min)"], rows, ["---", "---", "---", "---:", "---:", "---:", "---:", "---:", "---", "---:"])}


def _client_fallbacks(run: dict) -> dict:
    """The fallbacks' paths (nats-py, rstream), measured in a run of their own beside the control."""
    rows = [[CLIENT_PATHS.get(p["path"], p["path"]), f"`{p['trials'][0].get('stamps_as') or p['recorded_as']}`",
             f"{p['n']:,}", _us(p["p50_us"]), _us(p["p90_us"]), _us(p["p99_us"]), _us(p["max_us"]),
             ", ".join(_us(x) for x in p["p50_per_trial_us"]),
             spread([t["load_average_1min"] for t in p["trials"]], lambda x: f"{x:.1f}")] for p in run["paths"]]
    return {"client_fallback_when": run["measured_at"][:16].replace("T", " "), "client_fallback_code": run["code"],
            "client_fallback_lost": str(run["perf_lost_events"]),
            "client_fallback_table": table(["path", "stamped as", "stamps", "p50 (µs)", "p90 (µs)", "p99 (µs)",
                                            "max (µs)", "p50 per trial (µs)", "load (1 min)"], rows,
                                           ["---", "---", "---:", "---:", "---:", "---:", "---:", "---", "---:"])}


def _row_measured(lag: dict, row: dict) -> str:
    """When a stamp_lag row was measured (a run with --merge keeps the other brokers' rows of earlier runs), its
    code and the load average (1 min) before it."""
    run = {k: row.get(k, lag[k]) for k in ("measured_at", "code", "load_average_1_5_15")}
    return (f"{run['measured_at'][:16].replace('T', ' ')}, {run['code']}, load "
            f"{run['load_average_1_5_15']['before'][0]:.1f}")


def _started(figure: dict) -> str:
    return f"{figure['median_s']:.2f} s ({figure['modules']})"


def _startup_when(run: dict) -> str:
    return run["measured_at"][:16].replace("T", " ")


def startup(results: dict) -> dict:
    before, after, alone = (results["startup"][key] for key in ("before", "after", "before_alone"))
    rows = [[name, _started(before["commands"][name]), _started(after["commands"][name]),
             change(after["commands"][name]["median_s"] / before["commands"][name]["median_s"] - 1)]
            for name in before["commands"]]
    return {"runs": str(after["runs"]), "goal": f"{after['goal_s']:g}", "cores": str(after["cores"]),
            "python": after["python"], "before_when": _startup_when(before), "before_code": before["code"],
            "after_when": _startup_when(after), "after_code": after["code"],
            "before_load": f"{before['load_average_1_5_15']['before'][0]:.1f}",
            "after_load": f"{after['load_average_1_5_15']['before'][0]:.1f}",
            "table": table(["command", "before", "after", "change"], rows, ["---", "---:", "---:", "---:"]),
            "alone_load": f"{alone['load_average_1_5_15']['before'][0]:.1f}", "alone_when": _startup_when(alone),
            "alone": ", ".join(f"{name} {figure['median_s']:.2f} s" for name, figure in alone["commands"].items())}


# ---- a new broker's first cells (bench/first_touch.py) ----------------------------------------------------------------

FIRST_TOUCH_ARMS = {"cold": "as the product starts it, no warm-up",
                    "pre_touch": "with -XX:+AlwaysPreTouch (the heap written at start), no warm-up",
                    "warmed": "as the product starts it, then the run's broker warm-up (brokerbench.local.warmup)"}


def _first_cells(cells: list[dict]) -> str:
    return " → ".join(f"{c['broker_cpu_pct']:.0f}% / {ms(c['e2e_p99_us'] / 1000)}" for c in cells)


def first_touch(results: dict) -> dict:
    rows = results["first_touch"]["rows"]
    row = rows[-1]
    summary, kafka = row["summary"], row["kafka"]
    warm_ups = sorted({c["warm_up_s"] for c in kafka["cells"] if c["warm_up_s"] is not None})
    return {"when": row["when"], "commit": row["commit"], "mb": str(row["mb"]),
            "load": f"{row['load_average'][0]:.1f} → {row['load_average'][1]:.1f}",
            "balloon": "on" if row["balloon_reports_free_pages"] else "off",
            "first_touch": f"{summary['first_touch_us_median']:.2f}", "retouch": f"{summary['retouch_us_median']:.3f}",
            "touch_range": f"{min(t['first_touch_us'] for t in row['trials']):.1f} to "
                           f"{max(t['first_touch_us'] for t in row['trials']):.1f}",
            "touch_all": f"{min(t['first_touch_us'] for r in rows for t in r['trials']):.1f} to "
                         f"{max(t['first_touch_us'] for r in rows for t in r['trials']):.1f}",
            "rows": str(len(rows)),
            "jvm_plain": secs(summary["jvm_start_s_median"]["False"]),
            "jvm_touch": secs(summary["jvm_start_s_median"]["True"]),
            "trials": str(len({c["trial"] for c in kafka["cells"]})), "rate": count(kafka["rate"]),
            "seconds": f"{kafka['seconds']:g}", "warm_up": " to ".join(f"{w:g}" for w in warm_ups[::max(1, len(warm_ups) - 1)]),
            "table": table(["Kafka started", "cells 1 → 4: broker CPU / end-to-end p99 in ms (medians)"],
                           [[FIRST_TOUCH_ARMS[arm], _first_cells(cells)]
                            for arm, cells in summary["kafka_by_cell"].items()])}


# ---- the Redis cell's repeat p99 spread (bench/redis_tail.py) ------------------------------------------------------

REDIS_TAIL_WAYS = {"auto": "Redis rewrites its AOF on its own (the stack before)",
                   "between": "compacted between cells (the stack now)"}
REDIS_TAIL_BANDS = ((0, 5), (5, 20), (20, 50), (50, 101))  # other processes' CPU over a cell, % of the host


def _tail_spread(s: dict) -> str:
    return "–" if s["sd_log_p99"] is None else f"{s['sd_log_p99']:.2f} (n {s['n']})"


def redis_tail(results: dict) -> dict:
    rt = results["redis_tail"]
    loads = rt["load_average_1_5_15"]
    ways = [[REDIS_TAIL_WAYS[way], _tail_spread(s["all"]), _tail_spread(s["quiet_host"]),
             f"{s['all']['geomean_p99_us']:,.0f}", f"{s['all']['min_p99_us']:,.0f}–{s['all']['max_p99_us']:,.0f}",
             f"{s['cells_with_a_rewrite']}: " + (", ".join(f"{p:,.0f}" for p in s["p99_us_of_cells_with_a_rewrite"])
                                                 or "–")]
            for way, s in rt["summary"].items()]
    bands = []
    for low, high in REDIS_TAIL_BANDS:
        row = [f"{low}–{min(high, 100)}%"]
        for way in rt["summary"]:
            logs = [math.log(c["p99_us"]) for c in rt["cells"]
                    if c["way"] == way and low <= (c["others_cpu_pct"] or 0) < high]
            row.append("–" if not logs else f"{len(logs)}: {math.exp(statistics.fmean(logs)):,.0f}" +
                       (f", sd {statistics.stdev(logs):.2f}" if len(logs) > 1 else ""))
        bands.append(row)
    return {"when": rt["measured_at"][:16].replace("T", " "), "code": rt["code"], "cell": rt["cell"],
            "quiet": f"{rt['quiet_others_cpu_pct']:g}",
            "load": f"{loads['before'][0]:.1f} before, {loads['after'][0]:.1f} after",
            "ways": table(["AOF rewrite", "sd of log p99", "on a quiet host", "geometric mean p99 (µs)",
                           "p99 range (µs)", "cells with a rewrite: their p99 (µs)"], ways),
            "bands": table(["other processes' CPU",
                            *(f"{way}: cells, geometric mean p99 (µs), sd of log" for way in rt["summary"])], bands)}


def _spread_cells(s: dict) -> list[str]:
    return [f"{s['n']}", f"{s['geomean_p99_us']:,.0f}" if s["n"] else "–",
            f"{s['min_p99_us']:,.0f}–{s['max_p99_us']:,.0f}" if s["n"] else "–",
            "–" if s["sd_log_p99"] is None else f"{s['sd_log_p99']:.2f}",
            "–" if s.get("robust_sd_log_p99") is None else f"{s['robust_sd_log_p99']:.2f}"]


def redis_priority(results: dict) -> dict:
    rp = results["redis_priority"]
    loads = rp["load_average_1_5_15"]
    said = {way: sorted({c["priority"] or "–" for c in rp["cells"] if c["way"] == way}) for way in rp["summary"]}
    rows = [[f"{way} ({'; '.join(said[way])})", *_spread_cells(s["all"]), *_spread_cells(s["quiet_host"])[:1],
             "–" if s["quiet_host"]["sd_log_p99"] is None else f"{s['quiet_host']['sd_log_p99']:.2f}"]
            for way, s in rp["summary"].items()]
    delays = {way: sorted(c["publish_delay_p99_us"] for c in rp["cells"] if c["way"] == way
                          and c.get("publish_delay_p99_us") is not None) for way in rp["summary"]}
    return {"when": rp["measured_at"][:16].replace("T", " "), "code": rp["code"], "cell": rp["cell"],
            "quiet": f"{rp['quiet_others_cpu_pct']:g}",
            "load": f"{loads['before'][0]:.1f} before, {loads['after'][0]:.1f} after",
            "table": table(["priority (as the cells stored it)", "cells", "geometric mean p99 (µs)", "p99 range (µs)",
                            "sd of log p99", "robust sd of log p99", "cells on a quiet host", "their sd of log p99"],
                           rows),
            "delays": "; ".join(f"{way} {statistics.median(d):,.0f} µs (range {d[0]:,.0f}–{d[-1]:,.0f})"
                                for way, d in delays.items() if d)}


def realtime_guard(results: dict) -> dict:
    rg = results["realtime_guard"]
    pct = lambda v: "–" if v is None else f"{v:.0f}%"  # noqa: E731
    rows = []
    for n, run in enumerate(rg["runs"], 1):
        cells = run["cells"]
        first = [c for c in cells if n == 1 and c["cell"].startswith("kafka.") and c["cell"].endswith(".r0")]
        rest = [c for c in cells if c not in first]
        top = lambda kept, key: max((c[key] for c in kept if c[key] is not None), default=None)  # noqa: E731
        dropped = [c for c in cells if (c.get("priority") or {}).get("dropped")]
        rows.append([f"{n} ({run['run_id']})", len(cells),
                     sum((c.get("priority") or {}).get("workers") == "realtime" for c in cells),
                     len(dropped), pct(top(first, "share_max_pct")), pct(top(rest, "share_max_pct")),
                     pct(top(cells, "host_busy_max_pct"))])
    t = rg["thresholds"]
    return {"when": rg["measured_at"][:16].replace("T", " "), "code": rg["code"], "runs": len(rg["runs"]),
            "load": " → ".join(f"{v:.1f}" for v in rg["load_average_1"]),
            "cell_share": f"{t['cell_share_pct']:g}", "host_busy": f"{t['host_busy_pct']:g}",
            "table": table(["run", "cells", "at real-time priority", "put back",
                            "cell's share, the first run's first Kafka cells (max over intervals)",
                            "cell's share, the other cells", "host's CPUs busy (max)"], rows)}


# ---- the page -------------------------------------------------------------------------------------------------------

SECTIONS = {"intro": None, "harness": harness, "broker_tools": broker_tools, "cell_overhead": cell_overhead,
            "run_overhead": run_overhead,
            "test_suite": test_suite, "first_run": first_run, "reports": reports, "event_decode": event_decode,
            "api_load": api_load,
            "false_claims": false_claims, "aa_regression": aa_regression, "aa_schedule": aa_schedule,
            "latency_truth": latency_truth, "stamp_lag": stamp_lag, "interval_close": interval_close,
            "redis_tail": redis_tail, "redis_priority": redis_priority, "realtime_guard": realtime_guard,
            "startup": startup,
            "first_touch": first_touch}


def load_results(folder: Path) -> dict:
    return {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}


def render_section(name: str, results: dict, templates: Path = TEMPLATES) -> str:
    path = next(templates.glob(f"*-{name}.md"))
    fill = SECTIONS[name]
    return Template(path.read_text()).substitute(fill(results) if fill else {}).strip() + "\n"


def render(results: dict, templates: Path = TEMPLATES) -> str:
    return NOTICE + "\n" + "\n".join(render_section(name, results, templates) for name in SECTIONS)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default=str(RESULTS), help="the folder of result files")
    parser.add_argument("--out", default=str(OUT), help="the page to write or check")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 with a diff if the page differs")
    args = parser.parse_args(argv)
    text = render(load_results(Path(args.results)))
    out = Path(args.out)
    if args.check:
        old = out.read_text() if out.exists() else ""
        diff = list(difflib.unified_diff(old.splitlines(True), text.splitlines(True), str(out), "from the results"))
        sys.stdout.writelines(diff)
        return 1 if diff else 0
    out.write_text(text)
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
