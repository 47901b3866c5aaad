"""The HTTP door, tried as an outside client that knows only the route table."""

from __future__ import annotations

import httpx
import pytest
from factories import make_job

from rollmux.core.spec import default_cluster
from rollmux.live.local import ThreadServer
from rollmux.live.service import SchedulerCore
from rollmux.live.telemetry import Telemetry

ADMIN = "admin-token-for-tests-0123456789"
TIMINGS = {"wait_s": 0.0, "onload_s": 0.0, "run_s": 0.01, "offload_s": 0.0}
# Every job route: (method, path template, body).
JOB_ROUTES = [
    ("GET", "/v1/jobs/{id}", None),
    ("DELETE", "/v1/jobs/{id}", None),
    ("POST", "/v1/jobs/{id}/acquire", {"phase": "rollout", "last_grant": None, "wait_s": 0}),
    ("POST", "/v1/jobs/{id}/release", {"grant_no": 1, "phase": "rollout", "timings": TIMINGS}),
    ("POST", "/v1/jobs/{id}/heartbeat", {}),
    ("POST", "/v1/jobs/{id}/progress", {"done": 1, "total": 2}),
    ("POST", "/v1/jobs/{id}/finish", {}),
    ("POST", "/v1/jobs/{id}/exit", {"code": 3, "reason": "RuntimeError: boom"}),
]
ADMIN_ROUTES = [("POST", "/v1/jobs", None), ("GET", "/v1/status", None)]


def _job(jid: str) -> dict:
    return make_job(jid, rollout=100, train=100, slo=2.0).model_dump(exclude_none=True)


@pytest.fixture
def api():
    """A served core with metrics, an httpx client on it, and two submitted jobs' tokens."""
    holder: dict = {}
    telemetry = Telemetry(lambda: holder["core"].request("metrics").result(timeout=10))
    core = holder["core"] = SchedulerCore(default_cluster().model_dump(), admin_token=ADMIN, telemetry=telemetry)
    with ThreadServer(core, telemetry) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        tokens = {}
        for jid in "ab":
            r = http.post("/v1/jobs", json=_job(jid), headers=_auth(ADMIN))
            assert r.status_code == 201, r.text
            tokens[jid] = r.json()["token"]
        yield http, tokens, core


def _auth(token: str | None) -> dict:
    return {"Authorization": f"Bearer {token}"} if token else {}


def _call(http, method, path, body, token):
    return http.request(method, path, json=body, headers=_auth(token))


@pytest.mark.parametrize("method,path,body", JOB_ROUTES)
def test_every_job_route_needs_a_token(api, method, path, body):
    http, tokens, core = api
    before = core.dump()
    for token in (None, "forged-token-of-nobody"):
        r = _call(http, method, path.format(id="a"), body, token)
        assert r.status_code == 401 and "error" in r.json(), (token, r.text)
    assert core.dump() == before


@pytest.mark.parametrize("method,path,body", JOB_ROUTES)
def test_another_jobs_token_is_forbidden_on_every_job_route(api, method, path, body):
    http, tokens, core = api
    before = core.dump()
    r = _call(http, method, path.format(id="a"), body, tokens["b"])
    assert r.status_code == 403, r.text
    assert tokens["b"] not in r.text and tokens["a"] not in r.text
    assert core.dump() == before


@pytest.mark.parametrize("method,path,body", ADMIN_ROUTES)
def test_admin_routes_refuse_a_job_token_and_no_token(api, method, path, body):
    http, tokens, core = api
    body = _job("c") if path == "/v1/jobs" else body
    assert _call(http, method, path, body, tokens["a"]).status_code == 403
    assert _call(http, method, path, body, None).status_code == 401
    assert "c" not in core.dump()["jobs"]


def test_the_admin_token_cannot_act_as_a_job(api):
    http, tokens, core = api
    r = _call(http, "POST", "/v1/jobs/a/acquire", {"phase": "rollout", "wait_s": 0}, ADMIN)
    assert r.status_code == 403


def test_an_unknown_job_is_404_for_the_admin_and_403_for_a_job(api):
    http, tokens, _ = api
    assert _call(http, "GET", "/v1/jobs/nope", None, ADMIN).status_code == 404
    assert _call(http, "DELETE", "/v1/jobs/nope", None, ADMIN).status_code == 404
    assert _call(http, "GET", "/v1/jobs/nope", None, tokens["a"]).status_code == 403


def test_a_full_cycle_submit_acquire_release_finish(api):
    http, tokens, core = api
    h = _auth(tokens["a"])
    grant_no = None
    for phase in ("rollout", "train"):
        r = http.post("/v1/jobs/a/acquire", json={"phase": phase, "last_grant": grant_no, "wait_s": 5}, headers=h)
        assert r.status_code == 200, r.text
        permit = r.json()
        assert {"grant_no", "phase", "nodes", "epoch", "lease_s"} <= set(permit) and permit["phase"] == phase
        assert permit["lease_s"] > 0
        grant_no = permit["grant_no"]
        r = http.post("/v1/jobs/a/release", json={"grant_no": grant_no, "phase": phase, "timings": TIMINGS},
                      headers=h)
        assert r.status_code == 200, r.text
    assert http.get("/v1/jobs/a", headers=h).json()["iterations"] == 1
    assert http.post("/v1/jobs/a/finish", headers=h).status_code == 200
    assert http.get("/v1/jobs/a", headers=_auth(ADMIN)).json()["status"] == "done"
    assert http.post("/v1/jobs/a/acquire", json={"phase": "rollout"}, headers=h).status_code == 410


def test_submit_answers_201_with_the_documented_fields_and_409_for_a_live_id(api):
    http, _, _ = api
    r = http.post("/v1/jobs", json=_job("c"), headers=_auth(ADMIN))
    assert r.status_code == 201 and {"job_id", "token", "group", "case", "nodes"} <= set(r.json())
    again = http.post("/v1/jobs", json=_job("c"), headers=_auth(ADMIN))
    assert again.status_code == 409 and "still running: cancel it (rollmux cancel c" in again.json()["error"]
    assert "rollmux run --job-id NEW" in again.json()["error"]


def test_only_the_admin_reports_an_entrypoints_exit_which_fails_the_job_with_its_code_and_last_line(api):
    http, tokens, core = api
    line = f"\x1b[31mRuntimeError: boom\x1b[0m\rtoken {tokens['a']} Bearer {ADMIN}"
    body = {"code": 3, "reason": line}
    before = core.dump()
    for token in (tokens["a"], tokens["b"]):  # its own token too: its launcher (the admin) reports its exit
        r = _call(http, "POST", "/v1/jobs/a/exit", body, token)
        assert r.status_code == 403 and "only the admin" in r.json()["error"], r.text
    assert core.dump() == before
    r = _call(http, "POST", "/v1/jobs/a/exit", body, ADMIN)
    assert r.status_code == 200, r.text
    reason = "entrypoint exited with code 3: RuntimeError: boom token [redacted] Bearer [redacted]"
    assert r.json() == {"job_id": "a", "status": "failed", "reason": reason}
    assert _call(http, "GET", "/v1/jobs/a", None, ADMIN).json()["reason"] == reason
    assert core.status()["jobs"]["a"]["reason"] == reason
    # A job that ended keeps its status and reason; the report is answered with them.
    r = _call(http, "POST", "/v1/jobs/a/exit", {"code": 0}, ADMIN)
    assert r.status_code == 200 and r.json()["reason"] == reason
    assert _call(http, "POST", "/v1/jobs/nope/exit", {"code": 1}, ADMIN).status_code == 404
    assert _call(http, "POST", "/v1/jobs/nope/exit", {"code": 1}, tokens["b"]).status_code == 403


@pytest.mark.parametrize("body,field", [({"code": 256}, "code"), ({"code": "3"}, "code"), ({}, "code"),
                                        ({"code": 1, "reason": "x" * 5000}, "reason"),
                                        ({"code": 1, "signal": 9}, "signal")])
def test_a_bad_exit_report_is_400_naming_the_field_and_changes_nothing(api, body, field):
    http, _, core = api
    before = core.dump()
    r = _call(http, "POST", "/v1/jobs/b/exit", body, ADMIN)
    assert r.status_code == 400 and r.json()["field"] == field, r.text
    assert core.dump() == before


def test_bad_input_is_400_naming_the_field(api):
    http, tokens, _ = api
    bad = {**_job("d"), "slo": 0.5}
    r = http.post("/v1/jobs", json=bad, headers=_auth(ADMIN))
    assert r.status_code == 400 and r.json()["field"] == "slo"
    r = http.post("/v1/jobs", content=b"{not json", headers=_auth(ADMIN))
    assert r.status_code == 400 and "not JSON" in r.json()["error"]
    r = http.post("/v1/jobs/a/acquire", json={"phase": "eval"}, headers=_auth(tokens["a"]))
    assert r.status_code == 400 and r.json()["field"] == "phase"
    r = http.post("/v1/jobs/a/acquire", json={"phase": "rollout", "wait_s": 99}, headers=_auth(tokens["a"]))
    assert r.status_code == 400 and r.json()["field"] == "wait_s"
    r = http.post("/v1/jobs", content=b"x" * (2 << 20), headers=_auth(ADMIN))
    assert r.status_code == 413


def test_an_acquire_that_cannot_be_granted_yet_answers_204_and_keeps_its_place(api):
    http, tokens, _ = api
    ha, hb = _auth(tokens["a"]), _auth(tokens["b"])
    first = http.post("/v1/jobs/a/acquire", json={"phase": "rollout", "wait_s": 5}, headers=ha).json()
    r = http.post("/v1/jobs/b/acquire", json={"phase": "rollout", "wait_s": 0.2}, headers=hb)
    assert r.status_code == 204  # a holds the shared node
    http.post("/v1/jobs/a/release", json={"grant_no": first["grant_no"], "phase": "rollout", "timings": TIMINGS},
              headers=ha)
    r = http.post("/v1/jobs/b/acquire", json={"phase": "rollout", "wait_s": 5}, headers=hb)
    assert r.status_code == 200 and r.json()["job_id"] == "b"


def test_cancel_by_the_job_reclaims_its_permit_and_the_group_goes_on(api):
    http, tokens, _ = api
    http.post("/v1/jobs/a/acquire", json={"phase": "rollout", "wait_s": 5}, headers=_auth(tokens["a"]))
    assert http.delete("/v1/jobs/a", headers=_auth(tokens["a"])).status_code == 200
    r = http.post("/v1/jobs/b/acquire", json={"phase": "rollout", "wait_s": 5}, headers=_auth(tokens["b"]))
    assert r.status_code == 200
    status = http.get("/v1/status", headers=_auth(ADMIN)).json()
    assert status["jobs"]["a"]["status"] == "cancelled" and status["groups"][0]["members"] == ["b"]


def test_metrics_are_public_and_hold_the_names_but_no_secret(api):
    http, tokens, _ = api
    http.post("/v1/jobs/a/acquire", json={"phase": "rollout", "wait_s": 5}, headers=_auth(tokens["a"]))
    http.post("/v1/jobs/a/acquire", headers=_auth("forged"))
    text = http.get("/metrics").text
    for name in ("rollmux_jobs", "rollmux_groups", "rollmux_admissions_total", "rollmux_pool_gpus",
                 "rollmux_permit_wait_seconds", "rollmux_refused_requests_total", "rollmux_journal_records_total",
                 "rollmux_build_info", "rollmux_cost_per_hour"):
        assert name in text, name
    assert all(t not in text for t in [*tokens.values(), ADMIN])


def test_status_names_the_journal_without_a_password(api):
    http, _, core = api
    assert "journal" in http.get("/v1/status", headers=_auth(ADMIN)).json()


def test_dashboard_needs_an_admin_login_that_sets_an_httponly_cookie(api):
    http, tokens, _ = api
    r = http.get("/", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/login"
    r = http.post("/login", data={"token": tokens["a"]}, follow_redirects=False)
    assert r.headers["location"] == "/login?failed=1" and "set-cookie" not in r.headers
    r = http.post("/login", data={"token": ADMIN}, follow_redirects=False)
    cookie = r.headers["set-cookie"]
    assert r.status_code == 303 and "HttpOnly" in cookie and "SameSite=strict" in cookie and ADMIN not in cookie
    page = http.get("/")
    assert page.status_code == 200 and "Content-Security-Policy" in page.headers
    assert http.get("/v1/status").status_code == 200  # the session cookie authenticates the page's fetch


def test_polling_a_waiting_acquire_again_and_again_leaves_nothing_behind(api):
    http, tokens, core = api
    http.post("/v1/jobs/a/acquire", json={"phase": "rollout", "wait_s": 5}, headers=_auth(tokens["a"]))
    for _ in range(20):
        r = http.post("/v1/jobs/b/acquire", json={"phase": "rollout", "wait_s": 0}, headers=_auth(tokens["b"]))
        assert r.status_code == 204
    request = core._waiting[("b", "rollout")]
    assert request._done_callbacks == [] and not request.aio.done()  # one bridge, nothing left per poll


def test_status_comes_a_page_at_a_time(api):
    http, _, _ = api
    for jid in "cdef":
        http.post("/v1/jobs", json=_job(jid), headers=_auth(ADMIN))
    first = http.get("/v1/status?limit=2", headers=_auth(ADMIN)).json()
    rest = http.get("/v1/status?offset=2&limit=10", headers=_auth(ADMIN)).json()
    assert list(first["jobs"]) == ["a", "b"] and list(rest["jobs"]) == ["c", "d", "e", "f"]
    assert first["page"] == {"offset": 0, "limit": 2, "groups_total": first["page"]["groups_total"],
                             "jobs_total": 6, "colocated_total": 0}
    assert http.get("/v1/status?limit=0", headers=_auth(ADMIN)).json()["field"] == "limit"
    assert http.get("/v1/status?offset=-1", headers=_auth(ADMIN)).status_code == 400
