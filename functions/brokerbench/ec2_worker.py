"""The EC2-kind worker's entry point: runs one cell and answers the waiting workflow task through its task token.

Started by an instance's user data in AWS, or as a process by the local workflow; the command line is
the same: `python -m brokerbench.ec2_worker --job BASE64_JSON`, with the token in the environment
(BROKERBENCH_TASK_TOKEN, which keeps it off the command line) or given as `--task-token TOKEN`.

While the cell runs, a daemon thread sends a heartbeat every `settings.heartbeat_interval_s()` seconds (60 in
AWS): the workflow's EC2 task has HeartbeatSeconds, so a worker that dies fails its cell within minutes. When
the workflow no longer waits for the token (TaskGone: the task timed out or was retried with a new token),
the worker does not start the cell, or stops the one it runs. SIGTERM or SIGINT (the local bridge's cancel, a
Ctrl-C) stops the cell the same way: the intervals it measured are kept and it ends failed with the reason.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import socket
import sys
import threading

from . import settings
from .workflow import steps, wiring
from .workflow.callbacks import TaskGone

TOKEN_ENV = "BROKERBENCH_TASK_TOKEN"
EXIT_TASK_GONE = 3  # nobody waits for this worker's answer


def _say(message: str) -> None:
    print(f"brokerbench worker: {message}", file=sys.stderr, flush=True)  # never the token


class Heartbeat:
    """Calls `callbacks.heartbeat(token)` every `interval_s` from a daemon thread until stopped.

    A failed call is retried at the next beat (the task's HeartbeatSeconds allows several misses);
    TaskGone stops the beats, sets `gone` and calls `on_gone` (the worker stops its cell)."""

    def __init__(self, callbacks, token: str, interval_s: float, on_gone=None) -> None:
        self.callbacks = callbacks
        self.token = token
        self.interval_s = interval_s
        self.on_gone = on_gone
        self.gone = threading.Event()
        self.beats = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="task-heartbeat", daemon=True)

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def beat(self) -> bool:
        """One heartbeat; False when the task is gone."""
        try:
            self.callbacks.heartbeat(self.token)
        except TaskGone as exc:
            _say(f"the workflow no longer waits for this worker ({exc})")
            self.gone.set()
            return False
        except Exception as exc:  # the next beat tries again
            _say(f"heartbeat failed: {type(exc).__name__}: {exc}")
            return True
        self.beats += 1
        return True

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            if not self.beat():
                if self.on_gone is not None:
                    self.on_gone()
                return


def stop_on_signals(stop: threading.Event) -> None:
    """SIGTERM and SIGINT set `stop`, which stops the cell where it checks (no KeyboardInterrupt in the middle of a
    write; its end event is written once, by whoever is first)."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_signal: stop.set())


def main(argv: list[str] | None = None, stop: threading.Event | None = None) -> int:
    """`stop`, once set (by a signal: stop_on_signals), stops the cell as the workflow giving up on it does."""
    parser = argparse.ArgumentParser(prog="python -m brokerbench.ec2_worker", description=__doc__.split("\n")[0])
    parser.add_argument("--task-token", default=None,
                        help=f"the workflow task's token (default: ${TOKEN_ENV}, which keeps it off the command line)")
    parser.add_argument("--job", required=True, help="base64 JSON: run_id, cell, targets")
    args = parser.parse_args(argv)
    token = args.task_token or os.environ.get(TOKEN_ENV)
    if not token:
        parser.error(f"give the task token with --task-token or ${TOKEN_ENV}")
    callbacks = wiring.task_callbacks()
    stop = stop or threading.Event()
    heartbeat = Heartbeat(callbacks, token, settings.heartbeat_interval_s(), on_gone=stop.set)
    if not heartbeat.beat():  # a launch the workflow gave up on (a retry has its own worker): measure nothing
        return EXIT_TASK_GONE
    heartbeat.start()
    try:
        job = json.loads(base64.b64decode(args.job))
        output = steps.run_cell(job, worker={"kind": "ec2", "host": socket.gethostname()}, stop=stop)
    except BaseException as exc:  # the workflow must hear of every ending, even Ctrl-C
        heartbeat.stop()
        code = 130 if isinstance(exc, KeyboardInterrupt) else 1
        try:
            callbacks.failure(token, "WorkerFailed", f"{type(exc).__name__}: {exc}")
        except TaskGone:
            return EXIT_TASK_GONE
        return code
    finally:
        heartbeat.stop()
    try:
        callbacks.success(token, output)
    except TaskGone as exc:
        _say(f"the cell ended but the workflow no longer waits for it ({exc})")
        return EXIT_TASK_GONE
    return 0


if __name__ == "__main__":
    stopped = threading.Event()
    stop_on_signals(stopped)
    sys.exit(main(stop=stopped))
