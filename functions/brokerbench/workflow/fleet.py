"""Starting an EC2-kind worker for one cell: an instance whose user data runs the worker, or locally a process.

Both run the same command, `python -m brokerbench.worker.ec2 --task-token ... --job ...`, and
the worker answers through the task-token contract (workflow.callbacks).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

WORKER_MODULE = "brokerbench.worker.ec2"


def encode_job(job: dict) -> str:
    return base64.b64encode(json.dumps(job, separators=(",", ":")).encode()).decode()


def user_data(job: dict, token: str, environment: dict[str, str]) -> str:
    """The instance's boot script: run the cell, report, power off (the instance terminates on shutdown)."""
    exports = "\n".join(f"export {k}={json.dumps(v)}" for k, v in sorted(environment.items()))
    return (
        "#!/bin/bash\nset -u\n"
        f"{exports}\n"
        f"/opt/brokerbench/.venv/bin/python -m {WORKER_MODULE} --task-token {json.dumps(token)} "
        f"--job {encode_job(job)}\n"
        "shutdown -h now\n"
    )


class Ec2Fleet:
    def __init__(self, client, *, launch_template: str, subnet: str, environment: dict[str, str]) -> None:
        self.client = client
        self.launch_template = launch_template
        self.subnet = subnet
        self.environment = environment

    def launch(self, job: dict, token: str) -> dict:
        response = self.client.run_instances(
            MinCount=1, MaxCount=1,
            LaunchTemplate={"LaunchTemplateName": self.launch_template, "Version": "$Latest"},
            SubnetId=self.subnet,
            UserData=user_data(job, token, self.environment),
            InstanceInitiatedShutdownBehavior="terminate",
            MetadataOptions={"HttpTokens": "required"},
            TagSpecifications=[{"ResourceType": "instance", "Tags": [
                {"Key": "brokerbench:run", "Value": job["run_id"]},
                {"Key": "brokerbench:cell", "Value": job["cell"]["cell_id"]},
            ]}],
        )
        return {"kind": "ec2", "instance_id": response["Instances"][0]["InstanceId"]}


class LocalProcessFleet:
    """A worker process on this machine, started with the command the user data would run."""

    def __init__(self, environment: dict[str, str]) -> None:
        self.environment = environment

    def launch(self, job: dict, token: str) -> dict:
        process = subprocess.Popen(
            [sys.executable, "-m", WORKER_MODULE, "--task-token", token, "--job", encode_job(job)],
            env={**os.environ, **self.environment}, stdin=subprocess.DEVNULL,
            cwd=Path(__file__).resolve().parents[3],
        )
        return {"kind": "local-process", "pid": process.pid}
