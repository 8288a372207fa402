"""TLS on the drivers' own sockets against real brokers: a redis-server on 127.0.0.1 serving its TLS port only
(Debian's build speaks TLS), and a nats-server with JetStream that requires TLS, each with a certificate made for the
session (trustme, tests/conftest.py), trusted through SSL_CERT_FILE as a managed broker's is through the system's store. A cell over TLS
(the Python loop: the native one does not speak TLS) delivers every message once, the broker's own count agrees, and
its acknowledgements and deliveries are stamped at arrival (socket_buffer.TlsSocket), where an ssl.SSLSocket could only
give the read's return and NATS's TLS endpoints were nats-py's (its PubAcks stamped in its callback, and no consumer)."""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest
import redis

from brokerbench.brokers.nats_jetstream import local as nats_local
from brokerbench.brokers.nats_jetstream.driver import NatsJetStreamDriver
from brokerbench.drivers import BrokerUnavailable
from brokerbench.local.processes import free_port, port_answers
from brokerbench.spec import validate
from brokerbench.reports.results import build_results
from inline_run import execute_run

CLIENT = validate({"brokers": ["nats-jetstream"], "sizes": [1024], "rates": [1], "formats": ["raw"]})["client"]


@pytest.fixture
def certificate(session_certificate, monkeypatch) -> dict:
    """The session's certificate for 127.0.0.1 and its authority's, as files (tests/conftest.py); the authority
    trusted by this process and the cells' (SSL_CERT_FILE: the processes start with this environment)."""
    monkeypatch.setenv("SSL_CERT_FILE", str(session_certificate["ca"]))
    return session_certificate


def tiny(broker: str) -> dict:
    return {"brokers": [broker], "sizes": [1024], "rates": [200], "formats": ["raw"], "duration_s": 1,
            "warmup_s": 0.2, "warmup_until_steady": False, "drain_timeout_s": 2}


def assert_whole_and_stamped_at_arrival(events: list[dict]) -> dict:
    [cell] = build_results(events)["cells"]
    assert cell["status"] == "completed", cell.get("reason")
    assert cell["sent"] == cell["received"] > 0 and cell["lost"] == cell["duplicated"] == 0
    [end] = [e["data"] for e in events if e["type"] == "CellCompleted"]
    assert end["send_loop"] == "python"  # the native loop does not speak TLS
    assert (end["ack_stamps"], end["delivery_stamps"]) == ("arrival", "arrival")
    assert cell["broker_count"]["difference"] == 0  # what the broker holds is what it acknowledged
    return cell


@pytest.fixture
def tls_nats(endpoints, certificate, tmp_path):
    """A nats-server with JetStream that requires TLS (its INFO says so); stopped at the end."""
    port = free_port()
    log = (tmp_path / "nats.log").open("w")
    server = subprocess.Popen([str(nats_local.server_binary()), "-js", "-a", "127.0.0.1", "-p", str(port),
                               "--tls", "--tlscert", str(certificate["cert"]), "--tlskey", str(certificate["key"]),
                               "-sd", str(tmp_path / "jetstream")], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 15
        while not port_answers(port):
            if time.monotonic() > deadline or server.poll() is not None:
                raise RuntimeError("nats-server did not answer: " + (tmp_path / "nats.log").read_text()[-2000:])
            time.sleep(0.1)
        yield {**endpoints, "nats-jetstream": {"url": f"tls://127.0.0.1:{port}"}}
    finally:
        server.terminate()
        server.wait(10)
        log.close()


def test_a_nats_cell_over_tls_delivers_everything_and_is_stamped_at_arrival(tls_nats, store):
    outcome = execute_run(tiny("nats-jetstream"), tls_nats, store)
    assert_whole_and_stamped_at_arrival(store.read(outcome.run_id))


def test_a_nats_client_that_asks_plain_nats_of_a_tls_server_is_told_to_use_tls(tls_nats):
    url = tls_nats["nats-jetstream"]["url"].replace("tls://", "nats://")
    with pytest.raises(BrokerUnavailable, match="requires TLS: its URL is tls://127.0.0.1:"):
        NatsJetStreamDriver({"url": url}, CLIENT).consumer("bb-none", "g", [0])


@pytest.fixture
def tls_redis(endpoints, certificate, tmp_path):
    """A redis-server with only its TLS port; stopped at the end."""
    files = certificate
    port = free_port()
    log = (tmp_path / "redis.log").open("w")
    server = subprocess.Popen([shutil.which("redis-server"), "--port", "0", "--tls-port", str(port), "--bind",
                               "127.0.0.1", "--tls-cert-file", str(files["cert"]), "--tls-key-file", str(files["key"]),
                               "--tls-ca-cert-file", str(files["ca"]), "--tls-auth-clients", "no", "--save", "",
                               "--appendonly", "no", "--dir", str(tmp_path)], stdout=log, stderr=subprocess.STDOUT)
    try:
        client = redis.Redis(host="127.0.0.1", port=port, ssl=True, ssl_ca_certs=str(files["ca"]),
                             socket_connect_timeout=1)
        deadline = time.monotonic() + 15
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("redis-server's TLS port did not answer: "
                                       + (tmp_path / "redis.log").read_text()[-2000:]) from None
                time.sleep(0.1)
        yield {**endpoints, "redis-streams": {"host": "127.0.0.1", "port": port, "tls": True}}, client
    finally:
        server.terminate()
        server.wait(10)
        log.close()


def test_a_redis_cell_over_tls_delivers_everything_and_is_stamped_at_arrival(tls_redis, store):
    endpoints, client = tls_redis
    outcome = execute_run(tiny("redis-streams"), endpoints, store)
    assert_whole_and_stamped_at_arrival(store.read(outcome.run_id))  # Redis's count: XLEN
    assert client.dbsize() == 0  # the cell's keys were removed after it


@pytest.mark.parametrize("loop", ["native", "python"])
def test_a_kafka_cell_over_tls_is_stamped_at_arrival(loop, endpoints, certificate, store, monkeypatch):
    """The session's Kafka also serves TLS (its SSL listener, as an MSK broker's): librdkafka reads it through OpenSSL,
    whose read() of each record goes through the extension (native.rdkafka_reads_hooked: read and recvmsg), so a cell
    over TLS on either loop has its acknowledgements at the kernel's receive time of their Produce response and its
    deliveries at the arrival of the latest Fetch response, as over plain TCP; every message delivered once."""
    from brokerbench import native

    monkeypatch.setenv("BROKERBENCH_SEND_LOOP", loop)
    kafka = {"bootstrap_servers": endpoints["kafka"]["tls_bootstrap_servers"], "tls": True}
    outcome = execute_run(tiny("kafka"), {**endpoints, "kafka": kafka}, store)
    events = store.read(outcome.run_id)
    [cell] = build_results(events)["cells"]
    assert cell["status"] == "completed", cell.get("reason")
    assert cell["sent"] == cell["received"] > 0 and cell["lost"] == cell["duplicated"] == 0
    [end] = [e["data"] for e in events if e["type"] == "CellCompleted"]
    assert end["send_loop"] == loop
    assert (end["ack_stamps"], end["delivery_stamps"]) == ("arrival", "client:librdkafka-fetch-arrival")
    assert native.module().rdkafka_reads_hooked() == 2  # librdkafka's recvmsg and read
