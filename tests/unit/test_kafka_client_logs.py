"""librdkafka's own lines go to the driver's logger, not to the terminal: a real confluent-kafka producer and consumer
made by the Kafka driver, bootstrapped at a loopback port nothing listens on (every connection refused, as a network
fault's reset or a killed node makes librdkafka report), write nothing to the process's stderr, and their lines and
errors reach LIBRDKAFKA_LOG, whence brokerbench's logger takes them into the run's log; the native send loop's
librdkafka keeps its lines for the worker to log the same way."""

import logging
import socket
import time

from brokerbench import native
from brokerbench.brokers.kafka import driver
from brokerbench.spec import validate

CLIENT = validate({"brokers": ["kafka"], "sizes": [1024], "rates": [100], "formats": ["raw"]})["client"]


def unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_librdkafkas_lines_reach_the_drivers_logger_and_not_stderr(capfd, caplog):
    kafka = driver.KafkaDriver({"bootstrap_servers": f"127.0.0.1:{unused_port()}"}, CLIENT)
    caplog.set_level(logging.DEBUG, logger=driver.LIBRDKAFKA_LOG.name)
    producer = kafka.producer("bb-logs", 1, "batch", lambda header, ok, at: None)
    consumer = kafka.consumer("bb-logs", "bb-logs-g", [0])
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not any("refused" in r.getMessage().lower() for r in caplog.records):
            producer.poll(0.1)
            consumer.poll(0.1)
    finally:
        consumer.close()
        producer.close()
    lines = [r.getMessage() for r in caplog.records if r.name == driver.LIBRDKAFKA_LOG.name]
    assert any("refused" in line.lower() for line in lines), lines  # librdkafka's own words, through the logger
    assert "rdkafka" not in capfd.readouterr().err  # nothing printed by librdkafka itself


def test_the_native_kafka_loops_librdkafka_lines_are_kept_and_logged_not_printed(capfd, caplog):
    """The native send loop's own librdkafka: its log callback keeps each line (level, facility, text) for
    forward_logs, which the worker's loop calls at every interval; nothing is printed on stderr."""
    kafka = driver.KafkaDriver({"bootstrap_servers": f"127.0.0.1:{unused_port()}"}, CLIENT)
    caplog.set_level(logging.DEBUG, logger=native.LIBRDKAFKA_LOG.name)
    sender = kafka.native_sender("bb-logs", 1, "batch")
    forwarded = 0
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not any("refused" in r.getMessage().lower() for r in caplog.records):
            time.sleep(0.1)  # librdkafka's own threads try the bootstrap server and log as they fail
            forwarded += native.forward_logs(sender)
    finally:
        sender.close()
    lines = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == native.LIBRDKAFKA_LOG.name]
    assert forwarded == len(lines) and any("refused" in text.lower() for _, text in lines), lines
    assert all(level >= logging.INFO for level, _ in lines) and any(level >= logging.WARNING for level, _ in lines)
    assert "rdkafka" not in capfd.readouterr().err
