"""The task-token contract: an EC2 worker reports its cell's outcome to the waiting workflow task."""

from __future__ import annotations

import json
import urllib.request


class StepFunctionsCallbacks:
    def __init__(self, client) -> None:
        self.client = client

    def success(self, token: str, output: dict) -> None:
        self.client.send_task_success(taskToken=token, output=json.dumps(output))

    def failure(self, token: str, error: str, cause: str) -> None:
        self.client.send_task_failure(taskToken=token, error=error[:256], cause=cause[:32768])


class LocalCallbacks:
    """The same calls to the local workflow's bridge (what SendTaskSuccess/Failure are to Step Functions)."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def _post(self, path: str, body: dict) -> None:
        request = urllib.request.Request(f"{self.url}{path}", data=json.dumps(body).encode(),
                                         headers={"content-type": "application/json"}, method="POST")
        with urllib.request.urlopen(request, timeout=30) as response:
            response.read()

    def success(self, token: str, output: dict) -> None:
        self._post("/callback/success", {"task_token": token, "output": output})

    def failure(self, token: str, error: str, cause: str) -> None:
        self._post("/callback/failure", {"task_token": token, "error": error, "cause": cause})
