"""The Lambda layer's lock (requirements-lambda.txt) against requirements.txt, and what changes the layer's asset
hash (cdk/bundling.py). The layer itself is built and run in tests/integration/test_lambda_runtime.py."""

import re
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from cdk import paths  # noqa: E402
from cdk.bundling import (  # noqa: E402
    LAYER_LEAVES_OUT, compile_command, layer_hash, lock_input, pip_command,
)

PIN = re.compile(r"^([A-Za-z0-9_.\-]+)(\[[^\]]*\])?==([^\s\\;]+)", re.M)


def pins(text: str) -> dict[str, str]:
    return {m.group(1).lower().replace("_", "-"): m.group(3) for m in PIN.finditer(text)}


def test_the_lock_pins_requirements_txt_as_it_is():
    """A requirements.txt bump without `make lambda-lock` fails here: the layer would ship the old version."""
    wanted = pins(paths.REQUIREMENTS.read_text())
    locked = pins(paths.LAMBDA_LOCK.read_text())
    for name, version in wanted.items():
        if name in LAYER_LEAVES_OUT:
            assert name not in locked, f"{name} is left out of the layer but locked"
        else:
            assert locked.get(name) == version, f"{name}=={version} in requirements.txt, {locked.get(name)} in the lock"


def test_every_locked_package_has_a_hash():
    entries = re.split(r"\n(?=[A-Za-z0-9])", paths.LAMBDA_LOCK.read_text().split("\n", 2)[2])
    assert len(entries) > 20
    for entry in entries:
        assert "--hash=sha256:" in entry, entry.splitlines()[0]


def test_the_lock_input_leaves_pulsar_out_and_keeps_the_rest():
    text = "boto3==1.44.5\npulsar-client==3.13.0\nPulsar_Client[avro]==3.13.0\naws-lambda-powertools[tracer]==3.37.0\n"
    assert lock_input(text) == "boto3==1.44.5\naws-lambda-powertools[tracer]==3.37.0\n"


def test_pip_installs_only_the_locked_wheels():
    command = pip_command(Path("lock.txt"), Path("out"), "3.12")
    assert {"--require-hashes", "--no-deps", "--only-binary=:all:", "--no-compile"} <= set(command)
    assert command[command.index("--requirement") + 1] == "lock.txt"


def test_bytecode_does_not_depend_on_the_zips_timestamps():
    assert compile_command("python3.12", Path("out"))[-3:-1] == ["--invalidation-mode", "unchecked-hash"]


def test_the_layer_hash_follows_the_lock_and_the_schemas(tmp_path):
    source = tmp_path / "layer"
    (source / "schemas").mkdir(parents=True)
    (source / "requirements-lambda.txt").write_text("a==1 \\\n    --hash=sha256:00\n")
    (source / "schemas" / "s.json").write_text("{}")
    first = layer_hash(source, "3.12", bundled=True)
    copy = tmp_path / "copy"
    shutil.copytree(source, copy)
    assert layer_hash(copy, "3.12", bundled=True) == first  # where the folder is does not matter
    assert layer_hash(source, "3.12", bundled=False) != first  # the unbundled folder is another asset
    assert layer_hash(source, "3.13", bundled=True) != first
    (source / "requirements-lambda.txt").write_text("a==2 \\\n    --hash=sha256:00\n")
    assert layer_hash(source, "3.12", bundled=True) != first
    (source / "requirements-lambda.txt").write_text("a==1 \\\n    --hash=sha256:00\n")
    (source / "schemas" / "s.json").write_text('{"x": 1}')
    assert layer_hash(source, "3.12", bundled=True) != first


def test_the_ec2_worker_runs_the_python_the_lock_is_for():
    from brokerbench.workflow.fleet import WORKER_LOCK, WORKER_PYTHON

    from cdk.bundling import LOCK_PYTHON

    assert WORKER_PYTHON == f"python{LOCK_PYTHON}" and WORKER_LOCK == paths.LAMBDA_LOCK.name


def test_the_worker_asset_carries_the_lock_and_bundled_its_wheels():
    from cdk.bundling import LocalWheelsBundling, wheels_command, worker_code, worker_source

    source = worker_source()
    assert (source / "requirements-lambda.txt").read_text() == paths.LAMBDA_LOCK.read_text()
    assert not (source / "requirements.txt").exists() and (source / "functions" / "handlers").is_dir()
    offline, bundled = worker_code(source, bundle=False), worker_code(source, bundle=True)
    assert "bundling" not in offline and isinstance(bundled["bundling"].local, LocalWheelsBundling)
    assert offline["asset_hash"] != bundled["asset_hash"]  # the folder without wheels is another asset
    command = wheels_command(Path("lock.txt"), Path("wheels"))
    assert command[3] == "download" and {"--require-hashes", "--no-deps", "--only-binary=:all:"} <= set(command)
    assert command[command.index("--python-version") + 1] == "3.12"
    assert "manylinux2014_x86_64" in command and "manylinux2014_aarch64" not in command
    graviton = worker_code(source, bundle=True, arch="aarch64")
    assert graviton["bundling"].local.arch == "aarch64" and graviton["asset_hash"] != bundled["asset_hash"]
    assert "manylinux2014_aarch64" in wheels_command(Path("lock.txt"), Path("wheels"), "aarch64")
