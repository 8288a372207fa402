"""A service that died is started again on the ports it had: each of them in its place, waited for while something
still holds it, and one still held after the wait replaced in its place alone (real sockets on 127.0.0.1)."""

import socket
import threading

from brokerbench.local import stack
from brokerbench.local.stack import HOST, Service, free_port


def _held(port: int) -> socket.socket:
    sock = socket.socket()
    sock.bind((HOST, port))
    sock.listen()
    return sock


def _service(ports: list[int]) -> Service:
    first, stream, dist = ports
    return Service("rabbitmq", [], first, "log", "3.10", None, {"stream_port": stream, "dist_port": dist,
                                                                 "node": "bb@localhost"})


def test_a_port_still_held_is_replaced_in_its_place_and_the_others_keep_theirs(monkeypatch):
    ports = [free_port() for _ in range(3)]
    monkeypatch.setattr(stack, "SAME_PORT_WAIT_S", 0.5)
    holder = _held(ports[0])
    try:
        allocate = stack._same_ports(_service(ports))
        first, stream, dist = allocate(), allocate(), allocate()
    finally:
        holder.close()
    assert first not in ports and (stream, dist) == (ports[1], ports[2])


def test_a_port_freed_within_the_wait_is_handed_out_again(monkeypatch):
    ports = [free_port() for _ in range(3)]
    monkeypatch.setattr(stack, "SAME_PORT_WAIT_S", 30.0)
    holder = _held(ports[0])
    threading.Timer(1.0, holder.close).start()
    allocate = stack._same_ports(_service(ports))
    assert [allocate(), allocate(), allocate()] == ports
