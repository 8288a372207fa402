"""Keeping the kernel's receive stamps on while a test checks them.

Linux stamps received packets only while some socket on the host asks for it (SO_TIMESTAMPNS and its kind): the
first such socket switches the stamping on through a deferred kernel work item (net_enable_timestamp), and the last
one closed switches it off again. A packet that arrives in between carries no stamp, and the loops fall back to the
read's return, as they did before (socket_buffer.recv_stamped). On a busy host that work item waits for a CPU: a
test whose socket asks for stamps and is answered a millisecond later can read the fallback. A worker's cells are
not affected (their warm-up comes first), but a test is; `stamps_on` holds a socket that asks, and returns once a
probe packet shows the stamping is on."""

from __future__ import annotations

import socket
import time
from contextlib import contextmanager

from brokerbench.brokers.socket_buffer import STAMP_SPACE, stamp_arrivals


@contextmanager
def stamps_on(timeout_s: float = 10.0):
    """Within it, the host stamps what TCP sockets receive (a stamped probe seen, its socket kept open)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        keeper = socket.create_connection(listener.getsockname(), timeout=5)
        peer, _ = listener.accept()
    try:
        stamp_arrivals(keeper)
        deadline = time.monotonic() + timeout_s
        while True:
            peer.sendall(b"x")
            _, controls, _, _ = keeper.recvmsg(16, STAMP_SPACE)
            if controls:
                break
            assert time.monotonic() < deadline, "the kernel never stamped a received packet"
            time.sleep(0.001)
        yield
    finally:
        keeper.close()
        peer.close()
