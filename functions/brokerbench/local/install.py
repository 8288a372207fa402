"""Idempotent install of the local stack's parts: Maven jars, the DynamoDB Local launcher, redis-server,
and the native send loop (built against librdkafka-dev's header)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from ..paths import PACKAGE_DIR

REPO_DIR = PACKAGE_DIR.parent.parent
CACHE_DIR = Path(os.environ.get("BROKERBENCH_CACHE", REPO_DIR / ".cache"))
JARS_DIR = CACHE_DIR / "jars"
POMS_DIR = PACKAGE_DIR / "local" / "jars"
LAUNCHER_SOURCE = PACKAGE_DIR / "local" / "java" / "LoopbackDynamoDB.java"
COMPONENTS = ("kafka", "dynamodb-local")


class InstallError(RuntimeError):
    pass


def lib_dir(component: str) -> Path:
    return JARS_DIR / component / "lib"


def _run(cmd: list[str], cwd: Path | None = None) -> None:
    result = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        raise InstallError(f"{' '.join(cmd)} failed:\n{result.stdout[-2000:]}{result.stderr[-2000:]}")


# Command -> the Debian package that provides it.
DEBIAN_PACKAGES = {"redis-server": "redis-server", "redis-benchmark": "redis-tools", "mvn": "maven",
                   "java": "openjdk-17-jdk-headless", "javac": "openjdk-17-jdk-headless", "node": "nodejs", "npm": "npm",
                   "gcc": "gcc", "chromium": "chromium"}
# Header -> the Debian package that provides it (for the native send loop's build).
DEBIAN_HEADERS = {"/usr/include/librdkafka/rdkafka.h": "librdkafka-dev"}
NATIVE_SOURCE = PACKAGE_DIR / "native" / "sendloop.c"
# Only the browser test needs chromium; `make run` does not install it.
RUN_COMMANDS = tuple(c for c in DEBIAN_PACKAGES if c != "chromium")


def install_commands(commands=RUN_COMMANDS, log=print) -> None:
    """apt-get install the packages of the missing commands (as root), else say what to install."""
    missing = sorted({DEBIAN_PACKAGES[c] for c in commands if not shutil.which(c)} |
                     {package for header, package in DEBIAN_HEADERS.items() if not Path(header).is_file()})
    if not missing:
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise InstallError(f"missing: {', '.join(missing)}; install them (sudo apt-get install {' '.join(missing)}) "
                           "and run make setup again")
    log(f"installing {', '.join(missing)} from Debian ...")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing]):
        result = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if result.returncode != 0:
            raise InstallError(f"{' '.join(cmd)} failed:\n{result.stderr[-2000:]}")


def install_jars(log=print) -> None:
    """Copy each component's runtime jars from Maven Central, once per pom version."""
    for component in COMPONENTS:
        folder = JARS_DIR / component
        pom = (POMS_DIR / f"{component}.pom.xml").read_text()
        stamp = folder / "pom.xml"
        if lib_dir(component).is_dir() and stamp.is_file() and stamp.read_text() == pom:
            continue
        log(f"fetching {component} jars from Maven Central ...")
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        (folder / "build.pom.xml").write_text(pom)
        _run(["mvn", "-q", "-B", "-f", "build.pom.xml", "dependency:copy-dependencies",
              "-DoutputDirectory=lib", "-DincludeScope=runtime"], cwd=folder)
        stamp.write_text(pom)  # last, so an interrupted fetch is fetched again next time
    classes = JARS_DIR / "dynamodb-local" / "classes"
    launcher = classes / "LoopbackDynamoDB.class"
    if not launcher.is_file() or launcher.stat().st_mtime < LAUNCHER_SOURCE.stat().st_mtime:
        classes.mkdir(exist_ok=True)
        _run(["javac", "-d", str(classes), "-cp", f"{lib_dir('dynamodb-local')}/*", str(LAUNCHER_SOURCE)])


def build_native(log=print) -> None:
    """Build the native send loop in place when its source is newer than the built module."""
    built = sorted(NATIVE_SOURCE.parent.glob("_sendloop*.so"))
    if built and built[0].stat().st_mtime >= NATIVE_SOURCE.stat().st_mtime:
        return
    log("building the native send loop ...")
    _run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=REPO_DIR)
    if not list(NATIVE_SOURCE.parent.glob("_sendloop*.so")):
        raise InstallError("the native send loop did not build (setup.py build_ext printed no error)")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        install_commands((*RUN_COMMANDS, "chromium") if "--with-browser" in args else RUN_COMMANDS)
        install_jars()
        build_native()
    except InstallError as exc:
        print(f"brokerbench setup: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
