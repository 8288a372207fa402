"""The broker registry: the interface a broker plug-in implements (brokerbench/brokers/<name>/), and the
registry that finds the plug-ins and makes their drivers.

Every layer may ask it what is registered (the run request's validation, the schema, the reports' captions):
it imports nothing of brokerbench. What a plug-in names as "module:attribute" (its driver, cloud provider,
environment description) is imported on first use, so asking the registry imports no broker client.
The plug-in packages themselves live in brokerbench.brokers, whose `__init__` re-exports these names.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Protocol

PLUGIN_PACKAGE = "brokerbench.brokers"  # where plug-ins are found: each package under it with a PLUGIN
Log = Callable[[str], None]


class UnknownBroker(ValueError):
    """A broker name that no plug-in registers and no named target explains."""


# -- the local service -------------------------------------------------------------------------
@dataclass
class Started:
    """A service the local stack started: what it records in its state file and hands to drivers."""

    pids: list[int]  # every process, in start order (the stack stops them last first, each with its group)
    port: int  # the main port: the service counts as running while it answers and every pid lives
    endpoint: dict  # what drivers connect to, in the shape of the broker's targets.<name> object
    version: str
    log: str  # the main log file (the stack shows its last lines when start-up fails)
    extra: dict = field(default_factory=dict)  # worth recording: more ports, settings in force


class LocalService(Protocol):
    """A broker run on 127.0.0.1 by the local stack (brokerbench.local.stack).

    Helpers a service uses: brokerbench.local.processes (spawn a process with its log, HOST,
    port_answers, StackError), brokerbench.local.install (InstallError, install_debian for Debian packages,
    fetch_maven_jars and lib_dir for Maven Central jars, jar_version).

    Optional, for network faults (brokerbench.faults): `proxied_sizes`, the node counts at which its endpoint's
    `proxy` says where a proxy in front of each node goes and how clients reach the nodes through them
    (brokerbench.local.proxies); a broker without it takes no network faults.
    """

    name: str  # its name in the stack: state key, folder under the state folder, `local status` row
    startup_timeout_s: float  # how long after start() ready() may take before start-up counts as failed (per node)

    def installed_version(self) -> str | None:
        """The version `start` would run, or None when it is not installed: the local stack then installs it
        before it starts it (brokerbench.local.install.install_on_first_use); `make setup` installs the quick
        suite's brokers up front, `make setup-all` every one."""

    def install(self, log: Log) -> None:
        """Install what `start` needs. Idempotent and quick when nothing is missing; raises
        brokerbench.local.install.InstallError saying what to do when it cannot.

        Optional, for the first-use progress line ("installing pulsar 4.0.7 (first use, ~234 MB) ..."):
        `install_version()`, the version install() installs, and `download_mb`, about how much it fetches."""

    def start(self, folder: Path, ports: Callable[[], int], settings: dict) -> Started:
        """Start the service's processes (in their own sessions, see processes.spawn) and return at once.

        folder: the service's own folder, with an empty `data/` inside (a broker's data lasts one
        session). ports(): a free 127.0.0.1 port each call. settings: the settings the stack was made
        with (`LocalStack(..., redis_aof=False)`); a service reads its own and ignores the rest.
        Raises brokerbench.local.processes.StackError when it cannot start (e.g. not installed)."""

    def ready(self, started: Started) -> bool:
        """Whether the service serves clients now: a real request (metadata, PING, an admin call),
        not only an open port. The stack polls it until startup_timeout_s (times the nodes of a cluster)."""


# -- the rest of a plug-in -------------------------------------------------------------------------
@dataclass(frozen=True)
class Settings:
    """JSON Schema fragments this broker adds to the run request (brokerbench.schema puts them in place)."""

    target: dict  # targets.<name>: an existing endpoint (an object schema); also a named target's shape
    provision: dict = field(default_factory=dict)  # provision.<name>: what the local stack or cloud is asked for
    client: dict = field(default_factory=dict)  # client.<setting>: the client settings it reads (shared by name)


@dataclass(frozen=True)
class Capabilities:
    """What the broker supports, shown by `brokerbench brokers`; a run asking for a mode not listed is refused."""

    modes: dict[str, str]  # mode (the run request's `modes`) -> what it means on this broker
    partitions: str  # what one of a cell's partitions is on this broker
    persistence: dict[str, str]  # persistence option -> what it means; the first is the default


@dataclass(frozen=True)
class CloudFault:
    """The fault a managed service offers a run in AWS mode (brokerbench.faults kind `reboot`), made through its own
    control-plane call from the worker's side of the cell (brokerbench.worker.cloud_faults)."""

    call: str  # the API call as IAM names it ("kafka:RebootBroker"): what the docs, records and policy say
    does: str  # what the call does to the target, in a few words (validation messages and docs)
    # "module" of its hooks: client() -> boto3 client; leader(client, endpoint, topic) -> node or None;
    # nodes(client, endpoint) -> node names; reboot(client, endpoint, node) -> (request, response);
    # whole(client, endpoint) -> bool (the service serves again on every node)
    hooks: str
    # the targets a fault may name: "leader", "follower", "node" (a node's own name); () takes none (the call acts
    # on the whole broker)
    targets: tuple[str, ...] = ("leader",)


@dataclass(frozen=True)
class CloudQuota:
    """The account's quota a provisioned target counts against (Service Quotas), checked before a run starts in AWS
    (workflow/admission.py) as the EC2 vCPU quota is: what the run's targets take, plus what the account holds now,
    against the quota's value."""

    service_code: str  # Service Quotas' ServiceCode ("kafka")
    name: str  # the quota's name there ("Number of brokers per account"): what a refusal tells to raise
    code: str | None  # its quota code ("L-EDD31C36"); None: looked up by name (ListServiceQuotas)
    unit: str  # what it counts ("brokers", "nodes")
    client: str  # the boto3 service in_use counts with ("kafka")
    need: str  # "module:function" (broker, provision settings) -> int: what one target of the run takes
    in_use: str  # "module:function" (client) -> int: what the account's region holds now


# -- what a cloud provider needs of the deployment: IAM statements by role, and ports ------------------
# Who holds each role in the deployed stack (cdk/stack.py gives it to them): a provider's calls as each one makes
# them (its cloud.py, cloud_faults.py and quota hooks).
ACCESS_ROLES = {
    "provision": "ProvisionTarget: creates the run's target (a retried create finds it again)",
    "check": "CheckTarget: reads the target's state and endpoint until it serves",
    "teardown": "TeardownTarget: finds and deletes the run's target",
    "sweep": "SweepTargets, hourly: lists bb-* resources and deletes those of ended runs",
    "clients": "the workers, RecordTargetsReady and RecordCellFailed: the brokers' clients (auth, topics)",
    "faults": "RunCell and the EC2 workers: a cell's fault of kind reboot on its run's own target",
    "admission": "the API and the schedules' trigger: the account's quota, counted before a run starts",
}
# What a resource pattern, a condition or an environment value may name besides its literal text, filled in by the
# CDK app: the deployment's pseudo parameters and what the stack's network gives the brokers. A provider may also
# name the shared resources it declares (CloudAccess.shared), each by its own placeholder.
ACCESS_PLACEHOLDERS = {
    "partition": "the AWS partition (aws, aws-cn...)",
    "region": "the stack's region",
    "account": "the stack's account id",
    "vpc": "the id of the VPC the brokers are created in",
    "private_subnets": "the ids of the brokers' private subnets, comma-separated (one per AZ)",
    "brokers_security_group": "the id of the brokers' security group (it lets the workers in on the declared ports)",
}
ENV_NAME = re.compile(r"BROKERBENCH_[A-Z0-9_]+")  # what a provider's environment variable is called
# A grant's `tagged`: the condition that holds it to what runs create, tagged brokerbench:run (targets.RUN_TAG)
# in the create request ("request") or on the resource acted on ("resource").
ACCESS_TAGGED = ("request", "resource")
PORT_PROTOCOLS = ("tcp", "udp")
ANY_RESOURCE = "*"  # a grant's resource for actions IAM gives no resource-level permissions


@dataclass(frozen=True)
class Grant:
    """One IAM statement a provider's calls need, in IAM's own terms: plain data the CDK app turns into policy."""

    role: str  # who needs it: a key of ACCESS_ROLES
    actions: tuple[str, ...]  # as IAM spells them ("kafka:CreateClusterV2")
    resources: tuple[str, ...]  # names of the provider's resource patterns (CloudAccess.resources), or "*"
    reason: str = ""  # why its wildcards (in an action or a resource) are acceptable: required when it has one
    tagged: str | None = None  # a key of ACCESS_TAGGED, or None
    condition: dict = field(default_factory=dict)  # any further IAM condition block; strings may name placeholders


@dataclass(frozen=True)
class Port:
    """A port range the workers reach the provider's targets on: the brokers' security group lets them in."""

    first: int
    last: int
    description: str  # what listens there ("Kafka (MSK)"): the ingress rule says "<description> from the workers"
    protocol: str = "tcp"


@dataclass(frozen=True)
class SubnetGroup:
    """An ElastiCache subnet group of the brokers' private subnets, made once by the stack for a provider; its
    placeholder is the group's name."""

    placeholder: str  # how the provider's patterns and environment name it ("subnet_group")
    id: str  # its construct id in the stack ("RedisSubnets"): its logical id derives from it, so keep it stable
    description: str


@dataclass(frozen=True)
class GeneratedSecret:
    """A Secrets Manager secret whose value the stack generates (letters and digits, and the punctuation unless
    excluded), made once for a provider; its placeholder is the secret's ARN."""

    placeholder: str  # how the provider's patterns and environment name it ("auth_secret")
    id: str  # its construct id in the stack ("RedisAuthToken"): its logical id derives from it, so keep it stable
    description: str
    length: int
    exclude_punctuation: bool
    why_not_rotated: str  # why no automatic rotation: the deployment's checks (cdk-nag AwsSolutions-SMG4) ask


SharedResource = SubnetGroup | GeneratedSecret


@dataclass(frozen=True)
class CloudAccess:
    """What a cloud provider needs of the deployment, declared beside its cloud.py: the ARN patterns of what it
    touches (by name, with ACCESS_PLACEHOLDERS in braces), its IAM statements by role, its ports, the shared
    resources the stack makes for it, and the environment its functions are told (variable -> value, with the same
    placeholders). The CDK app (cdk/constructs/broker_targets.py, network.py) makes, grants and sets exactly these,
    so adding a provider is adding its declaration; nothing here imports the CDK (the Lambda code must not need it)."""

    resources: dict[str, str]  # name -> ARN pattern ("arn:{partition}:kafka:{region}:{account}:cluster/bb-*/*")
    grants: tuple[Grant, ...]
    ports: tuple[Port, ...] = ()
    shared: tuple[SharedResource, ...] = ()  # made once by the stack, named by their placeholders
    environment: dict[str, str] = field(default_factory=dict)  # BROKERBENCH_* -> value ("{private_subnets}")

    def __post_init__(self) -> None:
        for i, made in enumerate(self.shared):
            _check_shared(f"shared[{i}]", made, self.shared[:i])
        known = self.placeholders()
        for name, pattern in self.resources.items():
            unknown = _placeholders(pattern) - set(known)
            if unknown:
                raise ValueError(f"resources.{name}: {pattern!r} names {', '.join(sorted(unknown))}, not among the "
                                 f"placeholders {', '.join(known)}")
        for i, grant in enumerate(self.grants):
            _check_grant(f"grants[{i}]", grant, self.resources, known)
        for i, port in enumerate(self.ports):
            if not (0 < port.first <= port.last <= 65535):
                raise ValueError(f"ports[{i}]: {port.first}-{port.last} is not a port range within 1-65535")
            if port.protocol not in PORT_PROTOCOLS:
                raise ValueError(f"ports[{i}].protocol: {port.protocol!r} is not one of {', '.join(PORT_PROTOCOLS)}")
            if not port.description:
                raise ValueError(f"ports[{i}].description: say what listens on {port.first}-{port.last}")
        for name, value in self.environment.items():
            if not ENV_NAME.fullmatch(name):
                raise ValueError(f"environment.{name}: not a BROKERBENCH_* variable name (capitals, digits, _)")
            unknown = _placeholders(value) - set(known)
            if not value or unknown:
                raise ValueError(f"environment.{name}: {value!r} " + (
                    f"names {', '.join(sorted(unknown))}, not among the placeholders {', '.join(known)}" if unknown
                    else "is empty: name what the stack sets it to"))

    def placeholders(self) -> tuple[str, ...]:
        """What its patterns and environment may name: the stack's (ACCESS_PLACEHOLDERS) and its shared resources'."""
        return (*ACCESS_PLACEHOLDERS, *(made.placeholder for made in self.shared))

    def granted(self, role: str) -> tuple[Grant, ...]:
        """Its grants for `role` (a key of ACCESS_ROLES), in declaration order."""
        if role not in ACCESS_ROLES:
            raise ValueError(f"role {role!r} is not one of {', '.join(ACCESS_ROLES)}")
        return tuple(g for g in self.grants if g.role == role)


def _check_shared(where: str, made, before: tuple) -> None:
    if not isinstance(made, (SubnetGroup, GeneratedSecret)):
        raise ValueError(f"{where}: {made!r} is not a SubnetGroup or a GeneratedSecret")
    if not re.fullmatch(r"[a-z][a-z0-9_]*", made.placeholder) or made.placeholder in ACCESS_PLACEHOLDERS:
        raise ValueError(f"{where}.placeholder: {made.placeholder!r} must be lower_case and not one of the stack's "
                         f"({', '.join(ACCESS_PLACEHOLDERS)})")
    if any(made.placeholder == other.placeholder for other in before):
        raise ValueError(f"{where}.placeholder: {made.placeholder!r} is declared twice")
    if not re.fullmatch(r"[A-Z][A-Za-z0-9]*", made.id) or any(made.id == other.id for other in before):
        raise ValueError(f"{where}.id: {made.id!r} must be a CamelCase construct id, once in the declaration")
    if not made.description:
        raise ValueError(f"{where}.description: say what it is for")
    if isinstance(made, GeneratedSecret):
        if not (16 <= made.length <= 4096):
            raise ValueError(f"{where}.length: {made.length} is not within 16-4096 characters")
        if not made.why_not_rotated:
            raise ValueError(f"{where}.why_not_rotated: say why the secret is not rotated automatically")


def _placeholders(value) -> set[str]:
    """The {names} in a pattern, or in every string of a condition block."""
    if isinstance(value, dict):
        return set().union(*(_placeholders(v) for v in value.values()), set())
    if isinstance(value, (list, tuple)):
        return set().union(*(_placeholders(v) for v in value), set())
    return set(re.findall(r"\{([^}]*)\}", value)) if isinstance(value, str) else set()


def _check_grant(where: str, grant: Grant, resources: dict[str, str], known: tuple[str, ...]) -> None:
    if grant.role not in ACCESS_ROLES:
        raise ValueError(f"{where}.role: {grant.role!r} is not one of {', '.join(ACCESS_ROLES)}")
    if not grant.actions or any(not re.fullmatch(r"[a-z0-9-]+:[A-Za-z0-9*]+", a) for a in grant.actions):
        raise ValueError(f"{where}.actions: {list(grant.actions)} are not IAM actions (service:Action)")
    if not grant.resources:
        raise ValueError(f"{where}.resources: name at least one resource pattern, or {ANY_RESOURCE!r}")
    unknown = [r for r in grant.resources if r != ANY_RESOURCE and r not in resources]
    if unknown:
        raise ValueError(f"{where}.resources: {', '.join(unknown)} not among the declared resources "
                         f"({', '.join(resources)}) or {ANY_RESOURCE!r}")
    if grant.tagged is not None and grant.tagged not in ACCESS_TAGGED:
        raise ValueError(f"{where}.tagged: {grant.tagged!r} is not one of {', '.join(ACCESS_TAGGED)}")
    unknown = _placeholders(grant.condition) - set(known)
    if unknown:
        raise ValueError(f"{where}.condition names {', '.join(sorted(unknown))}, not among the placeholders")
    patterns = [ANY_RESOURCE if r == ANY_RESOURCE else resources[r] for r in grant.resources]
    if any("*" in text for text in (*grant.actions, *patterns)) and not grant.reason:
        raise ValueError(f"{where}.reason: {list(grant.actions)} on {list(grant.resources)} has a wildcard; "
                         "say why it is acceptable")


@dataclass(frozen=True)
class Cloud:
    """The managed service a run provisions in AWS mode."""

    service: str  # its name, e.g. "Amazon MSK"
    factory: str  # "module:function" () -> a TargetProvider (brokerbench.targets), configured from the environment
    # What a provisioned target costs (brokerbench.cost adds it to a run's estimate): "module:function"
    # (broker, provision settings, life_s) -> (cost items, notes), at the list prices of a table beside it; None:
    # the target is not priced. creation_s: about how long it takes to create before it serves, billed all the same.
    prices: str | None = None
    creation_s: float = 0.0
    fault: CloudFault | None = None  # the fault the service offers (kind reboot); None: no fault in AWS
    quota: CloudQuota | None = None  # the account quota its targets count against; None: none checked
    # what the deployment must allow its calls (IAM by role) and its clients (ports); None: the stack grants nothing
    access: CloudAccess | None = None


@dataclass(frozen=True)
class Plugin:
    name: str  # the broker's name in run requests ("kafka", "redis-streams")
    description: str
    family: str  # the wire protocol; a named target's `driver` field names a family ("kafka", "redis")
    driver: str  # "module:Class" of its Driver, constructed as Class(endpoint, client)
    settings: Settings
    capabilities: Capabilities
    environment: str  # "module:function" (endpoint, client) -> dict: what the run's settings mean on it
    caption: str  # "module:function" (mode, client, recorded) -> str: one line for report tables
    local: LocalService | None = None
    # "module:function" (client, recorded) -> dict: what an acknowledgement waits for with the settings in force
    # (see `durability`); None: the plug-in does not state it, and reports say so.
    durability: str | None = None
    cloud: Cloud | None = None
    libraries: tuple[str, ...] = ()
    # "module" of its local cluster's fault hooks (brokerbench.faults): leader(endpoint, topic) -> node name or None,
    # asked of the broker itself, and start_node(endpoint, node) -> pids; None: no cluster faults can be injected into
    cluster: str | None = None  # client library distributions whose versions every run records

    def new_driver(self, endpoint: dict, client: dict):
        return load(self.driver)(endpoint, client)

    def settings_in_force(self, endpoint: dict, client: dict) -> dict:
        """TargetsReady's `settings`: the acks in force, what each mode means, persistence (may ask the broker)."""
        return load(self.environment)(endpoint, client)

    def describe_mode(self, mode: str, client: dict, recorded: dict | None) -> str:
        """What `mode` means with these client settings; `recorded` is TargetsReady's target, when stored."""
        return load(self.caption)(mode, client, recorded or {})

    def state_durability(self, client: dict, recorded: dict | None) -> dict:
        """What an acknowledgement waits for on this row: a disk sync, replicas, or memory only (see `durability`)."""
        if self.durability is None:
            return dict(NOT_STATED)
        return durability(load(self.durability)(client, recorded or {}))

    def cloud_targets(self):
        """The TargetProvider for AWS mode; UnknownBroker when this broker has no cloud provider."""
        if self.cloud is None:
            raise UnknownBroker(f"{self.name} has no cloud provider: give its endpoint in targets.{self.name}")
        return load(self.cloud.factory)()

    def price_target(self, broker: str, settings: dict, life_s: float) -> tuple[list[dict], list[str]]:
        """What its provisioned target costs over `life_s` with these provision settings: cost items and notes."""
        return load(self.cloud.prices)(broker, settings, life_s)

    def where(self) -> list[str]:
        """Where it runs: local, the cloud service, and always an existing (external) endpoint."""
        return [*(["local"] if self.local else []), *([f"cloud: {self.cloud.service}"] if self.cloud else []),
                "external"]


# -- matched durability ------------------------------------------------------------------------
# What a plug-in's durability function returns, and the statement of one that has none. fsync: True when the
# acknowledgement waits for a disk sync of the message, "interval" when the broker syncs on a timer (the
# acknowledgement does not wait for it), False when nothing syncs it, None when unknown. replicas: the other copies
# the acknowledgement waits for (0: only the node that answered; None: unknown). memory_only: True when the
# acknowledged message is on no disk at all (no write, or a write that is never synced and not replicated).
DURABILITY_FIELDS = ("fsync", "replicas", "memory_only", "text")
# failover (optional in a plug-in's statement): what the broker's own documentation promises for an acknowledged
# message when the node that acknowledged it fails, at these settings: promised True (it survives the loss of one
# node), False (nothing is promised: a loss is an expected finding, not a defect), None (not stated).
FAILOVER_NOT_STATED = {"promised": None, "text": "not stated (the broker's plug-in does not say what its "
                                                 "documentation promises when a node fails)"}
NOT_STATED = {"fsync": None, "replicas": None, "memory_only": None,
              "text": "not stated (the broker's plug-in does not describe its durability)",
              "failover": FAILOVER_NOT_STATED}


def durability(statement: dict) -> dict:
    """A plug-in's durability statement, checked: every field present and of its kind (ValueError names the field)."""
    missing = [name for name in DURABILITY_FIELDS if name not in statement]
    if missing:
        raise ValueError(f"durability statement lacks {', '.join(missing)}")
    if statement["fsync"] not in (True, False, "interval", None):
        raise ValueError(f"durability.fsync: {statement['fsync']!r} is not true, false, \"interval\" or null")
    replicas = statement["replicas"]
    if replicas is not None and (isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0):
        raise ValueError(f"durability.replicas: {replicas!r} is not a count of replicas (0 or more) or null")
    if statement["memory_only"] not in (True, False, None):
        raise ValueError(f"durability.memory_only: {statement['memory_only']!r} is not true, false or null")
    if not isinstance(statement["text"], str) or not statement["text"]:
        raise ValueError("durability.text: a sentence is required")
    failover = statement.get("failover") or FAILOVER_NOT_STATED
    if failover.get("promised") not in (True, False, None):
        raise ValueError(f"durability.failover.promised: {failover.get('promised')!r} is not true, false or null")
    if not isinstance(failover.get("text"), str) or not failover["text"]:
        raise ValueError("durability.failover.text: a sentence is required (what the documentation promises)")
    return {**{name: statement[name] for name in DURABILITY_FIELDS},
            "failover": {"promised": failover["promised"], "text": failover["text"]}}


def durability_label(statement: dict) -> str:
    """The statement in a few words for a table: "fsync per message, 2 replicas", "memory only"..."""
    if statement.get("memory_only"):
        return "memory only"
    fsync = {True: "fsync per message", "interval": "fsync on a timer", False: "no fsync", None: "fsync unknown"}
    replicas = statement.get("replicas")
    copies = ("replicas unknown" if replicas is None else "no replicas" if replicas == 0
              else f"{replicas} replica{'s' if replicas > 1 else ''}")
    if statement.get("fsync") is None and replicas is None and statement.get("memory_only") is None:
        return "not stated"
    return f"{fsync[statement.get('fsync')]}, {copies}"


def load(reference: str):
    """The attribute a "module:attribute" reference names."""
    module, _, attribute = reference.partition(":")
    return getattr(importlib.import_module(module), attribute)


# -- the registry ------------------------------------------------------------------------------
@cache
def plugins() -> dict[str, Plugin]:
    """Every registered broker by name, in name order: each package under brokerbench/brokers with a PLUGIN."""
    found: dict[str, Plugin] = {}
    package = importlib.import_module(PLUGIN_PACKAGE)
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        if not info.ispkg:
            continue
        plugin = getattr(importlib.import_module(f"{PLUGIN_PACKAGE}.{info.name}"), "PLUGIN", None)
        if plugin is None:
            continue
        if plugin.name in found:
            raise RuntimeError(f"two broker plug-ins are named {plugin.name!r}")
        found[plugin.name] = plugin
    return dict(sorted(found.items()))


def plugin(name: str) -> Plugin:
    """The registered broker `name`."""
    try:
        return plugins()[name]
    except KeyError:
        raise UnknownBroker(f"unknown broker {name!r}; registered: {', '.join(plugins())}") from None


def families() -> dict[str, Plugin]:
    """The plug-in that serves named targets of each family: the one named like the family, else the first."""
    out: dict[str, Plugin] = {}
    for candidate in sorted(plugins().values(), key=lambda p: (p.name != p.family, p.name)):
        out.setdefault(candidate.family, candidate)
    return dict(sorted(out.items()))


def for_target(name: str, endpoint: dict | None = None) -> Plugin:
    """The plug-in serving the row `name`: a registered broker, or a named target (its endpoint's `driver`)."""
    if name in plugins():
        return plugins()[name]
    family = (endpoint or {}).get("driver")
    if family in families():
        return families()[family]
    if family is None:
        raise UnknownBroker(f"unknown broker {name!r}; registered: {', '.join(plugins())}, or a target in "
                            f"targets with a driver ({', '.join(families())})")
    raise UnknownBroker(f"target {name!r} names driver {family!r}; known: {', '.join(families())}")


def local_services() -> dict[str, tuple[str, LocalService]]:
    """Each registered local service by its stack name, with the broker it serves."""
    return {p.local.name: (p.name, p.local) for p in plugins().values() if p.local is not None}


def get_driver(broker: str, endpoint: dict, client: dict):
    """The driver (a brokerbench.drivers.Driver) for `broker` (a registered broker, or a named target whose endpoint names its `driver`),
    connected to `endpoint` with the run's client settings."""
    return for_target(broker, endpoint).new_driver(endpoint, client)


def driver_modules() -> list[str]:
    """The module of every registered broker's driver (what a worker's fork server imports before it forks the
    cell's processes)."""
    return [p.driver.partition(":")[0] for p in plugins().values()]
