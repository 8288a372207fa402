"""The local stack as a provider: a broker this run starts is this run's to stop.

A run with network faults (brokerbench.faults) also starts the stack's Toxiproxy, owned by the run, and puts a proxy
in front of each node of every broker (brokerbench.local.proxies.route); its teardown removes them, and the last
broker's teardown stops the Toxiproxy the run started.
"""

from __future__ import annotations

import contextlib

from .. import faults
from ..registry import plugin
from ..local.proxies import TOXIPROXY, proxies_left, route, unroute
from ..local.stack import LocalStack, StackError, cluster_name
from ..local.warmup import warm_up_logged
from . import GONE, KEPT, ProvisioningError, target, torn_down


class LocalTargets:
    def __init__(self, stack: LocalStack) -> None:
        self.stack = stack

    def _service(self, broker: str, spec: dict) -> str:
        """The stack's name for the broker as the spec asks for it: one node, or a cluster ("kafka@3")."""
        service = plugin(broker).local
        if service is None:
            raise ProvisioningError(f"{broker} has no local service: give its endpoint in targets.{broker}")
        nodes = spec["provision"].get(broker, {}).get("nodes", 1)
        largest = getattr(service, "max_nodes", 1)
        if not 1 <= nodes <= largest:
            raise ProvisioningError(f"provision.{broker}.nodes: {nodes} nodes; locally {broker} runs "
                                    + (f"1 to {largest} nodes" if largest > 1 else "as 1 node"))
        return cluster_name(service.name, nodes)

    def provision(self, run_id: str, broker: str, spec: dict) -> dict:
        service = self._service(broker, spec)
        wanted = spec["provision"].get(broker, {}).get("version")
        # Not installed yet: the version its first use installs (stack.up installs it).
        installed = (self.stack.installed_version(service) or self.stack.install_version(service)
                     or "not installed")
        if wanted and not installed.startswith(wanted.rstrip("x").rstrip(".")):
            raise ProvisioningError(f"{broker} {wanted} is not available locally (the local stack has {installed}); "
                                    f"remove provision.{broker}.version or install that version")
        try:
            new = not self.stack.is_up([service])
            self.stack.up(services=[service], owner=run_id, log=lambda m: None)
            # The broker's processes travel with the endpoint, so each cell samples their CPU and memory.
            endpoint = self.stack.endpoint(service)
        except StackError as exc:
            raise ProvisioningError(f"could not start local {broker}: {exc}") from None
        if new:  # a broker this run started is warmed up before its first cell (local/warmup.py)
            warm_up_logged(broker, endpoint)
        if "nodes" in endpoint:  # a cluster: where its faults' hooks find the stack (brokerbench.faults)
            endpoint = {**endpoint, "stack": {"state_dir": str(self.stack.state_dir), "service": service}}
        if any(f["kind"] == faults.NETWORK for f in spec.get("faults") or []):
            endpoint = self._route(run_id, broker, service, endpoint)
        return target(broker, "local", ready=True, endpoint=endpoint, resource=service)

    def _route(self, run_id: str, broker: str, service: str, endpoint: dict) -> dict:
        """The broker's clients routed through proxies on the stack's Toxiproxy (started for the run if it does not
        run yet): a network fault's link."""
        try:
            self.stack.up(services=[TOXIPROXY.name], owner=run_id, log=lambda m: None)
            api_port = self.stack.endpoint(TOXIPROXY.name)["api_port"]
            return route(endpoint, service, api_port)
        except StackError as exc:
            raise ProvisioningError(f"could not route {broker}'s clients through Toxiproxy (network faults): "
                                    f"{exc}") from None

    def check(self, current: dict) -> dict:
        return {**current, "ready": True}

    def teardown(self, run_id: str, broker: str, spec: dict) -> dict:
        try:
            service = self._service(broker, spec)
        except ProvisioningError:  # refused before anything started
            return torn_down(broker, GONE, "nothing started")
        if spec.get("keep_targets"):
            return torn_down(broker, KEPT, "kept (keep_targets)")
        if any(f["kind"] == faults.NETWORK for f in spec.get("faults") or []):
            self._unroute(run_id, service)
        if self.stack.down(services=[service], owner=run_id, log=lambda m: None):
            return torn_down(broker, GONE, "stopped")
        try:
            self.stack.endpoint(service)
        except StackError:  # a retried teardown finds it stopped already
            return torn_down(broker, GONE, "not running (stopped already)")
        return torn_down(broker, KEPT, "left running (not started by this run)")

    def _unroute(self, run_id: str, service: str) -> None:
        """The broker's proxies removed; the stack's Toxiproxy stopped once no proxy is left on it, if this run
        started it."""
        try:
            api_port = self.stack.endpoint(TOXIPROXY.name)["api_port"]
        except StackError:  # not running (stopped already, or never started)
            return
        with contextlib.suppress(StackError):
            unroute(self.stack.endpoint(service), service, api_port)
        if not proxies_left(api_port):
            self.stack.down(services=[TOXIPROXY.name], owner=run_id, log=lambda m: None)
