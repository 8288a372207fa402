"""Network faults in a run request (brokerbench.faults, kind "network"): each rule names its field, a single node takes
them where its clients can be routed through a proxy, the timetable takes each off at its end, and each effect is
the Toxiproxy toxic it says (brokerbench.toxiproxy)."""

import pytest
import spec_tools

from brokerbench import faults
from brokerbench.spec import expand, validate
from brokerbench.toxiproxy import client_endpoint, routed, toxics_for

BASE = {"name": "n", "brokers": ["redis-streams"], "sizes": [1024], "rates": [200], "formats": ["raw"],
        "duration_s": 10}
RESET = {"kind": "network", "effect": "reset", "at_s": 2, "duration_s": 3}


def problems(**request) -> dict[str, str]:
    return spec_tools.problems(BASE, **request)


def test_a_network_fault_needs_no_replica_and_reaches_every_cell():
    clusters = {b: {"nodes": 3} for b in ("kafka", "nats-jetstream", "rabbitmq-quorum", "rabbitmq-streams",
                                          "redis-streams")}
    for brokers, provision in ((["redis-streams"], {}), (["kafka"], {}), (["kafka"], {"kafka": {"nodes": 3}}),
                               (["nats-jetstream", "rabbitmq-quorum", "rabbitmq-streams"], {}),
                               (list(clusters), clusters)):
        spec = validate({**BASE, "brokers": brokers, "provision": provision,
                         "faults": [RESET, {**RESET, "effect": "latency", "latency_ms": 20, "at_s": 6,
                                            "direction": "upstream"}]})
        assert all(cell["faults"] == spec["faults"] for cell in expand(spec))


def test_a_kill_beside_a_network_fault_still_needs_a_replica():
    found = problems(brokers=["kafka"], faults=[RESET, {"kind": "kill", "at_s": 6}])
    assert "replica" in found["provision.kafka.nodes"], found


@pytest.mark.parametrize("fault, field, words", [
    ({"kind": "network", "at_s": 1, "duration_s": 2}, "faults[0].effect", "needs its effect: one of latency, "
                                                                          "bandwidth, reset, blackhole"),
    ({**RESET, "effect": "melt"}, "faults[0].effect", "'melt' is not one of"),
    ({"kind": "network", "effect": "reset", "at_s": 1}, "faults[0].duration_s", "needs its duration_s"),
    ({**RESET, "at_s": 8}, "faults[0].duration_s", "ends at 11 s, after the measured 10 s"),
    ({**RESET, "at_s": 10}, "faults[0].at_s", "not inside the measured 10 s"),
    ({**RESET, "effect": "latency"}, "faults[0].latency_ms", "a latency fault needs its latency_ms"),
    ({**RESET, "effect": "bandwidth"}, "faults[0].rate_kbps", "a bandwidth fault needs its rate_kbps"),
    ({**RESET, "latency_ms": 5}, "faults[0].latency_ms", "belongs to a latency fault, not a reset one"),
    ({**RESET, "effect": "latency", "latency_ms": 5, "rate_kbps": 10}, "faults[0].rate_kbps",
     "belongs to a bandwidth fault, not a latency one"),
    ({**RESET, "effect": "latency", "latency_ms": 0}, "faults[0].latency_ms", "0 is less than or equal to"),
    ({**RESET, "direction": "sideways"}, "faults[0].direction", "'sideways' is not one of"),
    ({**RESET, "target": "follower"}, "faults[0].target", "redis-streams runs as 1 node: it has no follower"),
    ({"kind": "kill", "at_s": 1, "effect": "reset"}, "faults[0].effect", "a kill has no effect"),
    ({"kind": "pause", "at_s": 1, "duration_s": 1, "latency_ms": 5}, "faults[0].latency_ms", "a pause has no"),
])
def test_each_rule_names_its_field(fault, field, words):
    found = problems(faults=[fault])
    assert words in found.get(field, ""), found


def test_brokers_whose_clients_cannot_be_routed_through_a_proxy_are_refused_with_where_it_runs():
    takes = ("(network faults run on: kafka (1 to 3 nodes), nats-jetstream (1 to 3 nodes), rabbitmq-quorum (1 to 3 "
             "nodes), rabbitmq-streams (1 to 3 nodes), redis-streams (1 to 3 nodes))")
    found = problems(brokers=["pulsar"], faults=[RESET])
    assert found["faults"].startswith("pulsar takes no network faults as 1 node") and takes in found["faults"]
    assert "faults" not in problems(provision={"redis-streams": {"nodes": 3}}, faults=[RESET])  # behind Sentinel
    found = problems(targets={"redis-streams": {"host": "127.0.0.1", "port": 6379}}, faults=[RESET])
    assert "not the run's to signal" in found["targets.redis-streams"], found


def test_the_timetable_takes_a_network_fault_off_at_its_end():
    steps = faults.timetable([{**RESET, "at_s": 1.5, "duration_s": 2}, {"kind": "kill", "at_s": 2}])
    assert [(s.at_ns, s.kind, s.index) for s in steps] == [
        (1_500_000_000, "network", 0), (2_000_000_000, "kill", 1), (3_500_000_000, "heal", 0)]
    assert faults.first_fault_ns([RESET]) == 2_000_000_000


def test_each_effect_is_its_toxic_on_the_directions_asked_for():
    def made(**fault):
        return [(t["type"], t["stream"], t["attributes"]) for t in toxics_for({**RESET, **fault})]
    assert made(effect="latency", latency_ms=40.4) == [("latency", "upstream", {"latency": 40, "jitter": 0}),
                                                       ("latency", "downstream", {"latency": 40, "jitter": 0})]
    assert made(effect="bandwidth", rate_kbps=64, direction="downstream") == [
        ("bandwidth", "downstream", {"rate": 64})]
    assert made(direction="upstream") == [("reset_peer", "upstream", {"timeout": 0})]
    assert made(effect="blackhole") == [("timeout", "upstream", {"timeout": 0}), ("timeout", "downstream",
                                                                                 {"timeout": 0})]
    names = [t["name"] for t in toxics_for({**RESET, "fault_index": 3})]
    assert names == ["fault-3-reset-upstream", "fault-3-reset-downstream"]  # one fault's own, removed by its heal


def test_clients_go_through_the_proxies_only_once_routed():
    endpoint = {"host": "127.0.0.1", "port": 6379, "proxy": {"links": [{"node": "n", "listen": 7000, "upstream": 6379}],
                                                             "clients": {"port": 7000}}}
    assert not routed(endpoint) and client_endpoint(endpoint) == endpoint
    on = {**endpoint, "proxy": {**endpoint["proxy"], "api_port": 8474}}
    assert routed(on) and client_endpoint(on)["port"] == 7000 and on["port"] == 6379
