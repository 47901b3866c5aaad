"""GET /metrics through the real server: without a scrape token it answers anyone and names no job;
with one (`rollmux serve --metrics-token-file`) it answers only that token or the admin's, in full."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from factories import make_job

from rollmux.core.spec import default_cluster
from rollmux.live.local import ProcessServer, ThreadServer, free_port
from rollmux.live.service import SchedulerCore
from rollmux.live.telemetry import Telemetry

ADMIN = "admin-token-for-tests-0123456789"
SCRAPE = "scrape-token-for-tests-0123456789"
JOB = "tenant-named-job"
TIMINGS = {"wait_s": 0.0, "onload_s": 0.0, "run_s": 0.01, "offload_s": 0.0}


def _private(path: Path, text: str, mode: int = 0o600) -> Path:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "w") as f:
        f.write(text + "\n")
    os.chmod(path, mode)  # whatever the umask
    return path


def _running_job(http: httpx.Client, admin: str) -> str:
    """Submit JOB and run one iteration of it over HTTP (so the per-job slowdown series exists); its token."""
    r = http.post("/v1/jobs", json=make_job(JOB, rollout=100, train=100, slo=2.0).model_dump(exclude_none=True),
                  headers={"Authorization": f"Bearer {admin}"})
    assert r.status_code == 201, r.text
    token = r.json()["token"]
    auth = {"Authorization": f"Bearer {token}"}
    for phase in ("rollout", "train"):
        permit = http.post(f"/v1/jobs/{JOB}/acquire", json={"phase": phase, "wait_s": 10}, headers=auth)
        assert permit.status_code == 200, permit.text
        done = http.post(f"/v1/jobs/{JOB}/release", headers=auth,
                         json={"grant_no": permit.json()["grant_no"], "phase": phase, "timings": TIMINGS})
        assert done.status_code == 200, done.text
    return token


@pytest.fixture(scope="module")
def scraped(tmp_path_factory):
    """`rollmux serve --metrics-token-file` with JOB iterating: (http client, admin token, JOB's token)."""
    work = tmp_path_factory.mktemp("metrics-auth")
    token_file = _private(work / "scrape.token", SCRAPE)
    server = ProcessServer(str(work / "journal.db"), work, extra=["--metrics-token-file", str(token_file)])
    try:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            yield http, server.admin_token, _running_job(http, server.admin_token)
    finally:
        server.signal()


def test_without_a_scrape_token_metrics_answer_anyone_and_name_no_job():
    holder: dict = {}
    telemetry = Telemetry(lambda: holder["core"].request("metrics").result(timeout=10))
    core = holder["core"] = SchedulerCore(default_cluster().model_dump(), admin_token=ADMIN, telemetry=telemetry)
    with ThreadServer(core, telemetry) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        _running_job(http, ADMIN)
        r = http.get("/metrics")
    assert r.status_code == 200 and "rollmux_jobs{" in r.text
    assert JOB not in r.text and "rollmux_job_iteration_slowdown" not in r.text


@pytest.mark.parametrize("who", ["nobody", "a job's token", "a forged token"])
def test_with_a_scrape_token_metrics_refuse_other_callers(scraped, who):
    http, _, job_token = scraped
    headers = {"nobody": {}, "a job's token": {"Authorization": f"Bearer {job_token}"},
               "a forged token": {"Authorization": "Bearer scrape-token-for-tests-0123456780"}}[who]
    r = http.get("/metrics", headers=headers)
    assert r.status_code == 401 and "rollmux_jobs" not in r.text


def test_with_a_scrape_token_the_scraper_sees_every_series(scraped):
    http, _, _ = scraped
    r = http.get("/metrics", headers={"Authorization": f"Bearer {SCRAPE}"})
    assert r.status_code == 200 and f'rollmux_job_iteration_slowdown{{job="{JOB}"}}' in r.text


def test_with_a_scrape_token_the_admin_may_scrape_too(scraped):
    http, admin, _ = scraped
    r = http.get("/metrics", headers={"Authorization": f"Bearer {admin}"})
    assert r.status_code == 200 and "rollmux_jobs{" in r.text


def test_a_scrape_token_file_others_can_read_is_refused_in_one_line(tmp_path):
    token_file = _private(tmp_path / "scrape.token", SCRAPE, mode=0o644)
    r = subprocess.run([sys.executable, "-m", "rollmux.cli", "serve", "--listen", f"127.0.0.1:{free_port()}",
                        "--store", str(tmp_path / "journal.db"), "--admin-token-file", str(tmp_path / "admin.token"),
                        "--metrics-token-file", str(token_file)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--metrics-token-file" in r.stderr and "readable by others" in r.stderr
    assert SCRAPE not in r.stdout + r.stderr and len(r.stderr.strip().splitlines()) == 1
