"""Toxiproxy's HTTP API: TCP proxies between clients and a broker's nodes, and the toxics a network fault puts on them.

Toxiproxy (github.com/Shopify/toxiproxy) is a user-space TCP proxy with an HTTP API. A proxy listens on one port and
forwards every connection to its upstream; a toxic changes what crosses it while it is in place, on one direction
("stream": upstream is client → server, downstream server → client), for every connection open or new. The
network faults of a run request (brokerbench.faults, `kind` "network") are these toxics:

- latency: every chunk of data is held `latency_ms` before it is passed on (in the direction(s) asked for);
- bandwidth: `rate_kbps` KB/s (1,000 bytes) per connection and direction: each chunk is held for its size at that rate
  (Toxiproxy's "rate", in KB/s), split into 100 ms slices when larger, a timer that oversleeps made up on the next;
- reset: `reset_peer` with timeout 0: the first data to cross a connection closes it with a TCP RST (SO_LINGER 0),
  and so does the first data of every connection made again while it is in place;
- blackhole: `timeout` with timeout 0: data is dropped and nothing is closed (a link that hangs: the client's
  connection stays open and nothing answers).

Used by the local stack (its Toxiproxy service), the worker (which puts the toxics on and takes them off at the
fault's times) and the tests (a known latency between a client and a real server: an independent truth).
"""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request

HOST = "127.0.0.1"
STREAMS = ("upstream", "downstream")  # client → server, server → client
LISTEN_WAIT_S = 5.0  # a new proxy listens once the API has answered; checked all the same, for this long


class ToxiproxyError(RuntimeError):
    """The Toxiproxy API refused a call or did not answer."""


def toxics_for(fault: dict) -> list[dict]:
    """The toxics (as the API takes them) that make the network fault `fault` (brokerbench.faults' shape: effect,
    direction and the effect's attribute), one per direction, each named after the fault's place `fault_index`."""
    effect, index = fault["effect"], fault.get("fault_index", 0)
    streams = STREAMS if fault.get("direction", "both") == "both" else (fault["direction"],)
    if effect == "latency":
        kind, attributes = "latency", {"latency": int(round(fault["latency_ms"])), "jitter": 0}
    elif effect == "bandwidth":
        kind, attributes = "bandwidth", {"rate": int(round(fault["rate_kbps"]))}
    elif effect == "reset":
        kind, attributes = "reset_peer", {"timeout": 0}
    elif effect == "blackhole":
        kind, attributes = "timeout", {"timeout": 0}
    else:
        raise ValueError(f"effect: {effect!r} is not a network fault's effect")
    return [{"name": f"fault-{index}-{effect}-{stream}", "type": kind, "stream": stream, "toxicity": 1.0,
             "attributes": attributes} for stream in streams]


class ToxiproxyClient:
    """The API of one Toxiproxy server on 127.0.0.1:`port`."""

    def __init__(self, port: int, timeout_s: float = 10.0) -> None:
        self.port, self.timeout_s = port, timeout_s

    def _call(self, method: str, path: str, body: dict | None = None):
        request = urllib.request.Request(f"http://{HOST}:{self.port}{path}", method=method,
                                         data=json.dumps(body).encode() if body is not None else None,
                                         headers={"content-type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as error:
            raise ToxiproxyError(f"{method} {path}: {error.code} {error.read().decode()[:500]}") from None
        except OSError as error:
            raise ToxiproxyError(f"{method} {path}: Toxiproxy on {HOST}:{self.port} did not answer ({error})") from None
        return json.loads(text) if text.strip().startswith(("{", "[")) else text

    def version(self) -> str:
        return str(self._call("GET", "/version")).strip()

    def proxies(self) -> dict[str, dict]:
        return self._call("GET", "/proxies")

    def proxy(self, name: str, upstream_port: int, listen_port: int) -> int:
        """A proxy from 127.0.0.1:`listen_port` to 127.0.0.1:`upstream_port`, made anew if one of that name exists
        (its toxics gone); returns the port clients connect to, once it listens."""
        if name in self.proxies():
            self.delete(name)
        self._call("POST", "/proxies", {"name": name, "listen": f"{HOST}:{listen_port}",
                                        "upstream": f"{HOST}:{upstream_port}", "enabled": True})
        deadline = time.monotonic() + LISTEN_WAIT_S
        while time.monotonic() < deadline:
            try:
                socket.create_connection((HOST, listen_port), timeout=1).close()
                return listen_port
            except OSError:
                time.sleep(0.02)
        raise ToxiproxyError(f"proxy {name} does not listen on {HOST}:{listen_port}")

    def delete(self, name: str) -> None:
        self._call("DELETE", f"/proxies/{name}")

    def toxics(self, name: str) -> dict[str, dict]:
        """The proxy's toxics by name, as Toxiproxy reports them."""
        return {t["name"]: t for t in self._call("GET", f"/proxies/{name}/toxics")}

    def add_toxic(self, proxy: str, toxic: dict) -> None:
        """Puts `toxic` (name, type, stream, toxicity, attributes) on the proxy, or changes its attributes."""
        if toxic["name"] in self.toxics(proxy):
            self._call("POST", f"/proxies/{proxy}/toxics/{toxic['name']}", {"attributes": toxic["attributes"]})
        else:
            self._call("POST", f"/proxies/{proxy}/toxics", toxic)

    def remove_toxic(self, proxy: str, name: str) -> None:
        self._call("DELETE", f"/proxies/{proxy}/toxics/{name}")

    def clear(self, proxy: str) -> list[str]:
        """Takes every toxic off the proxy; returns their names."""
        names = list(self.toxics(proxy))
        for name in names:
            self.remove_toxic(proxy, name)
        return names

    def latency(self, name: str, ms: float, stream: str = "downstream", jitter_ms: float = 0) -> None:
        """Sets (or changes, while traffic flows) the latency every chunk of `stream` data gains through proxy
        `name`; 0 removes it."""
        if stream not in STREAMS:
            raise ValueError(f"stream: {stream!r} is not one of {', '.join(STREAMS)}")
        toxic = f"latency-{stream}"
        if not ms:
            if toxic in self.toxics(name):
                self.remove_toxic(name, toxic)
            return
        self.add_toxic(name, {"name": toxic, "type": "latency", "stream": stream, "toxicity": 1.0,
                              "attributes": {"latency": int(round(ms)), "jitter": int(round(jitter_ms))}})


def routed(endpoint: dict) -> bool:
    """Whether the endpoint's clients go through proxies (the local stack's `route` made them)."""
    return "api_port" in (endpoint.get("proxy") or {})


def client_endpoint(endpoint: dict) -> dict:
    """The endpoint as the cell's producers and consumers reach it: through the proxies where it is routed (its
    `proxy.clients` fields in place of the nodes' own addresses), else as it is."""
    return {**endpoint, **endpoint["proxy"]["clients"]} if routed(endpoint) else endpoint
