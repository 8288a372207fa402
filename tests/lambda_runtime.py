"""The Lambda code as Lambda runs it, on this machine: the layer `cdk deploy` builds (cdk/bundling.py's
LocalPipBundling, cached in .cache/lambda per layer hash), the code asset (functions/ less the stack's
CODE_EXCLUDES), the runtime's Python (3.12) with nothing else on its path, and the AWS Lambda Runtime Interface
Emulator (`make test` builds it: brokerbench.local.install.install_rie) in front of awslambdaric, the runtime
interface client Lambda's own Python images run.

Not emulated: Lambda's read-only file system, its missing /dev/shm, its memory and CPU limits, the VPC, IAM.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from brokerbench.local.install import CACHE_DIR, install_rie
from brokerbench.local.stack import free_port

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")  # cdk/ imports aws_cdk
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from cdk import paths  # noqa: E402
from cdk.bundling import (  # noqa: E402
    LocalCodeBundling, LocalPipBundling, LocalWheelsBundling, find_python, layer_hash, layer_source,
    manylinux_platforms, worker_source,
)
from cdk.constructs.functions import DEFAULT_PYTHON, SCHEMAS_IN_LAYER  # noqa: E402

# The runtime interface client, beside the layer (Lambda's runtime brings its own): pinned with its two dependencies.
RIC = ["awslambdaric==4.2.2", "simplejson==4.3.0", "snapshot-restore-py==1.0.0"]
LAMBDA_CACHE = CACHE_DIR / "lambda"


def _locked(build):
    """Run build() under the cache's lock (two pytest-xdist workers may want the same layer)."""
    LAMBDA_CACHE.mkdir(parents=True, exist_ok=True)
    with open(LAMBDA_CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return build()


def _build_once(folder: Path, fill, replaces: str | None = None) -> Path:
    """folder, made by fill(tmp) the first time (into a temporary sibling renamed at the end); then the folders
    named `replaces`* that it replaces (a layer or wheels built for an earlier lock or schemas) are removed."""
    def build():
        if not folder.is_dir():
            tmp = folder.with_name(folder.name + ".partial")
            shutil.rmtree(tmp, ignore_errors=True)
            fill(tmp)
            tmp.rename(folder)
            for old in LAMBDA_CACHE.glob(f"{replaces}*") if replaces else ():
                if old != folder:
                    shutil.rmtree(old, ignore_errors=True)
        return folder
    return _locked(build)


def layer() -> Path:
    """The dependencies layer as the stack's bundling builds it (python/, schemas/), per layer hash."""
    source = layer_source()
    digest = layer_hash(source, DEFAULT_PYTHON, bundled=True)[:16]
    return _build_once(LAMBDA_CACHE / f"layer-{digest}",
                       lambda tmp: LocalPipBundling(source, DEFAULT_PYTHON).try_bundle(str(tmp)), replaces="layer-")


def runtime_client() -> Path:
    """awslambdaric and its dependencies for the runtime's Python, in a folder of their own."""
    def fill(tmp: Path) -> None:
        platforms = [arg for p in manylinux_platforms() for arg in ("--platform", p)]
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
                        "--target", str(tmp), "--only-binary=:all:", "--implementation", "cp", "--python-version",
                        DEFAULT_PYTHON, *platforms, *RIC], check=True, capture_output=True)
    return _build_once(LAMBDA_CACHE / ("ric-" + "-".join(r.replace("==", "") for r in RIC)), fill)


def worker_asset(into: Path) -> Path:
    """The EC2 worker's asset as the stack bundles it (cdk/constructs/workers.py), zipped as CDK uploads it; the
    wheels are cached per lock (they are exactly the lock's)."""
    wheels = _build_once(LAMBDA_CACHE / f"wheels-{layer_hash(layer_source(), DEFAULT_PYTHON, bundled=True)[:16]}",
                         lambda tmp: LocalWheelsBundling(layer_source()).try_bundle(str(tmp)), replaces="wheels-")
    folder = into / "asset"
    shutil.copytree(worker_source(), folder)
    shutil.copytree(wheels / "wheels", folder / "wheels")
    return Path(shutil.make_archive(str(into / "worker"), "zip", folder))


def code_asset(into: Path) -> Path:
    """functions/ as the stack's code asset holds it (paths.CODE_EXCLUDES left out, compiled): /var/task."""
    into.mkdir(parents=True)
    LocalCodeBundling(paths.FUNCTIONS, DEFAULT_PYTHON).try_bundle(str(into))
    return into


def python() -> str:
    return find_python(DEFAULT_PYTHON)


def environment(task: Path, opt: Path, ric: Path, home: Path, **settings: str) -> dict[str, str]:
    """What a function sees: no variable of this shell, the path Lambda gives (the task root, then the layer's
    python/), the runtime client after them, dummy credentials, and the stack's settings."""
    return {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8", "PYTHONNOUSERSITE": "1",
            "PYTHONPATH": os.pathsep.join([str(task), str(opt / "python"), str(ric)]),
            "LAMBDA_TASK_ROOT": str(task), "AWS_EXECUTION_ENV": f"AWS_Lambda_python{DEFAULT_PYTHON}",
            "AWS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
            "BROKERBENCH_SCHEMAS": str(opt / "schemas"), **settings}


assert SCHEMAS_IN_LAYER == "/opt/schemas"  # environment() points BROKERBENCH_SCHEMAS at the same folder of the layer


class Emulator:
    """aws-lambda-rie running one handler through awslambdaric under the runtime's Python, on loopback ports."""

    def __init__(self, handler: str, task: Path, env: dict[str, str], log: Path) -> None:
        self.port, api = free_port(), free_port()
        self.log = log
        command = [str(install_rie()), "--runtime-interface-emulator-address", f"127.0.0.1:{self.port}",
                   "--runtime-api-address", f"127.0.0.1:{api}", python(), "-m", "awslambdaric", handler]
        with open(log, "wb") as out:
            self.process = subprocess.Popen(command, cwd=task, env=env, stdout=out, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if self.process.poll() is not None:
                    break
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"aws-lambda-rie did not answer:\n{log.read_text()[-3000:]}")

    def invoke(self, payload: dict, timeout_s: float = 180) -> dict:
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/2015-03-31/functions/function/invocations",
                                         data=json.dumps(payload).encode(), method="POST")
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:
            return json.loads(answer.read())

    def stop(self) -> None:
        """The emulator, the runtime and any process the function left (one session: the group)."""
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=10)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


# Run by the runtime's Python in the import test: every handler imported, then where each loaded module came from
# and, for the layer's and the code asset's, whether its .pyc is one the runtime uses as it is.
IMPORT_CHECK = r"""
import importlib, importlib.util, json, os, sys, sysconfig
handlers, layer, task = json.loads(sys.argv[1]), os.path.realpath(sys.argv[2]), os.path.realpath(sys.argv[3])
for name in handlers:
    importlib.import_module(f"handlers.{name}")
paths = sysconfig.get_paths()
site = {os.path.realpath(paths[k]) for k in ("purelib", "platlib")}
stdlib = {os.path.realpath(paths[k]) for k in ("stdlib", "platstdlib")}
under = lambda path, roots: any(path.startswith(r + os.sep) for r in roots)
outside, stale, from_layer = [], [], 0
for module in list(sys.modules.values()):
    path = os.path.realpath(getattr(module, "__file__", None) or "/")
    if path == "/" or (under(path, stdlib) and not under(path, site)):
        continue
    if not under(path, [layer, task]):
        outside.append(path)
    elif path.endswith(".py"):
        from_layer += under(path, [layer])
        cached = importlib.util.cache_from_source(path)
        header = open(cached, "rb").read(8) if os.path.exists(cached) else b""
        if header[:4] != importlib.util.MAGIC_NUMBER or int.from_bytes(header[4:8], "little") != 1:
            stale.append(path)  # no .pyc, another Python's, or one that checks the source (flags 1: unchecked hash)
print(json.dumps({"version": list(sys.version_info[:2]), "outside": sorted(outside), "stale": sorted(stale),
                  "from_layer": from_layer, "pulsar": "pulsar" in sys.modules}))
"""
