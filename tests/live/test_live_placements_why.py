"""Why the live service admitted jobs alone: GET /v1/status, `rollmux status` and the metric
rollmux_isolated_placements_total{reason}, through the real HTTP service."""

from __future__ import annotations

import httpx
from factories import make_job
from prometheus_client.parser import text_string_to_metric_families

from rollmux.core.placement.why import REASON_NAMES
from rollmux.core.spec import default_cluster
from rollmux.live.local import ThreadServer
from rollmux.live.service import SchedulerCore
from rollmux.live.status_view import summary_line
from rollmux.live.telemetry import Telemetry

ADMIN = "admin-token-for-tests-0123456789"
CLUSTER = default_cluster().model_dump()
# a founds the first group; b's own SLO is loose but a's is tight (a member's SLO refuses b);
# c is so short that its own budget is the tightest anywhere (its SLO refuses both groups).
JOBS = [make_job("a", rollout=100, train=100, slo=1.0), make_job("b", rollout=100, train=100, slo=2.0),
        make_job("c", rollout=10, train=10, slo=1.0), make_job("d", rollout=100, train=100, slo=2.0)]
EXPECTED = {**dict.fromkeys(REASON_NAMES, 0), "no_groups": 1, "member_slo": 1, "newcomer_slo": 1}


def _auth(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def _isolated_counter(text: str) -> dict[str, float]:
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    return {s.labels["reason"]: s.value for s in fams["rollmux_isolated_placements"].samples
            if s.name.endswith("_total")}


def test_status_and_metric_say_why_jobs_were_admitted_alone():
    holder: dict = {}
    telemetry = Telemetry(lambda: holder["core"].request("metrics").result(timeout=10))
    core = holder["core"] = SchedulerCore(CLUSTER, admin_token=ADMIN, telemetry=telemetry)
    with ThreadServer(core, telemetry) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        # Before any admission every reason is there at 0 (rate() sees the first event).
        assert _isolated_counter(http.get("/metrics").text) == dict.fromkeys(REASON_NAMES, 0.0)
        cases = {}
        for job in JOBS:
            r = http.post("/v1/jobs", json=job.model_dump(exclude_none=True), headers=_auth(ADMIN))
            assert r.status_code == 201, r.text
            cases[job.job_id] = r.json()["case"]
        assert cases == {"a": "isolated", "b": "isolated", "c": "isolated", "d": "direct_packing"}
        st = http.get("/v1/status", headers=_auth(ADMIN)).json()
        assert st["isolated_placements"] == 3
        assert st["placements_why"] == EXPECTED
        assert sum(st["refusals_why"].values()) == 0 + 1 + 2  # a saw no group, b one, c two
        assert {j: s["why"] for j, s in st["jobs"].items()} == {
            "a": "no_groups", "b": "member_slo", "c": "newcomer_slo", "d": None}
        assert _isolated_counter(http.get("/metrics").text) == {k: float(v) for k, v in EXPECTED.items()}
        line = summary_line(st)
        assert "3 admitted alone" in line and "member_slo 1" in line and "group_size" not in line


def test_the_reasons_survive_a_restart_from_the_journal_and_from_a_snapshot(tmp_path):
    for snapshot_every in (10_000, 2):  # replayed record by record; mostly from a snapshot
        store = str(tmp_path / f"journal-{snapshot_every}.db")
        core = SchedulerCore(CLUSTER, store=store, snapshot_every=snapshot_every)
        for job in JOBS:
            core.submit(job.model_dump(exclude_none=True))
        before = core.status()
        core.shutdown()
        again = SchedulerCore(None, store=store)
        try:
            after = again.status()
            for key in ("isolated_placements", "placements_why", "refusals_why"):
                assert after[key] == before[key], key
            assert after["placements_why"] == EXPECTED
            assert {j: s["why"] for j, s in after["jobs"].items()} == {j: s["why"] for j, s in before["jobs"].items()}
        finally:
            again.shutdown()
