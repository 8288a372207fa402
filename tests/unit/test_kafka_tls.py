"""Kafka over TLS: the local node's TLS listener (stack setting kafka_tls) and what a target with `tls` gives
librdkafka. The listener itself is served and read by a real broker in tests/integration/test_tls.py."""

import pytest

from brokerbench.brokers.kafka import driver, local
from brokerbench.local.processes import HOST


def test_the_single_node_serves_tls_with_the_certificate_named(tmp_path):
    """The key and the certificate in one PEM keystore (the key first, as Kafka reads a PEM keystore file), an SSL
    listener on the port given, advertised as it listens; a cluster's nodes and a stack without the setting listen in
    plain only; a setting that names no file is refused by name."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.write_text("the certificate\n")
    key.write_text("the key\n")
    tls = {"kafka_tls": {"cert": str(cert), "key": str(key)}}
    listeners, properties = local.tls_listener(tls, 1, tmp_path, 9094)
    assert listeners == [f"SSL://{HOST}:9094"]
    keystore = tmp_path / "tls-keystore.pem"
    assert keystore.read_text() == key.read_text() + cert.read_text() and keystore.stat().st_mode & 0o777 == 0o600
    assert "listener.name.ssl.ssl.keystore.type=PEM" in properties
    assert f"listener.name.ssl.ssl.keystore.location={keystore}" in properties
    assert [p for p in properties if p.startswith("listener.security.protocol.map=")][0].endswith(",SSL:SSL")
    assert local.tls_listener(tls, 3, tmp_path, 9094) == ([], []) == local.tls_listener({}, 1, tmp_path, None)
    with pytest.raises(local.StackError, match="kafka_tls"):
        local.tls_listener({"kafka_tls": {"cert": str(cert)}}, 1, tmp_path, 9094)
    with pytest.raises(local.StackError, match="no.pem"):
        local.tls_listener({"kafka_tls": {"cert": str(cert), "key": str(tmp_path / "no.pem")}}, 1, tmp_path, 9094)


def test_a_tls_target_trusts_the_file_ssl_cert_file_names(monkeypatch):
    """librdkafka's own OpenSSL does not read SSL_CERT_FILE: the driver passes it as ssl.ca.location; without it the
    system's authorities; nothing of TLS for a plain target."""
    monkeypatch.setenv("SSL_CERT_FILE", "/etc/ca.pem")
    assert driver._security({"bootstrap_servers": "b:9094", "tls": True}) == {
        "security.protocol": "SSL", "ssl.ca.location": "/etc/ca.pem"}
    assert driver._security({"bootstrap_servers": "b:9092"}) == {}
    monkeypatch.delenv("SSL_CERT_FILE")
    assert driver._security({"bootstrap_servers": "b:9094", "tls": True}) == {"security.protocol": "SSL"}
