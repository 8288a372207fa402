"""NATS JetStream as a plug-in: discovered, in the schema, loopback only, refused as a provisioned target in AWS;
the driver's framing and the recorded meaning of a PubAck, without a server."""

import pytest

from brokerbench import brokers, schema, spec
from brokerbench.brokers.nats_jetstream import driver, environment, local
from brokerbench.local.processes import HOST, StackError
from brokerbench.targets import ExistingTargets, ProvisioningError
from brokerbench.workflow import steps, wiring

MINIMAL = {"sizes": [1024], "rates": [100], "formats": ["json"]}
CLIENT = spec.validate({**MINIMAL, "brokers": ["nats-jetstream"]})["client"]


def test_it_is_registered_with_its_modes_and_persistence_and_no_cloud():
    plugin = brokers.plugin("nats-jetstream")
    assert plugin.family == "nats" and brokers.families()["nats"] is plugin
    assert set(plugin.capabilities.modes) == {"batch", "single"}
    assert list(plugin.capabilities.persistence) == ["file", "file-sync-always", "memory"]  # the default first
    assert plugin.cloud is None and plugin.where() == ["local", "external"]
    assert plugin.local.name == "nats" and brokers.local_services()["nats"][0] == "nats-jetstream"
    assert plugin.libraries == ("nats-py",)


def test_its_settings_reach_the_schema_and_a_run_request():
    props = schema.generated()["properties"]
    assert "nats-jetstream" in props["brokers"]["items"]["anyOf"][0]["enum"]
    assert props["targets"]["properties"]["nats-jetstream"]["required"] == ["url"]
    assert props["client"]["properties"]["nats_storage"]["enum"] == ["file", "memory"]
    assert (CLIENT["nats_storage"], CLIENT["nats_replicas"], CLIENT["nats_max_in_flight"]) == ("file", 1, 1000)
    full = spec.validate({**MINIMAL, "brokers": ["nats-jetstream", "edge-nats"], "modes": ["batch", "single"],
                          "targets": {"edge-nats": {"driver": "nats", "url": "nats://10.0.0.7:4222"}}})
    assert {c["broker"] for c in spec.expand(full)} == {"nats-jetstream", "edge-nats"}
    for target, field in [({"url": "http://x:4222"}, "targets.nats-jetstream.url"),
                          ({"url": "nats://x:4222", "sync_interval": "1s"}, "targets.nats-jetstream.sync_interval")]:
        with pytest.raises(spec.SpecError) as refused:
            spec.validate({**MINIMAL, "brokers": ["nats-jetstream"], "targets": {"nats-jetstream": target}})
        assert field in {p.path for p in refused.value.problems}
    with pytest.raises(spec.SpecError) as refused:
        spec.validate({**MINIMAL, "brokers": ["nats-jetstream"], "client": {"nats_storage": "disk"}})
    assert "client.nats_storage" in {p.path for p in refused.value.problems}


def test_in_aws_mode_it_runs_only_as_an_endpoint_and_a_provisioned_one_is_refused_by_name(monkeypatch):
    monkeypatch.setenv("BROKERBENCH_MODE", "aws")
    request = spec.validate({**MINIMAL, "brokers": ["nats-jetstream"]})
    problem = wiring.provider_problem("nats-jetstream", request)
    assert problem == "nats-jetstream has no cloud provider: give its endpoint in targets.nats-jetstream"
    with pytest.raises(steps.InvalidRequest, match="nats-jetstream has no cloud provider"):
        steps.validate_request({"request": {**MINIMAL, "brokers": ["nats-jetstream"]}})
    with pytest.raises(ProvisioningError, match="nats-jetstream"):
        wiring.target_provider("nats-jetstream", request)
    given = spec.validate({**MINIMAL, "brokers": ["nats-jetstream"],
                           "targets": {"nats-jetstream": {"url": "nats://10.0.0.9:4222"}}})
    assert wiring.provider_problem("nats-jetstream", given) is None  # nats-py is in the Lambda layer
    assert isinstance(wiring.target_provider("nats-jetstream", given), ExistingTargets)


def test_start_binds_the_server_to_loopback_with_jetstream_in_the_data_folder(tmp_path, monkeypatch):
    spawned = []
    monkeypatch.setattr(local, "spawn", lambda cmd, cwd, log: spawned.append((cmd, cwd)) or 101)
    monkeypatch.delenv(local.SYNC_ENV, raising=False)
    started = local.NatsService().start(tmp_path, iter([4222]).__next__, {})
    assert started.pids == [101] and started.port == 4222
    assert started.endpoint["url"] == f"nats://{HOST}:4222" and started.endpoint["sync_interval"] == "2m"
    cmd, cwd = spawned[0]
    assert cmd[cmd.index("-a") + 1] == HOST and cmd[cmd.index("-p") + 1] == "4222" and "-js" in cmd
    assert not {"-m", "--http_port", "--https_port", "--cluster", "--routes"} & set(cmd)  # no other listener
    assert cwd == tmp_path / "data"
    config = (tmp_path / "nats.conf").read_text()
    assert f'store_dir: "{tmp_path / "data"}"' in config and "sync_interval: 2m" in config


def test_the_sync_policy_comes_from_the_stack_or_the_environment_and_a_wrong_one_is_named(tmp_path, monkeypatch):
    monkeypatch.setattr(local, "spawn", lambda cmd, cwd, log: 101)
    monkeypatch.setenv(local.SYNC_ENV, "always")
    started = local.NatsService().start(tmp_path, iter([4222]).__next__, {})
    assert started.endpoint["sync_interval"] == "always"
    assert "sync_interval: always" in (tmp_path / "nats.conf").read_text()
    monkeypatch.setenv(local.SYNC_ENV, "sometimes")
    with pytest.raises(StackError, match=local.SYNC_ENV):
        local.NatsService().start(tmp_path, iter([4222]).__next__, {})
    assert local.sync_policy({"nats_sync": "2m"}) == "2m"  # the stack's own setting comes first


def test_the_header_travels_before_the_payload_and_comes_back_whole():
    header, payload = b"\x01" * 20, b"\x00{payload}"
    body = driver.frame(header, payload)
    assert body[0] == 20 and driver.unframe(body) == (header, payload)
    assert driver.unframe(driver.frame(b"", b"")) == (b"", b"")


def test_only_a_pub_ack_acknowledges_a_publish():
    assert driver.is_pub_ack(b'{"stream":"S","seq":7}', None)
    assert not driver.is_pub_ack(b'{"error":{"code":503,"description":"no responders"}}', None)
    assert not driver.is_pub_ack(b"", {"Status": "503"})  # no stream holds the subject


def test_streams_subjects_and_consumers_are_named_as_jetstream_allows():
    assert driver.stream_name("bb-20261127T0221-ab.c*d>e f") == "bb-20261127T0221-ab_c_d_e_f"
    assert driver.subject("bb-r.1-c00003", 2) == "bb-r_1-c00003.2"
    assert driver.durable_name("bb-r-c00003-g", [0, 2]) == "bb-r-c00003-g_0-2"


@pytest.mark.parametrize("client, sync, says", [
    ({"nats_storage": "file", "nats_replicas": 1}, "always", "syncs every write to disk before its PubAck"),
    ({"nats_storage": "file", "nats_replicas": 1}, "2m", "not yet on disk"),
    ({"nats_storage": "file", "nats_replicas": 3}, None, "a quorum of the stream's 3 replicas"),
    ({"nats_storage": "memory", "nats_replicas": 1}, "always", "nothing is written to disk"),
])
def test_what_a_pub_ack_means_follows_the_stream_and_the_servers_sync_policy(client, sync, says):
    assert says in environment.acks_meaning(client, sync)


def test_the_caption_states_storage_replicas_and_sync_as_recorded():
    recorded = {"settings": {"persistence": {"storage": "file", "replicas": 1, "sync_interval": "always"}}}
    assert environment.caption("single", CLIENT, recorded) == ("single = one publish in flight, PubAck: file storage, "
                                                               "1 replica, fsync before each PubAck")
    assert environment.caption("batch", {**CLIENT, "nats_storage": "memory"}, {}) == (
        "batch = up to 1000 publishes in flight, PubAck: memory storage, 1 replica, in memory only")
    assert "sync policy not recorded" in environment.caption("batch", CLIENT, {})
