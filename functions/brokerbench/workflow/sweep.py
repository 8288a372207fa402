"""The sweeper: what a run's own teardown missed, deleted once the run has ended.

Every hour (the CDK app's Sweeper schedule) it lists the bb-* MSK clusters, ElastiCache replication groups and
Amazon MQ brokers (each cloud provider's `leftovers`) and the EC2 workers that carry a `brokerbench:run` tag,
and reads each run's events:
  - a run whose end (RunCompleted or RunFailed) is stored has ended: its resources are deleted (an MSK cluster or
    ElastiCache group still being created refuses, and is left for the next sweep);
  - a run with no end stored is still going: left alone;
  - a run this deployment's events do not know: left alone;
  - a target the run kept (keep_targets) stays until its brokerbench:keep-until tag's time, then goes as above once
    the run has ended; a kept target without the tag (created before the tag was written) stays until its run's
    request plus the deployment's maximum keep (deployment.keep_targets_max_hours). EC2 workers are never kept.
Resources without the tag, or not named bb-*, are never listed. The result says, per resource, what was deleted
and what was left and why; the handler logs one line for each.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta

from .. import deployment
from ..events import RUN_EVENTS, EventStore
from ..registry import plugins
from ..settings import boto
from ..targets import DELETING, GONE
from . import wiring

RUN_TAG = "brokerbench:run"
LIVE_INSTANCES = ["pending", "running", "stopping", "stopped"]


class Sweeper:
    def __init__(self, store: EventStore, providers: list, ec2, *, now=time.time) -> None:
        self.store, self.providers, self.ec2, self.now = store, providers, ec2, now  # now: the clock, epoch seconds

    def sweep(self) -> dict:
        found = [item for provider in self.providers for item in provider.leftovers()] + self.instances()
        runs: dict[str, str | None] = {}
        deleted, left = [], []
        for item in found:
            if item["run_id"] not in runs:
                runs[item["run_id"]] = self.why_not_ended(item["run_id"])
            why = runs[item["run_id"]] or self.why_kept(item)
            if why:
                left.append({**item, "reason": why})
                continue
            try:
                outcome = self.delete(item)
            except Exception as exc:  # noqa: BLE001 (one refused delete must not keep the others)
                left.append({**item, "reason": f"the delete failed: {type(exc).__name__}: {exc}"})
                continue
            if outcome in (DELETING, GONE, "terminating"):
                deleted.append({**item, "outcome": outcome})
            else:
                left.append({**item, "reason": f"the run has ended, but the {item['kind']} resource is {outcome} "
                                               f"({item['state']}): the next sweep tries again"})
        return {"deleted": deleted, "left": left}

    def why_not_ended(self, run_id: str) -> str | None:
        """None when the run has ended (its end event is stored); otherwise why its resources stay."""
        requested = self.store.read(run_id, prefix="00#run")
        if not requested:
            return "no run of this id in the events table (not this deployment's, or not started here)"
        if not any(e["type"] in RUN_EVENTS for e in self.store.read(run_id, prefix="90#run#end")):
            return "the run is still going (no RunCompleted or RunFailed stored)"
        return None

    def why_kept(self, item: dict) -> str | None:
        """Why a target of an ended run stays: its keep (keep_targets) has not run out yet; None once it has."""
        requested = self.store.read(item["run_id"], prefix="00#run")[0]
        if item["kind"] == "ec2" or not requested["data"]["spec"].get("keep_targets"):
            return None
        if item.get("keep_until"):
            until, source = datetime.fromisoformat(item["keep_until"]), "its brokerbench:keep-until tag"
        else:
            until = datetime.fromisoformat(requested["at"]) + timedelta(hours=deployment.keep_targets_max_hours())
            source = "no keep-until tag: the run's request plus the deployment's maximum keep"
        if self.now() < until.timestamp():
            return f"the run keeps its targets (keep_targets) until {until.isoformat(timespec='seconds')} ({source})"
        return None

    def instances(self) -> list[dict]:
        found = []
        pages = self.ec2.get_paginator("describe_instances").paginate(Filters=[
            {"Name": "tag-key", "Values": [RUN_TAG]}, {"Name": "instance-state-name", "Values": LIVE_INSTANCES}])
        for page in pages:
            for reservation in page["Reservations"]:
                for instance in reservation["Instances"]:
                    tags = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
                    found.append({"kind": "ec2", "name": instance["InstanceId"], "resource": instance["InstanceId"],
                                  "state": instance["State"]["Name"], "run_id": tags[RUN_TAG]})
        return found

    def delete(self, item: dict) -> str:
        if item["kind"] == "ec2":
            self.ec2.terminate_instances(InstanceIds=[item["resource"]])
            return "terminating"
        provider = next(p for p in self.providers if p.kind == item["kind"])
        return provider.delete(item["resource"], item["state"])


def cloud_providers() -> list:
    """The cloud target providers of the broker plug-ins, each once (several plug-ins may share one)."""
    factories = {p.cloud.factory: p for p in plugins().values() if p.cloud is not None}
    return [p.cloud_targets() for p in factories.values()]


def sweep_targets() -> dict:
    return Sweeper(wiring.event_store(), cloud_providers(), boto("ec2")).sweep()
