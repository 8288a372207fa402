"""The Redis failover cluster's pure parts: the config files the stack writes for its redis-servers and Sentinels,
reading the Sentinels' answers into the master that leads, the WAIT a producer ends its writes with, and what a
run on the cluster states about its durability."""

from pathlib import Path

import hiredis

from brokerbench.brokers.redis_streams import environment
from brokerbench.brokers.redis_streams.cluster import MASTER_NAME, fields, flags, leading, node_name
from brokerbench.brokers.redis_streams.driver import wait_command
from brokerbench.brokers.redis_streams.local import node_config, sentinel_config


def lines(text: str) -> list[str]:
    return text.strip().splitlines()


def test_a_replica_config_names_its_master_and_a_master_config_names_none():
    replica = lines(node_config(7001, Path("/d/node-2"), True, 7000, None))
    master = lines(node_config(7000, Path("/d/node-1"), False, None, None))
    assert "replicaof 127.0.0.1 7000" in replica and not any(line.startswith("replicaof") for line in master)
    assert {"bind 127.0.0.1", "port 7001", 'dir "/d/node-2"', "appendonly yes"} <= set(replica)
    assert "appendonly no" in master
    assert not any("requirepass" in line or "masterauth" in line for line in replica)


def test_a_password_is_required_of_clients_and_given_to_the_master_quoted():
    config = lines(node_config(7001, Path("/d"), True, 7000, 'a"b\\c'))
    assert 'requirepass "a\\"b\\\\c"' in config and 'masterauth "a\\"b\\\\c"' in config
    sentinel = lines(sentinel_config(7100, Path("/s"), 7000, 'a"b\\c', **KNOWN))
    assert f'sentinel auth-pass {MASTER_NAME} "a\\"b\\\\c"' in sentinel


KNOWN = {"myid": "a" * 40, "replica_ports": [7001, 7002], "others": [(7101, "b" * 40), (7102, "c" * 40)]}


def test_a_sentinel_watches_the_first_master_with_quorum_2_and_short_timings():
    config = lines(sentinel_config(7100, Path("/s"), 7000, None, **KNOWN))
    assert f"sentinel monitor {MASTER_NAME} 127.0.0.1 7000 2" in config
    assert "sentinel myid " + "a" * 40 in config
    assert {f"sentinel known-replica {MASTER_NAME} 127.0.0.1 7001", f"sentinel known-replica {MASTER_NAME} 127.0.0.1 "
            f"7002", f"sentinel known-sentinel {MASTER_NAME} 127.0.0.1 7101 {'b' * 40}"} <= set(config)
    assert f"sentinel down-after-milliseconds {MASTER_NAME} 1000" in config
    assert f"sentinel failover-timeout {MASTER_NAME} 3000" in config
    assert {"bind 127.0.0.1", "port 7100"} <= set(config)


def view(port: int, flag: str = "master") -> dict:
    return fields(["name", MASTER_NAME, "ip", "127.0.0.1", "port", str(port), "flags", flag, "num-slaves", "2"])


def test_a_flat_sentinel_answer_reads_as_fields_and_flags():
    assert view(7000)["port"] == "7000" and flags(view(7000, "master,s_down,o_down")) == {"master", "s_down", "o_down"}
    assert node_name("127.0.0.1", 7000) == "127.0.0.1:7000"


def test_a_master_leads_when_a_majority_of_the_sentinels_name_it_up():
    assert leading([view(7000), view(7000), view(7000)], 3) == "127.0.0.1:7000"
    assert leading([view(7000), view(7000), None], 3) == "127.0.0.1:7000"  # one Sentinel gone: 2 of 3 still
    assert leading([view(7001), view(7000), view(7000)], 3) == "127.0.0.1:7000"  # one behind the switch


def test_no_master_leads_while_the_sentinels_see_it_down_or_disagree():
    assert leading([view(7000, "master,s_down"), view(7000, "master,s_down,o_down"), view(7000)], 3) is None
    assert leading([view(7000, "master,failover_in_progress"), view(7001), view(7000, "master,o_down")], 3) is None
    assert leading([view(7000), view(7001), None], 3) is None
    assert leading([None, None, None], 3) is None


def test_wait_is_packed_only_when_replicas_are_asked_for():
    assert wait_command({}) is None and wait_command({"redis_wait_replicas": 0}) is None
    packed, replicas = wait_command({"redis_wait_replicas": 2, "redis_wait_timeout_ms": 250})
    reader = hiredis.Reader()
    reader.feed(packed)
    assert (reader.gets(), replicas) == ([b"WAIT", b"2", b"250"], 2)
    assert wait_command({"redis_wait_replicas": 1})[0] == hiredis.pack_command((b"WAIT", 1, 1000))


RECORDED = {"settings": {"persistence": {"appendonly": "yes", "appendfsync": "everysec"}, "replication": {"replicas": 2}}}


def test_a_replicated_cell_states_asynchronous_replication_unless_it_waits_for_replicas():
    plain = environment.durability({}, RECORDED)
    assert plain["replicas"] == 0 and "a failover may lose it" in plain["text"]
    waited = environment.durability({"redis_wait_replicas": 1}, RECORDED)
    assert waited["replicas"] == 1 and "WAIT 1" in waited["text"] and "not a guarantee" in waited["text"]
    single = environment.durability({}, {"settings": {"persistence": {"appendonly": "yes", "appendfsync": "always"}}})
    assert single["replicas"] == 0 and "failover" not in single["text"]
    assert environment.caption("single", {"redis_wait_replicas": 1}, RECORDED).endswith(
        "2 replicas (asynchronous) with Sentinel failover, WAIT 1")
    assert "replica" not in environment.caption("single", {}, {"settings": {"persistence": {"appendonly": "no"}}})
