"""The task-token contract: an EC2 worker reports its cell's outcome to the waiting workflow task.

`heartbeat` tells the task the worker is alive (SendTaskHeartbeat): the EC2 task has HeartbeatSeconds, so a
worker that stops beating (a dead instance, a killed process) fails its cell within that window. Every call
raises `TaskGone` when the workflow no longer waits for this token (the task timed out, failed, or was
retried with a new token): the worker then has nobody to report to and should stop.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

# SendTaskSuccess/Failure/Heartbeat's answers for a token nobody waits for any more.
GONE_CODES = frozenset({"TaskDoesNotExist", "TaskTimedOut", "InvalidToken"})


class TaskGone(RuntimeError):
    """The workflow task behind this token has ended (or never existed): nothing waits for this worker."""


class StepFunctionsCallbacks:
    def __init__(self, client) -> None:
        self.client = client

    def _call(self, operation: str, **params) -> None:
        from botocore.exceptions import ClientError

        try:
            getattr(self.client, operation)(**params)
        except ClientError as exc:
            code = exc.response["Error"]["Code"]
            if code in GONE_CODES:
                raise TaskGone(f"{code}: {exc.response['Error'].get('Message', '')}") from None
            raise

    def success(self, token: str, output: dict) -> None:
        self._call("send_task_success", taskToken=token, output=json.dumps(output))

    def failure(self, token: str, error: str, cause: str) -> None:
        self._call("send_task_failure", taskToken=token, error=error[:256], cause=cause[:32768])

    def heartbeat(self, token: str) -> None:
        self._call("send_task_heartbeat", taskToken=token)


class LocalCallbacks:
    """The same calls to the local workflow's bridge (what SendTaskSuccess/Failure/Heartbeat are to Step
    Functions); the bridge answers 400 TaskDoesNotExist for a token it no longer waits for."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def _post(self, path: str, body: dict) -> None:
        request = urllib.request.Request(f"{self.url}{path}", data=json.dumps(body).encode(),
                                         headers={"content-type": "application/json"}, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                response.read()
        except urllib.error.HTTPError as exc:
            if 400 <= exc.code < 500:
                try:
                    answer = json.loads(exc.read() or b"{}")
                except ValueError:
                    answer = {}
                if answer.get("errorType") in GONE_CODES:
                    raise TaskGone(f"{answer['errorType']}: {answer.get('errorMessage', '')}") from None
            raise

    def success(self, token: str, output: dict) -> None:
        self._post("/callback/success", {"task_token": token, "output": output})

    def failure(self, token: str, error: str, cause: str) -> None:
        self._post("/callback/failure", {"task_token": token, "error": error, "cause": cause})

    def heartbeat(self, token: str) -> None:
        self._post("/callback/heartbeat", {"task_token": token})
