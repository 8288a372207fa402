"""Idempotent install of the local stack's parts (`make setup`): the tools, each registered broker's local
service, DynamoDB Local and its launcher, and the native send loop (built against librdkafka-dev's header).
The tests' own tools come with `--with-browser` (`make test`): chromium, and Toxiproxy (a TCP proxy that adds
a known latency: the tests' independent truth for latency figures), built from the Go module proxy.

Also the helpers a broker's local service installs with: Debian packages, Maven Central jars.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from ..brokers import plugins
from ..paths import PACKAGE_DIR

REPO_DIR = PACKAGE_DIR.parent.parent
CACHE_DIR = Path(os.environ.get("BROKERBENCH_CACHE", REPO_DIR / ".cache"))
JARS_DIR = CACHE_DIR / "jars"
BIN_DIR = CACHE_DIR / "bin"
POMS_DIR = PACKAGE_DIR / "local" / "jars"
LAUNCHER_SOURCE = PACKAGE_DIR / "local" / "java" / "LoopbackDynamoDB.java"


class InstallError(RuntimeError):
    pass


def lib_dir(component: str) -> Path:
    return JARS_DIR / component / "lib"


def jar_version(component: str, prefix: str) -> str | None:
    """The version in the name of the component's `prefix-<version>.jar`, None when it is not installed."""
    for jar in lib_dir(component).glob(f"{prefix}-*.jar"):
        return jar.stem[len(prefix) + 1:]
    return None


def _run(cmd: list[str], cwd: Path | None = None) -> None:
    result = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        raise InstallError(f"{' '.join(cmd)} failed:\n{result.stdout[-2000:]}{result.stderr[-2000:]}")


# Command -> the Debian package that provides it (the tools every part needs; brokers name their own).
DEBIAN_PACKAGES = {"mvn": "maven", "java": "openjdk-17-jdk-headless", "javac": "openjdk-17-jdk-headless",
                   "node": "nodejs", "npm": "npm", "gcc": "gcc", "chromium": "chromium", "go": "golang-go"}
# Header -> the Debian package that provides it (for the native send loop's build).
DEBIAN_HEADERS = {"/usr/include/librdkafka/rdkafka.h": "librdkafka-dev"}
NATIVE_SOURCE = PACKAGE_DIR / "native" / "sendloop.c"
# Only the tests need chromium (the browser test) and go (to build Toxiproxy); `make run` installs neither.
TEST_COMMANDS = ("chromium", "go")
RUN_COMMANDS = tuple(c for c in DEBIAN_PACKAGES if c not in TEST_COMMANDS)
TOXIPROXY_MODULE = "github.com/Shopify/toxiproxy/v2/cmd/server"
TOXIPROXY_VERSION = "2.5.0"


def install_debian(packages: dict[str, str], log=print, headers: dict[str, str] | None = None) -> None:
    """apt-get install the packages of the missing commands (and headers) as root, else say what to install."""
    missing = sorted({package for command, package in packages.items() if not shutil.which(command)} |
                     {package for header, package in (headers or {}).items() if not Path(header).is_file()})
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


def install_commands(commands=RUN_COMMANDS, log=print) -> None:
    """The tools themselves (and the native send loop's header)."""
    install_debian({command: DEBIAN_PACKAGES[command] for command in commands}, log, DEBIAN_HEADERS)


def fetch_maven_jars(component: str, pom: str, log=print, maven_settings: Path | None = None) -> Path:
    """Copy the runtime jars of `pom` (a pom.xml's text) from Maven Central into lib_dir(component), once per
    pom text. maven_settings: a settings.xml (e.g. a mirror of every repository to Maven Central)."""
    folder = JARS_DIR / component
    stamp = folder / "pom.xml"
    if lib_dir(component).is_dir() and stamp.is_file() and stamp.read_text() == pom:
        return lib_dir(component)
    log(f"fetching {component} jars from Maven Central ...")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    (folder / "build.pom.xml").write_text(pom)
    _run(["mvn", "-q", "-B", *(["-s", str(maven_settings)] if maven_settings else []), "-f", "build.pom.xml",
          "dependency:copy-dependencies", "-DoutputDirectory=lib", "-DincludeScope=runtime"], cwd=folder)
    stamp.write_text(pom)  # last, so an interrupted fetch is fetched again next time
    return lib_dir(component)


def install_dynamodb_local(log=print) -> None:
    """DynamoDB Local (the event store) and its loopback launcher."""
    fetch_maven_jars("dynamodb-local", (POMS_DIR / "dynamodb-local.pom.xml").read_text(), log)
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


def toxiproxy_path() -> Path:
    """Toxiproxy's server, as `go install` names it."""
    return BIN_DIR / "server"


def toxiproxy_version() -> str | None:
    """The installed Toxiproxy's module version (`go version -m`: a `go install` build prints "git" for
    `-version`), None when it is not installed."""
    if not toxiproxy_path().is_file() or not shutil.which("go"):
        return None
    result = subprocess.run(["go", "version", "-m", str(toxiproxy_path())], capture_output=True, text=True)
    for line in result.stdout.splitlines():
        fields = line.split()
        if fields[:2] == ["mod", "github.com/Shopify/toxiproxy/v2"] and len(fields) > 2:
            return fields[2].removeprefix("v")
    return None


def install_toxiproxy(log=print) -> Path:
    """Toxiproxy's server from the Go module proxy into .cache/bin, unless that version is there (~40 s)."""
    if toxiproxy_version() == TOXIPROXY_VERSION:
        return toxiproxy_path()
    log(f"building Toxiproxy {TOXIPROXY_VERSION} (go install) ...")
    BIN_DIR.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(["go", "install", f"{TOXIPROXY_MODULE}@v{TOXIPROXY_VERSION}"], capture_output=True,
                            text=True, env={**os.environ, "GOBIN": str(BIN_DIR)})
    if result.returncode != 0 or toxiproxy_version() != TOXIPROXY_VERSION:
        raise InstallError(f"go install {TOXIPROXY_MODULE}@v{TOXIPROXY_VERSION} failed:\n{result.stderr[-2000:]}")
    return toxiproxy_path()


def install_all(with_browser: bool = False, log=print) -> None:
    """Everything `make setup` needs; with_browser adds the tests' own tools (chromium, Toxiproxy)."""
    install_commands((*RUN_COMMANDS, *TEST_COMMANDS) if with_browser else RUN_COMMANDS, log)
    for plugin in plugins().values():
        if plugin.local is not None:
            plugin.local.install(log)
    install_dynamodb_local(log)
    build_native(log)
    if with_browser:
        install_toxiproxy(log)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        install_all("--with-browser" in args)
    except InstallError as exc:
        print(f"brokerbench setup: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
