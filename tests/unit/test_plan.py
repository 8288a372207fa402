from brokerbench.plan import estimated_seconds, plan
from brokerbench.spec import validate

BASE = {"brokers": ["kafka"], "sizes": [1024], "rates": [100], "formats": ["json"]}


def test_short_light_cells_go_to_lambda_and_long_or_heavy_ones_to_ec2():
    assert {c["worker"] for c in plan(validate(BASE))["cells"]} == {"lambda"}
    assert {c["worker"] for c in plan(validate({**BASE, "duration_s": 1200}))["cells"]} == {"ec2"}
    heavy = validate({**BASE, "producers": 4, "consumers": 2, "partitions": 2})
    assert {c["worker"] for c in plan(heavy)["cells"]} == {"ec2"}


def test_the_rule_is_data_in_the_spec():
    spec = validate({**BASE, "rates": [100, 1000], "messages": 1000, "warmup_s": 0, "drain_timeout_s": 1,
                     "placement": {"lambda_max_cell_s": 20}})
    cells = plan(spec)["cells"]
    assert estimated_seconds(cells[0]) == 0 + 10 + 1 + 15
    assert [c["worker"] for c in cells] == ["ec2", "lambda"]
    forced = plan(validate({**BASE, "placement": {"worker": "ec2"}}))
    assert {c["worker"] for c in forced["cells"]} == {"ec2"}


def test_plan_carries_concurrency_and_polling():
    planned = plan(validate({**BASE, "max_concurrency": 3, "provision": {"poll_s": 5}}))
    assert (planned["max_concurrency"], planned["provision_wait_s"], planned["brokers"]) == (3, 5, ["kafka"])
