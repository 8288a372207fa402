"""The cell's outbox (worker.cell._Outbox) on a real pipe: a message too large for the pipe's buffer, sent to a
process that is itself sending one as large before it reads, arrives, in order, while the cell's side reads."""

import multiprocessing
import threading

import pytest

from brokerbench.worker.cell import _Outbox

BIG = bytes(8 << 20)  # far above a socket pair's buffer (a few hundred KB)


def _child(conn) -> None:
    conn.send(("interval", BIG))  # blocks until the parent reads it
    conn.send(("got", [conn.recv()[0] for _ in range(2)]))


@pytest.mark.timeout(60)  # sent from the cell's own loop, the two sides waited for each other for ever
def test_a_large_message_to_a_process_that_is_sending_one_arrives_while_the_cell_reads():
    ours, theirs = multiprocessing.Pipe()
    child = multiprocessing.get_context("fork").Process(target=_child, args=(theirs,))
    child.start()
    outbox = _Outbox()
    try:
        outbox.send(ours, ("not_acked", BIG))  # sent from the loop, this would wait for the child for ever
        outbox.send(ours, ("expect", 1))
        assert ours.poll(30)
        kind, payload = ours.recv()
        assert kind == "interval" and len(payload) == len(BIG)
        assert ours.poll(30) and ours.recv() == ("got", ["not_acked", "expect"])  # in the order sent
    finally:
        outbox.close()
        child.join(10)
        if child.is_alive():
            child.kill()
    assert child.exitcode == 0


def test_a_process_that_is_gone_is_not_waited_for():
    ours, theirs = multiprocessing.Pipe()
    theirs.close()
    outbox = _Outbox()
    outbox.send(ours, ("expect", BIG))  # its end is closed: the send fails, quietly, in the outbox's thread
    outbox.close()
    assert not [t for t in threading.enumerate() if t.name == "cell-outbox" and t.is_alive()]
