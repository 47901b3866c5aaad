"""The dashboard on a real server with jobs, in headless Chromium: the groups render."""

from __future__ import annotations

import httpx
from dashboard_checks import check_dashboard_dom, check_screenshot, dump_dom, screenshot
from factories import make_job

from rollmux.core.spec import default_cluster
from rollmux.live.local import ThreadServer
from rollmux.live.service import SchedulerCore

ADMIN = "admin-token-for-tests-0123456789"
TIMINGS = {"wait_s": 0.0, "onload_s": 0.0, "run_s": 0.01, "offload_s": 0.0}


def test_the_dashboard_shows_the_servers_groups_turns_timeline_and_jobs(tmp_path):
    core = SchedulerCore(default_cluster().model_dump(), admin_token=ADMIN)
    jobs = [make_job("a", rollout=100, train=20), make_job("b", rollout=20, train=100),
            make_job("solo", rollout=50, train=50, slo=1.0)]
    with ThreadServer(core) as server, httpx.Client(base_url=server.url) as http:
        tok = {j.job_id: core.submit(j.model_dump(exclude_none=True))["token"] for j in jobs}
        # ... and one submitted without phase times, measured as it runs (its row says so)
        tok["m"] = core.submit({"job_id": "m", "arrival_s": 0, "duration_s": 3600, "slo": 2.0, "rollout_gpus": 8,
                                "train_gpus": 8})["token"]
        for job_id in ("a", "m"):
            for phase in ("rollout", "train"):
                core.acquire(job_id, phase, tok[job_id])
                core.release(job_id, phase, TIMINGS, tok[job_id])
        core.acquire("b", "rollout", tok["b"])  # a running phase on the timeline
        login = http.post("/login", data={"token": ADMIN}, follow_redirects=False)
        cookie = f"rollmux_session={login.cookies['rollmux_session']}"
        status = http.get("/v1/status", headers={"Authorization": f"Bearer {ADMIN}"}).json()
        assert len(status["groups"]) == 3 and status["jobs"]["m"]["profile"]["measuring"] == {"iterations": 1, "of": 4}
        check_dashboard_dom(dump_dom(f"{server.url}/", cookie=cookie), status)
        png = tmp_path / "dashboard.png"  # look at it: pytest --basetemp=DIR keeps it
        screenshot(f"{server.url}/", png, cookie=cookie)
        check_screenshot(png)
