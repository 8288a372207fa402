"""Idempotent install of the local stack's parts. `make setup` installs what the quick suite runs on (the local
services of the brokers its run requests name, read from suites/quick.json), DynamoDB Local and its launcher, the
tools and the native send loop (built against librdkafka-dev's header); `--suite NAME` installs another suite's
brokers instead. Any other broker (Pulsar, ZooKeeper-mode Kafka) is installed on first use: the local stack
installs a service that is not installed before it starts it, with a progress line on stderr
(install_on_first_use). `--all` (`make setup-all`) installs every registered broker up front, and so does
`--with-browser` (`make test`), which adds the tests' own tools: chromium, Toxiproxy (a TCP proxy that adds
a known latency: the tests' independent truth for latency figures) and the AWS Lambda Runtime Interface Emulator
(the handlers run through it as Lambda runs them), both built from the Go module proxy.

Also the helpers a broker's local service installs with: Debian packages, Maven Central jars.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from ..registry import LocalService, plugin, plugins
from ..paths import PACKAGE_DIR
from ..spec import SpecError, suite_runs

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
                   "node": "nodejs", "npm": "npm", "gcc": "gcc", "chromium": "chromium", "go": "golang-go",
                   "strace": "strace"}
# Header -> the Debian package that provides it (for the native send loop's build).
DEBIAN_HEADERS = {"/usr/include/librdkafka/rdkafka.h": "librdkafka-dev"}
NATIVE_SOURCE = PACKAGE_DIR / "native" / "sendloop.c"
# Only the tests need chromium (the browser test), go (to build Toxiproxy) and strace (to count a broker's fsync
# calls); `make run` installs none of them.
TEST_COMMANDS = ("chromium", "go", "strace")
RUN_COMMANDS = tuple(c for c in DEBIAN_PACKAGES if c not in TEST_COMMANDS)
TOXIPROXY_MODULE = "github.com/Shopify/toxiproxy/v2/cmd/server"
TOXIPROXY_VERSION = "2.5.0"
# AWS publishes no tagged module version: this is the Go module proxy's pseudo-version of its 2026-10-30 commit.
RIE_MODULE = "github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie"
RIE_VERSION = "0.0.0-20261030222936-bef5c4ba774d"


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
    """The installed Toxiproxy's module version, None when it is not installed."""
    return go_binary_version(toxiproxy_path(), "github.com/Shopify/toxiproxy/v2")


def go_binary_version(path: Path, module: str) -> str | None:
    """The version of `module` a `go install`ed binary was built from (`go version -m`: such a build prints "git"
    for its own `-version`), None when it is not installed."""
    if not path.is_file() or not shutil.which("go"):
        return None
    result = subprocess.run(["go", "version", "-m", str(path)], capture_output=True, text=True)
    for line in result.stdout.splitlines():
        fields = line.split()
        if fields[:2] == ["mod", module] and len(fields) > 2:
            return fields[2].removeprefix("v")
    return None


def go_install(name: str, package: str, module: str, version: str, path: Path, log=print) -> Path:
    """`package` from the Go module proxy into .cache/bin, unless that version is there."""
    if go_binary_version(path, module) == version:
        return path
    log(f"building {name} {version} (go install) ...")
    BIN_DIR.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(["go", "install", f"{package}@v{version}"], capture_output=True,
                            text=True, env={**os.environ, "GOBIN": str(BIN_DIR)})
    if result.returncode != 0 or go_binary_version(path, module) != version:
        raise InstallError(f"go install {package}@v{version} failed:\n{result.stderr[-2000:]}")
    return path


def install_toxiproxy(log=print) -> Path:
    """Toxiproxy's server from the Go module proxy into .cache/bin, unless that version is there (~40 s)."""
    return go_install("Toxiproxy", TOXIPROXY_MODULE, "github.com/Shopify/toxiproxy/v2", TOXIPROXY_VERSION,
                      toxiproxy_path(), log)


def rie_path() -> Path:
    """The AWS Lambda Runtime Interface Emulator, as `go install` names it."""
    return BIN_DIR / "aws-lambda-rie"


def install_rie(log=print) -> Path:
    """The Lambda Runtime Interface Emulator from the Go module proxy into .cache/bin (~25 s): the tests run the
    handlers through it, as Lambda does (tests/integration/test_lambda_runtime.py)."""
    return go_install("the Lambda Runtime Interface Emulator", RIE_MODULE, RIE_MODULE.removesuffix("/cmd/aws-lambda-rie"),
                      RIE_VERSION, rie_path(), log)


def pom_version(pom: str, artifact: str) -> str | None:
    """The version a pom's text names for the dependency `artifact` (what fetch_maven_jars would install)."""
    match = re.search(rf"<artifactId>{re.escape(artifact)}</artifactId>\s*<version>([^<]+)</version>", pom)
    return match.group(1) if match else None


def suite_brokers(suite: str) -> list[str]:
    """The registered brokers with a local service that the suite's run requests name (all of a study's runs),
    leaving out those a request gives an endpoint for in `targets` (they are not started here)."""
    names = set()
    for request in suite_runs(suite):
        targets = request.get("targets") or {}
        names |= {b for b in request.get("brokers", []) if b in plugins() and b not in targets}
    return sorted(name for name in names if plugin(name).local is not None)


def install_set(suite: str | None) -> list[str]:
    """The brokers `make setup` installs: a suite's (suite_brokers), or every registered local one (suite None)."""
    if suite is None:
        return [name for name, p in plugins().items() if p.local is not None]
    return suite_brokers(suite)


def install_all(with_browser: bool = False, log=print, suite: str | None = None) -> None:
    """What `make setup` needs: the brokers of install_set(suite) (all of them when suite is None), DynamoDB
    Local, the tools and the native send loop; with_browser adds the tests' own tools (chromium, Toxiproxy)."""
    names = install_set(suite)  # first: an unknown suite installs nothing
    install_commands((*RUN_COMMANDS, *TEST_COMMANDS) if with_browser else RUN_COMMANDS, log)
    for service in dict.fromkeys(plugin(name).local for name in names):  # a service two brokers share: once
        service.install(log)
    install_dynamodb_local(log)
    build_native(log)
    if with_browser:
        install_toxiproxy(log)
        install_rie(log)


# -- install on first use --------------------------------------------------------------------------
def first_use_line(name: str, service: LocalService) -> str:
    """The progress line of a first-use install: "installing pulsar 4.0.7 (first use, ~234 MB) ...". A service
    may tell the version its install() installs (`install_version()`) and its download's size (`download_mb`)."""
    version = getattr(service, "install_version", lambda: None)()
    size = getattr(service, "download_mb", None)
    return (f"installing {name}{f' {version}' if version else ''} (first use"
            f"{f', ~{size} MB' if size else ''}) ...")


def install_on_first_use(name: str, service: LocalService, log=None) -> bool:
    """Install `service` (the stack's `name` for it) when it is not installed, saying so on stderr first; True
    when it installed. One install at a time per cache folder (stacks in other folders share the cache): a
    second caller waits, then finds it installed. InstallError names the service when installing fails."""
    if service.installed_version() is not None:
        return False
    say = log or (lambda message: print(message, file=sys.stderr, flush=True))
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with open(CACHE_DIR / "install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if service.installed_version() is not None:
            return False
        say(first_use_line(name, service))
        try:
            service.install(lambda message: say(f"  {message}"))
        except InstallError as exc:
            raise InstallError(f"installing {name} failed: {exc}") from None
        if service.installed_version() is None:
            raise InstallError(f"installing {name} failed: it is still not installed after its install step")
    return True


def main(argv: list[str] | None = None) -> int:
    """`make setup`: the quick suite's needs (`--suite NAME`: that suite's); `--all` (`make setup-all`) and
    `--with-browser` (`make test`): every registered broker; `--with-toxiproxy`: Toxiproxy too (network faults)."""
    parser = argparse.ArgumentParser(prog="python -m brokerbench.local.install")
    parser.add_argument("--suite", default="quick", help="install the brokers this suite runs on (default quick)")
    parser.add_argument("--all", action="store_true", help="install every registered broker")
    parser.add_argument("--with-browser", action="store_true", help="everything, and the tests' own tools")
    parser.add_argument("--with-toxiproxy", action="store_true",
                        help="also build Toxiproxy (network faults; needs Go), which the stack otherwise builds on "
                             "first use")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        install_all(args.with_browser, suite=None if args.all or args.with_browser else args.suite)
        if args.with_toxiproxy and not args.with_browser:
            install_toxiproxy()
    except (InstallError, SpecError) as exc:
        print(f"brokerbench setup: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
