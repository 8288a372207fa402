"""Brokers as plug-ins: discovery, named targets, the generated schema, providers per mode, the local stack's contract."""

import json
import sys
import textwrap
import time
from dataclasses import replace

import pytest

from brokerbench import brokers, registry, schema, spec
from brokerbench.brokers import Started, UnknownBroker
from brokerbench.cli import main
from brokerbench.codecs import FORMATS, codecs, prebuilt
from brokerbench.local.processes import HOST, pid_alive, port_answers, spawn
from brokerbench.local.stack import LocalStack, StackError
from brokerbench.targets import ExistingTargets, ProvisioningError
from brokerbench.targets.local import LocalTargets
from brokerbench.workflow import steps, wiring

MINIMAL = {"sizes": [1024], "rates": [100], "formats": ["json"]}


def test_the_registry_finds_each_broker_package_and_what_it_names_exists():
    found = brokers.plugins()
    assert {"kafka", "redis-streams"} <= set(found)
    assert brokers.families()["kafka"].name == "kafka" and brokers.families()["redis"].name == "redis-streams"
    for plugin in found.values():
        for reference in (plugin.driver, plugin.environment, plugin.caption, *([plugin.cloud.factory] if plugin.cloud else [])):
            assert callable(brokers.load(reference)), reference
        assert plugin.capabilities.modes and plugin.capabilities.persistence, plugin.name
        assert plugin.settings.target["type"] == "object", plugin.name
    services = {}
    for plugin in found.values():  # a stack name two rows share is one service (RabbitMQ's node serves two)
        if plugin.local:
            assert services.setdefault(plugin.local.name, plugin.local) is plugin.local, plugin.name
    assert "dynamodb" not in services


def test_the_checked_in_request_schema_is_the_one_the_registries_generate():
    assert schema.generated() == schema.checked_in(), "schemas/run-request.schema.json is stale: run `brokerbench schema --write`"


def test_a_broker_package_dropped_in_is_registered_and_reaches_the_schema(tmp_path, monkeypatch):
    package = tmp_path / "fake_queue"
    package.mkdir()
    (package / "__init__.py").write_text(textwrap.dedent('''
        from brokerbench.brokers import Capabilities, Plugin, Settings
        PLUGIN = Plugin(name="fake-queue", description="a test broker", family="fakeq", driver="x:y",
                        settings=Settings(target={"type": "object", "required": ["url"],
                                                  "properties": {"url": {"type": "string"}}},
                                          provision={"type": "object", "default": {}},
                                          client={"fake_window": {"type": "integer", "default": 7}}),
                        capabilities=Capabilities(modes={"batch": "all at once"}, partitions="queues",
                                                  persistence={"memory": "none"}),
                        environment="x:y", caption="x:y")
    '''))
    monkeypatch.setattr(brokers, "__path__", [*brokers.__path__, str(tmp_path)])
    brokers.plugins.cache_clear()
    try:
        assert brokers.plugin("fake-queue").family == "fakeq"
        generated = schema.generated()
        props = generated["properties"]
        assert "fake-queue" in props["brokers"]["items"]["anyOf"][0]["enum"]
        assert props["targets"]["properties"]["fake-queue"]["required"] == ["url"]
        assert "fake-queue" in props["provision"]["properties"] and props["client"]["properties"]["fake_window"]
        assert "fakeq" in props["targets"]["additionalProperties"]["properties"]["driver"]["enum"]
    finally:
        brokers.plugins.cache_clear()
        sys.modules.pop("brokerbench.brokers.fake_queue", None)


def test_a_named_target_is_served_by_its_drivers_family():
    endpoint = {"driver": "kafka", "bootstrap_servers": "127.0.0.1:9092"}
    assert brokers.for_target("redpanda", endpoint).name == "kafka"
    assert brokers.for_target("kafka").name == "kafka"
    with pytest.raises(UnknownBroker, match="'nats'"):
        brokers.for_target("nats")
    with pytest.raises(UnknownBroker, match="driver 'amqp'"):
        brokers.for_target("rabbit", {"driver": "amqp"})


def test_run_requests_accept_named_targets_and_refuse_names_nothing_explains():
    targets = {"redpanda": {"driver": "kafka", "bootstrap_servers": "10.0.0.5:9092"},
               "valkey": {"driver": "redis", "host": "10.0.0.6", "port": 6379}}
    full = spec.validate({**MINIMAL, "brokers": ["kafka", "redpanda", "valkey"], "targets": targets})
    assert {c["broker"] for c in spec.expand(full)} == {"kafka", "redpanda", "valkey"}
    with pytest.raises(spec.SpecError) as refused:
        spec.validate({**MINIMAL, "brokers": ["kafka", "nats"],
                       "targets": {"redpanda": {"driver": "kafka"}, "Bad": {"driver": "kafka", "bootstrap_servers": "x"},
                                   "mq": {"driver": "amqp", "url": "x"}}})
    found = {p.path: p.message for p in refused.value.problems}
    assert "'nats' is not one of the registered brokers" in found["brokers[1]"]
    assert "'bootstrap_servers' is a required property" in found["targets.redpanda"]
    assert "targets" in found  # the name Bad is not a broker name
    assert "'amqp' is not one of" in found["targets.mq.driver"]


def test_a_broker_without_a_cloud_provider_is_refused_in_aws_mode_with_its_name(monkeypatch):
    kafka = brokers.plugin("kafka")
    local_only = replace(kafka, name="local-only", cloud=None)
    registered = brokers.plugins()
    monkeypatch.setattr(registry, "plugins", lambda: {**registered, "local-only": local_only})
    monkeypatch.setattr(spec, "plugins", registry.plugins)
    monkeypatch.setenv("BROKERBENCH_MODE", "aws")
    request = {**MINIMAL, "brokers": ["kafka", "local-only"]}
    assert wiring.provider_problem("kafka", spec.validate(request)) is None
    assert "local-only has no cloud provider" in wiring.provider_problem("local-only", spec.validate(request))
    with pytest.raises(steps.InvalidRequest, match="local-only has no cloud provider"):
        steps.validate_request({"request": request})
    with pytest.raises(ProvisioningError, match="local-only"):
        wiring.target_provider("local-only", spec.validate(request))
    teardown = steps.teardown_target({"run_id": "R", "broker": "local-only", "spec": spec.validate(request)})
    assert teardown["action"].startswith("nothing to tear down")
    given = {"targets": {"local-only": {"bootstrap_servers": "10.0.0.5:9092"}}}
    assert isinstance(wiring.target_provider("local-only", given), ExistingTargets)  # an endpoint needs no provider


def test_a_broker_whose_client_is_not_deployed_is_refused_in_aws_mode_even_with_an_endpoint(monkeypatch):
    """The Lambda layer and the EC2 worker leave pulsar-client out (requirements-lambda.txt): a Pulsar run in AWS is
    refused when it is requested, naming the broker and the missing module, rather than failing in every cell."""
    monkeypatch.setitem(sys.modules, "pulsar", None)  # import pulsar raises ImportError, as in the layer
    for module in [m for m in sys.modules if m.startswith("brokerbench.brokers.pulsar.driver")]:
        monkeypatch.delitem(sys.modules, module)
    monkeypatch.setenv("BROKERBENCH_MODE", "aws")
    request = spec.validate({**MINIMAL, "brokers": ["kafka", "pulsar"], "targets": {"pulsar": {
        "service_url": "pulsar://10.0.0.7:6650", "admin_url": "http://10.0.0.7:8080"}}})
    assert wiring.provider_problem("kafka", request) is None
    problem = wiring.provider_problem("pulsar", request)
    assert problem.startswith("pulsar cannot run in AWS: its client library is not deployed") and "pulsar" in problem[40:]
    with pytest.raises(steps.InvalidRequest, match="pulsar cannot run in AWS"):
        steps.validate_request({"request": request})
    monkeypatch.setenv("BROKERBENCH_MODE", "local")  # locally the client is a requirement: not checked here
    assert wiring.provider_problem("pulsar", request) is None


def test_brokers_command_lists_version_where_and_capabilities(capsys):
    assert main(["brokers", "--json"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["kafka"]["runs"] == ["local (1 to 3 nodes)", "cloud: Amazon MSK", "external"]
    assert (rows["kafka"]["local_nodes"], rows["redis-streams"]["local_nodes"], rows["pulsar"]["local_nodes"]) == (3, 3, 1)
    assert rows["redis-streams"]["runs"] == ["local (1 to 3 nodes)", "cloud: ElastiCache for Redis", "external"]
    assert set(rows["kafka"]["modes"]) == {"batch", "single"} and rows["redis-streams"]["driver"] == "redis"
    assert "no-aof" in rows["redis-streams"]["persistence"] and rows["kafka"]["partitions"]
    assert rows["kafka"]["version"] == (brokers.plugin("kafka").local.installed_version()
                                        or "not installed (4.1.1 on first use)")
    assert main(["brokers"]) == 0
    table = capsys.readouterr().out
    assert "redis-streams" in table and "Amazon MSK" in table and "batch, single" in table
    assert main(["schema", "--check"]) == 0


def test_codecs_are_registered_modules_and_raw_is_the_prebuilt_one():
    assert set(FORMATS) == set(codecs()) == {"raw", "json", "msgpack", "avro", "protobuf"}
    assert [f for f in FORMATS if prebuilt(f)] == ["raw"]


class TwoProcessService:
    """A local service of two processes: an HTTP server (the port) and a helper."""

    name = "pair"
    startup_timeout_s = 10.0

    def installed_version(self):
        return "1.0"

    def install(self, log):
        pass

    def start(self, folder, ports, settings):
        port = ports()
        server = spawn([sys.executable, "-m", "http.server", "--bind", HOST, str(port)], folder, folder / "pair.log")
        helper = spawn([sys.executable, "-c", "import time; time.sleep(60)"], folder, folder / "pair.log")
        return Started([server, helper], port, {"url": f"http://{HOST}:{port}", "flag": settings.get("flag")}, "1.0",
                       str(folder / "pair.log"))

    def ready(self, started):
        return port_answers(started.port)


def test_the_stack_starts_a_service_of_several_processes_waits_for_it_and_stops_every_one(tmp_path):
    stack = LocalStack(tmp_path, flag="on")
    stack.services = {"pair": ("pair-broker", TwoProcessService())}
    endpoints = stack.up(log=lambda m: None)
    try:
        assert endpoints["pair-broker"]["flag"] == "on"  # the stack's settings reach the service
        status = stack.status()["pair"]
        assert status["state"] == "running" and len(status["pids"]) == 2
        assert stack.up(log=lambda m: None) == endpoints and stack.status()["pair"]["pids"] == status["pids"]
    finally:
        assert stack.down(log=lambda m: None) == ["pair"]
    assert not any(pid_alive(pid) for pid in status["pids"])
    assert stack.status()["pair"] == {"state": "stopped"}


class ClusterService(TwoProcessService):
    """A service that runs as one node or as a cluster: a process per node, each on its own port."""

    name = "pair"
    max_nodes = 3

    def start(self, folder, ports, settings):
        nodes = settings.get("nodes", 1)
        node_ports = [ports() for _ in range(nodes)]
        pids = [spawn([sys.executable, "-m", "http.server", "--bind", HOST, str(port)], folder, folder / "pair.log")
                for port in node_ports]
        return Started(pids, node_ports[0], {"urls": [f"http://{HOST}:{port}" for port in node_ports]}, "1.0",
                       str(folder / "pair.log"), {"nodes": nodes})

    def ready(self, started):
        return all(port_answers(int(url.rsplit(":", 1)[1])) for url in started.endpoint["urls"])


def test_a_cluster_runs_beside_the_single_node_under_its_own_name_and_down_stops_both(tmp_path):
    stack = LocalStack(tmp_path)
    stack.services = {"pair": ("pair-broker", ClusterService()), "solo": ("solo-broker", TwoProcessService())}
    try:
        stack.up(services=["pair"], log=lambda m: None)
        stack.up(services=["pair@3"], owner="run-1", log=lambda m: None)
        cluster = stack.endpoint("pair@3")
        assert len(cluster["urls"]) == 3 and len(cluster["pids"]) == 3 and all(map(pid_alive, cluster["pids"]))
        assert stack.endpoints(required=["pair"]) == {"pair-broker": {"urls": [stack.endpoint("pair")["urls"][0]]}}  # one node
        assert [name for name, s in stack.status().items() if s["state"] == "running"] == ["pair", "pair@3"]
        assert (tmp_path / "pair@3" / "data").is_dir()
        for wrong, why in [("pair@4", "1 node or a cluster of 2 to 3 here, not 4"), ("solo@2", "solo runs as 1 node"),
                           ("pair@x", "no local service pair@x"), ("pair@1", "not 1")]:
            with pytest.raises(StackError, match=why):
                stack.up(services=[wrong], log=lambda m: None)
    finally:
        stopped = stack.down(log=lambda m: None)
    assert sorted(stopped) == ["pair", "pair@3"] and not any(map(pid_alive, cluster["pids"]))
    assert "pair@3" not in stack.status()


class SilentService(ClusterService):
    """A service whose processes start but never answer."""

    startup_timeout_s = 1.0

    def ready(self, started):
        return False


def test_a_cluster_gets_the_start_up_bound_of_each_of_its_nodes_and_a_silent_one_is_stopped(tmp_path):
    stack = LocalStack(tmp_path)
    stack.services = {"pair": ("pair-broker", SilentService())}
    for name, bound_s in [("pair", 1), ("pair@3", 3)]:
        started = time.monotonic()
        with pytest.raises(StackError, match=f"{name} did not answer on .* within {bound_s} s") as raised:
            stack.up(services=[name], log=lambda m: None)
        waited = time.monotonic() - started
        assert bound_s <= waited, (name, waited, str(raised.value))
        assert name not in stack.status() or stack.status()[name] == {"state": "stopped"}  # nothing left running


def test_a_local_cluster_larger_than_the_service_runs_is_refused_before_anything_starts(tmp_path):
    stack = LocalStack(tmp_path)
    targets = LocalTargets(stack)
    spec = {"provision": {"kafka": {"nodes": 4}, "redis-streams": {"nodes": 4}, "pulsar": {"nodes": 2}}}
    with pytest.raises(ProvisioningError, match=r"provision.kafka.nodes: 4 nodes; locally kafka runs 1 to 3 nodes"):
        targets.provision("run-1", "kafka", spec)
    with pytest.raises(ProvisioningError, match=r"provision.redis-streams.nodes: 4 nodes; .* runs 1 to 3 nodes"):
        targets.provision("run-1", "redis-streams", spec)
    with pytest.raises(ProvisioningError, match=r"provision.pulsar.nodes: 2 nodes; .* runs as 1 node"):
        targets.provision("run-1", "pulsar", spec)
    assert targets.teardown("run-1", "kafka", spec) == {"broker": "kafka", "state": "gone", "action": "nothing started"}
    assert not stack.state_file.exists()
