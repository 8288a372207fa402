"""`brokerbench serve` runs a due schedule by itself: the trigger is stored, the run goes through the workflow,
its notification names the schedule's recipients, and GET /schedules shows both."""

import json
import time

from brokerbench.events.dynamodb import DynamoEventStore
from conftest import ServedApi

TINY = {"name": "sched-tiny", "brokers": ["redis-streams"], "sizes": [1024], "rates": [200], "formats": ["raw"],
        "duration_s": 1, "warmup_s": 0.5, "warmup_until_steady": False, "repeats": 1}


def test_a_due_schedule_starts_one_run_and_is_reported(stack, tmp_path):
    name = f"every-minute-{int(time.time())}"
    schedules = tmp_path / "schedules.json"
    schedules.write_text(json.dumps({"schedules": [
        {"name": name, "description": "a tiny run every minute", "spec": TINY, "cron": "* * * * *",
         "baseline": "previous", "notify": ["perf@example.com"], "enabled": True}]}))
    served = ServedApi(stack.state_dir, tmp_path, "--schedules", str(schedules))
    try:
        status, _, listing = served.request("GET", "/schedules")
        assert status == 200 and [s["name"] for s in listing["schedules"]] == [name]
        assert listing["schedules"][0]["last_trigger"] is None and listing["schedules"][0]["next_due"]

        deadline = time.monotonic() + 150  # the next minute boundary, then a tiny run
        while True:
            assert time.monotonic() < deadline, f"no scheduled run ended: {listing}"
            time.sleep(1)
            _, _, listing = served.request("GET", "/schedules")
            last = listing["schedules"][0]["last_run"]
            if last and last["status"] not in ("starting", "running"):
                break
        trigger = listing["schedules"][0]["last_trigger"]
        assert trigger["outcome"] == "started" and trigger["run_id"] == last["run_id"]
        assert last["status"] == "completed"
        status, _, run = served.request("GET", f"/runs/{last['run_id']}")
        assert run["name"] == "sched-tiny" and run["status"] == "completed"
    finally:
        served.stop()
    db = stack.endpoints(required=["dynamodb"])["dynamodb"]
    store = DynamoEventStore(db["table"], endpoint_url=db["endpoint_url"])
    triggers = store.read(f"schedule#{name}")
    outcomes = [e for e in triggers if not e["sk"].endswith("#claim")]
    # one outcome per due time, and every started run is a run the store has
    assert len({e["data"]["due_at"] for e in outcomes}) == len(outcomes) >= 1
    for event in outcomes:
        if event["data"]["outcome"] == "started":
            assert store.read(event["data"]["run_id"], prefix="00#")
