"""The few Pulsar admin REST calls brokerbench makes (topics, stats, the broker's version), over the standard
library: the admin API is plain HTTP and JSON, so no admin client package is needed."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request


class AdminError(RuntimeError):
    """The admin API answered with an error status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def partition_topic(topic: str, partition: int) -> str:
    """The name of one partition of a partitioned topic."""
    return f"{topic}-partition-{partition}"


class Admin:
    def __init__(self, url: str, timeout_s: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    def call(self, method: str, path: str, body=None, timeout_s: float | None = None):
        """The parsed JSON answer (None when empty); AdminError for an error status, OSError when nothing answers."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"} if data is not None else {})
        try:
            with urllib.request.urlopen(request, timeout=timeout_s or self.timeout_s) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as exc:
            text = exc.read().decode(errors="replace")
            try:
                reason = json.loads(text).get("reason", text)
            except (ValueError, AttributeError):
                reason = text
            raise AdminError(exc.code, f"{method} {path}: {exc.code} {reason}"[:500]) from None
        if not text:
            return None
        try:
            return json.loads(text)
        except ValueError:
            return text

    @staticmethod
    def path(topic: str) -> str:
        """persistent://tenant/namespace/name -> /admin/v2/persistent/tenant/namespace/name"""
        domain, _, rest = topic.partition("://")
        return f"/admin/v2/{domain}/{urllib.parse.quote(rest)}"

    def lookup(self, topic: str, listener_name: str | None = None) -> dict:
        """The broker serving `topic`, with the addresses of its listener `listener_name` (its internal one when
        none is named): {"brokerUrl": "pulsar://HOST:PORT", ...}."""
        domain, _, rest = topic.partition("://")
        query = f"?listenerName={urllib.parse.quote(listener_name)}" if listener_name else ""
        return self.call("GET", f"/lookup/v2/topic/{domain}/{urllib.parse.quote(rest)}{query}")

    def version(self) -> str:
        return str(self.call("GET", "/admin/v2/brokers/version"))

    def tenants(self) -> list[str]:
        return self.call("GET", "/admin/v2/tenants") or []

    def namespaces(self, tenant: str) -> list[str]:
        return self.call("GET", f"/admin/v2/namespaces/{tenant}") or []

    def create_partitioned(self, topic: str, partitions: int) -> None:
        self.call("PUT", self.path(topic) + "/partitions", partitions)

    def create_topic(self, topic: str) -> None:
        """A non-partitioned topic."""
        self.call("PUT", self.path(topic))

    def delete_partitioned(self, topic: str) -> None:
        """Forced: producers and consumers still connected are disconnected."""
        self.call("DELETE", self.path(topic) + "/partitions?force=true")

    def stats(self, topic: str) -> dict:
        """One partition's (or a non-partitioned topic's) counters."""
        return self.call("GET", self.path(topic) + "/stats")

    def started_at(self) -> int | None:
        """When the broker's JVM started (ms since the epoch), from its own metrics: a broker restarted since
        an earlier reading has another."""
        for group in self.call("GET", "/admin/v2/broker-stats/metrics") or []:
            if "jvm_start_time" in (group.get("metrics") or {}):
                return int(group["metrics"]["jvm_start_time"])
        return None

    def analyze_backlog(self, topic: str, subscription: str, timeout_s: float | None = None) -> dict:
        """Reads the subscription's backlog on one partition and counts its entries and messages (a batch
        entry holds several); `aborted` when the broker's scan limits stopped it before the end."""
        return self.call("POST", self.path(topic) + f"/subscription/{urllib.parse.quote(subscription)}/analyzeBacklog",
                         timeout_s=timeout_s)
