"""DynamoDB Local, the event store, as a service of the local stack (its data outlives `local down`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..registry import Started
from .install import JARS_DIR, POMS_DIR, install_dynamodb_local, jar_version, lib_dir, pom_version
from .processes import HOST, StackError, port_answers, spawn

EVENTS_TABLE = "brokerbench-events"


class DynamoDBLocal:
    name = "dynamodb"
    startup_timeout_s = 120.0  # a hang, not a slow host (local/stack.py STARTUP_CAP_S)
    download_mb = 51  # its jars and sqlite4java's native library (the lib folder install fills)

    def install_version(self) -> str | None:
        return pom_version((POMS_DIR / "dynamodb-local.pom.xml").read_text(), "DynamoDBLocal")

    def installed_version(self) -> str | None:
        return jar_version("dynamodb-local", "DynamoDBLocal")

    def install(self, log) -> None:
        install_dynamodb_local(log)

    def start(self, folder: Path, ports: Callable[[], int], settings: dict) -> Started:
        lib = lib_dir("dynamodb-local")
        classes = JARS_DIR / "dynamodb-local" / "classes"
        if not (classes / "LoopbackDynamoDB.class").is_file():
            raise StackError("DynamoDB Local is not installed: run `make setup`")
        port = ports()
        cmd = ["java", "-Xmx512m", f"-Djava.library.path={lib}", "-cp", f"{classes}:{lib}/*", "LoopbackDynamoDB",
               "-port", str(port), "-sharedDb", "-dbPath", str(folder / "data"), "-disableTelemetry"]
        log = folder / "dynamodb.log"
        return Started([spawn(cmd, folder, log)], port, {"endpoint_url": f"http://{HOST}:{port}", "table": EVENTS_TABLE},
                       self.installed_version() or "unknown", str(log))

    def ready(self, started: Started) -> bool:
        return port_answers(started.port)
