from brokerbench.plan import estimated_seconds, plan
from brokerbench.spec import expand, validate

BASE = {"brokers": ["kafka"], "sizes": [1024], "rates": [100], "formats": ["json"]}


def test_short_light_cells_go_to_lambda_and_long_or_heavy_ones_to_ec2():
    assert {c["worker"] for c in plan(validate(BASE))["cells"]} == {"lambda"}
    assert {c["worker"] for c in plan(validate({**BASE, "duration_s": 1200}))["cells"]} == {"ec2"}
    heavy = validate({**BASE, "producers": 4, "consumers": 2, "partitions": 2})
    assert {c["worker"] for c in plan(heavy)["cells"]} == {"ec2"}


def test_the_rule_is_data_in_the_spec():
    spec = validate({**BASE, "rates": [100, 1000], "messages": 1000, "warmup_s": 0, "drain_timeout_s": 1,
                     "placement": {"lambda_max_cell_s": 20}})
    cells = sorted(plan(spec)["cells"], key=lambda c: c["index"])
    assert estimated_seconds(cells[0]) == 0 + 10 + 1 + 15
    assert [c["worker"] for c in cells] == ["ec2", "lambda"]
    forced = plan(validate({**BASE, "placement": {"worker": "ec2"}}))
    assert {c["worker"] for c in forced["cells"]} == {"ec2"}


def test_plan_carries_concurrency_and_polling():
    planned = plan(validate({**BASE, "max_concurrency": 3, "provision": {"poll_s": 5}}))
    assert (planned["max_concurrency"], planned["provision_wait_s"], planned["brokers"]) == (3, 5, ["kafka"])


def test_the_plan_hands_the_cells_over_in_their_run_order():
    spec = validate({**BASE, "brokers": ["kafka", "redis-streams"], "formats": ["raw", "json", "avro"], "repeats": 2,
                     "order_seed": 5})
    planned = plan(spec)["cells"]
    assert [c["order"] for c in planned] == list(range(12))
    assert [c["cell_id"] for c in planned] == [c["cell_id"] for c in expand(spec)]
    assert [c["index"] for c in planned] != list(range(12))


def test_steps_plan_cells_stores_the_seed_and_the_order_it_runs(monkeypatch):
    from brokerbench.workflow import steps

    stored = []

    class Store:
        def append(self, events):
            stored.extend(events)

    monkeypatch.setattr("brokerbench.workflow.wiring.event_store", lambda: Store())
    run = steps.validate_request({"request": {**BASE, "formats": ["raw", "json", "avro"], "repeats": 2}})
    planned = steps.plan_cells(run)
    [requested] = stored
    assert requested["data"]["spec"]["order_seed"] == run["spec"]["order_seed"] is not None
    assert requested["data"]["cells"] == planned["cells"]  # what the map runs, in its order
    assert planned["cells"] == plan(validate({**BASE, "formats": ["raw", "json", "avro"], "repeats": 2,
                                              "order_seed": run["spec"]["order_seed"]}))["cells"]
