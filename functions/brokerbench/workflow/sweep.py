"""The sweeper: what a run's own teardown missed, deleted once the run has ended or its deadline has passed.

Every hour (the CDK app's Sweeper schedule) it first drains the RunEnded dead-letter queue: each execution end the
RunEnded function could not handle (its retries spent, or EventBridge unable to deliver it) is handled again here
(the run's end stored, its teardown started, its slot among the runs in flight released), and the message
deleted once that worked. Then it lists the bb-* MSK
clusters, ElastiCache replication groups and Amazon MQ brokers (each cloud provider's `leftovers`) and the EC2
workers that carry a `brokerbench:run` tag, and reads each run's events:
  - a run whose end (RunCompleted or RunFailed) is stored has ended: its resources are deleted (an MSK cluster or
    ElastiCache group still being created refuses, and is left for the next sweep);
  - a run with no end stored is still going, until its deadline (run_deadline: its request's time, the spec's
    provisioning bound, twice the plan's estimate, the teardown loop's bound and a margin): then it is given a
    RunFailed that says so and its resources are deleted. An end that was never stored (RunEnded failed for good,
    or the execution hangs) cannot keep brokers billing longer than that;
  - a run this deployment's events do not know: left alone;
  - a target the run kept (keep_targets) stays until its brokerbench:keep-until tag's time, then goes as above once
    the run has ended; a kept target without the tag (created before the tag was written) stays until its run's
    request plus the deployment's maximum keep (deployment.keep_targets_max_hours). EC2 workers are never kept.
Resources without the tag, or not named bb-*, are never listed.

No single failure stops the sweep: each provider is listed on its own, each resource deleted on its own, each run
read on its own, and what could not be listed, read or deleted is reported under `failed` (what, which resource,
why) while the rest goes on. The result says, per resource, what was deleted and what was left and why; the
handler logs one line for each and counts the failures (the SweepFailures metric, alarmed).
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone

from .. import deployment
from ..events import RUN_EVENTS, EventStore, planned_cells
from ..plan import run_seconds
from ..registry import plugins
from ..settings import boto, env
from ..targets import DELETING, GONE, TEARDOWN_TIMEOUT_S
from . import stop, wiring
from .admission import Slots

RUN_TAG = "brokerbench:run"
LIVE_INSTANCES = ["pending", "running", "stopping", "stopped"]
DEAD_LETTERS_ENV = "BROKERBENCH_RUN_ENDED_DLQ_URL"  # cdk/constructs/teardown.py
# A run's deadline, beyond its provisioning bound and the teardown loop's: the plan's estimate is what the cells
# should take (ASSUMED_MAX_RATE for unthrottled counts, a rate search at its most steps), so twice it, and an hour
# for what no estimate holds (EC2 workers booting, retried cells, the workflow's own steps). Later than that, a
# run with no end stored is not going to tear down by itself.
ESTIMATE_FACTOR = 2
DEADLINE_MARGIN_S = 3600
DRAIN_BATCHES = 10  # up to 100 dead letters per sweep (10 a receive); the rest wait for the next hour


def run_deadline(requested: list[dict]) -> float:
    """The time (epoch s) after which a run with no end stored is taken as abandoned, from its stored RunRequested
    (and CellsPlanned) events: requested at + spec.provision.timeout_s + ESTIMATE_FACTOR x the plan's estimate +
    TEARDOWN_TIMEOUT_S + DEADLINE_MARGIN_S."""
    header = next(e for e in requested if e["type"] == "RunRequested")
    spec = header["data"]["spec"]
    started = datetime.fromisoformat(header["at"].replace("Z", "+00:00")).timestamp()
    estimate = run_seconds(spec, planned_cells(requested))
    return started + spec["provision"]["timeout_s"] + ESTIMATE_FACTOR * estimate + TEARDOWN_TIMEOUT_S + \
        DEADLINE_MARGIN_S


def _utc(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _error(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"


class Ec2Workers:
    """The EC2 workers a run launched (tagged brokerbench:run), listed and terminated like a provider's resources."""

    kind = "ec2"

    def __init__(self, ec2) -> None:
        self.ec2 = ec2

    def leftovers(self) -> list[dict]:
        found = []
        pages = self.ec2.get_paginator("describe_instances").paginate(Filters=[
            {"Name": "tag-key", "Values": [RUN_TAG]}, {"Name": "instance-state-name", "Values": LIVE_INSTANCES}])
        for page in pages:
            for reservation in page["Reservations"]:
                for instance in reservation["Instances"]:
                    tags = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
                    found.append({"kind": self.kind, "name": instance["InstanceId"], "resource": instance["InstanceId"],
                                  "state": instance["State"]["Name"], "run_id": tags[RUN_TAG]})
        return found

    def delete(self, resource: str, state: str) -> str:
        self.ec2.terminate_instances(InstanceIds=[resource])
        return "terminating"


class Sweeper:
    """`dead_letters`: an SQS client and the RunEnded dead-letter queue's URL, or None (locally: no queue);
    `teardowns`: where a drained run's teardown goes (stop.teardowns()); `slots`: the runs in flight's slots a
    drained run's end releases (workflow/admission.py); `now`: the clock deadlines are read on."""

    def __init__(self, store: EventStore, providers: list, ec2, *, dead_letters: tuple | None = None,
                 teardowns=None, slots=None, now=time.time) -> None:
        self.store, self.now, self.teardowns, self.slots = store, now, teardowns, slots
        self.sources = [*providers, Ec2Workers(ec2)]
        self.dead_letters = dead_letters

    def sweep(self) -> dict:
        drained, failed = self.drain() if self.dead_letters else ([], [])
        found = []
        for source in self.sources:
            try:
                listed = source.leftovers()
            except Exception as exc:  # noqa: BLE001 (one provider's listing must not keep the others')
                failed.append({"action": "list", "kind": source.kind, "name": None, "run_id": None,
                               "reason": f"listing the {source.kind} resources failed: {_error(exc)}"})
                continue
            for item in listed:
                if item.get("problem"):  # one resource of the listing could not be read (its tags)
                    failed.append({"action": "list", **{k: item.get(k) for k in ("kind", "name", "run_id")},
                                   "reason": item["problem"]})
                else:
                    found.append(item)
        runs: dict[str, str | None] = {}
        deleted, left = [], []
        for item in found:
            if item["run_id"] not in runs:
                try:
                    runs[item["run_id"]] = self.why_not_ended(item["run_id"])
                except Exception as exc:  # noqa: BLE001 (one run's events unreadable: its resources wait)
                    runs[item["run_id"]] = f"reading the run's events failed: {_error(exc)}"
                    failed.append({"action": "read", "kind": "run", "name": item["run_id"], "run_id": item["run_id"],
                                   "reason": runs[item["run_id"]]})
            why = runs[item["run_id"]] or self.why_kept(item)
            if why:
                left.append({**item, "reason": why})
                continue
            try:
                outcome = self.delete(item)
            except Exception as exc:  # noqa: BLE001 (one refused delete must not keep the others)
                failed.append({"action": "delete", **{k: item[k] for k in ("kind", "name", "run_id")},
                               "reason": f"the delete failed: {_error(exc)}"})
                continue
            if outcome in (DELETING, GONE, "terminating"):
                deleted.append({**item, "outcome": outcome})
            else:
                left.append({**item, "reason": f"the run has ended, but the {item['kind']} resource is {outcome} "
                                               f"({item['state']}): the next sweep tries again"})
        return {"deleted": deleted, "left": left, "failed": failed, "drained": drained}

    def why_not_ended(self, run_id: str) -> str | None:
        """None when the run has ended (its end event is stored) or is past its deadline (then it is given a
        RunFailed that says so); otherwise why its resources stay."""
        requested = self.store.read(run_id, prefix="00#run")
        if not requested:
            return "no run of this id in the events table (not this deployment's, or not started here)"
        if any(e["type"] in RUN_EVENTS for e in self.store.read(run_id, prefix="90#run#end")):
            return None
        deadline = run_deadline(requested)
        if self.now() <= deadline:
            return f"the run is still going (no RunCompleted or RunFailed stored; its deadline is {_utc(deadline)})"
        stop.record_end(self.store, run_id, "failed",
                        f"no end was stored by the run's deadline ({_utc(deadline)}: requested at "
                        f"{requested[0]['at']}, its provisioning bound, twice its estimate and the teardown's bound, "
                        f"plus {DEADLINE_MARGIN_S} s): the sweeper deleted its targets")
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

    def delete(self, item: dict) -> str:
        source = next(s for s in self.sources if s.kind == item["kind"])
        return source.delete(item["resource"], item["state"])

    def drain(self) -> tuple[list[dict], list[dict]]:
        """Each dead letter of RunEnded handled again (stop.run_ended: the run's end stored if it has none, its
        teardown started) and deleted from the queue once that worked; one that fails again stays for the next
        sweep (and keeps the queue's alarm on) and is reported. A message is either the EventBridge event itself
        (the rule's dead-letter queue: delivery failed) or Lambda's record of a failed invocation (the function's
        on-failure destination: the event under requestPayload)."""
        sqs, url = self.dead_letters
        drained, failed = [], []
        for _ in range(DRAIN_BATCHES):
            messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0,
                                           VisibilityTimeout=300).get("Messages", [])
            for message in messages:
                run_id = None
                try:
                    body = json.loads(message["Body"])
                    event = body.get("requestPayload", body)
                    run_id = json.loads(event["detail"].get("input") or "{}").get("run_id") or event["detail"]["name"]
                    ended = stop.run_ended(self.store, event["detail"], self.teardowns, self.slots)
                    sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
                except Exception as exc:  # noqa: BLE001 (one dead letter must not keep the others)
                    failed.append({"action": "drain", "kind": "dead letter", "name": message["MessageId"],
                                   "run_id": run_id, "reason": f"handling the run's end again failed: {_error(exc)}"})
                    continue
                drained.append({"message": message["MessageId"], "run_id": ended["run_id"],
                                "status": ended["status"], "teardown": ended["teardown"]})
            if len(messages) < 10:
                break
        return drained, failed


class Unavailable:
    """A provider that could not be made (a setting missing, say): listed, it reports why, and the others go on."""

    def __init__(self, kind: str, exc: Exception) -> None:
        self.kind, self.exc = kind, exc

    def leftovers(self) -> list[dict]:
        raise RuntimeError(f"the provider could not be made: {_error(self.exc)}")


def cloud_providers() -> list:
    """The cloud target providers of the broker plug-ins, each once (several plug-ins may share one)."""
    factories = {p.cloud.factory: p for p in plugins().values() if p.cloud is not None}
    providers = []
    for plugin in factories.values():
        try:
            providers.append(plugin.cloud_targets())
        except Exception as exc:  # noqa: BLE001 (one plug-in's provider must not keep the others')
            providers.append(Unavailable(plugin.cloud.service, exc))
    return providers


def sweep_targets() -> dict:
    url, store = env(DEAD_LETTERS_ENV, ""), wiring.event_store()
    return Sweeper(store, cloud_providers(), boto("ec2"), dead_letters=(boto("sqs"), url) if url else None,
                   teardowns=stop.teardowns(), slots=Slots.of(store)).sweep()
