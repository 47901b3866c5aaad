"""The dashboard's session cookie through the real HTTP server: what it may change (Origin and CSRF
token), sign-in limits, sign-out, server-side expiry; and caller strings in the log."""

from __future__ import annotations

import logging
import re
import time
from urllib.parse import quote

import httpx
import pytest
from dashboard_checks import _devtools_page
from factories import make_job

from rollmux.core.spec import default_cluster
from rollmux.live.dashboard.routes import LOGIN_FAILURES, LOGIN_WINDOW_S, MAX_SESSIONS, SESSION_TTL_S
from rollmux.live.local import ThreadServer
from rollmux.live.service import SchedulerCore

ADMIN = "admin-token-for-tests-0123456789"


@pytest.fixture
def site():
    """A served core (admin token ADMIN), an httpx client on it, and the server's dashboard object."""
    core = SchedulerCore(default_cluster().model_dump(), admin_token=ADMIN)
    with ThreadServer(core) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        yield http, server._server.config.app.state.dashboard


def _login(http: httpx.Client) -> tuple[str, str]:
    """Sign in; (the session cookie's value, the CSRF token the dashboard page carries)."""
    r = http.post("/login", data={"token": ADMIN}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/", r.text
    sid = r.cookies["rollmux_session"]
    http.cookies.clear()  # each request below names the cookie it sends
    page = http.get("/", headers=_cookie(sid), follow_redirects=False)
    (csrf,) = re.findall(r'<meta name="csrf-token" content="([^"]+)">', page.text)
    return sid, csrf


def _cookie(sid: str) -> dict:
    return {"Cookie": f"rollmux_session={sid}"}


def _headers(http: httpx.Client, origin: str | None = "self", csrf: str | None = None, sid: str | None = None) -> dict:
    out = _cookie(sid) if sid is not None else {}
    if origin is not None:
        out["Origin"] = str(http.base_url).rstrip("/") if origin == "self" else origin
    if csrf is not None:
        out["X-CSRF-Token"] = csrf
    return out


def _job(jid: str) -> dict:
    return make_job(jid, rollout=100, train=100, slo=2.0).model_dump(exclude_none=True)


def _jobs(http: httpx.Client) -> set[str]:
    return set(http.get("/v1/status", headers={"Authorization": f"Bearer {ADMIN}"}).json()["jobs"])


@pytest.mark.parametrize("origin,csrf", [(None, None), ("self", None), (None, "good"), ("null", "good"),
                                         ("self", "forged-csrf-token")],
                         ids=["neither", "no-csrf", "no-origin", "null-origin", "wrong-csrf"])
def test_a_cookie_submit_without_the_origin_and_the_csrf_token_is_refused(site, origin, csrf):
    http, _ = site
    sid, token = _login(http)
    headers = _headers(http, origin, token if csrf == "good" else csrf, sid=sid)
    r = http.post("/v1/jobs", json=_job("a"), headers=headers)
    assert r.status_code == 403 and "a" not in _jobs(http)


def test_a_cookie_submit_with_the_origin_and_the_csrf_token_is_accepted(site):
    http, _ = site
    sid, csrf = _login(http)
    r = http.post("/v1/jobs", json=_job("a"), headers=_headers(http, "self", csrf, sid=sid))
    assert r.status_code == 201 and "a" in _jobs(http)


def test_a_cross_origin_cookie_cancel_is_refused(site):
    http, _ = site
    http.post("/v1/jobs", json=_job("a"), headers={"Authorization": f"Bearer {ADMIN}"})
    sid, csrf = _login(http)
    r = http.delete("/v1/jobs/a", headers=_headers(http, "https://evil.example", csrf, sid=sid))
    assert r.status_code == 403
    assert http.get("/v1/jobs/a", headers={"Authorization": f"Bearer {ADMIN}"}).json()["status"] != "cancelled"


def test_a_cookie_read_needs_no_csrf_token(site):
    http, _ = site
    sid, _ = _login(http)
    assert http.get("/v1/status", headers=_cookie(sid)).status_code == 200


def test_bearer_requests_need_neither_origin_nor_csrf_token(site):
    http, _ = site
    auth = {"Authorization": f"Bearer {ADMIN}"}
    assert http.post("/v1/jobs", json=_job("a"), headers=auth).status_code == 201
    assert http.post("/v1/jobs", json=_job("b"), headers={**auth, "Origin": "https://evil.example"}).status_code == 201
    assert http.delete("/v1/jobs/a", headers=auth).status_code == 200


def test_logout_ends_the_session_on_the_server(site):
    http, _ = site
    sid, csrf = _login(http)
    r = http.post("/logout", headers=_headers(http, "self", csrf, sid=sid))
    assert r.status_code == 204 and 'rollmux_session=""' in r.headers["set-cookie"]
    assert http.get("/v1/status", headers=_cookie(sid)).status_code == 401
    assert http.get("/", headers=_cookie(sid), follow_redirects=False).status_code == 303


def test_logout_without_the_csrf_token_is_refused_and_the_session_lives(site):
    http, _ = site
    sid, _ = _login(http)
    assert http.post("/logout", headers=_headers(http, "self", sid=sid)).status_code == 403
    assert http.get("/v1/status", headers=_cookie(sid)).status_code == 200


def test_an_expired_session_is_refused_whatever_the_cookie_says(site):
    http, dashboard = site
    sid, _ = _login(http)
    dashboard.sessions.clock = lambda: time.monotonic() + SESSION_TTL_S  # a session's lifetime later
    assert http.get("/v1/status", headers=_cookie(sid)).status_code == 401
    assert len(dashboard.sessions) == 0  # pruned, not only refused


def test_live_sessions_are_capped_and_the_oldest_ends_first(site):
    http, dashboard = site
    first, _ = _login(http)
    for _ in range(MAX_SESSIONS):
        _login(http)
    assert len(dashboard.sessions) == MAX_SESSIONS
    assert http.get("/v1/status", headers=_cookie(first)).status_code == 401


def test_the_sixth_failed_sign_in_in_a_minute_is_429_with_retry_after(site):
    http, _ = site
    for _ in range(LOGIN_FAILURES):
        r = http.post("/login", data={"token": "wrong-token"}, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == "/login?failed=1"
    r = http.post("/login", data={"token": "wrong-token"}, follow_redirects=False)
    assert r.status_code == 429 and 1 <= int(r.headers["retry-after"]) <= LOGIN_WINDOW_S


def test_a_blocked_client_cannot_sign_in_until_the_window_passes(site):
    http, dashboard = site
    for _ in range(LOGIN_FAILURES):
        http.post("/login", data={"token": "wrong-token"}, follow_redirects=False)
    r = http.post("/login", data={"token": ADMIN}, follow_redirects=False)
    assert r.status_code == 429 and "set-cookie" not in r.headers
    dashboard.limiter.clock = lambda: time.monotonic() + LOGIN_WINDOW_S  # the window later
    assert http.post("/login", data={"token": ADMIN}, follow_redirects=False).status_code == 303


def test_a_sign_in_from_another_origin_is_refused(site):
    http, _ = site
    r = http.post("/login", data={"token": ADMIN}, headers={"Origin": "https://evil.example"},
                  follow_redirects=False)
    assert r.status_code == 403 and "set-cookie" not in r.headers


def test_a_sign_in_from_the_page_itself_is_accepted(site):
    http, _ = site
    r = http.post("/login", data={"token": ADMIN}, headers=_headers(http, "self"), follow_redirects=False)
    assert r.status_code == 303 and "rollmux_session" in r.cookies


def test_a_job_id_with_newlines_and_escapes_is_logged_escaped_and_bounded(site, caplog):
    http, _ = site
    evil = "x\n2099-01-01 CRITICAL forged line\x1b[31m" + "y" * 300
    with caplog.at_level(logging.WARNING, logger="rollmux.service"):
        r = http.get("/v1/jobs/" + quote(evil, safe=""), headers={"Authorization": "Bearer forged"})
    assert r.status_code in (401, 404)  # no job can have this id
    (line,) = [rec.getMessage() for rec in caplog.records if "forged line" in rec.getMessage()]
    assert "\n" not in line and "\x1b" not in line and "\\n" in line and "\\x1b" in line
    assert "y" * 81 not in line and len(line) < 300


def test_a_field_name_with_newlines_is_logged_escaped_and_bounded(site, caplog):
    http, _ = site
    body = {**_job("a"), "x\n2099-01-01 CRITICAL forged line\x1b[31m" + "z" * 300: 1}
    with caplog.at_level(logging.WARNING, logger="rollmux.service"):
        r = http.post("/v1/jobs", json=body, headers={"Authorization": f"Bearer {ADMIN}"})
    assert r.status_code == 400
    (line,) = [rec.getMessage() for rec in caplog.records if "forged line" in rec.getMessage()]
    assert "\n" not in line and "\x1b" not in line and "\\n" in line and "\\x1b" in line
    assert "z" * 241 not in line and len(line) < 400


# -- the real pages in headless Chromium: its Origin header and the page's CSRF token do the job ----------

def test_chromium_signs_in_from_the_login_page(site):
    http, dashboard = site
    with _devtools_page(str(http.base_url).rstrip("/") + "/login", cookie="unrelated=1") as page:
        page.evaluate(f'document.getElementById("token").value = "{ADMIN}"; '
                      'document.querySelector("form").submit(); true')
        page.wait_event("Page.loadEventFired")
        assert page.evaluate("window.location.pathname") == "/"
    assert len(dashboard.sessions) == 1


def test_chromium_signs_out_with_the_dashboards_button(site):
    http, dashboard = site
    sid, _ = _login(http)
    with _devtools_page(str(http.base_url).rstrip("/") + "/", cookie=f"rollmux_session={sid}") as page:
        assert page.evaluate("window.location.pathname") == "/"
        page.evaluate('document.getElementById("logout").click(); true')
        page.wait_event("Page.loadEventFired")
        assert page.evaluate("window.location.pathname") == "/login"
    assert len(dashboard.sessions) == 0
    assert http.get("/v1/status", headers=_cookie(sid)).status_code == 401
