"""The EC2-kind worker: runs one cell and answers the waiting workflow task through its task token.

Started by an instance's user data in AWS, or as a process by the local workflow; the command
line is the same: `python -m brokerbench.worker.ec2 --task-token TOKEN --job BASE64_JSON`.
"""

from __future__ import annotations

import argparse
import base64
import json
import socket
import sys

from .. import config
from ..workflow import steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m brokerbench.worker.ec2", description=__doc__.split("\n")[0])
    parser.add_argument("--task-token", required=True, help="the workflow task's token")
    parser.add_argument("--job", required=True, help="base64 JSON: run_id, cell, targets")
    args = parser.parse_args(argv)
    callbacks = config.task_callbacks()
    try:
        job = json.loads(base64.b64decode(args.job))
        output = steps.run_cell(job, worker={"kind": "ec2", "host": socket.gethostname()})
    except BaseException as exc:  # the workflow must hear of every ending, even Ctrl-C
        callbacks.failure(args.task_token, "WorkerFailed", f"{type(exc).__name__}: {exc}")
        return 130 if isinstance(exc, KeyboardInterrupt) else 1
    callbacks.success(args.task_token, output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
