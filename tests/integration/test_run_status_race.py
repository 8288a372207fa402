"""A run's status read while its execution ends: the API reads the run's events, then asks the executor, and a run
that stored its end in between is shown by that end (`cancelled`), never `incomplete`. DynamoDB Local is real; the
executor is a stand-in whose answer is timed to land between the two reads, the moment no real run can be made to hit."""

from synthetic import synthetic_run

from brokerbench.api import views
from brokerbench.workflow.starter import Execution
from brokerbench.events import RUN_EVENTS
from brokerbench.events.run import run_completed_event

SPEC = {"name": "race", "brokers": ["kafka"], "sizes": [1024], "rates": [1000], "formats": ["json", "raw"], "repeats": 1}


class EndsWhenAsked:
    """An executor whose run stores its end (cancelled) and ends just as it is asked about it."""

    def __init__(self, store, run_id: str) -> None:
        self.store, self.run_id, self.asked = store, run_id, 0

    def execution(self, run_id: str):
        self.asked += 1
        if self.asked == 1:
            self.store.append([run_completed_event(run_id, "cancelled", 1, 0, "cancelled by request")])
        return Execution(run_id, "ended", cancelled=True)

    def pending(self):
        return []


def stored_without_end(store, seed: int) -> str:
    events = [e for e in synthetic_run(SPEC, intervals=3, seed=seed) if e["type"] not in RUN_EVENTS]
    store.append(events)
    return events[0]["run_id"]


def test_a_run_that_ends_between_the_reads_shows_its_end_in_detail(store):
    run_id = stored_without_end(store, 31)
    starter = EndsWhenAsked(store, run_id)
    detail = views.run_detail(store, starter, run_id)
    assert starter.asked == 1
    assert detail["status"] == "cancelled"
    assert detail["finished_at"] is not None


def test_a_run_that_ends_between_the_reads_shows_its_end_in_listings(store):
    run_id = stored_without_end(store, 32)
    starter = EndsWhenAsked(store, run_id)
    requested = next(e for e in store.read(run_id, prefix="00#") if e["type"] == "RunRequested")
    line = views.summary(store, starter, requested)
    assert line["status"] == "cancelled"
    assert line["finished_at"] is not None
