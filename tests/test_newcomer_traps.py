"""Traps a newcomer met with only the README, docs/ and --help, each through the real interface: the
`rollmux` CLI (in a subprocess where a trap could hang it or where the process's own log is the
output) and `rollmux serve` as an operator starts it, with --log-level before the command."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from rollmux.cli import app
from rollmux.live.local import free_port, wait_until_up
from factories import job_record

ROOT = Path(__file__).resolve().parents[1]
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")


# -- simulate: a job asking for more GPUs than any cluster has ------------------------------------

def test_simulate_refuses_a_job_asking_for_millions_of_rollout_gpus_at_once(tmp_path):
    # Such a job once made `simulate` run for ever: the timeout is the failure it would meet.
    (tmp_path / "t.jsonl").write_text(json.dumps(job_record("a", rollout_gpus=9_999_999)) + "\n")
    res = subprocess.run([sys.executable, "-m", "rollmux.cli", "simulate", "--jobs", "t.jsonl"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, res.stdout + res.stderr
    (line,) = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert line.startswith("error: t.jsonl:1: field 'rollout_gpus': ") and "9999999" in line, line


# -- serve: an unknown field in its cluster file --------------------------------------------------

def test_serve_refuses_an_unknown_cluster_field_naming_its_line_before_creating_the_store(tmp_path):
    (tmp_path / "c.yaml").write_text("pools:\n  rollout: {gpu: H20, gpus_per_node: 8, price_per_gpu_hour: 1.0}\n"
                                     "  train: {gpu: H800, gpus_per_node: 8, price_per_gpu_hour: 2.85}\n"
                                     "regoin: eu\n")
    res = CliRunner().invoke(app, ["serve", "--listen", "127.0.0.1:0", "--store", str(tmp_path / "j.db"),
                                   "--cluster", str(tmp_path / "c.yaml"),
                                   "--admin-token-file", str(tmp_path / "admin.token")])
    assert res.exit_code == 2, res.output
    assert [ln for ln in res.stderr.splitlines() if ln.strip()] == [
        f"error: {tmp_path / 'c.yaml'}:4: field 'regoin': unknown field"], res.stderr
    assert res.stdout == "" and not (tmp_path / "j.db").exists() and not (tmp_path / "admin.token").exists()


# -- the README: a guide, not a research log -------------------------------------------------------

def test_the_readme_is_short_and_carries_no_dated_entries_or_tracker_items():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) < 200, len(lines)
    found = [f"README.md:{n}: {ln}" for n, ln in enumerate(lines, 1)
             if DATE.search(ln) or re.search(r"\bissue\s*#?\d+", ln, flags=re.I)]
    assert found == []


# -- rollmux serve's own log, as an operator starts it ---------------------------------------------

ADMIN_ROUTES = [("POST", "/v1/jobs"), ("GET", "/v1/status")]


@pytest.fixture(scope="module")
def serve_log(tmp_path_factory) -> dict:
    """`rollmux --log-level info serve` in a child process: a job submitted and placed, each admin
    route called with a wrong token, then SIGTERM; what it printed and the job's token."""
    work = tmp_path_factory.mktemp("serve-log")
    url = f"http://127.0.0.1:{free_port()}"
    log = open(work / "serve.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "rollmux.cli", "--log-level", "info", "serve", "--listen",
                             url.removeprefix("http://"), "--store", str(work / "j.db"),
                             "--admin-token-file", str(work / "admin.token")],
                            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        wait_until_up(url, proc=proc)
        admin = {"Authorization": f"Bearer {(work / 'admin.token').read_text().strip()}"}
        with httpx.Client(base_url=url, timeout=30) as http:
            placed = http.post("/v1/jobs", json=job_record("a"), headers=admin)
            assert placed.status_code == 201, placed.text
            wrong = {"Authorization": "Bearer not-the-admin-token"}
            refusals = [http.request(m, path, headers=wrong, json=job_record("b") if m == "POST" else None)
                        for m, path in ADMIN_ROUTES]
        assert [r.status_code for r in refusals] == [401] * len(ADMIN_ROUTES), [r.text for r in refusals]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        log.close()
    return {"text": (work / "serve.log").read_text(), "placed": placed.json()}


def test_serve_at_log_level_info_logs_the_submit_and_the_placement(serve_log):
    placed = serve_log["placed"]
    assert "event=submit job=a rollout_gpus=16 train_gpus=8 slo=1.5" in serve_log["text"], serve_log["text"]
    assert (f"event=placed job=a case={placed['case']} group={placed['group_id']} epoch={placed['epoch']}"
            in serve_log["text"]), serve_log["text"]
    assert placed["token"] not in serve_log["text"]


@pytest.mark.parametrize("method,path", ADMIN_ROUTES)
def test_serve_logs_a_refused_admin_route_by_the_route_not_job_none(serve_log, method, path):
    refusals = [ln for ln in serve_log["text"].splitlines() if "refused auth" in ln]
    assert any(ln.endswith(f"refused auth on {method} {path}: missing or wrong token") for ln in refusals), refusals
    assert not [ln for ln in refusals if "None" in ln], refusals


def test_demo_refuses_too_few_iterations_before_starting_anything():
    res = CliRunner().invoke(app, ["demo", "--iterations", "3"])
    assert res.exit_code == 2 and "--iterations" in res.output and "greater than or equal to" in res.output
