"""What `make setup` installs (the quick suite's brokers, read from the suite), what `make setup-all` and
`make test` install (every broker), and the install on first use: the decision, the progress line and the
error naming the broker.

Nothing here downloads: every install step (Maven, apt-get, the native build, go install) is stubbed, so the
tests check which services are installed and what is said, not that Maven Central serves the jars (a real
first-use install of Pulsar fetches ~234 MB; `make setup-all` and `make test` do that for real).
"""

import argparse
import json
from pathlib import Path

import pytest

from brokerbench import brokers, cli, spec
from brokerbench.cli import run as run_command
from brokerbench.brokers.pulsar import local as pulsar_local
from brokerbench.brokers.redis_streams import local as redis_local
from brokerbench.local import install
from brokerbench.local.stack import LocalStack, StackError
from brokerbench.local.workflow import LocalWorkflow, WorkflowError


@pytest.fixture
def installs(monkeypatch):
    """Every install step stubbed: the broker services' install() calls are recorded in order, by service name."""
    called = []
    for plugin in brokers.plugins().values():
        if plugin.local is not None:
            monkeypatch.setattr(plugin.local, "install", lambda log, name=plugin.local.name: called.append(name))
    for step in ("install_commands", "install_dynamodb_local", "build_native", "install_toxiproxy", "install_rie"):
        monkeypatch.setattr(install, step, lambda *a, step=step, **k: called.append(step))
    return called


def test_the_quick_suites_install_set_is_its_brokers_without_pulsar_or_zookeeper_mode_kafka():
    quick = spec.load_suite("quick")  # read here from the suite file, as the install set is
    assert install.install_set("quick") == sorted(quick["brokers"])
    assert "pulsar" not in install.install_set("quick") and "kafka-zookeeper" not in install.install_set("quick")
    assert {"kafka", "redis-streams"} <= set(install.install_set("quick"))
    everything = {name for name, p in brokers.plugins().items() if p.local is not None}
    assert set(install.install_set(None)) == everything and {"pulsar", "kafka-zookeeper"} <= everything


def test_a_suites_install_set_follows_its_file_every_run_and_leaves_out_given_endpoints(tmp_path, monkeypatch):
    monkeypatch.setattr(spec, "SUITES_DIR", tmp_path)
    run = {"sizes": [1024], "rates": [100], "formats": ["json"]}
    (tmp_path / "study.json").write_text(json.dumps({"description": "two runs", "runs": [
        {**run, "name": "a", "brokers": ["pulsar"]},
        {**run, "name": "b", "brokers": ["kafka-zookeeper", "kafka"],
         "targets": {"kafka": {"bootstrap_servers": "10.0.0.5:9092"}}},  # an existing endpoint: nothing to install
    ]}))
    assert install.install_set("study") == ["kafka-zookeeper", "pulsar"]


def test_setup_installs_the_quick_suites_brokers_setup_all_and_test_every_one(installs):
    assert install.main([]) == 0
    assert installs == ["install_commands", "kafka", "redis", "install_dynamodb_local", "build_native"]
    # Each service once: the RabbitMQ node that serves two brokers is installed once.
    everything = list(dict.fromkeys(p.local.name for p in brokers.plugins().values() if p.local is not None))
    for flags, tools in ((["--all"], []), (["--with-browser"], ["install_toxiproxy", "install_rie"])):
        installs.clear()
        assert install.main(flags) == 0
        assert installs == ["install_commands", *everything, "install_dynamodb_local", "build_native", *tools]


def test_setup_for_an_unknown_suite_names_it(installs, capsys):
    assert install.main(["--suite", "nosuch"]) == 1
    assert "no suite named 'nosuch'" in capsys.readouterr().err and installs == []


@pytest.fixture
def pulsar_cache(tmp_path, monkeypatch):
    """Pulsar's jar folder and the install lock in a temporary cache; returns the jar folder."""
    lib = tmp_path / "jars" / "pulsar" / "lib"
    monkeypatch.setattr(pulsar_local, "lib_dir", lambda component: lib)
    monkeypatch.setattr(install, "CACHE_DIR", tmp_path)
    return lib


def test_a_service_not_installed_is_installed_on_first_use_with_a_progress_line(pulsar_cache, monkeypatch, capsys):
    fetched = []

    def fetch(component, pom, log, maven_settings=None):  # the download step, stubbed: the jars it would copy
        fetched.append(component)
        log(f"fetching {component} jars from Maven Central ...")
        pulsar_cache.mkdir(parents=True)
        (pulsar_cache / "pulsar-broker-4.0.7.jar").touch()
        return pulsar_cache

    monkeypatch.setattr(pulsar_local, "fetch_maven_jars", fetch)
    monkeypatch.setattr(pulsar_local.PulsarService, "record_class_archive", lambda self, log: log("recording"))
    service = pulsar_local.PulsarService()
    assert service.installed_version() is None
    assert install.install_on_first_use("pulsar", service) is True
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "installing pulsar 4.0.7 (first use, ~234 MB) ..."  # the version the pom pins
    assert err[1:] == ["  fetching pulsar jars from Maven Central ...", "  recording"]
    assert fetched == ["pulsar"] and service.installed_version() == "4.0.7"
    assert install.install_on_first_use("pulsar", service) is False  # installed: nothing fetched, nothing said
    assert fetched == ["pulsar"] and capsys.readouterr().err == ""


def test_a_failed_first_use_install_is_an_error_naming_the_broker(pulsar_cache, monkeypatch):
    def fetch(component, pom, log, maven_settings=None):
        raise install.InstallError("mvn -q -B dependency:copy-dependencies failed:\nCould not resolve dependencies")

    monkeypatch.setattr(pulsar_local, "fetch_maven_jars", fetch)
    stack = LocalStack(pulsar_cache.parent / "state")
    with pytest.raises(StackError, match=r"^installing pulsar failed: mvn .* failed:\nCould not resolve"):
        stack.install(["pulsar"])


def test_a_run_installs_its_local_brokers_before_the_workflow_starts_and_not_those_given_an_endpoint(
        pulsar_cache, monkeypatch, capsys):
    def fetch(component, pom, log, maven_settings=None):  # the download step, stubbed
        pulsar_cache.mkdir(parents=True)
        (pulsar_cache / "pulsar-broker-4.0.7.jar").touch()
        (pulsar_cache.parent / "pulsar.jsa").touch()  # the class-data archive: no recording start
        return pulsar_cache

    monkeypatch.setattr(pulsar_local, "fetch_maven_jars", fetch)
    redis_installs = []
    monkeypatch.setattr(redis_local.RedisService, "installed_version", lambda self: None)
    monkeypatch.setattr(redis_local.RedisService, "install", lambda self, log: redis_installs.append(log))
    workflow = LocalWorkflow(LocalStack(pulsar_cache.parent / "state"), pulsar_cache.parent / "reports")
    request = {"brokers": ["pulsar", "redis-streams"], "sizes": [1024], "rates": [100], "formats": ["json"],
               "targets": {"redis-streams": {"host": "10.0.0.9", "port": 6379}}}
    assert workflow.install_brokers(request) == ["pulsar"] and redis_installs == []
    assert capsys.readouterr().err.startswith("installing pulsar 4.0.7 (first use, ~234 MB) ...\n")
    assert workflow.install_brokers({**request, "sizes": "big"}) == []  # refused by ValidateRequest, not here
    request["targets"] = {}
    with pytest.raises(WorkflowError, match="^installing redis-streams failed: it is still not installed"):
        workflow.install_brokers(request)


class LateService:
    """A service that is not installed until install() runs; start() stops the test once it is reached."""

    name = "late"
    startup_timeout_s = 5.0
    download_mb = 12

    def __init__(self):
        self.calls = []

    def installed_version(self):
        return "1.0" if "install" in self.calls else None

    def install(self, log):
        self.calls.append("install")

    def start(self, folder, ports, settings):
        self.calls.append("start")
        raise StackError("started")


def test_the_stack_installs_a_service_before_it_starts_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(install, "CACHE_DIR", tmp_path / "cache")
    stack = LocalStack(tmp_path / "state")
    service = LateService()
    stack.services = {"late": ("late-broker", service)}
    with pytest.raises(StackError, match="started"):
        stack.up(["late"], log=lambda m: None)
    assert service.calls == ["install", "start"]
    assert capsys.readouterr().err == "installing late-broker (first use, ~12 MB) ...\n"
    with pytest.raises(StackError, match="started"):
        stack.up(["late"], log=lambda m: None)
    assert service.calls == ["install", "start", "start"] and capsys.readouterr().err == ""


def test_the_report_opens_only_where_a_browser_can_show_it_and_never_under_ci(monkeypatch, tmp_path):
    opened = []
    monkeypatch.setattr(run_command.webbrowser, "open", lambda url: opened.append(url) or True)
    html = tmp_path / "report.html"
    assert run_command.open_report(html, {}) is False
    assert run_command.open_report(html, {"DISPLAY": ":0", "CI": "true"}) is False
    assert run_command.open_report(html, {"BROWSER": "firefox", "CI": "1"}) is False and opened == []
    assert run_command.open_report(html, {"DISPLAY": ":0"}) is True
    assert opened == [Path(html).as_uri()]


def test_a_run_ends_with_its_results_and_reports_the_html_report_last(tmp_path, capsys, monkeypatch):
    opened = []
    monkeypatch.setattr(run_command, "open_report", lambda html: opened.append(html) or True)
    results = tmp_path / "run-1" / "results.json"
    results.parent.mkdir()
    for path in (results, results.parent / "report.md", results.parent / "report.html"):
        path.write_text("{}")
    run_command._print_report(results, argparse.Namespace(no_open=True))
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines == [f"results: {results}", f"report:  {results.parent / 'report.md'}",
                     f"report:  {results.parent / 'report.html'}"] and opened == []
    run_command._print_report(results, argparse.Namespace(no_open=False))
    assert capsys.readouterr().out.strip().endswith("(opened in the browser)")
    assert opened == [results.parent / "report.html"]
    (results.parent / "report.html").unlink()  # no HTML report: nothing to open, the Markdown one is named
    run_command._print_report(results, argparse.Namespace(no_open=False))
    assert capsys.readouterr().out.strip().splitlines()[-1] == f"report:  {results.parent / 'report.md'}"
    assert len(opened) == 1


def test_the_brokers_command_says_which_version_a_missing_broker_installs_on_first_use(pulsar_cache, capsys):
    assert cli.main(["brokers", "--json"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["pulsar"]["version"] == "not installed (4.0.7 on first use)"  # the pom's pulsar-broker version
