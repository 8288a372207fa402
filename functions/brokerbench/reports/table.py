"""The comparison table: per (size, rate, mode), one row per broker × format, from results.json.

Above each table a caption says what the mode means on each broker, the acks and persistence in force
(each broker's plug-in words it), and on a second line what each broker's acknowledgement waited for (a disk sync,
replicas, or memory only: results.json `durability`), so brokers are read on the same footing. A percentile finer than the cell's sample
supports is not shown (see model.min_samples).

A cell is read as a typed row (reports.rows.ResultCell), converted once per table: what it does not have is None.
"""

from __future__ import annotations

from itertools import groupby

import msgspec
from rich.markup import escape
from rich.table import Table

from .. import host
from ..figures import DELIVERED_SHARE_RULE, STAMP_MARK, share_short, share_text, stamped_late
from ..limit import CONSUMER_LEGEND, CONSUMER_MARK, LEGEND, MARK, client_bound, consumer_bound, rate_found_text
from ..metrics import Metric, net_figures, sample_of, shown_in
from ..registry import UnknownBroker, durability_label, for_target
from .model import LOSS_CLASSES, MAX_RATE_NOTE, PERCENTILES, min_samples, need_label
from .rows import ResultCell, result_cell, run_spec

SUSTAINED_RATE = 0.99  # the fallback for results written before cells carried their verdict
HOST_BUSY = "host busy"  # the mark of a cell measured on a busy host (brokerbench.host)
VERDICT_STYLE = {"sustainable": "green", "unsustainable": "yellow", "inconclusive": "dim", "max-rate": "cyan"}
# Which count a latency object's sample is, when the object does not carry its own count (brokerbench.metrics).
SAMPLE_OF = sample_of()
# The table's metric columns (brokerbench.metrics), and how each unit is printed.
COLUMNS = shown_in("terminal")
NETS = net_figures()  # a codec column shows its p50 as measured / net of the call floor


def _ms(us: float | None) -> str:
    return "-" if us is None else f"{us / 1000:.2f}"


def _ns(ns: float | None) -> str:
    return "-" if ns is None else f"{ns:,.0f}"


LATENCY_FORMATS = {"ms": _ms, "ns": _ns}  # a latency percentile's unit as shown -> its text


def codec_cell(cell: ResultCell, field: str) -> str:
    """The p50 as measured / net of the cell's call floor (results.encode_net_ns), in ns; the net '-' for a cell
    stored before the floor was measured."""
    measured = percentile(cell, field, "p50", _ns)
    if cell.latency(field).p50 is None or measured.startswith("[dim]"):  # nothing measured, or withheld
        return measured
    return f"{measured} / {_ns(cell.latency(field.replace('_ns', '_net_ns')).p50)}"


def _range(values: list[float]) -> str:
    low, high = min(values), max(values)
    return f"{low:,.1f}" if round(low, 1) == round(high, 1) else f"{low:,.1f}–{high:,.1f}"


def floor_note(results: dict) -> str | None:
    """The call floor the codec columns' net figures are net of, named once: its range over the run's cells."""
    done = [c for c in map(result_cell, results["cells"]) if c.status == "completed"]
    floors = [c.codec_floor_ns for c in done if c.codec_floor_ns]
    if not done:
        return None
    text = "enc / dec ns: the p50 as measured / net of its cell's call floor (two clock reads around a no-op call"
    if floors:
        text += (f": encode {_range([f.encode_ns for f in floors])} ns, decode "
                 f"{_range([f.decode_ns for f in floors])} ns in this run")
    return text + ")" + ("; net '-': stored before the floor was measured" if len(floors) < len(done) else "")


def _group_key(cell: ResultCell):
    rate = cell.rate_target
    return (cell.size_bytes, (0, rate) if isinstance(rate, (int, float)) else (1, str(rate)), cell.mode)


def sample_count(cell: dict | ResultCell, field: str) -> int | None:
    """How many values the cell's latency object was computed from (a results.json cell, or its typed row)."""
    cell = cell if isinstance(cell, ResultCell) else result_cell(cell)
    count = cell.latency(field).count
    if count is not None:
        return count
    count = getattr(cell, SAMPLE_OF[field])
    if count is None and SAMPLE_OF[field] == "acked":
        count = cell.sent
    return count


def percentile(cell: ResultCell, field: str, key: str, fmt) -> str:
    """The value, or n<… when the sample is too small for this percentile."""
    value = getattr(cell.latency(field), key)
    bound = getattr(cell.latency(field).lower_bounds, key)
    if value is None:
        return "-" if bound is None else f"[yellow]≥ {fmt(bound)}[/]"  # missing messages at +∞: a lower bound
    n, need = sample_count(cell, field), min_samples(PERCENTILES[key]) if key in PERCENTILES else 1
    if n is not None and n < need:
        return f"[dim]{need_label(need)}[/]"
    return fmt(value)


def loss_cell(cell: dict | ResultCell) -> str:
    """0, or every loss class that occurred, in red (and the broker's count when it disagrees, and an accounting
    residual); undelivered and lost the broker could not tell apart are their sum, in yellow: not loss; so are the
    messages due and never sent (the producer fell behind)."""
    cell = cell if isinstance(cell, ResultCell) else result_cell(cell)
    classes = {name: getattr(cell, name) for name in LOSS_CLASSES}
    if cell.unacknowledged is None and cell.unacked is not None:
        classes["unacknowledged"] = cell.unacked
    unknown = cell.undelivered_or_lost if cell.lost is None and cell.received is not None else None
    parts = [f"{name.replace('_', ' ')} {value:,}" for name, value in classes.items() if value]
    difference = cell.broker_count.difference if cell.broker_count else None
    if difference:
        parts.append(f"broker count {difference:+,}")
    if cell.residual:
        parts.append(f"accounting residual {cell.residual:+,}")
    text = f"[red]{', '.join(parts)}[/]" if parts else ""
    if unknown:
        text += ("; " if text else "") + f"[yellow]undelivered or lost {unknown:,} (broker backlog unknown)[/]"
    if cell.not_sent:  # due and never sent: the producer fell behind (no loss at the broker)
        text += ("; " if text else "") + f"[yellow]not sent {cell.not_sent:,} (producer behind)[/]"
    if text:
        return text
    if cell.has_loss:
        return "[red]loss[/]"
    return "-" if all(v is None for v in classes.values()) else "0"


def verdict_cell(cell: dict | ResultCell) -> str:
    cell = cell if isinstance(cell, ResultCell) else result_cell(cell)
    if cell.rate_target == "sustainable":  # a search: the rate found is the result
        found = cell.max_sustainable_rate
        steps = len(cell.search.steps) if cell.search else 0
        held = cell.search.sustainable_for_s if cell.search else None
        held = f"held {held:,.0f} s, " if held is not None else ""
        text = f"max sustainable {rate_found_text(found, cell.limit)} ({held}{steps} steps)" if found else None
        return escape(text) if text else "[red]none found[/]"
    verdict = cell.verdict
    if verdict is None:  # results stored before the verdict: only the rate can be checked
        if cell.rate_target == "max":
            verdict = "max-rate"
        else:
            kept_up = cell.rate_achieved >= SUSTAINED_RATE * cell.rate_target
            return "rate ok (no verdict)" if kept_up else "[yellow]behind[/]"
    bound = f" · [yellow]{MARK}[/]" if client_bound(cell.limit) else ""
    bound += f" · [yellow]{CONSUMER_MARK}[/]" if consumer_bound(cell.limit) else ""
    bound += f" · [red]{share_text(cell.delivered_share)}[/]" if share_short(cell.delivered_share) else ""
    return f"[{VERDICT_STYLE[verdict]}]{verdict}[/]{bound}{host_mark(cell)}"


def host_mark(cell: ResultCell) -> str:
    """' · host busy (CPU pressure 78%)' for a cell measured on a busy host (brokerbench.host), in red."""
    if not cell.busy:
        return ""
    pressure = cell.host.cpu_pressure_pct
    return f" · [red]{HOST_BUSY}" + (f" (CPU pressure {pressure:.0f}%)" if pressure is not None else "") + "[/]"


def limit_note(results: dict) -> str | None:
    """The legends of the client-bound and consumer-bound marks, for those some cell carries."""
    notes = [f"{mark}: {legend}" for mark, legend, bound in ((MARK, LEGEND, client_bound),
                                                            (CONSUMER_MARK, CONSUMER_LEGEND, consumer_bound))
             if any(bound(c.limit) for c in map(result_cell, results["cells"]))]
    if any(share_short(c.delivered_share) for c in map(result_cell, results["cells"])):
        notes.append(DELIVERED_SHARE_RULE)
    return "; ".join(notes) or None


def host_note(results: dict) -> str | None:
    """The legend of the host-busy mark, when some cell carries it: which cells and why, and the rule."""
    busy = [c for c in map(result_cell, results["cells"]) if c.busy]
    if not busy:
        return None
    why = "; ".join(f"{c.broker} {c.format} #{c.repeat}: {host.text(msgspec.structs.asdict(c.host))}" for c in busy)
    return f"{HOST_BUSY} ({len(busy)} cell{'s' if len(busy) != 1 else ''}: {why}). {host.RULE}"


def caption(results: dict, brokers: list[str], mode: str, rate) -> str:
    """What the mode means per broker, the acks and persistence in force, and the latency basis."""
    spec = run_spec(results["spec"])
    client = spec.client or next((c.client for c in map(result_cell, results["cells"]) if c.client), {})
    targets = results["environment"]["brokers"]
    endpoints = spec.targets or {}
    parts = []
    for broker in brokers:
        try:
            plugin = for_target(broker, endpoints.get(broker))
        except UnknownBroker:  # a run of a broker no longer registered
            parts.append(f"{broker} {mode}")
            continue
        parts.append(f"{broker} {plugin.describe_mode(mode, client, targets.get(broker))}")
    text = "; ".join(parts)
    if rate == "max":
        text += f". {MAX_RATE_NOTE}"
    return text + durability_line(results, brokers)


def durability_line(results: dict, brokers: list[str]) -> str:
    """The caption's second line: what each broker's acknowledgement waited for (results.json `durability`)."""
    stated = results["durability"]
    parts = [f"{broker} {durability_label(stated[broker])}" for broker in brokers if broker in stated]
    return ("\ndurability: " + "; ".join(parts)) if parts else ""


def column_text(cell: ResultCell, metric: Metric, with_net: bool) -> str:
    """A metric's column in a completed cell's row: a plain number to its digits, a latency percentile in its unit
    (or n<… where the sample is too small), a codec's p50 as measured / net."""
    if with_net:
        return codec_cell(cell, metric.field)
    if metric.stat is not None:
        return percentile(cell, metric.field, metric.stat, LATENCY_FORMATS[metric.unit])
    value = getattr(cell, metric.field)
    return "-" if value is None else f"{value:,.{metric.digits}f}"


def comparison_tables(results: dict) -> list[Table]:
    tables = []
    spec = run_spec(results["spec"])
    repeats = spec.repeats
    cells = sorted(map(result_cell, results["cells"]), key=lambda c: (_group_key(c), c.broker, c.format, c.repeat))
    for (size, _, mode), group in groupby(cells, key=_group_key):
        group = list(group)
        rate = group[0].rate_target
        rate_text = f"{int(rate):,} msgs/s" if isinstance(rate, (int, float)) else (
            "max rate (latency from enqueue)" if rate == "max" else f"{rate} rate")
        brokers = sorted({c.broker for c in group})
        table = Table(title=f"{size:,} B ({spec.size_basis} basis) · {rate_text} · {mode} mode"
                            f"\n[dim]{escape(caption(results, brokers, mode, rate))}[/]",
                      title_justify="left", header_style="bold")
        for name, justify in [("broker", "left"), ("format", "left"),
                              *((m.column + (" / net" if key in NETS else ""), "right") for key, m in COLUMNS.items()),
                              ("loss", "right"), ("status", "left")]:
            table.add_column(name, justify=justify, no_wrap=name.endswith("/ net"))  # measured / net on one line
        for cell in group:
            label = cell.format + (f" #{cell.repeat}" if repeats > 1 else "")
            label += f" {STAMP_MARK}" if stamped_late(cell.ack_stamps, cell.delivery_stamps) else ""  # results.stamps_note
            if cell.status != "completed":
                table.add_row(cell.broker, label, *["-"] * len(COLUMNS), loss_cell(cell),
                              f"[red]{cell.status}[/]: {escape(cell.reason or '')}")
                continue
            table.add_row(cell.broker, label, *(column_text(cell, m, key in NETS) for key, m in COLUMNS.items()),
                          loss_cell(cell), verdict_cell(cell))
        tables.append(table)
    return tables
