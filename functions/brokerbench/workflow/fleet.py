"""Starting an EC2-kind worker for one cell: an instance whose user data installs and runs the worker, or
locally a process.

Both run the same command, `python -m brokerbench.ec2_worker --job ...` with the task token in
BROKERBENCH_TASK_TOKEN, and the worker answers through the task-token contract (workflow.callbacks),
with a heartbeat while the cell runs.

In EC2 the task token never enters the user data (which anyone with ec2:DescribeInstanceAttribute can read,
and which stays with the instance): StartEc2Worker puts it in an SSM SecureString parameter of its own
(BROKERBENCH_TOKEN_PARAMETERS/<launch's client token>-<token digest>), the boot script reads it and deletes it.
"""

from __future__ import annotations

import base64
import hashlib
import math
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from .. import deployment
from ..plan import estimated_seconds

WORKER_MODULE = "brokerbench.ec2_worker"
TOKEN_ENV = "BROKERBENCH_TASK_TOKEN"
WORKER_ROOT = "/opt/brokerbench"  # the instance's install: .venv, the unpacked worker asset (app/)
# The worker's Python: the one the Lambda layer's lock is resolved for (cdk/bundling.py LOCK_PYTHON), so the asset's
# wheels install on it and the worker runs what the Lambda functions run. Amazon Linux 2023 packages it.
WORKER_PYTHON = "python3.12"
WORKER_LOCK = "requirements-lambda.txt"  # in the asset, with the wheels it pins in wheels/
# A launch that EC2 could not do now (capacity, throttling): RunCellOnEc2's Retry names this error.
RETRYABLE_LAUNCH_ERRORS = frozenset({"InsufficientInstanceCapacity", "RequestLimitExceeded", "Unavailable",
                                     "InternalError", "ServiceUnavailable"})
# How many launches of one cell with different task tokens (retries of RunCellOnEc2) may each have their
# own ClientToken; beyond that the launch is refused rather than started without idempotency.
MAX_LAUNCH_ATTEMPTS = 16


class WorkerLaunchFailed(RuntimeError):
    """EC2 could not start the worker now; the workflow retries the task (its error name is this class's)."""


class VcpuQuotaExceeded(RuntimeError):
    """EC2 refused the worker because the account's vCPU quota is used up (VcpuLimitExceeded). RunCellOnEc2 retries
    it on its own, with a longer backoff than a capacity error (another run's workers may end meanwhile: 1, 2, 4
    and 8 minutes), then the cell fails with this message, which names the quota to raise."""


def vcpu_quota_message(instance_type: str, detail: str) -> str:
    from .admission import EC2_STANDARD_QUOTA, EC2_STANDARD_QUOTA_NAME  # the quota the start-up check reads too

    return (f"EC2 refused to start a {instance_type} worker: VcpuLimitExceeded ({detail.strip() or 'no detail'}). "
            f"The account's quota \"{EC2_STANDARD_QUOTA_NAME}\" (Service Quotas, Amazon EC2, {EC2_STANDARD_QUOTA[1]}, "
            "counted in vCPUs) is used up by this run's and other instances: raise it, or lower max_concurrency.")


def encode_job(job: dict) -> str:
    return base64.b64encode(json.dumps(job, separators=(",", ":")).encode()).decode()


def client_token(run_id: str, cell_id: str, attempt: int) -> str:
    """RunInstances' ClientToken for a cell's launch: the same run, cell and attempt always give the same
    token (≤ 64 ASCII characters), so a retried StartEc2Worker gets the instance already started back."""
    digest = hashlib.sha256(f"{run_id}\n{cell_id}\n{attempt}".encode()).hexdigest()[:48]
    return f"bb-a{attempt}-{digest}"


def power_off_minutes(job: dict) -> int:
    """When a worker's instance powers off whatever happens: twice the cell's estimated time, plus 30 minutes
    for the boot and the install."""
    try:
        estimate = estimated_seconds(job["cell"])
    except (KeyError, TypeError):
        estimate = 3600.0
    return math.ceil(2 * estimate / 60) + 30


def token_parameter(prefix: str, client_token_: str, token: str) -> str:
    """Where one launch's task token waits for its instance: per launch attempt and per token, so a new task
    token changes the user data (and EC2 answers IdempotentParameterMismatch, as before)."""
    return f"{prefix.rstrip('/')}/{client_token_}-{hashlib.sha256(token.encode()).hexdigest()[:16]}"


def user_data(job: dict, token_parameter_: str, environment: dict[str, str], *, worker_asset: str | None = None,
              root: str = WORKER_ROOT) -> str:
    """The instance's boot script: install the worker (from `worker_asset`, an s3:// zip of functions/, the
    layer's lock and its wheels, installed without PyPI; without one the image must have `root`/.venv with the
    code), run the cell, power off (the instance terminates on shutdown).

    The task token is read from the SSM SecureString parameter `token_parameter_` (and the parameter
    deleted): it is never in the user data. When anything fails before the worker runs, the EXIT trap sends
    WorkerBootFailed with the task token (the step and command that failed as the cause) and powers off;
    when the token itself cannot be read, nothing can answer and the task's heartbeat timeout fails the cell.
    The token is kept in a variable and handed to the worker in its environment: it is never echoed, traced
    (no `set -x`) or put on a command line that a failure message would show."""
    q = shlex.quote
    exports = "".join(f"export {k}={q(v)}\n" for k, v in sorted(environment.items()))
    if worker_asset:
        install = (
            f'STEP="installing {WORKER_PYTHON}"\n'
            f"command -v {WORKER_PYTHON} >/dev/null || dnf install -y -q {WORKER_PYTHON} {WORKER_PYTHON}-pip\n"
            'STEP="downloading the worker code from $WORKER_ASSET"\n'
            'mkdir -p "$ROOT"\n'
            'aws s3 cp --only-show-errors "$WORKER_ASSET" "$ROOT/worker.zip"\n'
            "beat\n"
            'STEP="unpacking the worker code"\n'
            'rm -rf "$ROOT/app"\n'
            f'{WORKER_PYTHON} -m zipfile -e "$ROOT/worker.zip" "$ROOT/app"\n'
            f'STEP="creating $ROOT/.venv with {WORKER_PYTHON}"\n'
            f'{WORKER_PYTHON} -m venv "$ROOT/.venv"\n'
            'export PATH="$ROOT/.venv/bin:$PATH"\n'
            "beat\n"
            'STEP="installing the worker\'s packages from the asset\'s wheels"\n'
            "pip install --disable-pip-version-check --no-input -q --no-index --find-links \"$ROOT/app/wheels\" "
            f'--require-hashes --no-deps -r "$ROOT/app/{WORKER_LOCK}"\n'
            'export PYTHONPATH="$ROOT/app/functions"\n'
            "beat\n"
        )
    else:
        install = 'export PATH="$ROOT/.venv/bin:$PATH"  # the image has the worker installed\n'
    return (
        "#!/bin/bash\n"
        "# brokerbench EC2 worker: install the worker, run one cell, power off (the instance terminates).\n"
        "# No `set -x`: the task token must stay out of the boot log.\n"
        "set -Eeuo pipefail\n"
        f"{exports}"
        'TASK_TOKEN=""\n'
        f"TOKEN_PARAMETER={q(token_parameter_)}\n"
        f"ROOT={q(root)}\n"
        f"WORKER_ASSET={q(worker_asset or '')}\n"
        'STEP="starting the boot script"\n'
        'FAILED_COMMAND=""\n'
        "WORKER_RAN=0\n"
        "finish() {\n"
        "  local status=$?\n"
        "  trap - ERR EXIT\n"
        "  set +e\n"
        '  if [ "$WORKER_RAN" = 0 ]; then\n'
        '    echo "brokerbench boot: $STEP failed (exit $status)" >&2\n'
        '    [ -n "$TASK_TOKEN" ] && aws stepfunctions send-task-failure --task-token "$TASK_TOKEN" \\\n'
        '      --error WorkerBootFailed --cause "$STEP failed (exit $status): $FAILED_COMMAND" >/dev/null\n'
        "  fi\n"
        "  shutdown -h now\n"
        "}\n"
        "trap 'FAILED_COMMAND=$BASH_COMMAND' ERR\n"
        "trap finish EXIT\n"
        'STEP="reading the task token from SSM parameter $TOKEN_PARAMETER"\n'
        'TASK_TOKEN=$(aws ssm get-parameter --name "$TOKEN_PARAMETER" --with-decryption '
        '--query Parameter.Value --output text)\n'
        'aws ssm delete-parameter --name "$TOKEN_PARAMETER" >/dev/null 2>&1 || true\n'
        "beat() {  # the task's heartbeat clock runs during the boot too\n"
        '  aws stepfunctions send-task-heartbeat --task-token "$TASK_TOKEN" >/dev/null 2>&1 || true\n'
        "}\n"
        "beat\n"
        f"shutdown -h +{power_off_minutes(job)}  # a worker that hangs still powers off (the heartbeat fails its cell)\n"
        f"{install}"
        'STEP="checking the worker installation"\n'
        f"python -c {q('import ' + WORKER_MODULE)}\n"
        "WORKER_RAN=1  # from here on the worker reports its own ending\n"
        'STEP="running the worker"\n'
        f'{TOKEN_ENV}="$TASK_TOKEN" python -m {WORKER_MODULE} --job {encode_job(job)} '
        '|| echo "brokerbench: the worker exited with $?" >&2\n'
    )


class TokenParameters:
    """The task tokens of launching workers, as SSM SecureString parameters (the account's aws/ssm key)."""

    def __init__(self, client, prefix: str) -> None:
        self.client = client
        self.prefix = prefix

    def name(self, client_token_: str, token: str) -> str:
        return token_parameter(self.prefix, client_token_, token)

    def put(self, name: str, token: str) -> None:
        self.client.put_parameter(Name=name, Value=token, Type="SecureString", Overwrite=True, Tier="Standard",
                                  Description="brokerbench: an EC2 worker's task token, deleted when it boots")

    def delete(self, name: str) -> None:
        try:
            self.client.delete_parameter(Name=name)
        except self.client.exceptions.ParameterNotFound:
            pass


class Ec2Fleet:
    def __init__(self, client, *, launch_template: str, subnet: str, environment: dict[str, str],
                 tokens: TokenParameters, worker_asset: str | None = None) -> None:
        self.client = client
        self.tokens = tokens
        self.launch_template = launch_template
        self.subnet = subnet
        self.environment = environment
        self.worker_asset = worker_asset

    def launch(self, job: dict, token: str) -> dict:
        """One instance for the cell. Its ClientToken comes from the run, the cell and the launch attempt:
        a StartEc2Worker that runs again for the same task (same token, same user data) gets the instance
        it started back instead of a second one. A new task token (RunCellOnEc2 retried) makes EC2 answer
        IdempotentParameterMismatch for the earlier attempt's token, and the launch takes the next attempt
        (the earlier instance finds its token gone at its first heartbeat and measures nothing)."""
        from botocore.exceptions import ClientError

        run_id, cell_id = job["run_id"], job["cell"]["cell_id"]
        for attempt in range(MAX_LAUNCH_ATTEMPTS):
            launch_token = client_token(run_id, cell_id, attempt)
            parameter = self.tokens.name(launch_token, token)
            self.tokens.put(parameter, token)
            try:
                response = self._run_instance(job, parameter, launch_token)
            except ClientError as exc:
                code = exc.response["Error"]["Code"]
                if code == "IdempotentParameterMismatch":  # an earlier attempt's instance: not this token's
                    self.tokens.delete(parameter)
                    continue
                if code == "VcpuLimitExceeded":
                    self.tokens.delete(parameter)  # no instance will read it
                    raise VcpuQuotaExceeded(vcpu_quota_message(deployment.worker_instance_type(),
                                                               exc.response["Error"].get("Message", ""))) from None
                if code in RETRYABLE_LAUNCH_ERRORS:
                    raise WorkerLaunchFailed(f"{code}: {exc.response['Error'].get('Message', '')}") from None
                raise
            return {"kind": "ec2", "instance_id": response["Instances"][0]["InstanceId"], "attempt": attempt}
        raise RuntimeError(f"cell {cell_id} was launched {MAX_LAUNCH_ATTEMPTS} times already; not launching again")

    def _run_instance(self, job: dict, parameter: str, client_token_: str) -> dict:
        return self.client.run_instances(
            MinCount=1, MaxCount=1,
            ClientToken=client_token_,
            LaunchTemplate={"LaunchTemplateName": self.launch_template, "Version": "$Latest"},
            SubnetId=self.subnet,
            UserData=user_data(job, parameter, self.environment, worker_asset=self.worker_asset),
            InstanceInitiatedShutdownBehavior="terminate",
            MetadataOptions={"HttpTokens": "required"},
            TagSpecifications=[{"ResourceType": "instance", "Tags": [
                {"Key": "brokerbench:run", "Value": job["run_id"]},
                {"Key": "brokerbench:cell", "Value": job["cell"]["cell_id"]},
            ]}],
        )


class LocalProcessFleet:
    """A worker process on this machine, started with the command the user data would run."""

    def __init__(self, environment: dict[str, str]) -> None:
        self.environment = environment

    def launch(self, job: dict, token: str) -> dict:
        process = subprocess.Popen(
            [sys.executable, "-m", WORKER_MODULE, "--job", encode_job(job)],
            env={**os.environ, **self.environment, TOKEN_ENV: token}, stdin=subprocess.DEVNULL,
            cwd=Path(__file__).resolve().parents[3],
            process_group=0,  # its own group: a lost worker is stopped with every process it started (local bridge)
        )
        return {"kind": "local-process", "pid": process.pid}
