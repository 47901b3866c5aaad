"""The command line's conventions: startup failures are one line and exit 2 before anything is created,
a new store says so, --version, completion, --log-level, `--json -`, help without type placeholders."""

from __future__ import annotations

import json
import socket

import pytest
from typer.testing import CliRunner

from rollmux.cli import app
from factories import job_record

runner = CliRunner()


def lines_of(text: str) -> list[str]:
    """The non-blank lines of `text`."""
    return [ln for ln in text.splitlines() if ln.strip()]


@pytest.fixture
def busy_port():
    """A port on loopback that something already listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield sock.getsockname()[1]


# -- serve: startup failures ---------------------------------------------------------------------

def test_serve_on_a_port_in_use_is_one_line_exit_2_and_creates_nothing(tmp_path, busy_port):
    store, token = tmp_path / "j.db", tmp_path / "admin.token"
    res = runner.invoke(app, ["serve", "--listen", f"127.0.0.1:{busy_port}", "--store", str(store),
                              "--admin-token-file", str(token)])
    assert res.exit_code == 2, res.output
    assert lines_of(res.stderr) == [f"error: --listen 127.0.0.1:{busy_port}: cannot listen there "
                                    "(Address already in use)"]
    assert res.stdout == "" and not store.exists() and not token.exists()


def test_serve_with_a_bad_cluster_file_creates_no_store(tmp_path):
    (tmp_path / "c.yaml").write_text("pools: 3\n")
    store = tmp_path / "j.db"
    res = runner.invoke(app, ["serve", "--listen", "127.0.0.1:0", "--store", str(store), "--cluster",
                              str(tmp_path / "c.yaml"), "--admin-token-file", str(tmp_path / "t")])
    assert res.exit_code == 2 and len(lines_of(res.stderr)) == 1, res.output
    assert "c.yaml" in res.stderr and not store.exists()


def test_serve_with_an_unloadable_tls_pair_creates_no_store(tmp_path):
    (tmp_path / "cert.pem").write_text("not a certificate\n")
    (tmp_path / "key.pem").write_text("not a key\n")
    store = tmp_path / "j.db"
    res = runner.invoke(app, ["serve", "--listen", "127.0.0.1:0", "--store", str(store), "--tls-cert",
                              str(tmp_path / "cert.pem"), "--tls-key", str(tmp_path / "key.pem"),
                              "--admin-token-file", str(tmp_path / "t")])
    assert res.exit_code == 2 and len(lines_of(res.stderr)) == 1, res.output
    assert "--tls-cert" in res.stderr and not store.exists()


@pytest.fixture
def served_once(monkeypatch):
    """`rollmux serve` that stops as soon as it would start serving (the server's loop replaced)."""
    import rollmux.live.server as server
    monkeypatch.setattr(server, "serve", lambda core, *args, **kw: core.shutdown())

    def serve(tmp_path):
        return runner.invoke(app, ["serve", "--listen", "127.0.0.1:0", "--store", str(tmp_path / "j.db"),
                                   "--admin-token-file", str(tmp_path / "admin.token")])
    return serve


def test_the_banner_says_a_new_store_is_new_and_a_restarted_one_what_it_recovered(tmp_path, served_once):
    first, second = served_once(tmp_path), served_once(tmp_path)
    assert first.exit_code == 0 and second.exit_code == 0, first.output + second.output
    assert "; new journal " in first.stdout and "recovered" not in first.stdout, first.stdout
    assert "(1 records recovered)" in second.stdout and "new journal" not in second.stdout, second.stdout


# -- input bounds and unknown fields: one line, exit 2 --------------------------------------------

CLUSTER = ("pools:\n  rollout: {gpu: H20, gpus_per_node: 8, price_per_gpu_hour: 1.0}\n"
           "  train: {gpu: H800, gpus_per_node: 8, price_per_gpu_hour: 2.85}\n")


@pytest.fixture
def trace(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(job_record("a")) + "\n")
    return path


@pytest.mark.parametrize("cluster,place", [
    (CLUSTER.replace("gpus_per_node: 8, price_per_gpu_hour: 1.0", "gpus_per_node: 1, price_per_gpu_hour: 1.0")
     .replace("gpus_per_node: 8, price_per_gpu_hour: 2.85", "gpus_per_node: 99999999, price_per_gpu_hour: 2.85"),
     "c.yaml:3: field 'pools.train.gpus_per_node'"),
    (CLUSTER + "cold_switch_s: 1.0e+300\n", "c.yaml:4: field 'cold_switch_s'"),
    (CLUSTER + "regoin: eu\n", "c.yaml:4: field 'regoin': unknown field"),
])
def test_simulate_refuses_an_unbounded_or_unknown_cluster_field_in_one_line(tmp_path, trace, cluster, place):
    (tmp_path / "c.yaml").write_text(cluster)
    res = runner.invoke(app, ["simulate", "--jobs", str(trace), "--cluster", str(tmp_path / "c.yaml")])
    assert res.exit_code == 2, res.output
    assert len(lines_of(res.stderr)) == 1 and place in res.stderr, res.stderr


def test_simulate_refuses_an_unknown_trace_field_in_one_line(tmp_path):
    (tmp_path / "t.jsonl").write_text(json.dumps(job_record("a", colour="red")) + "\n")
    res = runner.invoke(app, ["simulate", "--jobs", str(tmp_path / "t.jsonl")])
    assert res.exit_code == 2 and lines_of(res.stderr) == [
        f"error: {tmp_path / 't.jsonl'}:1: field 'colour': unknown field"], res.stderr


def test_submit_names_the_line_of_a_bad_field_in_a_yaml_job_file(tmp_path):
    import yaml
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job_record("a", train_gpus=0), sort_keys=False))
    line = next(i for i, ln in enumerate((tmp_path / "job.yaml").read_text().splitlines(), 1)
                if ln.startswith("train_gpus"))
    res = runner.invoke(app, ["submit", str(tmp_path / "job.yaml"), "--admin-token-file", str(tmp_path / "t")])
    assert res.exit_code == 2 and len(lines_of(res.stderr)) == 1, res.output
    assert f"job.yaml:{line}: field 'train_gpus'" in res.stderr and line > 1


def test_submit_refuses_an_unknown_field_of_a_job_file_before_calling_the_service(tmp_path):
    (tmp_path / "job.yaml").write_text(json.dumps(job_record("a", gpus=8), indent=1))
    res = runner.invoke(app, ["submit", str(tmp_path / "job.yaml"), "--url", "http://127.0.0.1:9",
                              "--admin-token-file", str(tmp_path / "t")])
    assert res.exit_code == 2 and "field 'gpus': unknown field" in res.stderr, res.output
    assert not (tmp_path / "t").exists()  # refused before the admin token was even read



# -- refusals name what was refused ---------------------------------------------------------------

def test_a_refused_admin_route_names_the_route_not_job_none():
    from starlette.testclient import TestClient

    from rollmux.core.spec import default_cluster
    from rollmux.live.app import create_app
    from rollmux.live.service import SchedulerCore
    core = SchedulerCore(default_cluster().model_dump(), admin_token="admin-token-for-tests-0123456789")
    try:
        with TestClient(create_app(core)) as client:
            res = client.post("/v1/jobs", json=job_record("a"), headers={"Authorization": "Bearer wrong-token"})
    finally:
        core.shutdown()
    assert res.status_code == 401
    assert "auth on POST /v1/jobs: missing or wrong token" in res.text and "None" not in res.text, res.text


# -- optional extras ------------------------------------------------------------------------------

def test_importing_the_trl_adapter_without_its_extra_says_what_to_install(monkeypatch):
    import importlib
    import sys
    monkeypatch.setitem(sys.modules, "torch", None)  # what Python does for a package that is not installed
    monkeypatch.delitem(sys.modules, "rollmux.adapters.trl", raising=False)
    with pytest.raises(ImportError) as exc:
        importlib.import_module("rollmux.adapters.trl")
    assert not isinstance(exc.value, ModuleNotFoundError)
    assert "pip install 'rollmux[trl]'" in str(exc.value) and "torch" in str(exc.value)


# -- conventions ----------------------------------------------------------------------------------

def test_version_prints_the_package_version():
    from importlib.metadata import version
    res = runner.invoke(app, ["--version"])
    assert res.exit_code == 0 and res.stdout == f"rollmux {version('rollmux')}\n"


def test_shell_completion_is_offered(monkeypatch):
    import typer.completion
    monkeypatch.setattr(typer.completion, "_get_shell_name", lambda: "bash")  # detected from the parent: sh under make
    res = runner.invoke(app, ["--show-completion"], prog_name="rollmux")
    assert res.exit_code == 0 and "_ROLLMUX_COMPLETE=complete_bash" in res.stdout, res.output


@pytest.fixture
def rollmux_logger():
    """The `rollmux` logger, its level restored afterwards."""
    import logging
    logger = logging.getLogger("rollmux")
    level = logger.level
    yield logger
    logger.setLevel(level)


def test_log_level_sets_the_level_of_rollmux_lines(rollmux_logger, trace):
    import logging
    res = runner.invoke(app, ["--log-level", "info", "simulate", "--jobs", str(trace), "--policy", "solo-d"])
    assert res.exit_code == 0 and rollmux_logger.level == logging.INFO, res.output


def test_log_level_refuses_a_level_it_does_not_know(rollmux_logger):
    res = runner.invoke(app, ["--log-level", "loud", "journal", "check", "x.db"])
    assert res.exit_code == 2 and "loud" in res.stderr


def test_json_dash_writes_json_to_stdout_and_the_table_to_stderr(trace):
    res = runner.invoke(app, ["simulate", "--jobs", str(trace), "--policy", "solo-d", "--json", "-"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert set(doc["policies"]) == {"solo-d"} and "solo-d" in res.stderr and not (trace.parent / "-").exists()


COMMANDS = [["simulate"], ["serve"], ["submit"], ["run"], ["status"], ["cancel"], ["profile"], ["demo"],
            ["chaos"], ["optimal"], ["study"], ["workload", "philly"], ["workload", "paper-trace"],
            ["bench", "sync"], ["bench", "placement"], ["journal", "check"], ["journal", "repair"], []]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "rollmux")
def test_help_has_no_type_placeholders(command):
    import re
    res = runner.invoke(app, [*command, "--help"], terminal_width=200)
    assert res.exit_code == 0, res.output
    assert not re.search(r"<(bool|int|float|str|path|list\[|[a-z]+ range)", res.stdout), res.stdout


# -- the service's structured log lines -----------------------------------------------------------

def test_event_lines_are_key_value_bounded_quoted_and_never_show_a_secret():
    from rollmux.live.events_log import MAX_VALUE, event_line
    line = event_line("submit", job="a", slo=1.5, reason='said "hi"\nthere', token="s3cret", note="x" * 500)
    assert line == 'event=submit job=a slo=1.5 reason="said \\"hi\\"\\nthere" note=' + "x" * MAX_VALUE + "..."
    assert "s3cret" not in line and "token" not in line and "\n" not in line


def test_the_service_logs_submit_placement_and_leave_at_info(caplog):
    import logging

    from rollmux.core.spec import default_cluster
    from rollmux.live.service import SchedulerCore
    caplog.set_level(logging.INFO, logger="rollmux.events")
    core = SchedulerCore(default_cluster().model_dump())
    try:
        placed = core.submit(job_record("a"))
        core.finish("a", placed["token"])
    finally:
        core.shutdown()
    lines = [r.getMessage() for r in caplog.records if r.name == "rollmux.events"]
    assert lines == ["event=submit job=a rollout_gpus=16 train_gpus=8 slo=1.5",
                     f"event=placed job=a case=isolated group={placed['group_id']} epoch=1",
                     'event=leave job=a status=done']
    assert placed["token"] not in caplog.text
