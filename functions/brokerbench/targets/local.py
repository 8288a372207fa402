"""The local stack as a provider: a broker this run starts is this run's to stop."""

from __future__ import annotations

from ..local.stack import LocalStack, StackError
from . import ProvisioningError, target

SERVICE = {"kafka": "kafka", "redis-streams": "redis"}


class LocalTargets:
    def __init__(self, stack: LocalStack) -> None:
        self.stack = stack

    def provision(self, run_id: str, broker: str, spec: dict) -> dict:
        service = SERVICE[broker]
        wanted = spec["provision"].get(broker, {}).get("version")
        installed = self.stack.installed_version(service)
        if wanted and not installed.startswith(wanted.rstrip("x").rstrip(".")):
            raise ProvisioningError(f"{broker} {wanted} is not available locally (the local stack has {installed}); "
                                    f"remove provision.{broker}.version or install that version")
        try:
            endpoints = self.stack.up(services=[service], owner=run_id, log=lambda m: None)
        except StackError as exc:
            raise ProvisioningError(f"could not start local {broker}: {exc}") from None
        return target(broker, "local", ready=True, endpoint=endpoints[broker], resource=service)

    def check(self, current: dict) -> dict:
        return {**current, "ready": True}

    def teardown(self, run_id: str, broker: str, spec: dict) -> dict:
        service = SERVICE[broker]
        if spec.get("keep_targets"):
            return {"broker": broker, "action": "kept (keep_targets)"}
        stopped = self.stack.down(services=[service], owner=run_id, log=lambda m: None)
        return {"broker": broker, "action": "stopped" if stopped else "left running (not started by this run)"}
