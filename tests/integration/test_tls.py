"""TLS on the drivers' own sockets against a real broker: a redis-server on 127.0.0.1 serving its TLS port only
(Debian's build speaks TLS) with a certificate made for the test (trustme), trusted through SSL_CERT_FILE as a managed
Redis's is through the system's store. A Redis cell over TLS (the Python loop: the native one does not speak TLS)
delivers every message once, the broker's own stream length agrees, and its acknowledgements and deliveries are
stamped at arrival (socket_buffer.TlsSocket), where an ssl.SSLSocket could only give the read's return."""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest
import redis
import trustme

from brokerbench.local.processes import free_port
from brokerbench.reports.results import build_results
from inline_run import execute_run


@pytest.fixture
def tls_redis(endpoints, tmp_path, monkeypatch):
    """A redis-server with only its TLS port, its certificate's authority trusted by this process and the cell's
    (SSL_CERT_FILE); stopped at the end."""
    authority = trustme.CA()
    cert = authority.issue_cert("127.0.0.1")
    files = {name: tmp_path / f"{name}.pem" for name in ("ca", "cert", "key")}
    authority.cert_pem.write_to_path(str(files["ca"]))
    cert.cert_chain_pems[0].write_to_path(str(files["cert"]))
    cert.private_key_pem.write_to_path(str(files["key"]))
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
        monkeypatch.setenv("SSL_CERT_FILE", str(files["ca"]))  # the cell's processes start with this environment
        yield {**endpoints, "redis-streams": {"host": "127.0.0.1", "port": port, "tls": True}}, client
    finally:
        server.terminate()
        server.wait(10)
        log.close()


def test_a_cell_over_tls_delivers_everything_and_is_stamped_at_arrival(tls_redis, store):
    endpoints, client = tls_redis
    outcome = execute_run({"brokers": ["redis-streams"], "sizes": [1024], "rates": [200], "formats": ["raw"],
                           "duration_s": 1, "warmup_s": 0.2, "warmup_until_steady": False, "drain_timeout_s": 2},
                          endpoints, store)
    events = store.read(outcome.run_id)
    [cell] = build_results(events)["cells"]
    assert cell["status"] == "completed", cell.get("reason")
    assert cell["sent"] == cell["received"] > 0 and cell["lost"] == cell["duplicated"] == 0
    [end] = [e["data"] for e in events if e["type"] == "CellCompleted"]
    assert end["send_loop"] == "python"  # the native loop does not speak TLS
    assert (end["ack_stamps"], end["delivery_stamps"]) == ("arrival", "arrival")
    assert cell["broker_count"]["difference"] == 0  # XLEN: what Redis holds is what it acknowledged
    assert client.info("server")["redis_version"] and client.dbsize() == 0  # the cell's keys were removed after it
