"""Local execution of the real workflow definition (statemachines/benchmark_run.asl.json).

An existing ASL interpreter (npm aws-local-stepfunctions, run by local/sfn/execute.mjs) walks
the definition; each Task state comes back here over HTTP on 127.0.0.1 and is served like the
lambda:invoke integration serves it in AWS: the same handler module, the same payload, the
result under `Payload`. `.waitForTaskToken` tasks get a token, the EC2-kind worker process
reports through /callback/success or /callback/failure (SendTaskSuccess/Failure's contract),
and the task's result is what the worker sent. The interpreter enforces TimeoutSeconds but ignores
HeartbeatSeconds, so the bridge enforces it: the worker beats through /callback/heartbeat
(SendTaskHeartbeat's contract), and a task that hears nothing for HeartbeatSeconds (or
BROKERBENCH_LOCAL_HEARTBEAT_S when set) fails with States.HeartbeatTimeout.

A cancel (the API's, or Ctrl-C) is StopExecution's counterpart: no new task starts, every callback is answered
TaskTimedOut as Step Functions answers a stopped execution's tokens, and each EC2-kind worker the bridge
started is sent SIGTERM, stops its cell (recording what it measured) and is waited for; one that does not stop
in time is killed.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from .. import settings
from ..events.dynamodb import from_environment as event_store
from ..paths import PACKAGE_DIR
from ..registry import plugins
from ..spec import SpecError, validate
from .stack import HOST, LocalStack, StackError

REPO_DIR = PACKAGE_DIR.parent.parent
DEFINITION = REPO_DIR / "statemachines" / "benchmark_run.asl.json"
TEARDOWN_DEFINITION = REPO_DIR / "statemachines" / "teardown_run.asl.json"  # its teardown states alone
NODE_RUNNER = PACKAGE_DIR / "local" / "sfn" / "execute.mjs"
NODE_POLYFILL = PACKAGE_DIR / "local" / "sfn" / "polyfill.mjs"
TOKEN_PLACEHOLDER = "local-task-token"
SHUTDOWN_POLL_S = 0.05
LAMBDA_INVOKE = "arn:aws:states:::lambda:invoke"
WAIT_FOR_TOKEN = ".waitForTaskToken"
STOP_GRACE_S = 30  # how long a cancel waits for the cells in progress to record what they measured


class WorkflowError(RuntimeError):
    pass


def substitutions(definition_text: str) -> dict[str, str]:
    """${XFunctionArn} -> local:x_... : the handler module behind each placeholder."""
    out = {}
    for name in set(re.findall(r"\$\{(\w+)\}", definition_text)):
        if not name.endswith("FunctionArn"):
            raise WorkflowError(f"no local value for ${{{name}}}")
        out[name] = "local:" + re.sub(r"(?<!^)(?=[A-Z])", "_", name[: -len("FunctionArn")]).lower()
    return out


def load_definition(path: Path = DEFINITION) -> dict:
    text = path.read_text()
    for name, value in substitutions(text).items():
        text = text.replace("${" + name + "}", value)
    return json.loads(text)


class _LambdaContext:
    """What Lambda's context tells a handler (and Powertools reads), for a local invocation.

    `function` is the local stand-in for the function's ARN (local:<handler module>)."""

    TIMEOUT_S = 900  # Lambda's longest

    def __init__(self, function: str, stop: threading.Event | None = None) -> None:
        self.stop = stop  # set on Ctrl-C or a cancel: the cell of a RunCell task stops (handlers/run_cell.py)
        self.invoked_function_arn = function
        self.function_name = function.rsplit(":", 1)[-1]
        self.function_version = "$LATEST"
        self.memory_limit_in_mb = None  # the local process has no memory limit of its own
        self.aws_request_id = str(uuid.uuid4())
        self.log_group_name = "local"  # the lines go to functions.log (brokerbench.observability)
        self.log_stream_name = self.function_name
        self._deadline = time.monotonic() + self.TIMEOUT_S

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


class Bridge:
    """The HTTP side of the local interpreter: Task invocations and task-token callbacks."""

    def __init__(self, definition: Path = DEFINITION) -> None:
        self.waiting: dict[str, Future] = {}
        self.heartbeats = _heartbeat_seconds(load_definition(definition)["States"])  # state -> HeartbeatSeconds
        self.beats: dict[str, float] = {}  # token -> time.monotonic() of its last heartbeat
        self.workers: dict[str, int] = {}  # token -> pid of the local EC2-kind worker
        self.tasks: list[tuple[str, str]] = []  # (state, "ok" | error name), in the order they ended
        self.active = 0
        self.cancelled = False  # after a cancel or Ctrl-C no new task starts and every token is gone
        self.stop = threading.Event()  # set with it: the cells running in this process stop (_LambdaContext.stop)
        self.lock = threading.Lock()
        bridge = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's naming)
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                status, answer = bridge.route(self.path, body)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer((HOST, 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://{HOST}:{self.server.server_address[1]}"
        # serve_forever checks for shutdown every poll_interval (0.5 s by default): every run's end waited for it
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": SHUTDOWN_POLL_S},
                                       name="workflow-bridge", daemon=True)

    def __enter__(self) -> Bridge:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def route(self, path: str, body: dict) -> tuple[int, dict]:
        try:
            if path == "/invoke":
                if self.cancelled:
                    return 500, {"errorType": "States.Cancelled", "errorMessage": "the run was interrupted"}
                with self.lock:
                    self.active += 1
                outcome = "ok"
                try:
                    return 200, self.invoke(body["state"], body["resource"], body["input"])
                except _TaskError as exc:
                    outcome = exc.error
                    raise
                except BaseException as exc:
                    outcome = type(exc).__name__
                    raise
                finally:
                    with self.lock:
                        self.active -= 1
                        self.tasks.append((body["state"], outcome))
            if path.startswith("/callback/") and self.cancelled:  # a stopped execution's tokens have timed out
                return 400, {"errorType": "TaskTimedOut", "errorMessage": "the execution was stopped (cancelled)"}
            if path == "/callback/heartbeat":  # SendTaskHeartbeat: the worker is alive
                future = self.waiting.get(body["task_token"])
                if future is None or future.done():
                    return 400, {"errorType": "TaskDoesNotExist", "errorMessage": "unknown or finished task token"}
                self.beats[body["task_token"]] = time.monotonic()
                return 200, {}
            if path in ("/callback/success", "/callback/failure"):
                future = self.waiting.get(body["task_token"])
                if future is None:
                    return 400, {"errorType": "TaskDoesNotExist", "errorMessage": "unknown or finished task token"}
                if path.endswith("success"):
                    future.set_result(body["output"])
                else:
                    future.set_exception(_TaskError(body.get("error", "TaskFailed"), body.get("cause", "")))
                return 200, {}
            return 404, {"errorType": "NotFound", "errorMessage": path}
        except _TaskError as exc:
            return 500, {"errorType": exc.error, "errorMessage": exc.cause}
        except KeyboardInterrupt:  # a cell stopped by Ctrl-C (it has recorded what it measured)
            return 500, {"errorType": "States.Cancelled", "errorMessage": "the run was interrupted or cancelled"}
        except Exception as exc:  # a handler's exception is the task's error, named by its class (as in Lambda)
            return 500, {"errorType": type(exc).__name__, "errorMessage": str(exc)}

    def invoke(self, state: str, resource: str, task_input: dict):
        if not resource.startswith(LAMBDA_INVOKE):
            raise WorkflowError(f"{state}: no local integration for {resource}")
        function = task_input["FunctionName"]
        module = importlib.import_module(f"handlers.{function.split(':', 1)[1]}")
        payload = task_input.get("Payload")
        if resource.endswith(WAIT_FOR_TOKEN):
            return self._wait_for_token(function, module, payload, state)
        result = module.lambda_handler(payload, _LambdaContext(function, self.stop))
        return {"Payload": result, "StatusCode": 200, "ExecutedVersion": "$LATEST"}

    def _wait_for_token(self, function: str, module, payload: dict, state: str = ""):
        token = f"local-{uuid.uuid4()}"
        payload = {k: (token if v == TOKEN_PLACEHOLDER else v) for k, v in payload.items()}
        future: Future = Future()
        self.waiting[token] = future
        window = (settings.local_heartbeat_s() or self.heartbeats.get(state)) if state in self.heartbeats else None
        try:
            self.beats[token] = time.monotonic()  # the heartbeat clock starts with the task
            launched = module.lambda_handler(payload, _LambdaContext(function, self.stop))
            pid = launched.get("pid") if isinstance(launched, dict) else None
            if pid:
                with self.lock:
                    self.workers[token] = pid
            stopping = False
            while True:
                if self.cancelled and not stopping:  # the worker stops its cell and records what it measured
                    stopping = True
                    if pid:
                        _signal(pid, signal.SIGTERM)
                try:
                    return future.result(timeout=min(0.5, window / 4) if window else 0.5)
                except TimeoutError:
                    if stopping:  # given until the cancel's grace ends (LocalWorkflow._interrupt), not the window
                        if not pid or _exited(pid):
                            raise _TaskError("States.Cancelled", "the run was cancelled or interrupted") from None
                        continue
                    if pid and _exited(pid) and not future.done():
                        time.sleep(1)  # a callback may still be on its way
                        if not future.done():
                            _stop_group(pid)  # what is left of it must not write after RecordCellFailed cleans up
                            raise _TaskError("WorkerLost", f"worker process {pid} ended without reporting") from None
                    if window and time.monotonic() - self.beats[token] > window and not future.done():
                        if pid:  # a hung worker: nobody waits for it any more
                            _stop_worker(pid)
                        raise _TaskError("States.HeartbeatTimeout",
                                         f"no heartbeat from the worker for {window:g} s (HeartbeatSeconds)") from None
        finally:
            self.waiting.pop(token, None)
            self.beats.pop(token, None)
            with self.lock:
                self.workers.pop(token, None)

    def stop_workers(self) -> list[int]:
        """Kill the EC2-kind workers still running (ones that did not stop when told); returns their pids."""
        with self.lock:
            pids = list(self.workers.values())
        for pid in pids:
            _stop_worker(pid)
        return pids


class _TaskError(Exception):
    def __init__(self, error: str, cause: str) -> None:
        super().__init__(f"{error}: {cause}")
        self.error, self.cause = error, cause


def _heartbeat_seconds(states: dict, found: dict | None = None) -> dict[str, float]:
    """HeartbeatSeconds of every Task state that has one, by state name (Map and Parallel states included)."""
    found = {} if found is None else found
    for name, state in states.items():
        if state.get("Type") == "Task" and state.get("HeartbeatSeconds"):
            found[name] = float(state["HeartbeatSeconds"])
        if state.get("Type") == "Map":
            _heartbeat_seconds((state.get("ItemProcessor") or state.get("Iterator"))["States"], found)
        for branch in state.get("Branches", []) if state.get("Type") == "Parallel" else []:
            _heartbeat_seconds(branch["States"], found)
    return found


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _stop_worker(pid: int) -> None:
    """Kill a worker process that stopped beating (it may be stopped or hung, so SIGKILL), with its processes, and
    reap it."""
    _signal(pid, signal.SIGKILL)
    _stop_group(pid)
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def _stop_group(pid: int) -> None:
    """SIGKILL for what is left of a worker: its process group (LocalProcessFleet starts each worker as the leader
    of its own), the fork server and the cell's producers and consumers. They die with the worker anyway, once
    its fork server has ended, but on a loaded host that took seconds, in which a producer wrote again into the
    stream that RecordCellFailed had deleted."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _exited(pid: int) -> bool:
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == pid
    except ChildProcessError:
        return True


@dataclass
class Execution:
    run_id: str
    status: str  # SUCCEEDED | FAILED | ABORTED
    output: dict | None = None
    error: str | None = None
    cause: str | None = None
    tasks: list[tuple[str, str]] = field(default_factory=list)  # every Task state served, in order
    waits: list[float] = field(default_factory=list)  # with a time_scale: the waits the definition asked for (ms)


class LocalWorkflow:
    """Runs the workflow definition against the local stack, with DynamoDB Local as the event store."""

    def __init__(self, stack: LocalStack, reports_dir: Path, definition: Path = DEFINITION) -> None:
        self.stack = stack
        self.reports_dir = Path(reports_dir)
        self.definition = definition

    def environment(self, bridge_url: str) -> dict[str, str]:
        db = self.stack.endpoints(required=["dynamodb"])["dynamodb"]
        return {
            "BROKERBENCH_MODE": "local",
            "BROKERBENCH_STATE_DIR": str(self.stack.state_dir),
            "BROKERBENCH_EVENTS_TABLE": db["table"],
            "BROKERBENCH_DYNAMODB_ENDPOINT": db["endpoint_url"],
            "BROKERBENCH_REPORTS": str(self.reports_dir.resolve()),
            "BROKERBENCH_CALLBACK_URL": bridge_url,
        }

    def install_brokers(self, request: dict) -> list[str]:
        """Install the local brokers the request runs on that are not installed yet (first use: a progress line
        on stderr each), before the workflow starts: ProvisionTarget's 60 s (TimeoutSeconds) are for starting a
        broker, not for fetching Pulsar's ~234 MB of jars. A request the workflow will refuse installs nothing.
        WorkflowError names the broker whose install failed."""
        try:
            spec = validate(request)
        except SpecError:
            return []  # ValidateRequest says what is wrong with it
        services = [plugins()[broker].local.name for broker in spec["brokers"]
                    if broker in plugins() and plugins()[broker].local and broker not in spec.get("targets", {})]
        try:
            return self.stack.install(services)
        except StackError as exc:
            raise WorkflowError(str(exc)) from None

    def execute(self, request: dict, *, suite: str | None = None, run_id: str,
                on_poll: Callable[[], None] | None = None, cancel: threading.Event | None = None,
                execution_input: dict | None = None, time_scale: float = 1.0) -> Execution:
        """Run the workflow to its end; `cancel`, when set from another thread, stops it like Ctrl-C does
        (cells in progress record what they measured) and the execution ends ABORTED.

        `execution_input` replaces the run workflow's input ({"request", "suite", "run_id"}) for another definition:
        the teardown state machine (TEARDOWN_DEFINITION) takes {"run": {"run_id", "spec"}}. `time_scale` (tests)
        shortens every wait the interpreter makes (Wait states, Retry backoff, task timeouts) to that fraction, so
        the definition's own intervals run for real; the execution lists the waits asked for."""
        node = shutil.which("node")
        if not node:
            raise WorkflowError("Node.js is needed to run the workflow locally (make setup installs its packages)")
        self.install_brokers(request)
        with Bridge(self.definition) as bridge:
            os.environ.update(self.environment(bridge.url))
            event_store().ensure_table()  # in AWS the CDK app owns the table
            job = {
                "definition": load_definition(self.definition),
                "input": execution_input or {"request": request, "suite": suite, "run_id": run_id},
                "bridge": bridge.url,
                "context": {"Execution": {"Name": run_id, "Id": f"local:{run_id}"}, "Task": {"Token": TOKEN_PLACEHOLDER}},
                "time_scale": time_scale,
            }
            log = self.stack.state_dir / "workflow.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            with open(log, "ab") as stderr:
                process = subprocess.Popen([node, "--import", NODE_POLYFILL.as_uri(), str(NODE_RUNNER)],
                                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                                           cwd=REPO_DIR, start_new_session=True)
                reader = threading.Thread(target=lambda: setattr(process, "result", process.communicate(
                    json.dumps(job).encode())[0]), daemon=True)
                reader.start()
                try:
                    while reader.is_alive():
                        reader.join(0.5)
                        if on_poll:
                            on_poll()
                        if cancel is not None and cancel.is_set():
                            self._interrupt(process, bridge)
                            reader.join(10)
                            return Execution(run_id, "ABORTED", error="Cancelled", cause="cancelled by request",
                                             tasks=bridge.tasks)
                except BaseException:  # Ctrl-C, or anything else: the interpreter never outlives the call
                    self._interrupt(process, bridge)
                    raise
            lines = (getattr(process, "result", b"") or b"").decode().strip().splitlines()
            if process.returncode != 0 or not lines:
                raise WorkflowError(f"the workflow interpreter exited with {process.returncode}; see {log}")
            outcome = json.loads(lines[-1])
        return Execution(run_id, outcome["status"], outcome.get("output"), outcome.get("error"), outcome.get("cause"),
                         bridge.tasks, outcome.get("waits", []))

    @staticmethod
    def _interrupt(process: subprocess.Popen, bridge: Bridge) -> None:
        """Ctrl-C or a cancel: cells in progress stop and record what they measured, in this process (Lambda
        kind) and in the EC2-kind worker processes (the bridge tells them); the interpreter stops."""
        bridge.cancelled = True
        bridge.stop.set()
        deadline = time.monotonic() + STOP_GRACE_S
        while bridge.active and time.monotonic() < deadline:  # let running tasks write their events
            time.sleep(0.2)
        bridge.stop_workers()  # none outlives the run (teardown follows and stops the brokers)
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
