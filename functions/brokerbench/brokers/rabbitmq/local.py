"""RabbitMQ on the local stack: Debian's rabbitmq-server (3.10) started as our own node, not the system service.

Two processes, both ours and in the service's folder: an epmd (the Erlang port mapper) on its own port bound to
127.0.0.1, then the node (beam.smp: rabbitmq-server execs the VM, so the pid the stack records is the broker's
own) with its node name, data, logs, config and enabled plug-ins under the folder. Every listener is on 127.0.0.1:
AMQP, the stream protocol (rabbitmq_stream), the management API (rabbitmq_management: a quorum queue's count of
what it took in, rabbitmq.management), and Erlang distribution on its own port. epmd also listens on ::1 whatever
it is told (it always adds the loopback addresses), never beyond.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path

from ...local.install import install_debian
from ...local.processes import HOST, StackError, port_answers, spawn
from .. import Started
from . import STATS_INTERVAL_MS

DEBIAN_PACKAGES = {"rabbitmq-server": "rabbitmq-server"}  # Erlang comes with it
LIB = Path("/usr/lib/rabbitmq")
SERVER = LIB / "bin" / "rabbitmq-server"  # the real script: /usr/sbin's wrapper would run it as user rabbitmq
READY_QUEUE = "bb-ready"


def config(amqp_port: int, stream_port: int, management_port: int) -> str:
    """rabbitmq.conf: the AMQP, stream and management listeners on 127.0.0.1 only, the stream listener advertising
    itself there (a stream client connects where the broker says the stream's leader is), statistics collected
    every STATS_INTERVAL_MS (a quorum queue's count comes from them: rabbitmq.management)."""
    return "\n".join([
        f"listeners.tcp.1 = {HOST}:{amqp_port}",
        f"stream.listeners.tcp.1 = {HOST}:{stream_port}",
        f"stream.advertised_host = {HOST}",
        f"stream.advertised_port = {stream_port}",
        f"management.tcp.ip = {HOST}",
        f"management.tcp.port = {management_port}",
        f"collect_statistics_interval = {STATS_INTERVAL_MS}",
        "management.sample_retention_policies.global.minute = 1",
        "management.sample_retention_policies.global.hour = 60",
        "management.sample_retention_policies.global.day = 1200",
        "management.sample_retention_policies.basic.minute = 1",
        "management.sample_retention_policies.basic.hour = 60",
        "management.sample_retention_policies.detailed.10 = 1",
        "", ])


def environment(folder: Path, ports: dict[str, int]) -> dict[str, str]:
    """The node's environment: its name, ports and folders; nothing from /etc/rabbitmq (an empty env file)."""
    return {
        "PATH": "/usr/bin:/bin:/usr/sbin:/sbin",
        "HOME": str(folder),  # the Erlang cookie is written there
        "RABBITMQ_CONF_ENV_FILE": str(folder / "rabbitmq-env.conf"),
        "RABBITMQ_NODENAME": f"bb{ports['amqp_port']}@localhost",
        "RABBITMQ_NODE_IP_ADDRESS": HOST,
        "RABBITMQ_NODE_PORT": str(ports["amqp_port"]),
        "RABBITMQ_DIST_PORT": str(ports["dist_port"]),
        "ERL_EPMD_ADDRESS": HOST,
        "ERL_EPMD_PORT": str(ports["epmd_port"]),
        "RABBITMQ_BASE": str(folder),
        "RABBITMQ_MNESIA_BASE": str(folder / "data"),
        "RABBITMQ_LOG_BASE": str(folder),
        "RABBITMQ_LOGS": "-",  # to standard output: the stack's log file
        "RABBITMQ_CONFIG_FILE": str(folder / "rabbitmq.conf"),
        "RABBITMQ_ENABLED_PLUGINS_FILE": str(folder / "enabled_plugins"),
        # The VM itself replaces the script (its pid is the broker's), with no shell and distribution on loopback.
        "RABBITMQ_ALLOW_INPUT": "true",
        "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": f"-noinput -kernel inet_dist_use_interface {{{HOST.replace('.', ',')}}}",
    }


class RabbitMQService:
    name = "rabbitmq"
    startup_timeout_s = 90.0  # ready in about 5 s on an idle two-core machine
    download_mb = 40  # rabbitmq-server with the Erlang packages it pulls in

    def installed_version(self) -> str | None:
        if not SERVER.is_file():
            return None
        for folder in (LIB / "lib").glob("rabbitmq_server-*"):
            if match := re.fullmatch(r"rabbitmq_server-(\d[\w.-]*)", folder.name):
                return match.group(1)
        return "unknown"

    def install_version(self) -> str | None:
        return "3.10 (Debian)"

    def install(self, log) -> None:
        install_debian(DEBIAN_PACKAGES, log)

    def start(self, folder: Path, ports: Callable[[], int], settings: dict) -> Started:
        if not SERVER.is_file() or not shutil.which("epmd"):
            raise StackError("rabbitmq-server is not installed: run `make setup-all` (it installs Debian's "
                             "rabbitmq-server)")
        port = ports()
        extra = {"stream_port": ports(), "dist_port": ports(), "epmd_port": ports(), "management_port": ports()}
        (folder / "rabbitmq.conf").write_text(config(port, extra["stream_port"], extra["management_port"]))
        (folder / "enabled_plugins").write_text("[rabbitmq_stream,rabbitmq_management].\n")
        (folder / "rabbitmq-env.conf").write_text("")
        env = environment(folder, {"amqp_port": port, **extra})
        log = folder / "rabbitmq.log"
        epmd = spawn(["epmd", "-port", str(extra["epmd_port"]), "-address", HOST], folder, folder / "epmd.log", env)
        server = spawn([str(SERVER)], folder, log, env)
        version = self.installed_version() or "unknown"
        endpoint = {"host": HOST, "amqp_port": port, "stream_port": extra["stream_port"], "version": version,
                    "management_url": f"http://{HOST}:{extra['management_port']}"}
        return Started([epmd, server], port, endpoint, version, str(log),
                       {**extra, "node": env["RABBITMQ_NODENAME"]})

    def ready(self, started: Started) -> bool:
        """An AMQP client connects and declares a quorum queue and a stream (both need the node's Raft and stream
        coordinators up), and the stream listener answers."""
        if not port_answers(started.endpoint["stream_port"]):
            return False
        from .amqp import declare_ready  # the client library loads only when a broker is actually started

        return declare_ready(started.endpoint, READY_QUEUE)


SERVICE = RabbitMQService()  # one node serves both rows: the stack starts it once for either or both
