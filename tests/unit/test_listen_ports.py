"""Listener ports are chosen outside the kernel's ephemeral range, never twice, never one something holds (real
sockets on 127.0.0.1)."""

import socket

from brokerbench.local import processes
from brokerbench.local.processes import ephemeral_range, free_port, listen_candidates


def test_the_ephemeral_range_is_read_from_the_kernels_file_and_defaults_without_it(tmp_path):
    ranges = tmp_path / "ip_local_port_range"
    ranges.write_text("20000\t45000\n")
    assert ephemeral_range(str(ranges)) == (20000, 45000)
    assert ephemeral_range(str(tmp_path / "missing")) == (32768, 60999)


def test_candidates_leave_out_the_ephemeral_range_and_may_be_none():
    candidates = listen_candidates((32768, 60999))
    assert candidates[0] == processes.LISTEN_PORTS[0] and candidates[-1] == 65535
    assert 32767 in candidates and 61000 in candidates
    assert not [p for p in candidates if 32768 <= p <= 60999]
    assert listen_candidates((1024, 65535)) == []


def test_free_ports_are_outside_the_range_unique_and_unheld_while_outgoing_connections_hold_ports():
    low, high = ephemeral_range()
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(300)
        clients = [socket.create_connection(server.getsockname()) for _ in range(300)]
        try:
            held = {c.getsockname()[1] for c in clients}
            ports = [free_port() for _ in range(500)]
        finally:
            for c in clients:
                c.close()
    assert len(set(ports)) == len(ports)
    assert not held & set(ports)
    assert not [p for p in ports if low <= p <= high]
    for port in ports[:50]:  # each could be bound as it was handed out
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_with_no_room_outside_the_range_the_kernel_chooses(monkeypatch):
    monkeypatch.setattr(processes, "ephemeral_range", lambda: (1024, 65535))
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
