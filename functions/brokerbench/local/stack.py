"""The local stack: each registered broker's local service and DynamoDB Local (the event store) on 127.0.0.1.

Each service gets free ports, a log file and a data folder under the state folder; its pids, ports
and endpoint are recorded in `stack.json`, so `up` twice reuses what runs and `down` stops exactly
what `up` started.

A service that can run as a cluster (its `max_nodes` > 1) has a second name per size, "kafka@3":
it runs beside the single node, with its own folder, and start() gets `nodes` in its settings.

A service that is not installed (`make setup` installs only the quick suite's brokers) is installed before it
starts, with a progress line on stderr: "installing pulsar 4.0.7 (first use, ~234 MB) ...".
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..registry import LocalService, Started, local_services
from .dynamodb import EVENTS_TABLE, DynamoDBLocal
from .install import REPO_DIR, InstallError, install_on_first_use
from .processes import HOST, StackError, free_port, pid_alive, port_answers, port_free, stop, tail
from .proxies import TOXIPROXY

__all__ = ["EVENTS_TABLE", "HOST", "LocalStack", "StackBusy", "StackError", "free_port", "pid_alive", "port_answers"]
EVENT_STORE = DynamoDBLocal()
# The least free space (MB) on the state folder's disk for starting a service.
MIN_FREE_MB = int(os.environ.get("BROKERBENCH_MIN_FREE_MB", "256"))


class StackBusy(StackError):
    """Another run holds the local stack (see LocalStack.run_lock)."""


# Services a plain `local up` leaves out: each is started by the run that needs it (Toxiproxy: network faults) or
# named (`local up toxiproxy`); `local down` and `local status` include it once it is recorded.
ON_REQUEST = (TOXIPROXY.name,)


# A start-up bound catches a broker that hangs, not a slow host: the single Kafka node missed 60 s at a load of 25 to 30
# (2 cores). A cluster's bound (per node) stops here, so that the local ProvisionTarget step (300 s) fails with the
# stack's message, never its own timeout.
STARTUP_CAP_S = 280.0


def cluster_name(service: str, nodes: int) -> str:
    """The stack's name for `service` run as `nodes` nodes ("kafka@3"); one node is the service's own name."""
    return service if nodes == 1 else f"{service}@{nodes}"


def default_state_dir() -> Path:
    return Path(os.environ.get("BROKERBENCH_HOME", REPO_DIR / ".brokerbench")) / "local"


@dataclass
class Service:
    """A started service as stack.json records it."""

    name: str
    pids: list[int]
    port: int
    log: str
    version: str
    endpoint: dict | None
    extra: dict = field(default_factory=dict)
    owner: str | None = None  # the run that started it (its teardown stops it), None for `local up`

    @classmethod
    def of(cls, name: str, started: Started, owner: str | None) -> Service:
        return cls(name, started.pids, started.port, started.log, started.version, started.endpoint, started.extra,
                   owner)

    @classmethod
    def load(cls, name: str, record: dict) -> Service:
        if "pids" not in record:  # written before services had several processes: no endpoint, restarted by `up`
            record = {**{k: v for k, v in record.items() if k != "pid"}, "pids": [record["pid"]], "endpoint": None}
        return cls(**{**record, "name": name})

    def started(self) -> Started:
        return Started(self.pids, self.port, self.endpoint or {}, self.version, self.log, self.extra)

    def running(self) -> bool:
        return self.endpoint is not None and all(map(pid_alive, self.pids)) and port_answers(self.port)


class LocalStack:
    """settings: passed to every service's start, each reads its own (redis_aof=False: Redis without AOF).
    startup_timeout_s: overrides each service's own."""

    def __init__(self, state_dir: Path | None = None, *, startup_timeout_s: float | None = None, **settings) -> None:
        self.state_dir = Path(state_dir or default_state_dir())
        self.settings = settings
        self.startup_timeout_s = startup_timeout_s
        # Service name -> (the key of its endpoint in endpoints(), the service): brokers, then the event store, then
        # Toxiproxy (started for a run with network faults only: ON_REQUEST).
        self.services: dict[str, tuple[str, LocalService]] = {
            **local_services(), EVENT_STORE.name: ("dynamodb", EVENT_STORE), TOXIPROXY.name: ("toxiproxy", TOXIPROXY)}

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

    @contextlib.contextmanager
    def serving(self, services, *, keep: bool = False, log=print):
        """The services for the length of one command (a run, `show`, `serve` ...): what is not running starts,
        and what this started stops at the end, unless `keep` or another command still uses it. Each such command
        holds a shared flock on users.lock while it runs; the last one out (the only one that can turn it into
        an exclusive lock) stops what it started. A service that was up before is left as found. Yields the
        endpoints."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with open(self.state_dir / "users.lock", "a") as users:
            fcntl.flock(users, fcntl.LOCK_SH)
            names = self._names(services)
            started = [name for name in names if not self.is_up([name])]
            endpoints = self.up(names, log=log)
            try:
                yield endpoints
            finally:
                if started and not keep:
                    try:
                        fcntl.flock(users, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        log(f"leaving {', '.join(started)} running: another command is using it")
                    else:
                        self.down(started, log=log)

    def _load(self) -> dict[str, Service]:
        if not self.state_file.is_file():
            return {}
        return {name: Service.load(name, record) for name, record in json.loads(self.state_file.read_text()).items()}

    def _save(self, services: dict[str, Service]) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({n: asdict(s) for n, s in services.items()}, indent=2))
        tmp.replace(self.state_file)

    def _lookup(self, name: str) -> tuple[str, LocalService, int]:
        """(its endpoint key, the service, its node count) of a stack name, "kafka" or "kafka@3"."""
        base, _, count = name.partition("@")
        if base not in self.services or (count and not count.isdigit()):
            raise StackError(f"no local service {name}; known: {', '.join(self.services)}")
        key, service = self.services[base]
        nodes = int(count or 1)
        largest = getattr(service, "max_nodes", 1)
        if count and not 2 <= nodes <= largest:
            raise StackError(f"{base} runs as 1 node" + (f" or a cluster of 2 to {largest}" if largest > 1 else "")
                             + f" here, not {nodes}")
        return key, service, nodes

    def _known(self, name: str) -> bool:
        try:
            self._lookup(name)
        except StackError:
            return False
        return True

    def _names(self, services) -> list[str]:
        """The requested services in start order (all when None: every service but those started on request only,
        and every cluster or such service recorded)."""
        if services is None:
            services = [*(name for name in self.services if name not in ON_REQUEST),
                        *(name for name in self._load() if ("@" in name or name in ON_REQUEST) and self._known(name))]
        for name in services:
            self._lookup(name)
        order = list(self.services)
        return sorted(set(services), key=lambda name: (order.index(name.partition("@")[0]), name))

    # -- public ------------------------------------------------------------------------------
    def status(self) -> dict[str, dict]:
        services = self._load()
        out = {}
        for name in self._names(None):
            svc = services.get(name)
            out[name] = {"state": "stopped"} if svc is None else {
                "state": "running" if svc.running() else "dead", "pid": svc.pids[0], "pids": svc.pids,
                "port": svc.port, "version": svc.version, "log": svc.log,
            }
        return out

    def is_up(self, services=None) -> bool:
        """Whether every service named (a cluster's too, "kafka@3") is running; all when None."""
        loaded = self._load()
        return all((svc := loaded.get(name)) is not None and svc.running() for name in self._names(services))

    def free_mb(self) -> int:
        """Free space on the disk of the state folder (the services' data and logs), in MB."""
        here = self.state_dir
        while not here.exists():
            here = here.parent
        return shutil.disk_usage(here).free // 2**20

    def check_disk(self) -> None:
        """Refuse to start services on a disk that is (nearly) full: a broker or DynamoDB Local that runs out of
        space mid-run fails its writes (DynamoDB Local answers InternalFailure), which no retry mends."""
        free = self.free_mb()
        if free < MIN_FREE_MB:
            raise StackError(f"only {free} MB free on the disk of {self.state_dir} (the local stack's data: broker "
                             f"logs, DynamoDB Local's tables); starting a service needs at least {MIN_FREE_MB} MB "
                             "(BROKERBENCH_MIN_FREE_MB): free some space, or put the stack on a larger disk with "
                             "--state-dir or BROKERBENCH_HOME")

    def installed_version(self, service: str) -> str | None:
        return self._lookup(service)[1].installed_version()

    def install_version(self, service: str) -> str | None:
        """The version installing the service would give (None when it cannot tell before installing)."""
        return getattr(self._lookup(service)[1], "install_version", lambda: None)()

    def install(self, services) -> list[str]:
        """Install each service that is not installed yet (a progress line on stderr each, naming the broker it
        serves); returns those brokers. StackError names the broker when its install fails."""
        installed = []
        for name in self._names(services):
            broker, service, _ = self._lookup(name)
            try:
                if install_on_first_use(broker, service):
                    installed.append(broker)
            except InstallError as exc:
                raise StackError(str(exc)) from None
        return installed

    def up(self, services=None, *, owner: str | None = None, log=print) -> dict:
        """Start what is not running (reusing what is) and return the endpoints.

        Services started here are marked with `owner`, so `down(owner=...)` stops only those.
        """
        with self._locked():
            return self._up(self._names(services), owner, log)

    def _up(self, names: list[str], owner, log) -> dict:
        state = self._load()
        started, restarted = [], set()
        try:
            for name in names:
                svc = state.get(name)
                if svc and svc.running():
                    continue
                ports = free_port
                if svc:
                    # it died: back on the same ports where they are free, with its data, as a real broker
                    restarted.add(name)
                    _stop_all(svc)  # restarts after a crash: clients in flight find it again, what it stored is kept
                    ports = _same_ports(svc)
                if not started:
                    self.check_disk()
                self.install([name])  # first use: installed before it starts (its start-up timeout excludes it)
                log(f"starting {name} ..." if svc is None else f"starting {name} again (it had stopped) ...")
                state[name] = self._start(name, ports, owner, keep_data=svc is not None)
                started.append(name)
                self._save(state)
            for name in started:
                for attempt in range(1, BIND_ATTEMPTS + 1):
                    try:
                        self._wait(state[name])
                        break
                    except StackError:
                        # a fresh port taken between its choice and the bind (by another process's listener):
                        # started again on fresh ones; a restart's ports are its own (_same_ports) and kept
                        if attempt == BIND_ATTEMPTS or name in restarted or not _port_taken(state[name]):
                            raise
                        log(f"{name}: a port was taken as it started; starting it again on fresh ports ...")
                        _stop_all(state[name])
                        state[name] = self._start(name, free_port, owner, keep_data=False)
                        self._save(state)
        except BaseException:
            for name in started:  # nothing half-started is left behind
                _stop_all(state.pop(name))
            self._save(state)
            raise
        return self.endpoints(required=names)

    def down(self, services=None, *, owner: str | None = None, log=print) -> list[str]:
        """Stop the services (only those started for `owner` when given); returns what was stopped."""
        with self._locked():
            return self._down(self._names(services), owner, log)

    def _down(self, names: list[str], owner, log) -> list[str]:
        state = self._load()
        stopped = []
        for name in reversed(names):
            svc = state.get(name)
            if svc is None or (owner is not None and svc.owner != owner):
                continue
            log(f"stopping {name} (pid {', '.join(map(str, svc.pids))}) ...")
            # A broker's data goes with it (below): its clean shutdown would keep nothing (RabbitMQ's took 6 s a node,
            # Pulsar's up to 10), so it is killed. The event store, whose data is kept, shuts down cleanly.
            _stop_all(svc, graceful=name == EVENT_STORE.name)
            del state[name]
            stopped.append(name)
            if name != EVENT_STORE.name:  # broker data is per session; the event store is kept
                shutil.rmtree(self.state_dir / name / "data", ignore_errors=True)
        if state:
            self._save(state)
        elif self.state_file.exists():
            self.state_file.unlink()
        return stopped

    def endpoints(self, required=None) -> dict:
        """Each started service's endpoint: under its broker's name, and the event store's under "dynamodb"."""
        services = self._load()
        missing = [n for n in self._names(required) if n not in services]
        if missing:
            raise StackError(f"the local stack is not up ({', '.join(missing)} missing): run `brokerbench local up`")
        return {self.services[name][0]: svc.endpoint for name, svc in services.items()
                if name in self.services and svc.endpoint is not None}

    def node_started(self, name: str, node: str, pids: list[int]) -> None:
        """A node of the cluster `name` started again on its own (a fault's restart, brokerbench.faults) with new
        `pids`: recorded in place of its old ones, so the stack finds the cluster whole and stops them at its end."""
        with self._locked():
            state = self._load()
            svc = state.get(name)
            entries = [n for n in ((svc.endpoint or {}).get("nodes") or []) if n["node"] == node] if svc else []
            if not entries:
                raise StackError(f"{name} has no node {node!r} in the local stack")
            old = set(entries[0]["pids"])
            svc.pids = [p for p in svc.pids if p not in old] + list(pids)
            entries[0]["pids"] = list(pids)
            self._save(state)

    def endpoint(self, name: str) -> dict:
        """One started service's endpoint, a cluster's too ("kafka@3"), with every process of it (`pids`)."""
        svc = self._load().get(name)
        if svc is None or svc.endpoint is None:
            raise StackError(f"{name} is not running in the local stack: run `brokerbench local up`")
        return {**svc.endpoint, "pids": svc.pids}

    # -- services ----------------------------------------------------------------------------
    def _start(self, name: str, ports, owner, keep_data: bool) -> Service:
        """Starts the service (not waited for) on ports from `ports`, in a data folder emptied unless `keep_data`."""
        folder = self._folder(name, keep_data=keep_data)
        _, service, nodes = self._lookup(name)
        settings = {**self.settings, "nodes": nodes} if nodes > 1 else self.settings
        return Service.of(name, service.start(folder, ports, settings), owner)

    def _folder(self, name: str, keep_data: bool = False) -> Path:
        """The service's folder, with an empty data folder for a broker (the event store keeps its data, and so
        does a broker started again after it stopped by itself)."""
        folder = self.state_dir / name
        if name != EVENT_STORE.name and not keep_data:
            shutil.rmtree(folder / "data", ignore_errors=True)
        (folder / "data").mkdir(parents=True, exist_ok=True)
        return folder

    def _wait(self, svc: Service) -> None:
        """Until the service answers: its start-up bound, per node for a cluster (its nodes start at once on the
        same cores: a 3-node Kafka cluster was ready 19 to 69 s after its JVMs started at a load of 16 to 32), at most
        STARTUP_CAP_S, inside the 300 s a local ProvisionTarget step has."""
        _, service, nodes = self._lookup(svc.name)
        timeout_s = self.startup_timeout_s or min(service.startup_timeout_s * nodes, STARTUP_CAP_S)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not all(map(pid_alive, svc.pids)):
                raise StackError(f"{svc.name} exited during startup; last lines of {svc.log}:\n{tail(svc.log)}")
            if service.ready(svc.started()):
                return
            time.sleep(0.2)
        raise StackError(f"{svc.name} did not answer on {HOST}:{svc.port} within {timeout_s:.0f} s; see {svc.log}")


BIND_ATTEMPTS = 3  # starts of a fresh service whose port was taken as it bound it
# what a service's log says when its listener's port was taken: Erlang (RabbitMQ), the JVM, Redis, Go (NATS), Python
ADDRESS_IN_USE = re.compile(r"eaddrinuse|address already in use", re.IGNORECASE)
SAME_PORT_WAIT_S = 10.0  # a dead service's port still held a moment (its children closing) is waited for this long


def _port_taken(svc: Service) -> bool:
    """Whether the service's logs (its log, its nodes' logs, the log files beside it) say a listener's port was in
    use."""
    logs = {Path(svc.log), *map(Path, (svc.extra or {}).get("logs") or []), *Path(svc.log).parent.glob("*.log")}
    for path in logs:
        try:
            if ADDRESS_IN_USE.search(path.read_text(errors="replace")):
                return True
        except OSError:
            continue
    return False


def _same_ports(svc: Service):
    """A port allocator that hands out a dead service's ports again, in the order it first took them (its
    port, then the ports in its extra settings), each one once nothing else has it (waited for up to
    SAME_PORT_WAIT_S); one still held then is replaced by a free one in its place, so the others keep theirs
    (skipping it shifted them: a restarted RabbitMQ took its old stream port for AMQP). Then free ones."""
    earlier = [svc.port, *(v for k, v in (svc.extra or {}).items() if k.endswith("port") and isinstance(v, int))]

    def next_port() -> int:
        if not earlier:
            return free_port()
        port = earlier.pop(0)
        deadline = time.monotonic() + SAME_PORT_WAIT_S
        while not port_free(port):
            if time.monotonic() >= deadline:
                return free_port()
            time.sleep(0.2)
        return port
    return next_port


def _stop_all(svc: Service, graceful: bool = True) -> None:
    """Every process of the service, the last started first."""
    for pid in reversed(svc.pids):
        stop(pid, graceful=graceful)


def cluster_nodes(endpoint: dict) -> list[dict]:
    """A local cluster's nodes as its stack records them now (a node started again has new pids); the endpoint's own
    list where it names no stack (brokerbench.faults' hooks)."""
    stack = endpoint.get("stack")
    if stack:
        return LocalStack(Path(stack["state_dir"])).endpoint(stack["service"])["nodes"]
    return endpoint["nodes"]


def current_endpoint(endpoint: dict) -> dict:
    """The endpoint with its cluster's nodes as the stack records them now (cluster_nodes)."""
    return {**endpoint, "nodes": cluster_nodes(endpoint)}


def node_restarted(endpoint: dict, node: str, pids: list[int]) -> None:
    """Records a node of the endpoint's local cluster started again with `pids` (LocalStack.node_started); in the
    endpoint's own list where it names no stack (cluster_nodes reads that list then)."""
    stack = endpoint.get("stack")
    if stack:
        LocalStack(Path(stack["state_dir"])).node_started(stack["service"], node, pids)
        return
    for entry in endpoint.get("nodes") or ():
        if entry["node"] == node:
            entry["pids"] = list(pids)
