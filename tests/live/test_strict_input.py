"""Strict input at the HTTP door: job ids, finite bounded numbers, unknown fields, nesting, and the
journal replay that reads the same models. Through the real HTTP server (ThreadServer)."""

from __future__ import annotations

import io
import json

import httpx
import pytest
from factories import job_record
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from rollmux.core.spec import MAX_PHASE_S, default_cluster
from rollmux.live.journal import open_store
from rollmux.live.live_state import ReplayError
from rollmux.live.local import ThreadServer
from rollmux.live.service import SchedulerCore
from rollmux.live.status_view import groups_table, jobs_table, summary_line
from rollmux.live.wire import MAX_DEPTH, MAX_HOST_BYTES, TIMING_FIELDS, ReleaseBody, read

ADMIN = "admin-token-for-strict-input-0123"
TIMINGS = {"wait_s": 0.0, "onload_s": 0.0, "run_s": 1.0, "offload_s": 0.0}


class Served:
    """A served core that repairs drift (as `rollmux serve` does), an httpx client, one job's token."""

    def __init__(self) -> None:
        self.core = SchedulerCore(default_cluster().model_dump(), admin_token=ADMIN, repair=True)
        self.server = ThreadServer(self.core)
        self.http = httpx.Client(base_url=self.server.url, timeout=30)
        r = self.http.post("/v1/jobs", json=job_record("j1"), headers=_auth(ADMIN))
        assert r.status_code == 201, r.text
        self.token = r.json()["token"]

    def grant(self, phase: str) -> int:
        """Acquire `phase` for j1; its grant number."""
        r = self.http.post("/v1/jobs/j1/acquire", json={"phase": phase, "wait_s": 10}, headers=_auth(self.token))
        assert r.status_code == 200, r.text
        return r.json()["grant_no"]

    def release(self, phase: str, grant_no: int, timings: dict) -> httpx.Response:
        """Release j1's `phase` with these timings."""
        body = {"phase": phase, "grant_no": grant_no, "timings": timings}
        return self.http.post("/v1/jobs/j1/release", json=body, headers=_auth(self.token))

    def raw(self, path: str, text: str) -> httpx.Response:
        """POST `text` as the body, as it is (JSON or not)."""
        return self.http.post(path, content=text, headers={**_auth(self.token), "Content-Type": "application/json"})

    def views(self) -> tuple[int, int]:
        """Status codes of GET /v1/status and GET /v1/jobs/j1."""
        return (self.http.get("/v1/status", headers=_auth(ADMIN)).status_code,
                self.http.get("/v1/jobs/j1", headers=_auth(self.token)).status_code)

    def close(self) -> None:
        """Stop the client and the server."""
        self.http.close()
        self.server.stop()


def _auth(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def served():
    s = Served()
    yield s
    s.close()


@pytest.fixture(scope="module")
def shared():
    s = Served()
    yield s
    s.close()


# -- job ids -----------------------------------------------------------------------------------

def test_a_job_named_admin_is_refused_at_submit_naming_job_id(served):
    r = served.http.post("/v1/jobs", json=job_record("<admin>"), headers=_auth(ADMIN))
    assert r.status_code == 400 and r.json()["field"] == "job_id"


@pytest.mark.parametrize("path_id", ["%3Cadmin%3E", "a%20b", "x" * 64, "status", "Admin", "-j1"])
def test_a_path_job_id_outside_the_pattern_is_not_found_before_any_lookup(served, monkeypatch, path_id):
    asked = []
    monkeypatch.setattr(served.core, "caller", lambda *a: asked.append(("caller", a)))
    monkeypatch.setattr(served.core, "request", lambda op, *a, **kw: asked.append((op, a)))
    r = served.http.get(f"/v1/jobs/{path_id}", headers=_auth(ADMIN))
    assert (r.status_code, r.json()["field"], asked) == (404, "job_id", [])


# -- unknown fields and nesting ----------------------------------------------------------------------

@pytest.mark.parametrize("path,body,field", [
    ("/v1/jobs/j1/acquire", {"phase": "rollout", "wait_s": 0, "priority": 1}, "priority"),
    ("/v1/jobs/j1/release", {"phase": "rollout", "timings": TIMINGS, "extra": 1}, "extra"),
    ("/v1/jobs/j1/release", {"phase": "rollout", "timings": {**TIMINGS, "gpu_s": 1}}, "timings.gpu_s"),
    ("/v1/jobs/j1/heartbeat", {"nodes": None, "bogus": True}, "bogus"),
    ("/v1/jobs/j1/progress", {"done": 1, "total": 2, "eta": 3}, "eta"),
    ("/v1/jobs/j1/finish", {"why": "done"}, "why"),
])
def test_an_unknown_field_on_a_job_route_is_refused_naming_it(served, path, body, field):
    r = served.http.post(path, json=body, headers=_auth(served.token))
    assert (r.status_code, r.json()["field"]) == (400, field)


def test_an_unknown_field_in_a_submission_is_refused_naming_it(served):
    r = served.http.post("/v1/jobs", json=job_record("j2", host_gb={"rollout": 1.0, "train": 1.0, "disk": 2.0}),
                         headers=_auth(ADMIN))
    assert (r.status_code, r.json()["field"]) == (400, "host_gb.disk")


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 100_000])
def test_a_body_nested_too_deeply_is_refused_with_400(served, depth):
    r = served.raw("/v1/jobs/j1/heartbeat", '{"nodes": ' + "[" * depth + "]" * depth + "}")
    assert r.status_code == 400 and "nested deeper" in r.json()["error"]


# -- numbers -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("slo", [1e308, 100.5])
def test_a_submission_with_an_slo_out_of_range_is_refused_naming_slo(served, slo):
    r = served.http.post("/v1/jobs", json=job_record("j2", slo=slo), headers=_auth(ADMIN))
    assert (r.status_code, r.json()["field"]) == (400, "slo")


@pytest.mark.parametrize("run_s", ["Infinity", "-Infinity", "NaN", "1e308", "1e999", "-1", "true", '"1"'])
def test_a_poisoned_run_s_is_refused_and_the_job_goes_on(served, run_s):
    served.release("rollout", served.grant("rollout"), TIMINGS)
    grant_no = served.grant("train")
    r = served.raw("/v1/jobs/j1/release", '{"phase": "train", "grant_no": %d, "timings": {"wait_s": 0, '
                   '"onload_s": 0, "run_s": %s, "offload_s": 0}}' % (grant_no, run_s))
    assert (r.status_code, r.json()["field"]) == (400, "timings.run_s")
    assert served.views() == (200, 200)
    assert served.release("train", grant_no, TIMINGS).status_code == 200


def test_releases_of_run_s_zero_and_tiny_keep_drift_repair_and_views_working(served):
    codes = []
    for run_s in (0.0, 5e-324, 1e-300, 0.0, MAX_PHASE_S, 1e-4, 200.0):
        for phase in ("rollout", "train"):
            codes.append(served.release(phase, served.grant(phase), {**TIMINGS, "run_s": run_s}).status_code)
    assert codes == [200] * 14 and served.views() == (200, 200)


# -- journal replay ----------------------------------------------------------------------------------

@pytest.mark.parametrize("kind,payload,says", [
    ("submit", {"job": job_record("<admin>"), "token_hash": "0" * 64, "at": 0.0}, "job.job_id"),
    ("release", {"job_id": "j1", "phase": "train", "timings": {**TIMINGS, "run_s": float("inf")}},
     "timings.run_s"),
])
def test_a_journal_record_with_a_bad_job_id_or_number_fails_replay_naming_it(tmp_path, kind, payload, says):
    url = f"sqlite://{tmp_path / 'journal.db'}"
    SchedulerCore(default_cluster().model_dump(), store=url).shutdown()
    store = open_store(url)
    store.stage(kind, payload)
    store.commit()
    store.close()
    with pytest.raises(ReplayError, match=f"record '{kind}'.*{says}"):
        SchedulerCore(None, store=url)


# -- anything the wire accepts, through release, drift repair and the views -----------------------------

SECONDS = st.one_of(st.integers(0, int(MAX_PHASE_S)), st.floats(0, MAX_PHASE_S),
                    st.sampled_from([0.0, 5e-324, 1e-300, 1e-6, 1e-3, MAX_PHASE_S]))
TIMINGS_ACCEPTED = st.fixed_dictionaries(
    {k: SECONDS for k in TIMING_FIELDS},
    optional={"epoch": st.integers(0, 2**40),
              "host_bytes": st.dictionaries(st.sampled_from(["rollout", "train"]), st.integers(0, MAX_HOST_BYTES))})


@settings(max_examples=30, deadline=None)
@given(rollout=TIMINGS_ACCEPTED, train=TIMINGS_ACCEPTED)
def test_any_timings_the_wire_accepts_never_break_repair_or_the_views(shared, rollout, train):
    for phase, timings in (("rollout", rollout), ("train", train)):
        grant_no = shared.grant(phase)
        read(ReleaseBody, {"phase": phase, "grant_no": grant_no, "timings": timings})  # the wire accepts it
        r = shared.release(phase, grant_no, timings)
        assert r.status_code == 200, r.text
    status = shared.http.get("/v1/status", headers=_auth(ADMIN))
    job = shared.http.get("/v1/jobs/j1", headers=_auth(shared.token))
    assert (status.status_code, job.status_code) == (200, 200)
    console = Console(file=io.StringIO(), width=200)
    for table in (groups_table(status.json()), jobs_table(status.json())):
        console.print(table)
    console.print(summary_line(json.loads(status.text)))
