"""What the environment can get wrong, tried for real: a program missing from PATH, a listening port taken, and a
full disk under DynamoDB Local (a small tmpfs, mounted by the test; where mounting is not allowed the full-disk
tests are skipped). Each ends with exit code 3 and a message that says what to do, and nothing half-started."""

import contextlib
import gzip
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from synthetic import synthetic_run

from brokerbench.cli import main
from brokerbench.events import StoreUnavailable
from brokerbench.events.dynamodb import DynamoEventStore
from brokerbench.local import stack as stack_module
from brokerbench.local.stack import LocalStack

BROKERBENCH = str(Path(sys.executable).with_name("brokerbench"))


def running_services(state_dir: Path) -> list[str]:
    state = state_dir / "stack.json"
    return sorted(json.loads(state.read_text())) if state.exists() and state.read_text().strip() else []


@pytest.mark.parametrize("service, program", [("kafka", "java"), ("redis", "redis-server"), ("dynamodb", "java")])
def test_a_program_missing_from_path_is_named_with_the_way_to_get_it(tmp_path, service, program):
    """PATH holds only the virtualenv's programs: no java, no redis-server. A broker whose own files are missing is
    installed on first use (Redis from Debian packages), and an install that cannot run says what is missing and
    how to get it, as starting a broker without its program does."""
    env = {**os.environ, "PATH": str(Path(sys.executable).parent)}
    state = tmp_path / "state"
    result = subprocess.run([BROKERBENCH, "--state-dir", str(state), "local", "up", service], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 3, result.stderr
    named = (f"{program} is not installed or not on PATH" in result.stderr
             or f"failed: missing: {program}" in result.stderr and f"apt-get install {program}" in result.stderr)
    assert named and "make setup" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert running_services(state) == []


def test_a_run_without_java_exits_3_before_it_starts_anything(tmp_path):
    env = {**os.environ, "PATH": str(Path(sys.executable).parent)}
    state, out = tmp_path / "state", tmp_path / "out"
    result = subprocess.run([BROKERBENCH, "--state-dir", str(state), "run", "--suite", "smoke", "--out", str(out)],
                            env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 3, result.stderr
    assert "java is not installed or not on PATH" in result.stderr and "Traceback" not in result.stderr
    assert running_services(state) == [] and not out.exists()


def test_serve_on_a_port_in_use_exits_3_and_stops_the_store_it_started(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        state = tmp_path / "state"
        result = subprocess.run([BROKERBENCH, "--state-dir", str(state), "serve", "--port", str(port),
                                 "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=180)
    assert result.returncode == 3, result.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr and "Address already in use" in result.stderr
    assert running_services(state) == []  # the DynamoDB Local it had started is stopped again


@pytest.fixture
def small_disk(tmp_path):
    """mount(size) -> a tmpfs of that size at a fresh folder, unmounted afterwards."""
    mounted = []

    def mount(size: str) -> Path:
        where = tmp_path / f"disk{len(mounted)}"
        where.mkdir()
        result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                                capture_output=True, text=True)
        if result.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here (needs root): {result.stderr.strip()}")
        mounted.append(where)
        return where

    yield mount
    for where in mounted:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_run_on_a_nearly_full_disk_is_refused_before_anything_starts(tmp_path, small_disk, capsys):
    disk = small_disk("8m")  # below the 256 MB a service needs
    code = main(["--state-dir", str(disk / "state"), "run", "--suite", "smoke", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 3
    assert "MB free on the disk of" in err and "--state-dir or BROKERBENCH_HOME" in err
    assert running_services(disk / "state") == [] and not (tmp_path / "out").exists()


def fill(disk: Path) -> Path:
    """Write zeros until the disk is full; returns the file."""
    filler = disk / "filler"
    chunk = b"\0" * 2**20
    with open(filler, "wb", buffering=0) as out:
        with contextlib.suppress(OSError):
            while True:
                out.write(chunk)
        with contextlib.suppress(OSError):  # the last, partial megabyte
            while True:
                out.write(b"\0" * 4096)
    return filler


def test_dynamodb_local_on_a_full_disk_fails_writes_clearly_and_loses_nothing(tmp_path, small_disk, monkeypatch,
                                                                                capsys):
    disk = small_disk("96m")
    monkeypatch.setattr(stack_module, "MIN_FREE_MB", 1)  # start on this small disk; the test fills it later
    monkeypatch.setenv("BROKERBENCH_STORE_OUTAGE_S", "3")
    local = LocalStack(disk / "state")
    local.up(["dynamodb"], log=lambda m: None)
    try:
        endpoint = local.endpoints(required=["dynamodb"])["dynamodb"]
        store = DynamoEventStore(endpoint["table"], endpoint_url=endpoint["endpoint_url"], outage_s=3)
        store.ensure_table()
        events = synthetic_run({"brokers": ["kafka", "redis-streams"], "sizes": [512, 1024, 2048, 4096],
                                "rates": [100, 200, 400], "formats": ["json", "avro"]}, intervals=10)
        filler = fill(disk)
        with pytest.raises(StoreUnavailable, match="fails every request") as failed:
            store.append(events)
        assert "InternalFailure" in str(failed.value)

        # The CLI says so, with exit code 3 and the disk named: `import` writes the same events.
        archive = tmp_path / "run.jsonl.gz"
        with gzip.open(archive, "wt") as out:
            out.writelines(json.dumps(e) + "\n" for e in events)
        monkeypatch.setattr("brokerbench.events.dynamodb.OUTAGE_S", 3.0)
        code = main(["--state-dir", str(disk / "state"), "import", str(archive)])
        err = " ".join(capsys.readouterr().err.split())
        assert code == 3, err
        assert "fails every request" in err and f"({disk / 'state'}) has" in err and "free some space" in err

        # Space again: the same append stores each event once, whatever had got in before the disk filled.
        filler.unlink()
        again = store.append(events)
        assert again.written + again.skipped == len(events)
        stored = store.read(events[0]["run_id"])
        assert sorted(e["event_id"] for e in stored) == sorted(e["event_id"] for e in events)
    finally:
        local.down(log=lambda m: None)
