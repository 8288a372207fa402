"""Fixtures for the real local stack: one Kafka, Redis and DynamoDB Local per test session (under pytest-xdist, per
worker: each has its own on free loopback ports and its own temporary directories), stopped at the end;
the other brokers (Pulsar, Kafka with ZooKeeper) only for the modules that use them. A session whose tests need only
the event store (`store`) starts DynamoDB Local alone.

Test tiers (markers, applied here by path, so a new module is in its tier without a decorator):
- `integration`: every test under tests/integration (a real Kafka, Redis, Pulsar or DynamoDB Local).
- `slow`: the modules in SLOW_MODULES: scaled study runs, fault injection (brokers, workers or the event store
  killed mid-run) and long cells (a broker-enforced cap or a proxy's delay measured over many seconds); each
  takes a minute or more of a full run. `pytest -m "not slow"` leaves them out, `make unit` runs neither tier.
"""

import fcntl
import json
import os
import secrets
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from brokerbench.events.dynamodb import DynamoEventStore
from brokerbench.local.stack import LocalStack
from certificates import local_certificate

CORE_SERVICES = ["kafka", "redis", "dynamodb"]
# Every JVM the tests start (Kafka, DynamoDB Local, Pulsar, ZooKeeper, their command-line tools) compiles with C1
# alone: `java` reads JDK_JAVA_OPTIONS, and every process the tests start inherits it. A full run's CPU is spent
# mostly in those JVMs (Kafka 39%, DynamoDB Local 10%, Pulsar 8% of a 3-worker run's first 12 minutes), much of
# it compiling: C1 alone took a Kafka start from 7.1 to 4.5 CPU seconds, and four 3 s cells on it from 10.6 to 5.8
# (DynamoDB Local 7.4 to 4.8 over the same run). The tests check behaviour and accounting, not a broker's speed;
# `make run` and users' runs keep the JVM's default (C2) compiler, whose steady state is what a benchmark measures.
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1"
os.environ.setdefault("JDK_JAVA_OPTIONS", TEST_JVM_OPTIONS)
# A rated cell takes real-time priority by default (worker/priority.py), put back by its guard after an interval
# in which the cell or the host was busy. The test session's three workers share 2 cores by construction, and a
# test's truths hold to the microsecond (a Toxiproxy delay, a quota's cap): a neighbour's real-time cell would take
# a core from them for up to the second before its guard looks. So the session's cells run at normal priority
# (BROKERBENCH_REALTIME=0, inherited by every process it starts); tests of the priority itself turn it on.
os.environ.setdefault("BROKERBENCH_REALTIME", "0")
# The modules that start Pulsar or ZooKeeper-mode Kafka (extra_brokers), sorted one after another: in one process
# (or on one worker) a broker one of them started serves the next.
EXTRA_BROKER_MODULES = {"test_pulsar.py", "test_study_run.py", "test_loopback.py", "test_kafka_zookeeper.py",
                        "test_nats.py", "test_rabbitmq.py", "test_network_faults.py"}
NEXT_ITEM = pytest.StashKey()
TESTS_DIR = Path(__file__).parent
INTEGRATION_DIR = TESTS_DIR / "integration"
SLOW_MODULES = {
    "test_study_run.py", "test_study_suites_run.py",  # scaled study runs (1-2.5 min each)
    "test_faults.py", "test_step_faults.py", "test_kill_ec2_worker.py",  # fault injection
    "test_quota.py", "test_latency_truth.py",  # long cells: a Kafka quota's cap, a Toxiproxy delay
}


# `make test WORKERS=N` runs the modules on pytest-xdist workers, a module on one worker (`--dist loadfile`, so that what a
# module starts starts once), handed out in collection order (`--no-loadscope-reorder`). These modules go first,
# longest first (their serial times on a quiet host, 40 s to 5 min): one of them left for the end would keep a
# worker busy after the others have finished. The rest keep pytest's order. (pytest-xdist 3.8's `loadgroup`
# would keep the EXTRA_BROKER_MODULES on one worker, but under pytest 9 the group never reaches the scheduler:
# it is written into the item's `_nodeid`, and the ids sent are `nodeid`'s.)
# test_quota.py is handed out after the first minutes, which the study suites' 3-node clusters keep CPU-bound: its
# cap is judged from below only in cells the machine gave a CPU (tests/machine_load.py), and started with the first
# modules on three workers its cells read 58 to 86% CPU pressure (skipped), where two workers' read at most 50%.
LONGEST_FIRST = [
    "test_study_suites_run.py", "test_faults.py", "test_engine.py",
    "test_workflow.py", "test_send_loop.py", "test_study_run.py", "test_two_runs_at_once.py", "test_quota.py",
    "test_kafka_zookeeper.py", "test_console.py", "test_kafka_cluster.py", "test_api_schedules.py", "test_pulsar.py",
    "test_cancel.py", "test_kill_ec2_worker.py", "test_secrets.py", "test_stack.py",
    "test_step_faults.py", "test_cdk_app.py", "test_lambda_runtime.py", "test_cli_run.py",
]


# Modules that judge timings against a known truth (Toxiproxy's delay) measure with the machine to itself: under
# pytest-xdist the other workers finish the test they are in and wait from the module's first measurement (its
# `machine_to_itself` fixture) to its end (its CPU pressure would otherwise skip most of its checks,
# tests/machine_load.py). A lock file shared by the run's workers: every other test holds it shared, the module holds
# it exclusive, and an "intent" lock taken first keeps new tests from starting while the module waits for the one
# under way.
# Their brokers start before that, beside the other workers' tests, and never beside another quiet module's
# measurement: a quiet module's fixtures are set up holding the lock shared, as a test runs, and a "starting" lock
# besides, which the quiet hold waits for. test_latency_truth starts a Kafka, a Pulsar (warmed up with 20,500
# messages), NATS and RabbitMQ, some 30-40 s of both cores; test_change_watch measuring beside that took 40 to 65 s
# in four CI runs (its host marks cells busy and it measures more runs), 34 to 37 s in six where nothing started
# beside it.
# They are handed out after the other integration modules and before the unit tests: test_latency_truth's brokers
# then start beside the others' tests rather than in a tail where nothing else is left to run (its setup took 40 s
# of the last run's 180 s quiet phase there, beside test_change_watch's measurement), and the unit tests' many short
# modules that follow end the workers together. test_change_watch, which starts nothing but a proxy, comes first:
# its measurement is then under way, or done, when test_latency_truth's brokers start.
QUIET_MODULES = ("test_change_watch.py", "test_latency_truth.py")
_QUIET_HELD = pytest.StashKey()


def _lock_path(kind: str) -> Path:
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"pid{os.getpid()}"
    return Path(tempfile.gettempdir()) / f"brokerbench-tests-{run}.{kind}"


@contextmanager
def _locked(kind: str, how: int):
    with open(_lock_path(kind), "a") as handle:
        fcntl.flock(handle, how)
        yield


@contextmanager
def _beside_others():
    """What every test runs under, unless a quiet module holds the machine: wait while one does or waits to."""
    with _locked("intent", fcntl.LOCK_SH):
        pass  # a quiet module waiting for the machine: start nothing new
    with _locked("quiet", fcntl.LOCK_SH):
        yield


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    if Path(item.path).name in QUIET_MODULES:
        yield
        return
    with _beside_others():
        yield


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_fixture_setup(fixturedef, request):
    """A quiet module's fixtures (its brokers, their warm-up) are set up as a test runs, beside the others' tests and
    never beside a quiet module's measurement, under the "starting" lock the quiet hold waits for. Not once this
    process holds the machine (a flock taken shared on a second handle would wait for its own exclusive one), nor
    inside another fixture's setup (one lock at a time)."""
    config = request.config
    if (fixturedef.argname == "machine_to_itself" or config.stash.get(_QUIET_HELD, False)
            or Path(request.node.path).name not in QUIET_MODULES):
        yield
        return
    config.stash[_QUIET_HELD] = True
    try:
        with _beside_others(), _locked("starting", fcntl.LOCK_SH):
            yield
    finally:
        config.stash[_QUIET_HELD] = False


@pytest.fixture(scope="module")
def machine_to_itself(request):
    """Held by a QUIET_MODULES module from its first measurement to its end: no other test runs on any worker
    meanwhile, and no quiet module's brokers are starting."""
    with _locked("starting", fcntl.LOCK_EX):
        pass  # another quiet module's brokers starting on another worker: they finish first
    with _locked("intent", fcntl.LOCK_EX), _locked("quiet", fcntl.LOCK_EX):
        request.config.stash[_QUIET_HELD] = True
        try:
            yield
        finally:
            request.config.stash[_QUIET_HELD] = False


# BROKERBENCH_TEST_TIMELINE=FILE: each test's pytest-xdist worker, start and end (epoch seconds, its fixtures'
# setup and teardown included) appended to FILE as JSON lines, by the workers (the controller relays the same
# hooks, and writes nothing): where a run's workers waited (bench/test_suite.py, `workers` in its row).
TIMELINE = os.environ.get("BROKERBENCH_TEST_TIMELINE")


def _timeline(nodeid: str, moment: str) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if TIMELINE and worker:
        with open(TIMELINE, "a") as out:
            out.write(json.dumps({"worker": worker, "test": nodeid, moment: time.time()}) + "\n")


def pytest_runtest_logstart(nodeid, location):
    _timeline(nodeid, "start")


def pytest_runtest_logfinish(nodeid, location):
    _timeline(nodeid, "end")


def pytest_itemcollected(item):
    """Each test's tier, as it is collected."""
    path = Path(item.path)
    if INTEGRATION_DIR in path.parents:
        item.add_marker(pytest.mark.integration)
        if path.name in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)


def pytest_collection_modifyitems(config, items):
    if getattr(config, "workerinput", None) is None:
        return  # one process (WORKERS=1) keeps pytest's order
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    first_of_group = min(rank.get(name, len(rank)) for name in EXTRA_BROKER_MODULES)

    def order(item) -> tuple[int, int]:
        name = Path(item.path).name
        if name in QUIET_MODULES:  # after the other integration modules, before the unit tests (see QUIET_MODULES)
            return (len(rank) + 1, QUIET_MODULES.index(name))
        own = rank.get(name, len(rank))
        if own == len(rank) and INTEGRATION_DIR not in Path(item.path).parents:
            return (len(rank) + 2, 0)  # the short modules the workers end on
        return (first_of_group, own) if name in EXTRA_BROKER_MODULES else (own, 0)

    items.sort(key=order)  # stable: a module stays whole, those modules one after another, every worker alike


@pytest.fixture(scope="session")
def session_certificate(tmp_path_factory) -> dict:
    """A certificate for 127.0.0.1 (its key in PKCS#8, as Pulsar reads it) and its authority's, as files, made for
    the session (trustme): the session's Pulsar and RabbitMQ serve TLS with it too. A test trusts it through
    SSL_CERT_FILE."""
    return local_certificate(tmp_path_factory.mktemp("certificate"))


@pytest.fixture(scope="session")
def local_stack(tmp_path_factory, session_certificate):
    """The session's local stack, nothing started yet; every service the session started stops at its end. Its
    Pulsar, its RabbitMQ and its Kafka also serve TLS with the session's certificate (endpoint tls_service_url;
    tls_amqp_port and tls_stream_port; tls_bootstrap_servers)."""
    cert, key = str(session_certificate["cert"]), str(session_certificate["key"])
    local = LocalStack(tmp_path_factory.mktemp("stack"), pulsar_tls={"cert": cert, "key": key},
                       rabbitmq_tls={"cert": cert, "key": key, "ca": str(session_certificate["ca"])},
                       kafka_tls={"cert": cert, "key": key})
    yield local
    local.down(log=lambda m: None)


@pytest.fixture(scope="session")
def stack(local_stack):
    local_stack.up(services=CORE_SERVICES, log=lambda m: None)
    return local_stack


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """The test after this one, for the module fixtures torn down now (extra_brokers)."""
    item.config.stash[NEXT_ITEM] = nextitem
    yield


@pytest.fixture(scope="session")
def _extra_owner(stack):
    owner = f"tests-{secrets.token_hex(3)}"
    yield owner
    stack.down(owner=owner, log=lambda m: None)


@pytest.fixture(scope="module")
def extra_brokers(stack, _extra_owner, request):
    """`extra_brokers("pulsar")` starts that broker (once) and returns every endpoint. The modules that use it run
    one after another on one worker (EXTRA_BROKER_MODULES), so a broker started for one serves the next; the
    brokers stop when the last of them ends, so idle JVMs do not share the cores with other tests."""

    def up(*services: str) -> dict:
        stack.up(services=list(services), owner=_extra_owner, log=lambda m: None)
        return stack.endpoints(required=CORE_SERVICES)

    yield up
    # Kept only from one of those modules to the next: any other module's brokers (a 3-node cluster, say) stop
    # with it, so that a later module that starts its own finds none running.
    following = request.config.stash.get(NEXT_ITEM, None)
    if (Path(request.node.path).name not in EXTRA_BROKER_MODULES or following is None
            or Path(following.path).name not in EXTRA_BROKER_MODULES):
        stack.down(owner=_extra_owner, log=lambda m: None)


@pytest.fixture(scope="session")
def endpoints(stack):
    return stack.endpoints(required=CORE_SERVICES)


@pytest.fixture(scope="session")
def event_store_endpoint(request, local_stack):
    """DynamoDB Local's endpoint. When a collected test needs the whole stack, the stack's DynamoDB Local (one per
    session, whichever test comes first); otherwise DynamoDB Local started alone (about 5 s, no broker)."""
    if any("stack" in item.fixturenames for item in request.session.items):
        return request.getfixturevalue("stack").endpoints(required=["dynamodb"])["dynamodb"]
    return local_stack.up(services=["dynamodb"], log=lambda m: None)["dynamodb"]


@pytest.fixture(scope="session")
def store(event_store_endpoint):
    """A table of its own on DynamoDB Local. Needs no broker: a test that runs cells asks for `endpoints` too."""
    events = DynamoEventStore(f"bb-test-{secrets.token_hex(4)}", endpoint_url=event_store_endpoint["endpoint_url"])
    events.ensure_table()
    yield events
    events.client.delete_table(TableName=events.table)


class ServedApi:
    """`brokerbench serve` as a user starts it, on a free loopback port, against the session's stack."""

    def __init__(self, state_dir, out_dir, *extra: str) -> None:
        import subprocess
        import sys
        import time
        from pathlib import Path

        self.out_dir = Path(out_dir)
        command = [str(Path(sys.executable).with_name("brokerbench")), "--state-dir", str(state_dir), "serve",
                   "--port", "0", "--out", str(out_dir), *extra]
        self.stderr = open(self.out_dir / "serve.stderr", "wb")
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=self.stderr)
        line = self.process.stdout.readline().decode().strip()  # "serving http://127.0.0.1:PORT"
        if not line.startswith("serving "):
            self.stop()
            raise RuntimeError(f"brokerbench serve did not start: {line!r}; "
                               f"{(self.out_dir / 'serve.stderr').read_text()[-2000:]}")
        self.url = line.split(" ", 1)[1]
        self.started = time.monotonic()

    def request(self, method: str, path: str, body=None, headers: dict | None = None, raw: bytes | None = None):
        """(status, headers, parsed JSON body or text)."""
        import json
        import urllib.error
        import urllib.request

        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        request = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers={"content-type": "application/json", **(headers or {})})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                status, got, text = response.status, dict(response.headers), response.read().decode()
        except urllib.error.HTTPError as error:
            status, got, text = error.code, dict(error.headers), error.read().decode()
        kind = got.get("Content-Type", got.get("content-type", ""))
        return status, got, json.loads(text) if kind.startswith("application/json") and text else text

    def stop(self) -> None:
        import signal

        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=150)
            except Exception:
                self.process.kill()
                self.process.wait()
        self.process.stdout.close()
        self.stderr.close()


@pytest.fixture(scope="session")
def served_api(stack, tmp_path_factory):
    served = ServedApi(stack.state_dir, tmp_path_factory.mktemp("served"), "--no-schedules")
    yield served
    served.stop()


@pytest.fixture(scope="module")
def toxiproxy(tmp_path_factory):
    """A Toxiproxy server for this module (tests/toxiproxy.py): proxies to real servers with a known latency."""
    from toxiproxy import Toxiproxy

    proxy = Toxiproxy(tmp_path_factory.mktemp("toxiproxy"))
    yield proxy
    proxy.stop()
