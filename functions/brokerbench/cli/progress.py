"""The progress view of a run: bars drawn from the run's stored events."""

from __future__ import annotations

import time

from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

from .common import console


class EventProgress:
    """Progress bars drawn from the run's stored events: the same for Lambda- and EC2-kind workers.

    Reads only what is new: the run header once, then, for the cells that may be running (the first
    max_concurrency unfinished ones, in the order the run executes them), the events stored after the
    last one read. Cells run in a shuffled order, so one cursor over the whole run would miss a cell
    whose sort key is lower than one already seen; each cell has its own.
    """

    def __init__(self, store, run_id: str, progress: Progress, give_up_s: float | None = None) -> None:
        self.store, self.run_id, self.progress = store, run_id, progress
        self.give_up_s = give_up_s  # an outage this long ends the wait (None: never)
        self.bars: dict[str, int] = {}
        self.overall = None
        self.finished: set[str] = set()
        self.cells: dict[str, dict] | None = None
        self.run_order: list[dict] = []  # cells in execution order
        self.window = 1  # cells that may run at once
        self.next = 0  # position in run_order of the first unfinished cell
        self.cursor: dict[str, str] = {}  # cell_id -> sort key of the last event read
        self.state: dict[str, dict] = {}
        self.reads = 0  # queries made (the tests check that a poll reads little)
        self.unavailable = False  # the last poll found the event store not answering
        self.unavailable_since: float | None = None  # monotonic time of the first poll of the current outage

    def _header(self) -> bool:
        if self.cells is not None:
            return True
        from ..events import InvalidEvent, planned_cells

        self.reads += 1
        header = self.store.read(self.run_id, prefix="00#run", interval_histograms=False)
        if not header or header[0]["type"] != "RunRequested":
            return False
        try:
            data, planned = header[0]["data"], planned_cells(header)
        except InvalidEvent:  # a large plan's chunks are still being written
            return False
        self.cells = {c["cell_id"]: c for c in planned}
        self.run_order = sorted(planned, key=lambda c: c.get("order", c["index"]))
        self.window = max(1, int(data["spec"].get("max_concurrency") or 1))
        order = data["spec"].get("order", "fixed")
        how = f"random order, seed {data['spec'].get('order_seed')}" if order == "random" else "fixed order"
        console.print(f"run [bold]{self.run_id}[/]: {len(self.cells)} cells ({how})")
        self.overall = self.progress.add_task("[bold]run", total=len(self.cells), status="")
        return True

    def poll(self) -> None:
        """Show what the stored events say so far; an event store that does not answer is shown, not fatal: the
        run's own writes retry, and the bars catch up once it answers again. An outage that has lasted
        `give_up_s` (the store's own wait, BROKERBENCH_STORE_OUTAGE_S) raises StoreUnavailable: the run's steps
        would each wait that long again, one after another, and the caller stops the run instead."""
        from ..events import StoreUnavailable

        try:
            self._poll()
            if self.unavailable and self.cells is not None:
                self.progress.update(self.overall, status="")
            self.unavailable, self.unavailable_since = False, None
        except StoreUnavailable:
            now = time.monotonic()
            self.unavailable = True
            self.unavailable_since = self.unavailable_since or now
            if self.give_up_s is not None and now - self.unavailable_since >= self.give_up_s:
                raise
            if self.cells is not None:
                self.progress.update(self.overall, status="[yellow]the event store does not answer; waiting[/]")

    def _poll(self) -> None:
        from ..events import cell_prefix

        if not self._header():
            return
        while self.next < len(self.run_order) and self.run_order[self.next]["cell_id"] in self.finished:
            self.next += 1
        position, running = self.next, 0
        while position < len(self.run_order) and running < self.window:
            cell = self.run_order[position]
            position += 1
            if cell["cell_id"] in self.finished:
                continue
            self.reads += 1
            new = self.store.read(self.run_id, prefix=cell_prefix(cell["index"]), interval_histograms=False,
                                  after=self.cursor.get(cell["cell_id"]))
            if new:
                self.cursor[cell["cell_id"]] = new[-1]["sk"]
                self._apply(cell, new)
            if cell["cell_id"] not in self.finished:
                running += 1

    def _apply(self, spec: dict, events: list[dict]) -> None:
        cell_id = spec["cell_id"]
        cell = self.state.setdefault(cell_id, {"intervals": 0, "sent": 0, "received": 0, "end": None})
        for event in events:
            if event["type"] == "CellStarted":
                cell.update(intervals=0, sent=0, received=0, worker=event["data"].get("worker", {}).get("kind", ""))
            elif event["type"] == "IntervalMeasured":
                counters = event["data"]["counters"]
                cell["intervals"] += 1
                cell["sent"] += counters["sent"]
                cell["received"] += counters["received"]
            elif event["type"] in ("CellCompleted", "CellFailed"):
                cell["end"] = event
        bar = self.bars.get(cell_id)
        if bar is None:
            bar = self.bars[cell_id] = self.progress.add_task(cell_id, total=1.0, status="")
        if cell["end"] is not None:
            end = cell["end"]
            status = "[green]ok[/]" if end["type"] == "CellCompleted" else f"[red]FAILED[/] {end['data']['reason']}"
            self.progress.update(bar, completed=1.0, status=status)
            self.progress.advance(self.overall)
            self.finished.add(cell_id)
            return
        if spec["messages"] is None:
            fraction = cell["intervals"] / max(1, spec["duration_s"])
        else:
            fraction = cell["sent"] / spec["messages"]
        self.progress.update(bar, completed=min(0.99, fraction),
                             status=f"{cell.get('worker', '')} · sent {cell['sent']:,} · received {cell['received']:,}")


def progress_bars() -> Progress:
    """A run's bars: the run's and each cell's, with the status its events give."""
    columns = [TextColumn("{task.description}", style="cyan"), BarColumn(bar_width=24), TaskProgressColumn(),
               TimeElapsedColumn(), TextColumn("{task.fields[status]}")]
    return Progress(*columns, console=console.real, transient=False)
