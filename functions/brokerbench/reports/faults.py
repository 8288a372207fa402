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
- Per broker and durability setting (`by_setting`): the cells' guarantees summed, beside what the broker's own
  documentation promises for an acknowledged message when a node fails at those settings (the plug-in's durability
  statement, registry.durability's `failover`). A loss where a promise was made is a broken promise (or a defect
  of the run) and says so; a loss where nothing is promised (Kafka acks=1, Redis's asynchronous replication) is an
  expected finding, not a defect of the tool.
"""

from __future__ import annotations

from msgspec import Struct, UnsetType, convert, to_builtins

from ..eventdata import Faults, Gap, Phase, build_types, given
from ..faults import PHASES
from ..registry import FAILOVER_NOT_STATED, NOT_STATED, durability_label
from .rows import Durability, ResultCell, result_cell, section

NO_PHASES = {"window_s": None, **dict.fromkeys(PHASES), "back_to_rate_s": None}
COUNTS = ("acknowledged", "lost", "undelivered_or_lost", "duplicated", "out_of_order", "send_errors", "unacknowledged")
# A setting's verdict, from its cells' losses and the broker's promise (by_setting).
VERDICTS = {
    "held": "held: no acknowledged message lost",
    "broken": "BROKEN: acknowledged messages lost where the broker promises none at these settings (a defect of the "
              "broker, or of the run: read its cells)",
    "expected": "lost, as allowed: the broker promises nothing at these settings; an expected finding, not a defect",
    "discarded": "discarded, as allowed: the broker promises nothing at these settings; an expected finding, not a "
                 "defect",
    "lost": "lost: the broker's plug-in does not say what it promises at these settings",
    "unknown": "cannot tell: the broker's backlog was not read, so a loss cannot be told from an undelivered message",
}


def guarantee(cell: dict | ResultCell) -> dict:
    """The guarantee's figures of one cell result (reports.results): what held, from the accounting."""
    c = cell if isinstance(cell, ResultCell) else result_cell(cell)
    count = c.broker_count
    difference = None if count is None else count.difference
    discarded = None if difference is None else max(0, -difference)
    return {"acknowledged": c.acked, "lost": c.lost, "undelivered_or_lost": c.undelivered_or_lost,
            "duplicated": c.duplicated, "out_of_order": c.out_of_order, "send_errors": c.send_errors,
            "unacknowledged": c.unacknowledged, "broker_count": None if count is None else to_builtins(count),
            "discarded": discarded, "held": None if c.lost is None else c.lost == 0 and not discarded}


def fault_record(data: dict) -> Faults:
    """A cell's faults as stored (CellCompleted or CellFailed `faults`, or a results cell's copy), typed: a field
    the stored record left out is UNSET, read through eventdata.given."""
    return convert(data, Faults)


def _gap_s(gap: Gap | None | UnsetType) -> float | None:
    """A gap's length in seconds; None where no gap was measured."""
    found = given(gap)
    return None if found is None else given(found.s)


def _row(cell: dict, record: dict) -> dict:
    c, applied = result_cell(cell), fault_record(record)
    return {"cell_id": c.cell_id, "broker": c.broker, "format": c.format, "mode": c.mode, "status": c.status,
            "repeat": c.repeat, "guarantee": guarantee(c), "faults": record,
            "unavailable_s": _gap_s(applied.producer_ack_gap),
            "consumer_unavailable_s": _gap_s(applied.consumer_receipt_gap),
            **(record["phases"] if given(applied.phases) is not None else NO_PHASES)}  # the phases as stored


class _Ended(Struct, kw_only=True):
    """A cell's end (CellCompleted or CellFailed data) as the fault rows read it: its faults' record as stored (None:
    the cell applied none)."""
    faults: dict | None = None


def rows(cells: list[dict], ends: dict[str, dict]) -> list[dict]:
    """A row per cell that ran faults: its guarantee, the faults as applied (from its CellCompleted or CellFailed
    in `ends`, by cell id: a cell that did not end has none), and the phases."""
    return [_row(cell, record) for cell in cells
            if (end := ends.get(cell["cell_id"])) is not None and (record := convert(end, _Ended).faults)]


def result_rows(cells: list[dict]) -> list[dict]:
    """The same rows from results.json's cells, which carry their faults' record (figures.cell_result)."""
    return [_row(cell, record) for cell in cells if (record := result_cell(cell).faults)]


def _sum(values: list) -> int | None:
    return None if any(v is None for v in values) else sum(values)


def _agrees(guarantees: list[dict]) -> bool | None:
    """Whether the broker's own count agreed with the sequence numbers in every cell (None: never read)."""
    differences = [(g["broker_count"] or {"difference": None})["difference"] for g in guarantees]
    known = [d for d in differences if d is not None]
    return None if not known else all(d == 0 for d in known)


def verdict(lost: int | None, promised: bool | None, discarded: int = 0) -> str:
    """held | broken | expected | discarded | lost | unknown (VERDICTS). A broker that holds fewer than it
    acknowledged (`discarded`) did not hold the guarantee either, whatever its consumers read first; where nothing
    was lost before delivery and nothing was promised, the verdict says that it was discarded, not lost."""
    if lost is None and not discarded:
        return "unknown"
    if not lost and not discarded:
        return "held"
    if promised is False and lost == 0:
        return "discarded"
    return {True: "broken", False: "expected", None: "lost"}[promised]


def by_setting(rows: list[dict], durability: dict[str, dict]) -> list[dict]:
    """A row per broker of the run (one durability setting each): its faulted cells' guarantees summed, the longest
    unavailability and slowest return to rate among them, and the verdict against the broker's promise."""
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(row["broker"], []).append(row)
    out = []
    for broker, found in groups.items():
        stated = durability.get(broker) or NOT_STATED  # a broker the run states nothing of
        failover = convert(stated, Durability).failover
        promise = FAILOVER_NOT_STATED if failover is None else to_builtins(failover)
        guarantees = [r["guarantee"] for r in found]
        counts = {name: sum(g[name] or 0 for g in guarantees) for name in COUNTS}
        counts["lost"] = _sum([g["lost"] for g in guarantees])  # unknown in any cell: unknown for the setting
        counts["discarded"] = sum(g["discarded"] or 0 for g in guarantees)
        gaps = [r["unavailable_s"] for r in found if r["unavailable_s"] is not None]
        backs = [r["back_to_rate_s"] for r in found]
        out.append({"broker": broker, "setting": stated["text"], "label": durability_label(stated),
                    "promise": promise, "cells": len(found), **counts, "broker_count_agrees": _agrees(guarantees),
                    "unavailable_s": max(gaps) if gaps else None,
                    "back_to_rate_s": None if not backs or None in backs else max(backs),
                    "verdict": verdict(counts["lost"], promise["promised"], counts["discarded"])})
    return out


def kept_text(lost: int | None, acknowledged: int, undelivered_or_lost: int, check: str, discarded: int) -> str:
    """What the broker kept of what it acknowledged, in words: the messages lost ('acknowledged messages lost: 0 of
    412,331 (verified by sequence numbers; the broker's count agrees)'), and what it discarded after its consumers
    had read them (a demoted Redis master), said as such: 'every one of 1,600 acknowledged messages delivered (...);
    the broker then discarded 1,276 of them (its count after the fault)'."""
    if lost is None:
        return f"acknowledged messages lost or undelivered: {undelivered_or_lost:,} (the broker's backlog unknown)"
    if discarded and not lost:
        return (f"every one of {acknowledged:,} acknowledged messages delivered ({check}); the broker then discarded "
                f"{discarded:,} of them (its count after the fault holds that many fewer than it acknowledged)")
    text = f"acknowledged messages lost: {lost:,} of {acknowledged:,} ({check})"
    if discarded:
        text += f"; the broker holds {discarded:,} fewer than it acknowledged (discarded after the fault)"
    return text


def setting_text(row: dict) -> str:
    """A broker and setting's kept_text, its cells summed."""
    check = "verified by sequence numbers" + {True: "; the broker's count agrees",
                                              False: "; the broker's count differs", None: ""}[row["broker_count_agrees"]]
    return kept_text(row["lost"], row["acknowledged"], row["undelivered_or_lost"], check, row["discarded"])


def setting_lines(settings: list[dict]) -> list[str]:
    """The per broker and setting table (markdown), a loss where a promise was made in bold with a warning sign."""
    if not settings:
        return []
    lines = ["| broker | durability | what the broker promises when a node fails | guarantee | verdict | cells | "
             "duplicated | send errors | unavailable s (longest) |", "|---|---|---|---|---|---:|---:|---:|---:|"]
    for row in settings:
        verdict_text = VERDICTS[row["verdict"]]
        if row["verdict"] == "broken":
            verdict_text = f"⚠ **{verdict_text}**"
        gap = "–" if row["unavailable_s"] is None else f"{row['unavailable_s']:.2f}"
        lines.append(f"| {row['broker']} | {row['label']}: {row['setting']} | {row['promise']['text']} | "
                     f"{setting_text(row)} | {verdict_text} | {row['cells']} | {row['duplicated']:,} | "
                     f"{row['send_errors']:,} | {gap} |")
    return lines + [""]


def _p99_ms(phase: Phase | None) -> str:
    """A phase's end-to-end p99 in ms; a dash where the phase had no interval or no end-to-end latency."""
    figures = None if phase is None else phase.end_to_end_latency_us
    return "–" if figures is None else f"{figures.p99 / 1000:,.1f}"


def _applied(record: Faults) -> str:
    """The actions as applied (a network fault with its effect), then any managed call the service refused (AWS:
    `failed`, with the error's code)."""
    done = [f"{a.kind}{' ' + a.effect if given(a.effect) else ''} {'+'.join(a.nodes) or '–'} at {a.at_s:.2f} s"
            for a in record.applied]
    refused = [f"{a.kind} {'+'.join(given(a.nodes, [])) or '–'} REFUSED at {a.at_s:.2f} s ({a.error['code']})"
               for a in given(record.failed, [])]
    return ", ".join(done + refused)


def held_text(row: dict) -> str:
    """A cell's kept_text: 'acknowledged messages lost: 0 of 1,200 (sequence numbers; the broker's count agrees)', a
    loss or a discard in bold with a warning sign."""
    g = row["guarantee"]
    difference = (g["broker_count"] or {"difference": None})["difference"]
    agrees = None if difference is None else difference == 0
    check = "sequence numbers" + ("; the broker's count agrees" if agrees else
                                  "; the broker's count differs" if agrees is False else "")
    text = kept_text(g["lost"], g["acknowledged"] or 0, g["undelivered_or_lost"] or 0, check, g["discarded"] or 0)
    return text if g["lost"] is None or (g["lost"] == 0 and not g["discarded"]) else f"⚠ **{text}**"


def markdown_lines(report: dict) -> list[str]:
    """The report's Guarantees section: a row per cell that ran faults."""
    typed = section(report)
    found = typed.guarantees
    if not found:
        return []
    lines = ["## Guarantees under faults", "", "Per broker and durability setting, every cell that ran faults:", "",
             *setting_lines(typed.guarantees_by_setting),
             "Each cell's faults as applied, what the broker kept of what it acknowledged, how long the producers "
             "went without an acknowledgement, when the delivered rate was back within 10% of the rate before, and "
             "the end-to-end p99 (ms) before, during and after the fault window (reports/faults.py).", "",
             "| cell | faults | leader before → at end | guarantee | duplicated | send errors | unacknowledged | "
             "unavailable s, producers / consumers | back to rate s | e2e p99 ms before / during / after |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---|"]
    for row in found:
        g, record = row["guarantee"], fault_record(row["faults"])
        leader = f"{record.applied[0].leader_before if record.applied else '–'} → {record.leader_at_end}"
        unavailable = " / ".join("–" if row[k] is None else f"{row[k]:.2f}"
                                 for k in ("unavailable_s", "consumer_unavailable_s"))
        back = "never" if row["back_to_rate_s"] is None and row["before"] else \
            "–" if row["back_to_rate_s"] is None else f"{row['back_to_rate_s']:g}"
        phases = given(record.phases)
        p99s = " / ".join(_p99_ms(None if phases is None else getattr(phases, name)) for name in PHASES)
        lines.append(f"| {row['cell_id']} | {_applied(record)} | {leader} | {held_text(row)} | "
                     f"{g['duplicated'] or 0:,} | {g['send_errors'] or 0:,} | {g['unacknowledged'] or 0:,} | "
                     f"{unavailable} | {back} | {p99s} |")
    return lines + [""]


def cell_line(cell: dict) -> str | None:
    """One line for the terminal under a cell that ran faults (a result cell with its `faults`), None otherwise:
    'kafka.raw...: kill 2 at 2.56 s, restart 2 at 6.25 s · leader 2 → 3 · acknowledged messages lost: 0 of 10,000
    (...) · unavailable 11.07 s (producers) / 11.06 s (consumers)'."""
    c = result_cell(cell)
    if not c.faults:
        return None
    record, row = fault_record(c.faults), {"guarantee": guarantee(c)}
    before = record.applied[0].leader_before if record.applied else None
    gaps = [_gap_s(record.producer_ack_gap), _gap_s(record.consumer_receipt_gap)]
    unavailable = " / ".join("–" if g is None else f"{g:.2f} s" for g in gaps)
    return (f"{c.cell_id}: {_applied(record) or 'no fault applied'} · leader {before or '–'} → "
            f"{record.leader_at_end or '–'} · {held_text(row).replace('⚠ **', '⚠ ').replace('**', '')} · "
            f"unavailable {unavailable} (producers / consumers)")


build_types(globals())  # msgspec's information on its Structs, built now (eventdata.build_types)
