"""AMQP 0-9-1 through pika, for what both RabbitMQ plug-ins do outside the hot path: connect, declare a cell's
queues (quorum queues, or streams, which are queues of type stream), count them (a passive declare's message
count: the broker's own figure, for a stream too), delete them."""

from __future__ import annotations

import json
import os
import socket
import ssl
import time

import pika
from pika.exceptions import (AMQPError, AuthenticationError, ChannelClosedByBroker, ProbableAccessDeniedError,
                             ProbableAuthenticationError)

from ...drivers import BrokerUnavailable

QUEUE_TYPES = ("quorum", "stream")


def lane_queue(topic: str, lane: int) -> str:
    """One queue (or stream) per lane, as the Redis plug-in has one stream key per lane."""
    return f"{topic}-{lane}"


_SECRETS: dict[str, str] = {}  # secret ARN -> password, fetched once per process


def _secret_password(arn: str) -> str:
    """The password in Secrets Manager: a JSON object's `password` (Amazon MQ's provider stores
    {"username", "password"}), or the secret string itself."""
    if arn not in _SECRETS:
        import boto3

        value = boto3.client("secretsmanager").get_secret_value(SecretId=arn)["SecretString"]
        try:
            _SECRETS[arn] = json.loads(value)["password"]
        except (ValueError, TypeError, KeyError):
            _SECRETS[arn] = value
    return _SECRETS[arn]


def credentials(endpoint: dict) -> tuple[str, str]:
    """(user, password): the password from the secret the endpoint names (Amazon MQ), or the environment variable it
    names, else guest's."""
    if endpoint.get("password_secret_arn"):
        return endpoint.get("username", "guest"), _secret_password(endpoint["password_secret_arn"])
    variable = endpoint.get("password_env")
    if variable:
        if not os.environ.get(variable):
            raise BrokerUnavailable(f"RabbitMQ at {endpoint['host']}: set {variable} to the password of "
                                    f"{endpoint.get('username', 'guest')}")
        return endpoint.get("username", "guest"), os.environ[variable]
    return endpoint.get("username", "guest"), "guest"


def addresses(endpoint: dict, port_key: str = "amqp_port") -> list[tuple[str, int]]:
    """Where a client may connect, in the order to try: the endpoint's own address, then each other node of a local
    cluster (`nodes`: any node serves a quorum queue or declares a stream, whichever node leads it). `port_key`:
    "amqp_port" or "stream_port"."""
    found = [(endpoint["host"], int(endpoint[port_key]))]
    for node in endpoint.get("nodes") or ():
        port = node.get("port" if port_key == "amqp_port" else port_key)
        if port and (node["host"], int(port)) not in found:
            found.append((node["host"], int(port)))
    return found


def first_answering(endpoint: dict, port_key: str = "amqp_port", timeout_s: float = 1.0) -> tuple[str, int]:
    """The first of `addresses` whose listener takes a connection (a client that connects to one address only: the
    native loops, rstream's first connection); the endpoint's own when none does (its client then says so)."""
    found = addresses(endpoint, port_key)
    if len(found) > 1:
        for address in found:
            try:
                socket.create_connection(address, timeout=timeout_s).close()
                return address
            except OSError:
                continue
    return found[0]


def parameters(endpoint: dict, timeout_s: float = 10.0) -> list[pika.ConnectionParameters]:
    """Connection parameters for each address (pika tries them in turn, each once)."""
    user, password = credentials(endpoint)
    tls = pika.SSLOptions(ssl.create_default_context(), endpoint["host"]) if endpoint.get("tls") else None
    return [pika.ConnectionParameters(
        host=host, port=port, virtual_host=endpoint.get("vhost", "/"),
        credentials=pika.PlainCredentials(user, password), socket_timeout=timeout_s, ssl_options=tls,
        blocked_connection_timeout=30, connection_attempts=1, heartbeat=60)  # pika sets TCP_NODELAY itself
        for host, port in addresses(endpoint)]


def connect(endpoint: dict, timeout_s: float = 10.0) -> pika.BlockingConnection:
    try:
        return pika.BlockingConnection(parameters(endpoint, timeout_s))
    except (AMQPError, OSError) as exc:
        raise _unanswered(endpoint, exc) from None


def check(endpoint: dict, timeout_s: float) -> None:
    """RabbitMQ answers over AMQP within `timeout_s`, as Kafka's and Redis's checks wait for theirs: a refused or
    reset connection (a node started again a moment before, on a loaded host, takes connections before it serves
    them: "Connection reset by peer") is tried again every 0.2 s until then. A refused login fails at once."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            pika.BlockingConnection(parameters(endpoint, max(0.5, deadline - time.monotonic()))).close()
            return
        except (AuthenticationError, ProbableAuthenticationError, ProbableAccessDeniedError) as exc:
            raise _unanswered(endpoint, exc) from None
        except (AMQPError, OSError) as exc:
            if time.monotonic() >= deadline:
                raise _unanswered(endpoint, exc) from None
            time.sleep(0.2)


def _unanswered(endpoint: dict, exc: Exception) -> BrokerUnavailable:
    return BrokerUnavailable(f"RabbitMQ at {endpoint['host']}:{endpoint['amqp_port']} did not answer: {exc!r}")


def declare(channel, queue: str, queue_type: str) -> None:
    """A durable queue of `queue_type` (quorum or stream); RabbitMQ requires both to be durable."""
    channel.queue_declare(queue, durable=True, arguments={"x-queue-type": queue_type})


def declare_lanes(endpoint: dict, topic: str, lanes: int, queue_type: str) -> None:
    """The cell's queues afresh: any left from an earlier cell of that name are deleted first."""
    connection = connect(endpoint)
    try:
        channel = connection.channel()
        for lane in range(lanes):
            channel.queue_delete(lane_queue(topic, lane))
            declare(channel, lane_queue(topic, lane), queue_type)
    except AMQPError as exc:
        raise BrokerUnavailable(f"could not declare {queue_type} queues for {topic}: {exc!r}") from None
    finally:
        _close(connection)


def delete_lanes(endpoint: dict, topic: str, lanes: int) -> None:
    try:
        connection = connect(endpoint)
    except BrokerUnavailable:
        return  # best effort: each cell has its own queues
    try:
        channel = connection.channel()
        for lane in range(lanes):
            channel.queue_delete(lane_queue(topic, lane))
    except AMQPError:
        pass
    finally:
        _close(connection)


def counts(endpoint: dict, topic: str, lanes: int) -> list[int] | None:
    """Each lane's message count as the broker reports it (queue.declare-ok of a passive declare): a quorum
    queue's ready messages, a stream's committed messages. None when it does not answer or a queue is missing."""
    try:
        connection = connect(endpoint, timeout_s=5)
    except BrokerUnavailable:
        return None
    try:
        out = []
        for lane in range(lanes):
            channel = connection.channel()
            out.append(int(channel.queue_declare(lane_queue(topic, lane), passive=True).method.message_count))
            channel.close()
        return out
    except (AMQPError, OSError):
        return None
    finally:
        _close(connection)


def declare_ready(endpoint: dict, queue: str) -> bool:
    """The readiness probe: a client connects, declares a quorum queue and a stream, and deletes them."""
    try:
        connection = pika.BlockingConnection(parameters(endpoint, timeout_s=2))
    except (AMQPError, OSError):
        return False
    try:
        channel = connection.channel()
        for queue_type in QUEUE_TYPES:
            declare(channel, f"{queue}-{queue_type}", queue_type)
            channel.queue_delete(f"{queue}-{queue_type}")
        return True
    except (AMQPError, OSError):
        return False
    finally:
        _close(connection)


def server_version(endpoint: dict) -> str | None:
    """The version the broker announces when a connection opens (its server properties)."""
    try:
        connection = connect(endpoint, timeout_s=5)
    except BrokerUnavailable:
        return None
    try:
        version = connection._impl.server_properties.get("version")  # pika keeps Connection.Start's properties
        return version.decode() if isinstance(version, bytes) else version
    finally:
        _close(connection)


def _close(connection) -> None:
    try:
        connection.close()
    except (AMQPError, OSError, ChannelClosedByBroker):
        pass
