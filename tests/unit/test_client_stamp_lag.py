"""bench/client_stamp_lag.py's reading of the kernel's trace: a tcp_probe line as perf script prints it gives the
receiving connection's ports and the segment's time, and each stamp is matched to the latest data segment on its
connections before it (a segment just after a stamp taken from the same skb counts as its own)."""

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("client_stamp_lag", REPO / "bench" / "client_stamp_lag.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)

LINE = (b"   22405.177446896: family=AF_INET src=127.0.0.1:59394 dest=127.0.0.1:46299 mark=0 data_len=10 "
        b"snd_nxt=0x44c0eb96 snd_una=0x44c0eb96 snd_cwnd=10 ssthresh=2147483647 snd_wnd=65483 srtt=26 rcv_wnd=65536 "
        b"sock_cookie=1 skbaddr=0xffff88810917c6e0 skaddr=0xffff88812dae9280")


def test_a_probe_line_gives_the_connection_and_the_time_in_ns():
    m = bench.PROBE.match(LINE)
    assert m is not None
    assert (int(m.group(3)), int(m.group(4)), int(m.group(5))) == (59394, 46299, 10)
    assert int(m.group(1)) * bench.SECOND_NS + int(m.group(2)) == 22_405_177_446_896


def test_each_stamp_is_matched_to_the_latest_segment_of_its_connections():
    segments = {(5000, 9092): [1_000_000, 6_000_000], (5001, 9092): [11_000_000], (7000, 9092): [5_990_000],
                (5000, 6379): [5_995_000]}  # another process's connection, another broker's port: not the path's
    row = {"local_ports": [5000, 5001], "broker_port": 9092, "began_ns": 0, "ended_ns": 20_000_000,
           "stamps_ns": [500_000, 1_250_000, 5_960_000, 11_200_000, 11_300_000]}
    # a library's stamp: the latest segment before it. 500_000: none before it.
    lags, unmatched, shared = bench.lags_of({**row, "stamps_as": "client:librdkafka"}, segments)
    assert (lags, unmatched, shared) == ([250_000, 4_960_000, 200_000, 300_000], 1, 2)
    # a stamp taken from the skb: 5_960_000's segment came 40 µs later, within SLACK_NS, and is its own
    lags, unmatched, shared = bench.lags_of({**row, "stamps_as": "arrival"}, segments)
    assert (lags, unmatched, shared) == ([250_000, -40_000, 200_000, 300_000], 1, 1)
    # Kafka's deliveries at the arrival of the latest Fetch response: the skb's time too
    assert bench.lags_of({**row, "stamps_as": "client:librdkafka-fetch-arrival"}, segments) == (lags, unmatched, shared)
    quantiles = bench.quantiles_us(lags)
    assert quantiles["n"] == 4 and quantiles["min_us"] == -40.0 and quantiles["max_us"] == 300.0
    assert quantiles["negative"] == 1


def test_the_footnote_cites_the_section_for_the_libraries_it_measured():
    """A † row stamped in librdkafka is told what the bench measured for it, citing a section that is on the page;
    a row stamped as the read returned (not a library's path) is not."""
    from brokerbench.figures import stamp_note

    heading = "How late a client library stamps, against the kernel's trace"
    note = stamp_note([("kafka raw", "arrival", "client:librdkafka")])
    assert f'"{heading}", bench/client_stamp_lag.py' in note and "librdkafka's stamps came" in note
    assert "µs" not in note  # words, no figure the run did not store
    assert heading not in stamp_note([("nats-jetstream raw", "read", "arrival")])
    assert f"## {heading} (`bench/client_stamp_lag.py`)" in (REPO / "docs" / "performance.md").read_text()
