"""The local stack as a provider: a broker this run starts is this run's to stop."""

from __future__ import annotations

from ..brokers import plugin
from ..local.stack import LocalStack, StackError
from . import ProvisioningError, target


class LocalTargets:
    def __init__(self, stack: LocalStack) -> None:
        self.stack = stack

    def _service(self, broker: str) -> str:
        service = plugin(broker).local
        if service is None:
            raise ProvisioningError(f"{broker} has no local service: give its endpoint in targets.{broker}")
        return service.name

    def provision(self, run_id: str, broker: str, spec: dict) -> dict:
        service = self._service(broker)
        wanted = spec["provision"].get(broker, {}).get("version")
        installed = self.stack.installed_version(service) or "not installed"
        if wanted and not installed.startswith(wanted.rstrip("x").rstrip(".")):
            raise ProvisioningError(f"{broker} {wanted} is not available locally (the local stack has {installed}); "
                                    f"remove provision.{broker}.version or install that version")
        try:
            endpoints = self.stack.up(services=[service], owner=run_id, log=lambda m: None)
        except StackError as exc:
            raise ProvisioningError(f"could not start local {broker}: {exc}") from None
        # The broker's processes travel with the endpoint, so each cell samples their CPU and memory.
        endpoint = {**endpoints[broker], "pids": self.stack.status()[service]["pids"]}
        return target(broker, "local", ready=True, endpoint=endpoint, resource=service)

    def check(self, current: dict) -> dict:
        return {**current, "ready": True}

    def teardown(self, run_id: str, broker: str, spec: dict) -> dict:
        service = self._service(broker)
        if spec.get("keep_targets"):
            return {"broker": broker, "action": "kept (keep_targets)"}
        stopped = self.stack.down(services=[service], owner=run_id, log=lambda m: None)
        return {"broker": broker, "action": "stopped" if stopped else "left running (not started by this run)"}
