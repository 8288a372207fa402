"""The local stack: a real single-node Kafka (KRaft), Redis and DynamoDB Local on 127.0.0.1.

Each service gets free ports, a log file and a data folder under the state folder; pids and
ports are recorded in `stack.json`, so `up` twice reuses what runs and `down` stops exactly
what `up` started.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .install import JARS_DIR, REPO_DIR, lib_dir

HOST = "127.0.0.1"
SERVICES = ("kafka", "redis", "dynamodb")
EVENTS_TABLE = "brokerbench-events"
KAFKA_HEAP = "512m"


class StackError(RuntimeError):
    pass


class StackBusy(StackError):
    """Another run holds the local stack (see LocalStack.run_lock)."""


def default_state_dir() -> Path:
    return Path(os.environ.get("BROKERBENCH_HOME", REPO_DIR / ".brokerbench")) / "local"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def port_answers(port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=timeout):
            return True
    except OSError:
        return False


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child (started by this process, not yet reaped) is not alive.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return True


def _jar_version(component: str, prefix: str) -> str:
    for jar in lib_dir(component).glob(f"{prefix}-*.jar"):
        return jar.stem[len(prefix) + 1:]
    return "unknown"


def _redis_version() -> str:
    server = shutil.which("redis-server")
    if not server:
        return "not installed"
    out = subprocess.run([server, "--version"], capture_output=True, text=True).stdout
    return next((p.split("=")[1] for p in out.split() if p.startswith("v=")), "unknown")


@dataclass
class Service:
    name: str
    pid: int
    port: int
    log: str
    version: str
    extra: dict = field(default_factory=dict)
    owner: str | None = None  # the run that started it (its teardown stops it), None for `local up`

    def running(self) -> bool:
        return pid_alive(self.pid) and port_answers(self.port)


class LocalStack:
    def __init__(self, state_dir: Path | None = None, *, redis_aof: bool = True, startup_timeout_s: float = 60) -> None:
        self.state_dir = Path(state_dir or default_state_dir())
        self.redis_aof = redis_aof
        self.startup_timeout_s = startup_timeout_s

    # -- state -------------------------------------------------------------------------------
    @property
    def state_file(self) -> Path:
        return self.state_dir / "stack.json"

    @contextlib.contextmanager
    def _locked(self):
        """One process or thread at a time changes the stack (the workflow provisions brokers in parallel)."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with open(self.state_dir / "stack.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    @property
    def run_lock_file(self) -> Path:
        return self.state_dir / "run.lock"

    @contextlib.contextmanager
    def run_lock(self, run_id: str):
        """Held for a whole local run: a second run on the same stack is refused (StackBusy), since its
        teardown would stop brokers the first is measuring and both would share the machine's cores.

        An flock, so it goes away with the process that held it, however that process ended."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        lock = open(self.run_lock_file, "a+")  # not truncated before the lock is ours: the holder stays readable
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            holder = self.run_holder() or {}
            raise StackBusy(
                f"another run is using the local stack in {self.state_dir}: run {holder.get('run_id', '?')} "
                f"(pid {holder.get('pid', '?')}, started {holder.get('started', '?')}). Wait for it to end, or "
                "give this run its own stack (--state-dir or BROKERBENCH_HOME)") from None
        try:
            lock.seek(0)
            lock.truncate()
            lock.write(json.dumps({"run_id": run_id, "pid": os.getpid(),
                                   "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}))
            lock.flush()
            yield
        finally:
            lock.truncate(0)
            fcntl.flock(lock, fcntl.LOCK_UN)
            lock.close()

    def run_holder(self) -> dict | None:
        """The run holding run_lock ({run_id, pid, started}), or None when no run holds it."""
        if not self.run_lock_file.is_file():
            return None
        with open(self.run_lock_file) as probe:
            try:
                fcntl.flock(probe, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                try:
                    return json.loads(self.run_lock_file.read_text() or "{}")
                except ValueError:
                    return {}
            fcntl.flock(probe, fcntl.LOCK_UN)
            return None

    def _load(self) -> dict[str, Service]:
        if not self.state_file.is_file():
            return {}
        return {name: Service(**svc) for name, svc in json.loads(self.state_file.read_text()).items()}

    def _save(self, services: dict[str, Service]) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({n: asdict(s) for n, s in services.items()}, indent=2))
        tmp.replace(self.state_file)

    # -- public ------------------------------------------------------------------------------
    def status(self) -> dict[str, dict]:
        services = self._load()
        out = {}
        for name in SERVICES:
            svc = services.get(name)
            out[name] = {"state": "stopped"} if svc is None else {
                "state": "running" if svc.running() else "dead", "pid": svc.pid, "port": svc.port,
                "version": svc.version, "log": svc.log,
            }
        return out

    def is_up(self, services=SERVICES) -> bool:
        status = self.status()
        return all(status[name]["state"] == "running" for name in services)

    def installed_version(self, service: str) -> str:
        if service == "kafka":
            return _jar_version("kafka", "kafka_2.13")
        if service == "dynamodb":
            return _jar_version("dynamodb-local", "DynamoDBLocal")
        return _redis_version()

    def up(self, services=SERVICES, *, owner: str | None = None, log=print) -> dict:
        """Start what is not running (reusing what is) and return the endpoints.

        Services started here are marked with `owner`, so `down(owner=...)` stops only those.
        """
        with self._locked():
            return self._up(services, owner, log)

    def _up(self, services, owner, log) -> dict:
        services_state = self._load()
        starters = {"kafka": self._start_kafka, "redis": self._start_redis, "dynamodb": self._start_dynamodb}
        started = []
        try:
            for name in SERVICES:
                if name not in services:
                    continue
                svc = services_state.get(name)
                if svc and svc.running():
                    continue
                if svc:
                    _stop_pid(svc.pid)
                log(f"starting {name} ...")
                services_state[name] = starters[name]()
                services_state[name].owner = owner
                started.append(name)
                self._save(services_state)
            for name in started:
                self._wait(services_state[name])
        except BaseException:
            for name in started:  # nothing half-started is left behind
                _stop_pid(services_state[name].pid)
                services_state.pop(name, None)
            self._save(services_state)
            raise
        return self.endpoints(required=services)

    def down(self, services=SERVICES, *, owner: str | None = None, log=print) -> list[str]:
        """Stop the services (only those started for `owner` when given); returns what was stopped."""
        with self._locked():
            return self._down(services, owner, log)

    def _down(self, services, owner, log) -> list[str]:
        state = self._load()
        stopped = []
        for name in reversed(SERVICES):
            svc = state.get(name)
            if name not in services or svc is None or (owner is not None and svc.owner != owner):
                continue
            log(f"stopping {name} (pid {svc.pid}) ...")
            _stop_pid(svc.pid)
            del state[name]
            stopped.append(name)
            if name != "dynamodb":  # broker data is per session; the event store is kept
                shutil.rmtree(self.state_dir / name / "data", ignore_errors=True)
        if state:
            self._save(state)
        elif self.state_file.exists():
            self.state_file.unlink()
        return stopped

    def endpoints(self, required=SERVICES) -> dict:
        services = self._load()
        missing = [n for n in required if n not in services]
        if missing:
            raise StackError(f"the local stack is not up ({', '.join(missing)} missing): run `brokerbench local up`")
        out = {}
        if "kafka" in services:
            out["kafka"] = {"bootstrap_servers": f"{HOST}:{services['kafka'].port}", "version": services["kafka"].version}
        if "redis" in services:
            out["redis-streams"] = {"host": HOST, "port": services["redis"].port, "version": services["redis"].version}
        if "dynamodb" in services:
            out["dynamodb"] = {"endpoint_url": f"http://{HOST}:{services['dynamodb'].port}", "table": EVENTS_TABLE}
        return out

    # -- services ----------------------------------------------------------------------------
    def _folder(self, name: str, keep_data: bool = False) -> Path:
        folder = self.state_dir / name
        if not keep_data:
            shutil.rmtree(folder / "data", ignore_errors=True)
        (folder / "data").mkdir(parents=True, exist_ok=True)
        return folder

    def _spawn(self, name: str, cmd: list[str], cwd: Path, port: int, version: str, **extra) -> Service:
        log_path = self.state_dir / name / f"{name}.log"
        with open(log_path, "ab") as log_file:
            proc = subprocess.Popen(cmd, cwd=cwd, stdout=log_file, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        return Service(name, proc.pid, port, str(log_path), version, extra)

    def _start_kafka(self) -> Service:
        folder = self._folder("kafka")
        lib = lib_dir("kafka")
        if not lib.is_dir():
            raise StackError("Kafka jars are missing: run `make setup`")
        port, controller_port = free_port(), free_port()
        config = folder / "server.properties"
        config.write_text("\n".join([
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.voters=1@{HOST}:{controller_port}",
            f"listeners=PLAINTEXT://{HOST}:{port},CONTROLLER://{HOST}:{controller_port}",
            f"advertised.listeners=PLAINTEXT://{HOST}:{port}",
            "controller.listener.names=CONTROLLER",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            f"log.dirs={folder / 'data'}",
            "num.partitions=1",
            "offsets.topic.replication.factor=1",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "share.coordinator.state.topic.replication.factor=1",
            "share.coordinator.state.topic.min.isr=1",
            "group.initial.rebalance.delay.ms=0",
            "delete.topic.enable=true",
            # Topics' file.delete.delay.ms (broker default log.segment.delete.delay.ms, 60 s): a deleted
            # cell's files are removed at once instead of during a later cell.
            "log.segment.delete.delay.ms=0",
            "message.max.bytes=16777216",
            "replica.fetch.max.bytes=16777216",
            # Client quotas (the reference caps figures are checked against) averaged over 2 one-second
            # samples instead of 11: a capped client then gets the cap second by second, not a burst of
            # ~10 s of quota followed by ~10 s of silence.
            "quota.window.num=2",
            "quota.window.size.seconds=1",
            "",
        ]))
        log4j = folder / "log4j2.properties"
        log4j.write_text("rootLogger.level=WARN\nrootLogger.appenderRef.stdout.ref=STDOUT\n"
                         "appender.stdout.type=Console\nappender.stdout.name=STDOUT\n"
                         "appender.stdout.layout.type=PatternLayout\nappender.stdout.layout.pattern=[%d] %p %m (%c)%n\n"
                         "logger.kafka.name=kafka\nlogger.kafka.level=INFO\n")
        classpath = f"{lib}/*"
        cluster_id = "-"
        while cluster_id.startswith("-"):  # as Kafka's own Uuid.randomUuid: never a leading dash
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        fmt = subprocess.run(["java", "-cp", classpath, "kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}",
                              "-c", str(config), "--ignore-formatted"], capture_output=True, text=True)
        if fmt.returncode != 0:
            raise StackError(f"formatting Kafka storage failed: {fmt.stderr[-1500:]}")
        # A pinned heap (-Xms = -Xmx): the JVM does not grow and shrink it while cells are measured.
        cmd = ["java", f"-Xms{KAFKA_HEAP}", f"-Xmx{KAFKA_HEAP}", "-XX:+UseG1GC", f"-Dlog4j2.configurationFile={log4j}",
               "-cp", classpath, "kafka.Kafka", str(config)]
        return self._spawn("kafka", cmd, folder, port, _jar_version("kafka", "kafka_2.13"),
                           controller_port=controller_port)

    def _start_redis(self) -> Service:
        folder = self._folder("redis")
        server = shutil.which("redis-server")
        if not server:
            raise StackError("redis-server is missing: run `make setup` (or apt-get install redis-server)")
        version = _redis_version()
        port = free_port()
        cmd = [server, "--bind", HOST, "--port", str(port), "--save", "", "--dir", str(folder / "data"),
               "--appendonly", "yes" if self.redis_aof else "no", "--appendfsync", "everysec",
               "--daemonize", "no", "--protected-mode", "yes", "--logfile", ""]
        return self._spawn("redis", cmd, folder, port, version, aof=self.redis_aof)

    def _start_dynamodb(self) -> Service:
        folder = self._folder("dynamodb", keep_data=True)
        lib = lib_dir("dynamodb-local")
        classes = JARS_DIR / "dynamodb-local" / "classes"
        if not (classes / "LoopbackDynamoDB.class").is_file():
            raise StackError("DynamoDB Local is not installed: run `make setup`")
        port = free_port()
        cmd = ["java", "-Xmx512m", f"-Djava.library.path={lib}", "-cp", f"{classes}:{lib}/*", "LoopbackDynamoDB",
               "-port", str(port), "-sharedDb", "-dbPath", str(folder / "data"), "-disableTelemetry"]
        return self._spawn("dynamodb", cmd, folder, port, _jar_version("dynamodb-local", "DynamoDBLocal"))

    def _wait(self, svc: Service) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if not pid_alive(svc.pid):
                raise StackError(f"{svc.name} exited during startup; last lines of {svc.log}:\n{_tail(svc.log)}")
            if port_answers(svc.port):
                return
            time.sleep(0.2)
        raise StackError(f"{svc.name} did not answer on {HOST}:{svc.port} within {self.startup_timeout_s:.0f} s; "
                         f"see {svc.log}")


def _tail(path: str, lines: int = 20) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _stop_pid(pid: int, timeout_s: float = 15) -> None:
    """SIGTERM the service's process group, then SIGKILL whatever is left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        except PermissionError:
            os.kill(pid, sig)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            if not pid_alive(pid):
                return
            time.sleep(0.1)
