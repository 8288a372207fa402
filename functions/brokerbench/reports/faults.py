"""What a cell measured under its faults (brokerbench.faults), from its events: the guarantee, and the figures
before, during and after.

- The guarantee: acknowledged messages lost (the accounting's `lost`: acknowledged, never delivered, no longer at
  the broker), duplicated and out of order, from the messages' own sequence numbers, with the broker's own count
  beside them; and send errors and unacknowledged sends, which the producer was told about (not a broken promise).
  A broker that ends the cell holding fewer messages than it acknowledged (its count below what the producers were
  told was stored) broke the promise too, even where the cell's consumers had read them first: a Redis master
  paused past the Sentinels' patience took writes on its open connections after it resumed, its consumers read
  them, and the failover discarded them when it became a replica (1,276 of 1,600 here). Those are `discarded`, and
  the guarantee did not hold.
- Unavailable: the longest stretch without an acknowledgement, to the acknowledgements' own stamps (producers),
  and without a delivery, to the polls that brought them (consumers).
- Before, during and after the fault window, and back to rate: brokerbench.faults.phases, worked out by the worker
  from its intervals' histograms (reports read no interval histograms) and stored with the cell.
"""

from __future__ import annotations

from ..faults import PHASES

NO_PHASES = {"window_s": None, **dict.fromkeys(PHASES), "back_to_rate_s": None}



def guarantee(cell: dict) -> dict:
    """The guarantee's figures of one cell result (reports.results): what held, from the accounting."""
    acked = cell.get("acked")
    lost = cell.get("lost")
    difference = (cell.get("broker_count") or {}).get("difference")
    discarded = None if difference is None else max(0, -difference)
    return {"acknowledged": acked, "lost": lost, "undelivered_or_lost": cell.get("undelivered_or_lost"),
            "duplicated": cell.get("duplicated"), "out_of_order": cell.get("out_of_order"),
            "send_errors": cell.get("send_errors"), "unacknowledged": cell.get("unacknowledged"),
            "broker_count": cell.get("broker_count"), "discarded": discarded,
            "held": None if lost is None else lost == 0 and not discarded}


def rows(cells: list[dict], ends: dict[str, dict]) -> list[dict]:
    """A row per cell that ran faults: its guarantee, the faults as applied, and the phases."""
    out = []
    for cell in cells:
        record = (ends.get(cell["cell_id"]) or {}).get("faults")
        if not record:
            continue
        out.append({"cell_id": cell["cell_id"], "broker": cell["broker"], "format": cell["format"],
                    "mode": cell["mode"], "status": cell["status"], "repeat": cell.get("repeat"),
                    "guarantee": guarantee(cell), "faults": record,
                    "unavailable_s": (record.get("producer_ack_gap") or {}).get("s"),
                    "consumer_unavailable_s": (record.get("consumer_receipt_gap") or {}).get("s"),
                    **(record.get("phases") or NO_PHASES)})
    return out


def _ms(figures: dict | None, name: str) -> str:
    value = ((figures or {}).get(name) or {}).get("p99")
    return "–" if value is None else f"{value / 1000:,.1f}"


def _applied(record: dict) -> str:
    return ", ".join(f"{a['kind']} {'+'.join(a['nodes']) or '–'} at {a['at_s']:.2f} s" for a in record["applied"])


def held_text(row: dict) -> str:
    """'acknowledged messages lost: 0 of 1,200 (sequence numbers; the broker's count agrees)', or the number lost."""
    g = row["guarantee"]
    count = g.get("broker_count") or {}
    agrees = count.get("difference") == 0 if count.get("difference") is not None else None
    check = "sequence numbers" + ("; the broker's count agrees" if agrees else
                                  "; the broker's count differs" if agrees is False else "")
    if g["lost"] is None:
        return f"acknowledged messages lost or undelivered: {g['undelivered_or_lost'] or 0:,} (the broker's backlog " \
               f"unknown)"
    text = f"acknowledged messages lost: {g['lost']:,} of {g['acknowledged'] or 0:,} ({check})"
    if g.get("discarded"):
        text += f"; the broker holds {g['discarded']:,} fewer than it acknowledged (discarded after the fault)"
    return text if g["lost"] == 0 and not g.get("discarded") else f"⚠ **{text}**"


def markdown_lines(report: dict) -> list[str]:
    """The report's Guarantees section: a row per cell that ran faults."""
    found = report.get("guarantees") or []
    if not found:
        return []
    lines = ["## Guarantees under faults", "",
             "Each cell's faults as applied, what the broker kept of what it acknowledged, how long the producers "
             "went without an acknowledgement, when the delivered rate was back within 10% of the rate before, and "
             "the end-to-end p99 (ms) before, during and after the fault window (reports/faults.py).", "",
             "| cell | faults | leader before → at end | guarantee | duplicated | send errors | unacknowledged | "
             "unavailable s, producers / consumers | back to rate s | e2e p99 ms before / during / after |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---|"]
    for row in found:
        g, record = row["guarantee"], row["faults"]
        leader = f"{record['applied'][0]['leader_before'] if record['applied'] else '–'} → {record.get('leader_at_end')}"
        unavailable = " / ".join("–" if row[k] is None else f"{row[k]:.2f}"
                                 for k in ("unavailable_s", "consumer_unavailable_s"))
        back = "never" if row["back_to_rate_s"] is None and row["before"] else \
            "–" if row["back_to_rate_s"] is None else f"{row['back_to_rate_s']:g}"
        p99s = " / ".join(_ms(row[name], "end_to_end_latency_us") for name in PHASES)
        lines.append(f"| {row['cell_id']} | {_applied(record)} | {leader} | {held_text(row)} | "
                     f"{g['duplicated'] or 0:,} | {g['send_errors'] or 0:,} | {g['unacknowledged'] or 0:,} | "
                     f"{unavailable} | {back} | {p99s} |")
    return lines + [""]


def cell_line(cell: dict) -> str | None:
    """One line for the terminal under a cell that ran faults (a result cell with its `faults`), None otherwise:
    'kafka.raw...: kill 2 at 2.56 s, restart 2 at 6.25 s · leader 2 → 3 · acknowledged messages lost: 0 of 10,000
    (...) · unavailable 11.07 s (producers) / 11.06 s (consumers)'."""
    record = cell.get("faults")
    if not record:
        return None
    row = {"guarantee": guarantee(cell)}
    before = record["applied"][0]["leader_before"] if record.get("applied") else None
    gaps = [(record.get(k) or {}).get("s") for k in ("producer_ack_gap", "consumer_receipt_gap")]
    unavailable = " / ".join("–" if g is None else f"{g:.2f} s" for g in gaps)
    return (f"{cell['cell_id']}: {_applied(record) or 'no fault applied'} · leader {before or '–'} → "
            f"{record.get('leader_at_end') or '–'} · {held_text(row).replace('⚠ **', '⚠ ').replace('**', '')} · "
            f"unavailable {unavailable} (producers / consumers)")
