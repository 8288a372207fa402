"""Named targets: any endpoint of a driver's protocol benchmarked under its own name, beside the registered brokers."""

import json

from brokerbench.events import new_run_id
from brokerbench.events.dynamodb import DynamoEventStore
from brokerbench.local.workflow import LocalWorkflow
from brokerbench.reports.results import build_results


def test_named_targets_pointed_at_the_local_brokers_are_their_own_rows(stack, endpoints, tmp_path):
    request = {"name": "wf-named", "brokers": ["kafka", "local-kafka", "local-redis"], "sizes": [1024], "rates": [1000],
               "formats": ["json"], "messages": 200, "warmup_s": 0.2, "warmup_until_steady": False,
               "drain_timeout_s": 1, "placement": {"worker": "lambda"},
               "targets": {"local-kafka": {"driver": "kafka",
                                           "bootstrap_servers": endpoints["kafka"]["bootstrap_servers"]},
                           "local-redis": {"driver": "redis", "host": endpoints["redis-streams"]["host"],
                                           "port": endpoints["redis-streams"]["port"]}}}
    run_id = new_run_id()
    execution = LocalWorkflow(stack, tmp_path / "reports").execute(request, run_id=run_id)
    assert execution.status == "SUCCEEDED", (execution.error, execution.cause)
    db = endpoints["dynamodb"]
    events = DynamoEventStore(db["table"], endpoint_url=db["endpoint_url"]).read(run_id)
    results = build_results(events)
    cells = {c["broker"]: c for c in results["cells"]}
    assert set(cells) == {"kafka", "local-kafka", "local-redis"}
    assert all(c["status"] == "completed" and c["sent"] == c["received"] == 200 for c in cells.values()), cells
    targets = events[1]["data"]["targets"]
    assert targets["local-kafka"]["client_library"] == "confluent-kafka" and targets["local-kafka"]["settings"]["acks"] == "all"
    assert targets["local-redis"]["settings"]["persistence"]["appendonly"] == "yes"  # asked of the Redis behind it
    teardown = {t["broker"]: t["action"] for t in execution.output["teardown"]}
    assert teardown["local-kafka"] == teardown["local-redis"] == "kept (existing endpoint)"
    report = json.loads((tmp_path / "reports" / run_id / "report.json").read_text())
    assert {c["broker"] for group in report["groups"] for c in group["cells"]} == set(cells)
