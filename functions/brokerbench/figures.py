"""One cell's figures from its end event, pure: latency summaries decoded exactly from the stored
histograms, the message accounting, throughput over the delivery window (`cell_result`). The worker uses it for
a rate search's steps, the results projection (reports.results) for every cell of a run."""

from __future__ import annotations

import base64
import math
import struct
import threading
import zlib
from typing import NamedTuple

import numpy as np
import pyhdrh

from . import histogram
from .metrics import HISTOGRAMS

# result field -> (histogram, divisor to the field's unit): each histogram of brokerbench.metrics, as recorded
LATENCY_METRICS = {name: (name, 1) for name in HISTOGRAMS}
SUMMARY_FIELDS = ("mean", "p50", "p75", "p95", "p99", "p999", "max")
# Every way a measured message can miss being received in time (see worker.outcome).
LOSS_CLASSES = ("lost", "late", "undelivered", "send_errors", "unacknowledged")
# Latencies from send to receipt: a measured message not received in time counts in them at +infinity.
MISSING_COUNTS_IN = ("end_to_end_latency_us", "delivery_latency_us")
MISSING_RULE = (
    "End-to-end and delivery latency count every measured message not received in time (sent − received: late, "
    "undelivered, lost, failed or unacknowledged sends) at +∞. A percentile whose rank falls among those is "
    "shown as ≥ the largest measured value, a lower bound (results.json: null, with the bound in "
    "`lower_bounds`), and never enters a comparison; the percentiles below it are taken over all sent "
    "messages, so they are higher than over the received ones alone. Mean and max are then lower bounds too."
)
# The least latency of each message due and never sent (worker.schedule.unsent): the cell's end less its intended
# time, µs, a histogram CellCompleted keeps beside the measured ones. They count in these latencies, from intended.
NOT_SENT_BOUNDS = "not_sent_bound_us"
NOT_SENT_COUNTS_IN = ("end_to_end_latency_us", "publish_delay_us")
NOT_SENT_RULE = (
    "A message due before the cell's end that its producer never sent (it fell behind its schedule and stopped on "
    "time: not sent) was never published nor delivered: it counts in end-to-end latency and publish delay as a "
    "missing message does, at +∞, and is known to be at least the cell's end minus its intended send time. A "
    "percentile whose rank falls among them is shown as ≥ the larger of the largest measured value and the value at "
    "that rank with each unsent message at that least latency (results.json: null, with the bound in "
    "`lower_bounds`), and never enters a comparison; the percentiles below it are taken over every message that was "
    "due. Mean and max are then lower bounds too."
)
ACCOUNTING_RULE = (
    "Every measured message that was due is in one class: due = sent + not sent (the producer fell behind its "
    "schedule), and sent = received + late + undelivered + lost + send errors + "
    "unacknowledged. Undelivered (still queued at the broker after the drain: a consumer that fell behind) and "
    "lost (acknowledged, never delivered, no longer queued) are told apart by the broker's own backlog; when the "
    "broker cannot tell it, only their sum is known and is shown as \"undelivered or lost N (broker backlog "
    "unknown)\", never as loss. What the classes leave over (residual) is shown as an accounting error."
)

# How a cell's acknowledgements (publish latency) and deliveries (end-to-end latency) were stamped: each producer and
# consumer says so (`stamps`: drivers, native senders), CellCompleted keeps the distinct values (ack_stamps,
# delivery_stamps; comma-separated where a cell's producers or consumers differed). "arrival": the kernel's receive
# time of the read that brought it (SO_TIMESTAMPNS), however late the loop read; "read": the read's return on the
# worker's own thread (a TLS socket); "client:LIBRARY": in the client library's thread or callback.
ARRIVAL, READ, CLIENT = "arrival", "read", "client"
STAMP_LAG_PAGE = "docs/performance.md, \"How late the Python loops stamp an acknowledgement\" (bench/stamp_lag.py)"
STAMP_RULE = (
    "Publish latency ends at the acknowledgement's stamp and end-to-end latency at the delivery's. Where either was "
    "not stamped at its arrival (the kernel's receive time), the row is marked: \"read\" is the read's return on the "
    "worker's thread (a TLS socket), \"client\" the client library's thread or callback, which come later by how "
    "long the worker's loop or the library took to come to it. How late that is on each path was measured apart and "
    "is not stored with the run: against the kernel's trace of each reply, librdkafka's, pulsar-client's, Pulsar's "
    "C API's, nats-py's and rstream's stamps came tens to hundreds of microseconds after the arrival at the median "
    "and up to milliseconds after it at p99, more on a busy host (docs/performance.md, \"How late a client library "
    "stamps, against the kernel's trace\", bench/client_stamp_lag.py); the Python loops against the native: "
    f"{STAMP_LAG_PAGE}."
)


def client_stamps(library: str) -> str:
    """The stamp of a producer or consumer whose client library stamps in its own thread or callback."""
    return f"{CLIENT}:{library}"


def joined_stamps(values) -> str | None:
    """The distinct stamps of a cell's producers or consumers (or of a configuration's cells), comma-separated;
    None where none said (runs stored before stamps were recorded, a cell without consumers)."""
    return ", ".join(sorted({part for value in values if value for part in value.split(", ")})) or None


def priority_text(value: dict | None) -> str | None:
    """A cell's scheduling priority (CellCompleted `priority`, worker/priority.py) in a few words: "realtime" (its
    processes and a local broker under SCHED_FIFO throughout), "normal", or each side's with ", dropped" where one
    went back during the cell; None for cells stored before it was recorded."""
    if not value:
        return None
    workers, broker = value.get("workers"), value.get("broker")
    text = workers if workers == broker else f"workers {workers}, broker {broker}"
    return f"{text}, dropped" if value.get("dropped") else text


def joined_priorities(values) -> str | None:
    """The distinct priority_text of a configuration's cells, "; "-separated; None where none said."""
    return "; ".join(sorted({text for value in values if (text := priority_text(value))})) or None


def late_stamps(value: str | None) -> list[str]:
    """The stamps in `value` that are not the kernel's arrival time ([] when all are, or none was recorded)."""
    return [part for part in (value or "").split(", ") if part and part != ARRIVAL]


# The mark of a row whose acknowledgements or deliveries were not all stamped at arrival, in every table.
STAMP_MARK = "†"


def stamped_late(ack_stamps: str | None, delivery_stamps: str | None) -> bool:
    """Whether a cell's (or configuration's) publish or end-to-end latency ends at a stamp other than the arrival."""
    return bool(late_stamps(ack_stamps) or late_stamps(delivery_stamps))


def stamp_note(rows) -> str | None:
    """The footnote of STAMP_MARK: for each (label, ack_stamps, delivery_stamps[, delivery_stamp_bound]) marked, what
    was stamped how, with the bound a cell measured of how far its delivery stamps can come after the response that
    carried them (merged over the rows of one label: stamp_bound_text), and where how late such stamps are was
    measured (it is not stored with the run, so no figure of that is printed); None when none is marked."""
    rows = list(rows)  # read twice: the labels, then the libraries
    bounds: dict[tuple, list] = {}  # (label, ack, delivery) -> the rows' bounds, in the rows' order
    for label, ack, delivery, *bound in rows:
        bounds.setdefault((label, ack, delivery), []).append(bound[0] if bound else None)
    parts = []
    for (label, ack, delivery), found in bounds.items():
        bound = stamp_bound_text(merge_stamp_bounds(found))
        said = [f"{what} {stamps_text(value)}{extra}"
                for what, value, extra in (("acknowledgements (publish latency)", ack, ""),
                                           ("deliveries (end-to-end latency)", delivery, bound))
                if late_stamps(value)]
        if said and f"{label}: {', '.join(said)}" not in parts:
            parts.append(f"{label}: {', '.join(said)}")
    if not parts:
        return None
    # what docs/performance.md measured for each library against the kernel's trace, in words (no figure: none is
    # stored with the run)
    measured = {"librdkafka": "librdkafka's stamps came tens to hundreds of microseconds late at the median "
                              "(deliveries as the poll returned later than acknowledgements), up to milliseconds at "
                              "p99",
                "librdkafka-report": "librdkafka's delivery reports, stamped as served, tens of microseconds late at "
                                     "the median and hundreds at p99",
                "librdkafka-fetch": "librdkafka's Fetch responses, read on its broker thread, tens of microseconds "
                                    "late at the median (about a tenth of a millisecond on a busy host) and a "
                                    "millisecond or more at p99, a third to a half as late as the consumer's poll",
                "librdkafka-fetch-arrival": "librdkafka's Fetch responses at their arrival, as early as the kernel's "
                                            "own stamps where a poll's messages came in one response, later by the "
                                            "bound above where in several",
                "pulsar-client": "pulsar-client's tens of microseconds late for an acknowledgement and hundreds for a "
                                 "delivery at the median, up to milliseconds at p99",
                "pulsar-c": "Pulsar's C API's tens of microseconds late at the median, tens to hundreds at p99",
                "nats-py": "nats-py's about a tenth of a millisecond late at the median and two tenths at p99 on a "
                           "quiet host (without TLS)",
                "rstream": "rstream's about a tenth of a millisecond late at the median and two tenths at p99 on a "
                           "quiet host"}
    libraries = dict.fromkeys(part.partition(":")[2] for _, ack, delivery, *_ in rows
                              for part in late_stamps(ack) + late_stamps(delivery) if part.startswith(f"{CLIENT}:"))
    said = [measured[name] for name in libraries if name in measured]
    against_kernel = ("; against the kernel's trace of each reply, measured apart, "
                      f"{'; '.join(said)}, more on a busy host (docs/performance.md, \"How late a client library "
                      "stamps, against the kernel's trace\", bench/client_stamp_lag.py)") if said else ""
    return (f"{STAMP_MARK} not stamped at arrival (the kernel's receive time): {'; '.join(parts)}. Such a stamp comes "
            f"later than the arrival by as long as the loop or the client library took to come to it{against_kernel}; "
            f"how late, on each broker's path, was measured apart and is not stored with this run: {STAMP_LAG_PAGE}")


# A client stamp whose words are not "in LIBRARY's thread or callback": Kafka's acknowledgements stamped as the
# delivery reports were served, where librdkafka's broker thread could not stamp them (brokers/kafka/driver.py)
LIBRARY_WORDS = {"librdkafka-report": "in librdkafka's delivery report, as served",
                 "librdkafka-fetch": "at the read of the latest Fetch response before the poll returned, on "
                                     "librdkafka's broker thread",
                 "librdkafka-fetch-arrival": "at the arrival (the kernel's receive time) of the latest Fetch response "
                                             "read before the poll returned"}


def merge_stamp_bounds(bounds) -> dict | None:
    """Several consumers' or cells' delivery stamp bounds (CellCompleted.delivery_stamp_bound) as one: polls summed,
    the spread's p99 and max the highest of theirs; None where none had one."""
    found = [b for b in bounds if b]
    if not found:
        return None

    def highest(key: str) -> float | None:
        return max((b[key] for b in found if b.get(key) is not None), default=None)

    return {"polls": sum(b["polls"] for b in found),
            "single_response_polls": sum(b["single_response_polls"] for b in found),
            "spread_p99_us": highest("spread_p99_us"), "spread_max_us": highest("spread_max_us")}


def _micros(us: float) -> str:
    return f"{us:,.0f} µs" if us < 1000 else f"{us / 1000:,.1f} ms"


def stamp_bound_text(bound: dict | None) -> str:
    """' (at the response that carried them in 99.8% of 2,390 polls; in the rest up to 380 µs later, p99 120 µs)':
    where a delivery's stamp is the latest response read before its poll returned, how often that was the one
    response its messages could have come from, and how much later than that response's read it was at most; '' with
    no bound or no poll."""
    if not bound or not bound.get("polls"):
        return ""
    polls, single = bound["polls"], bound["single_response_polls"]
    share = "all" if single == polls else f"{math.floor(1000 * single / polls) / 10:.1f}% of"  # never rounded to 100
    text = f" (at the response that carried them in {share} {polls:,} polls"
    if single < polls:
        top, p99 = bound.get("spread_max_us"), bound.get("spread_p99_us")
        text += (f"; in the rest up to {_micros(top)} later" if top is not None else "; in the rest by no bound "
                 "measured") + (f" (p99 {_micros(p99)})" if p99 is not None else "")
    return text + ")"


def stamps_text(value: str) -> str:
    """'client:librdkafka' -> "in librdkafka's thread or callback"; 'read' -> 'as the read returned (TLS)'."""
    words = []
    for part in value.split(", "):
        kind, _, library = part.partition(":")
        words.append("at arrival" if kind == ARRIVAL else "as the read returned (TLS)" if kind == READ else
                     LIBRARY_WORDS.get(library, f"in {library}'s thread or callback") if library else part)
    return " and ".join(words)


# A cell with consumers that delivered in time less than this share of what it sent: its rate is that of the smaller
# part of its messages, and the tables say so beside it ("delivered 1.5% of sent"). Where the broker still held the
# rest, the rate is already taken up to when the drain gave up (worker.outcome.delivery); the share tells the rest
# apart too (lost, late, or a backlog the broker could not tell), and says how little the figure rests on.
DELIVERED_SHARE_FLOOR = 0.5
DELIVERED_SHARE_RULE = (
    "A cell with consumers takes its rate over the time from its first delivery to its last, or to when the drain "
    "gave up where measured messages were still queued at the broker for the consumers (they had those to read "
    "until then). A cell that delivered in time less than {floor:.0%} of what it sent is marked \"delivered N% of "
    "sent\": its rate is that of the smaller part of its messages."
).format(floor=DELIVERED_SHARE_FLOOR)


def delivered_share(delivered: int | None, sent: int | None, consumed: bool) -> float | None:
    """delivered / sent for a cell with consumers; None for a publish-only cell or one that sent nothing."""
    if not consumed or not sent or delivered is None:
        return None
    return round(delivered / sent, 6)


def share_short(share: float | None) -> bool:
    """Whether a cell delivered in time too small a share of what it sent for its rate to speak for it."""
    return share is not None and share < DELIVERED_SHARE_FLOOR


def share_text(share: float) -> str:
    """'delivered 1.5% of sent' (two significant digits below 10%)."""
    return f"delivered {share:.1%} of sent" if share < 0.1 else f"delivered {share:.0%} of sent"


# Percentiles of a latency spectrum (reports.model), figured with each histogram's summary.
SPECTRUM = (50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95, 99.99, 100.0)


# -- histograms, decoded once and exactly --------------------------------------------------------------
# A report reads five cumulative histograms per cell. hdrh's decode allocates a full counts array (23,552
# buckets) per histogram, and every percentile walks it; here hdrh's own varint decoder (pyhdrh) fills a
# reused array, only the stretch it wrote is read back (the non-zero buckets), and the figures are
# brokerbench.histogram's to the last bit: the same buckets, the same value ranges (its
# _equivalent_ranges, tabulated once per bucket) and the same percentile rule as its _at.
class Buckets(NamedTuple):
    """A histogram's non-zero buckets: counts index (ascending) and count, its total count and layout."""
    indexes: np.ndarray  # int64
    counts: np.ndarray  # uint64
    total: int  # as hdrh's get_total_count()
    layout: object  # an HdrHistogram of the same layout (value ranges)


_COMPRESSION_COOKIE, _ENCODING_COOKIE = 0x1C849304, 0x1C849303  # hdrh's V2 cookies (word size masked out)
_HEADER = struct.Struct(">IIIIQQd")  # the payload's: cookie, length, offset, figures, lowest, highest, ratio
_LAYOUT = histogram.new()  # the layout of every histogram brokerbench records
_RANGES = histogram._equivalent_ranges(_LAYOUT, np.arange(_LAYOUT.counts_len, dtype=np.int64))
_HIGHEST, _MIDDLE = _RANGES[1].astype(np.float64), _RANGES[2].astype(np.float64)
_BUFFERS = threading.local()  # per thread: a zeroed counts array the decoder writes into


def _buckets_of(hist) -> Buckets:
    counts = np.ctypeslib.as_array(hist.counts)
    nonzero = np.flatnonzero(counts)
    return Buckets(nonzero.astype(np.int64), counts[nonzero], int(hist.get_total_count()), hist)


def _empty() -> Buckets:
    return Buckets(np.zeros(0, np.int64), np.zeros(0, np.uint64), 0, _LAYOUT)


def decode_buckets(blob: str) -> Buckets:
    """An encoded histogram's non-zero buckets: what hdrh's decode puts in its counts array."""
    return _decode_fast(blob) or _buckets_of(histogram.decode(blob))


def _decode_fast(blob: str) -> Buckets | None:
    """hdrh's decode, in brokerbench's layout only (None otherwise: hdrh decodes, or refuses, it)."""
    try:
        raw = base64.b64decode(blob)
        cookie, length = struct.unpack_from(">II", raw)
        if cookie & ~0xF0 != _COMPRESSION_COOKIE or length != len(raw) - 8:
            return None
        data = zlib.decompress(raw[8:])
        cookie, _, _, digits, lowest, highest, _ = _HEADER.unpack_from(data)
    except (ValueError, struct.error, zlib.error):
        return None
    if cookie & ~0xF0 != _ENCODING_COOKIE or (lowest, highest, digits) != (
            histogram.LOWEST, histogram.HIGHEST, histogram.SIGNIFICANT_FIGURES):
        return None
    if len(data) == _HEADER.size:
        return _empty()
    counts = getattr(_BUFFERS, "counts", None)
    if counts is None:
        counts = _BUFFERS.counts = np.zeros(_LAYOUT.counts_len, np.uint64)
    try:
        found = pyhdrh.decode(data, _HEADER.size, counts.ctypes.data, _LAYOUT.counts_len, 8)
    except Exception:  # noqa: BLE001 (hdrh raises it again, as it would have)
        counts[:] = 0
        return None
    if not found["total"] or found["min_nonzero_index"] < 0:
        counts[:] = 0
        return _empty()
    low, high = found["min_nonzero_index"], found["max_nonzero_index"] + 1
    written = counts[low:high]
    indexes = np.flatnonzero(written)
    values = written[indexes]  # a copy
    written[:] = 0
    return Buckets(indexes + low, values, int(found["total"]), _LAYOUT)


def merge_blobs(blobs: list[str]) -> Buckets:
    """histogram.merge of stored histograms: counts add, exactly (empty ones are skipped, as there)."""
    parts = [decode_buckets(blob) for blob in blobs if blob is not None]
    if any(p.layout is not _LAYOUT for p in parts):  # another layout: hdrh adds them value by value
        return _buckets_of(histogram.merge(blobs))
    return merge_buckets(parts)


def merge_buckets(parts: list[Buckets]) -> Buckets:
    """Buckets of brokerbench's layout added, exactly."""
    parts = [p for p in parts if p.total]
    if not parts:
        return _empty()
    if len(parts) == 1:
        return parts[0]
    indexes = np.concatenate([p.indexes for p in parts])
    counts = np.concatenate([p.counts for p in parts])
    order = np.argsort(indexes, kind="stable")
    indexes, counts = indexes[order], counts[order]
    first = np.flatnonzero(np.r_[True, indexes[1:] != indexes[:-1]])
    return Buckets(indexes[first], np.add.reduceat(counts, first), sum(p.total for p in parts), _LAYOUT)


def _ranges(b: Buckets) -> tuple[np.ndarray, np.ndarray]:
    """Highest and median equivalent value of each bucket, as floats (histogram._equivalent_ranges)."""
    if b.layout is _LAYOUT:
        return _HIGHEST[b.indexes], _MIDDLE[b.indexes]
    _, highest, middle = histogram._equivalent_ranges(b.layout, b.indexes)
    return highest.astype(np.float64), middle.astype(np.float64)


def _at(cumulative: np.ndarray, highest: np.ndarray, count: int, wanted) -> list[float]:
    """histogram._at, every percentile in one search (its targets, max(int(p·count/100 + 0.5), 1), computed
    in the same float64 steps)."""
    targets = np.maximum((np.asarray(wanted, dtype=np.float64) * count / 100 + 0.5).astype(np.int64), 1)
    found = np.minimum(np.searchsorted(cumulative, targets.astype(np.uint64)), highest.size - 1)
    return highest[found].tolist()


def bucket_summary(b: Buckets, scale: float = 1.0) -> dict[str, float | int]:
    """histogram.summary of these buckets."""
    return _summary_and_spectrum(b, scale, ())[0]


def bucket_percentiles(b: Buckets, wanted) -> list[float]:
    """histogram.percentiles of these buckets."""
    if int(b.total) == 0:
        return [None for _ in wanted]
    highest, _ = _ranges(b)
    return _at(np.cumsum(b.counts), highest, int(b.total), wanted)


def _summary_and_spectrum(b: Buckets, scale: float, wanted) -> tuple[dict, list]:
    count = int(b.total)
    if count == 0:
        return {"count": 0, "mean": None, **{k: None for k in histogram.PERCENTILES}, "max": None}, []
    highest, middle = _ranges(b)
    values = _at(np.cumsum(b.counts), highest, count, [*histogram.PERCENTILES.values(), *wanted])
    out: dict[str, float | int] = {"count": count, "mean": float((middle * b.counts).sum() / count / scale)}
    for name, value in zip(histogram.PERCENTILES, values):
        out[name] = float(value / scale)
    out["max"] = float(highest[-1] / scale)
    return out, values[len(histogram.PERCENTILES):]


class Figures(NamedTuple):
    total: int
    summary: dict  # histogram.summary's figures; shared, never modified
    spectrum: list  # histogram.percentiles at SPECTRUM; [] when empty
    standard: bool  # in brokerbench's layout (where a merge of it alone is itself)


def figures_of(b: Buckets) -> Figures:
    summary, spectrum = _summary_and_spectrum(b, 1.0, SPECTRUM)
    return Figures(int(b.total), summary, spectrum, b.layout is _LAYOUT)


def figures(blob: str, cache: dict | None = None) -> Figures:
    """A stored histogram's total count, summary and spectrum; `cache` (one report's build) keeps them."""
    found = cache.get(blob) if cache is not None else None
    if found is None:
        found = figures_of(decode_buckets(blob))
        if cache is not None:
            cache[blob] = found
    return found


def with_missing(b: Buckets, missing: int, wanted: dict[str, float], at_least: Buckets | None = None,
                 ) -> tuple[dict, dict]:
    """Percentiles (name -> p) over the measured values, `missing` more at +infinity (MISSING_RULE), and the messages
    never sent (NOT_SENT_RULE), at +infinity too, with `at_least` their least latencies. Those whose rank falls among
    the measured ones are read there (histogram._at's rank rule over all values); the others, and the mean and max,
    are only known from below: at least the largest measured value, or the value at that rank with every unsent
    message at its least latency, whichever is larger (the mean: at least the mean of those finite values). Returns
    (values, lower bounds)."""
    bounded = at_least if at_least is not None and int(at_least.total) else None
    count, extra = int(b.total), int(bounded.total) if bounded else 0
    total = count + extra + missing
    if not count + extra:
        return dict.fromkeys(wanted), {}
    least = merge_buckets([b, bounded]) if bounded else b  # measured values and the unsent ones' least latencies
    highest, middle = _ranges(b)
    least_highest, least_middle = _ranges(least)
    cumulative, least_cumulative = np.cumsum(b.counts), np.cumsum(least.counts)
    measured_max = float(highest[-1]) if count else 0.0
    values, bounds = {}, {}
    for name, p in wanted.items():
        rank = max(int(p * total / 100 + 0.5), 1)
        if rank <= count:
            values[name] = float(highest[min(int(np.searchsorted(cumulative, np.uint64(rank))), highest.size - 1)])
            continue
        at = min(int(np.searchsorted(least_cumulative, np.uint64(min(rank, count + extra)))), least_highest.size - 1)
        values[name], bounds[name] = None, max(measured_max, float(least_highest[at]))
    if missing or extra:
        means = [float((least_middle * least.counts).sum() / (count + extra))]
        if count:
            means.append(float((middle * b.counts).sum() / count))
        values.update(mean=None, max=None)
        bounds.update(mean=max(means), max=float(least_highest[-1]))
    return values, bounds


def latency_object(blob: str | None, cache: dict | None = None, missing: int = 0,
                   not_sent: str | None = None) -> dict:
    """A histogram's summary; with `missing` messages at +infinity (MISSING_RULE) or the lower bounds of messages
    never sent (`not_sent`, the NOT_SENT_BOUNDS histogram: NOT_SENT_RULE), the percentiles taken over all of them,
    and `missing`, `not_sent` and `lower_bounds` beside."""
    if not blob:  # nothing measured (a publish-only cell's end-to-end latency): no figure, bounded or not
        return dict.fromkeys(SUMMARY_FIELDS)
    summary = figures(blob, cache).summary
    out = {k: (round(summary[k], 3) if summary[k] is not None else None) for k in SUMMARY_FIELDS}
    bounded = decode_buckets(not_sent) if not_sent else None
    owed = int(bounded.total) if bounded is not None else 0
    if not missing and not owed:
        return out
    values, bounds = with_missing(decode_buckets(blob), missing, histogram.PERCENTILES, bounded)
    out.update({k: None if v is None else round(v, 3) for k, v in values.items()})
    return {**out, "missing": missing, **({"not_sent": owed} if owed else {}),
            "lower_bounds": {k: round(v, 3) for k, v in bounds.items()}}


def cell_result(cell: dict, end: dict | None, cache: dict | None = None) -> dict:
    base = {
        "cell_id": cell["cell_id"],
        "broker": cell["broker"],
        "format": cell["format"],
        "mode": cell["mode"],
        "size_basis": cell["size_basis"],
        "size_bytes": cell["size_bytes"],
        "rate_target": cell["rate"],
        "producers": cell["producers"],
        "consumers": cell["consumers"],
        "partitions": cell["partitions"],
        "repeat": cell["repeat"],
        "order": cell.get("order", cell["index"]),
        "client": cell["client"],
    }
    if end is None:
        return {**base, "status": "incomplete", "reason": "no end event (the run was stopped)"}
    if end["type"] == "CellFailed":
        data = end["data"]
        failed = {**base, "status": "failed", "reason": data["reason"]}
        if "totals" in data:  # a cell that measured nothing usable keeps its counts as evidence
            failed.update(_counts(data["totals"]), broker_count=data.get("broker_count"), warmup=data.get("warmup"))
        if data.get("faults"):
            failed["faults"] = data["faults"]
        return failed
    data = end["data"]
    totals, seconds = data["totals"], data["measured_s"]
    consumed = totals["received"] is not None  # publish-only cells: throughput is what was acknowledged
    # Delivered over the time it took to deliver it; events from before the delivery window was
    # recorded fall back to what was measured over the schedule's seconds.
    delivered = totals.get("delivered", totals["received"] if consumed else totals["sent"])
    delivered_bytes = totals.get("bytes_delivered", totals["bytes_received"] if consumed else totals["bytes_sent"])
    window = data.get("delivery_window_s") or seconds
    counts = _counts(totals)
    return {
        **base,
        "status": "completed",
        "encoded_bytes": round(data["encoded_bytes"], 1),
        "send_loop": data.get("send_loop", "python"),  # runs stored before the native loop ran Python
        "sender": data.get("sender"),  # Pulsar's native path: native-pwire or native-capi (None: one path, or Python)
        # how acknowledgements and deliveries were stamped (ARRIVAL, READ, client_stamps); None: stored before
        "ack_stamps": data.get("ack_stamps"),
        "delivery_stamps": data.get("delivery_stamps"),
        "delivery_stamp_bound": data.get("delivery_stamp_bound"),  # how far those stamps can come after the response's
        "priority": data.get("priority"),  # what its processes and a local broker ran at (worker/priority.py)
        **_codec_net(data, cache),
        "measured_s": seconds,
        "delivery_window_s": round(window, 6),
        "delivery_window_start_s": data.get("delivery_window_start_s"),
        "delivery_window_end": data.get("delivery_window_end"),  # None: stored before it was recorded
        "delivered_share": delivered_share(delivered, totals["sent"], consumed),
        "latency_basis": data.get("latency_basis", "intended"),
        "warmup": data.get("warmup"),
        "resources": data.get("resources"),  # CPU and memory of the workers and a local broker (worker/resources.py)
        "host": data.get("host"),  # the host's CPU and memory pressure and steal, and whether it was busy (host.py)
        "send_rate": round(totals["sent"] / seconds, 3),
        "rate_achieved": round(delivered / window, 3),
        "delivered": delivered,  # what throughput counts: the measured messages received in time
        **counts,
        "has_loss": any(counts.get(k) for k in (*LOSS_CLASSES, "undelivered_or_lost")),
        "broker_count": data.get("broker_count"),
        "max_sustainable_rate": (data.get("search") or {}).get("max_sustainable_rate"),
        "search": data.get("search"),
        # What limited the rate (brokerbench.limit): schedule, broker or client (client-bound); None before it was kept.
        "limit": data.get("limit"),
        "verdict": (data.get("verdict") or {}).get("verdict"),
        "verdict_reasons": (data.get("verdict") or {}).get("reasons", []),
        "publish_only": not consumed,
        "throughput_msgs_per_s": round(delivered / window, 3),
        "throughput_mb_per_s": round(delivered_bytes / window / 1e6, 4),
        "intervals": data["intervals"],
        **{field: latency_object(data["histograms"].get(hist), cache,
                                 missing_of(totals) if field in MISSING_COUNTS_IN else 0,
                                 data["histograms"].get(NOT_SENT_BOUNDS) if field in NOT_SENT_COUNTS_IN else None)
           for field, (hist, _) in LATENCY_METRICS.items()},
        **_shape(cell, data),
        **({"faults": data["faults"]} if data.get("faults") else {}),  # as applied (brokerbench.faults)
    }


def _codec_net(data: dict, cache: dict | None) -> dict:
    """The timed call's own cost (codecs.floor) and the codec's p50s net of it (never below 0); nothing for
    runs stored before the floor was measured."""
    floor = data.get("codec_floor_ns")
    if not floor:
        return {}
    net = {}
    for field in ("encode_ns", "decode_ns"):
        p50 = latency_object(data["histograms"].get(field), cache)["p50"]
        net[field] = {"p50": None if p50 is None else round(max(0.0, p50 - floor[field]), 3)}
    return {"codec_floor_ns": floor, "encode_net_ns": net["encode_ns"], "decode_net_ns": net["decode_ns"]}


def _shape(cell: dict, data: dict) -> dict:
    """A shaped schedule's figures (worker.outcome.startup and .bursts), with the bursts summarised: how many
    were measured and wholly delivered, and the median and longest time from a burst's first due message to
    its last delivery."""
    if not (cell.get("backlog") or cell.get("burst")):
        return {}
    out: dict = {"shaped": True, "startup": data.get("startup")}
    bursts = data.get("bursts")
    if bursts is not None:
        times = [row["delivered_in_ms"] for row in bursts["cycles"] if row["delivered_in_ms"] is not None]
        bursts = {**bursts, "measured": len(bursts["cycles"]), "delivered": len(times),
                  "delivered_in_ms": {"p50": float(np.median(times)) if times else None,
                                      "max": max(times) if times else None}}
    out["bursts"] = bursts
    return out


def missing_of(totals: dict) -> int:
    """Measured messages sent and not received in time (worker.outcome: sent - received); 0 when nothing
    consumed (publish-only)."""
    if totals.get("received") is None:
        return 0
    return max(0, totals.get("missing", totals["sent"] - totals["received"]))


def _counts(totals: dict) -> dict:
    """The message accounting of a cell: due = sent + not_sent; sent = received + late + undelivered + lost +
    send_errors + unacknowledged (due and not_sent None for cells stored before they were counted; due None when
    unthrottled)."""
    return {"due": totals.get("due"), "not_sent": totals.get("not_sent"), "sent": totals["sent"], "acked": totals.get("acked"), "received": totals["received"],
            "late": totals.get("late"), "undelivered": totals.get("undelivered"), "lost": totals["lost"],
            # the sum of undelivered and lost, known when the broker's backlog (and so the split) was not
            "undelivered_or_lost": totals.get("undelivered_or_lost"), "missing": totals.get("missing"),
            "residual": totals.get("residual"),
            "duplicated": totals["duplicated"],
            "out_of_order": totals["out_of_order"], "send_errors": totals["send_errors"],
            "unacknowledged": totals.get("unacked")}
