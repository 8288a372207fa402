"""The comparison table: per (size, rate, mode), one row per broker × format, from results.json."""

from __future__ import annotations

from itertools import groupby

from rich.table import Table

from .model import SUSTAINED_RATE


def _ms(us: float | None) -> str:
    return "-" if us is None else f"{us / 1000:.2f}"


def _us(ns: float | None) -> str:
    return "-" if ns is None else f"{ns / 1000:.1f}"


def _group_key(cell: dict):
    rate = cell["rate_target"]
    return (cell["size_bytes"], rate if rate != "max" else float("inf"), cell["mode"])


def comparison_tables(results: dict) -> list[Table]:
    tables = []
    cells = sorted(results["cells"], key=lambda c: (_group_key(c), c["broker"], c["format"], c["repeat"]))
    for (size, rate, mode), group in groupby(cells, key=_group_key):
        rate_text = "max rate" if rate == float("inf") else f"{int(rate):,} msgs/s"
        table = Table(title=f"{size:,} B ({results['spec'].get('size_basis', 'record')} basis) · {rate_text} · {mode} mode",
                      title_justify="left", header_style="bold")
        for name, justify in [("broker", "left"), ("format", "left"), ("bytes", "right"), ("msgs/s", "right"),
                              ("MB/s", "right"), ("e2e p50 ms", "right"), ("e2e p99 ms", "right"),
                              ("e2e p99.9 ms", "right"), ("delay p99 ms", "right"), ("enc µs", "right"),
                              ("dec µs", "right"), ("lost", "right"), ("status", "left")]:
            table.add_column(name, justify=justify)
        for cell in group:
            label = cell["format"] + (f" #{cell['repeat']}" if results["spec"].get("repeats", 1) > 1 else "")
            if cell["status"] != "completed":
                table.add_row(cell["broker"], label, *["-"] * 10, f"[red]{cell['status']}[/]: {cell.get('reason', '')}")
                continue
            e2e = cell["end_to_end_latency_us"]
            rate = f"{cell['throughput_msgs_per_s']:,.0f}"
            kept_up = cell["rate_target"] == "max" or cell["rate_achieved"] >= SUSTAINED_RATE * cell["rate_target"]
            table.add_row(
                cell["broker"], label, f"{cell['encoded_bytes']:,.0f}", rate if kept_up else f"[yellow]{rate}[/]",
                f"{cell['throughput_mb_per_s']:,.2f}", _ms(e2e["p50"]), _ms(e2e["p99"]), _ms(e2e["p999"]),
                _ms(cell["publish_delay_us"]["p99"]), _us(cell["encode_ns"]["p50"]), _us(cell["decode_ns"]["p50"]),
                "-" if cell["lost"] is None else (f"{cell['lost']:,}" if not cell["lost"] else f"[red]{cell['lost']:,}[/]"),
                "ok" if kept_up else "[yellow]behind[/]",
            )
        tables.append(table)
    return tables
