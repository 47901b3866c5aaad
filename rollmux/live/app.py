"""The scheduler's only door: an authenticated HTTP API around `SchedulerCore` (DESIGN §8).

`create_app` wires the routes, the error mapping and the dashboard; handlers are
thin: they parse JSON, resolve the bearer token to a caller, and await the
core's future. Routes (JSON in and out):

  POST   /v1/jobs                    admin        submit a job record -> 201 {job_id, token, group, case, nodes}
                                                   (202 with its queue_position when it waits for nodes)
  GET    /v1/jobs/{id}               admin, job   the job's status
  DELETE /v1/jobs/{id}               admin, job   cancel: permits reclaimed, the group goes on
  POST   /v1/jobs/{id}/acquire       job          {phase, last_grant, wait_s<=30}: 200 permit or 204 (ask again)
  POST   /v1/jobs/{id}/release       job          {grant_no, phase, timings}
  POST   /v1/jobs/{id}/heartbeat     job          {nodes?, readmit?}
  POST   /v1/jobs/{id}/progress      job          {done, total}
  POST   /v1/jobs/{id}/finish        job          the job is done
  GET    /v1/status                  admin        groups, members, turns, jobs, pools, timeline
  GET    /metrics                    anyone       Prometheus text exposition
  GET    /                           admin login  the dashboard (an HttpOnly session cookie)

No or unknown token: 401; a valid token for another job, or a job's token on an
admin route: 403; an unknown job (admin only): 404.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import secrets
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from rollmux.live.handoff import bridge
from rollmux.live.refusals import BadRequest, Forbidden, ServiceError
from rollmux.live.service import ADMIN, SchedulerCore
from rollmux.live.views import MAX_PAGE, PAGE

MAX_BODY = 1 << 20       # a job record is a few hundred bytes; 1 MiB leaves room and bounds memory
MAX_WAIT_S = 30.0        # the longest long poll
DEFAULT_WAIT_S = 20.0
SESSION_COOKIE = "rollmux_session"
log = logging.getLogger("rollmux.http")


class TooLarge(ServiceError):
    """The request body is over MAX_BODY (413)."""

    status, reason = 413, "too_large"


def _bearer(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    scheme, _, token = auth.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


async def _body(request: Request) -> dict:
    """The JSON object in the request body ({} if empty); BadRequest / TooLarge otherwise."""
    declared = request.headers.get("content-length") or "0"
    if not declared.isdigit():
        raise BadRequest(f"{request.url.path}: Content-Length {declared[:40]!r} is not a byte count")
    if int(declared) > MAX_BODY:
        raise TooLarge(f"{request.url.path}: body over {MAX_BODY} bytes")
    raw = bytearray()
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY:
            raise TooLarge(f"{request.url.path}: body over {MAX_BODY} bytes")
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"{request.url.path}: body is not JSON ({exc})") from None
    if not isinstance(body, dict):
        raise BadRequest(f"{request.url.path}: body must be a JSON object, not {type(body).__name__}")
    return body


def _int_param(request: Request, name: str, default: int, low: int, high: int | None) -> int:
    """An integer query parameter within [low, high]; BadRequest naming it otherwise."""
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if not raw.isdigit() or int(raw) < low or (high is not None and int(raw) > high):
        raise BadRequest(f"{request.url.path}: ?{name}= must be an integer in {low}..{high or 'inf'}", name)
    return int(raw)


class Api:
    """The route handlers over one core (and the dashboard's login sessions)."""

    def __init__(self, core: SchedulerCore, telemetry: Any = None, secure_cookies: bool = False) -> None:
        self.core, self.telemetry, self.secure_cookies = core, telemetry, secure_cookies
        self._sessions: set[str] = set()  # SHA-256 of live dashboard session ids

    async def _do(self, op: str, *args: Any) -> Any:
        return await self.core.request(op, *args, loop=asyncio.get_running_loop())

    def _caller(self, request: Request, job_id: str | None = None) -> str:
        token = _bearer(request)
        if token is None and self._session_ok(request):
            return ADMIN
        return self.core.caller(token, job_id)

    def _session_ok(self, request: Request) -> bool:
        sid = request.cookies.get(SESSION_COOKIE)
        if not sid:
            return False
        h = hashlib.sha256(sid.encode()).hexdigest()
        return any(hmac.compare_digest(h, s) for s in self._sessions)

    # -- jobs -----------------------------------------------------------------------------
    async def submit(self, request: Request) -> Response:
        caller = self._caller(request)
        if caller != ADMIN:
            raise self.core._refuse("submit", None, "only the admin may submit jobs", Forbidden)
        job = self.core.parse_job(await _body(request))
        out = await self._do("submit", caller, job)
        # 202: accepted, waiting in the placement queue for nodes (its position in the answer).
        return JSONResponse(out, status_code=202 if out.get("status") == "queued" else 201)

    async def job(self, request: Request) -> Response:
        jid = request.path_params["job_id"]
        return JSONResponse(await self._do("job", self._caller(request, jid), jid))

    async def cancel(self, request: Request) -> Response:
        jid = request.path_params["job_id"]
        return JSONResponse(await self._do("cancel", self._caller(request, jid), jid))

    async def acquire(self, request: Request) -> Response:
        jid = request.path_params["job_id"]
        caller = self._caller(request, jid)
        body = await _body(request)
        wait_s = body.get("wait_s", DEFAULT_WAIT_S)
        if isinstance(wait_s, bool) or not isinstance(wait_s, (int, float)) or not 0 <= wait_s <= MAX_WAIT_S:
            raise BadRequest(f"acquire for job {jid!r}: wait_s must be a number in 0..{MAX_WAIT_S:g}", "wait_s")
        permit = await self._do("acquire", caller, jid, body.get("phase"), body.get("last_grant"))
        # One asyncio bridge per permit request, however often it is polled: a bridge per poll
        # would leave a callback on the request for every poll that timed out.
        aio = bridge(permit, asyncio.get_running_loop())
        try:
            # shield: a poll that times out leaves the request queued; the next poll re-attaches to it.
            out = await asyncio.wait_for(asyncio.shield(aio), timeout=wait_s)
        except asyncio.TimeoutError:
            return Response(status_code=204)
        return JSONResponse(out)

    async def release(self, request: Request) -> Response:
        jid = request.path_params["job_id"]
        caller = self._caller(request, jid)
        body = await _body(request)
        grant_no = body.get("grant_no")
        if grant_no is not None and (isinstance(grant_no, bool) or not isinstance(grant_no, int)):
            raise BadRequest(f"release for job {jid!r}: grant_no must be an integer", "grant_no")
        return JSONResponse(await self._do("release", caller, jid, body.get("phase"), body.get("timings"), grant_no))

    async def heartbeat(self, request: Request) -> Response:
        jid = request.path_params["job_id"]
        caller = self._caller(request, jid)
        body = await _body(request)
        return JSONResponse(await self._do("heartbeat", caller, jid, body.get("nodes"), body.get("readmit")))

    async def progress(self, request: Request) -> Response:
        jid = request.path_params["job_id"]
        caller = self._caller(request, jid)
        body = await _body(request)
        return JSONResponse(await self._do("progress", caller, jid, body.get("done"), body.get("total")))

    async def finish(self, request: Request) -> Response:
        jid = request.path_params["job_id"]
        return JSONResponse(await self._do("finish", self._caller(request, jid), jid))

    async def status(self, request: Request) -> Response:
        caller = self._caller(request)
        offset = _int_param(request, "offset", 0, 0, None)
        limit = _int_param(request, "limit", PAGE, 1, MAX_PAGE)
        return JSONResponse(await self._do("status", caller, offset, limit))

    # -- metrics and dashboard ---------------------------------------------------------------
    async def metrics(self, request: Request) -> Response:
        if self.telemetry is None:
            return Response("metrics are off\n", status_code=404, media_type="text/plain")
        data, content_type = await run_in_threadpool(self.telemetry.exposition)
        return Response(data, media_type=content_type)

    async def dashboard(self, request: Request) -> Response:
        if not self._session_ok(request):
            return RedirectResponse("/login", status_code=303)
        return self._page("index.html")

    async def login_page(self, request: Request) -> Response:
        return self._page("login.html")

    async def login(self, request: Request) -> Response:
        form = await request.form()
        token = form.get("token")
        if not isinstance(token, str) or self.core.identify(token) != ADMIN:
            self.core._refuse("login", None, "wrong admin token", Forbidden)
            return RedirectResponse("/login?failed=1", status_code=303)
        sid = secrets.token_urlsafe(32)
        self._sessions.add(hashlib.sha256(sid.encode()).hexdigest())
        resp = RedirectResponse("/", status_code=303)
        resp.set_cookie(SESSION_COOKIE, sid, httponly=True, samesite="strict", secure=self.secure_cookies,
                        max_age=12 * 3600)
        return resp

    def _page(self, name: str) -> Response:
        from rollmux.live.dashboard import page
        nonce = secrets.token_urlsafe(16)
        html = page(name).replace("<script>", f'<script nonce="{nonce}">')
        csp = (f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'unsafe-inline'; connect-src 'self'; "
               "img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
        return HTMLResponse(html, headers={"Content-Security-Policy": csp, "X-Content-Type-Options": "nosniff",
                                           "Cache-Control": "no-store"})


async def _service_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ServiceError)
    return JSONResponse({"error": str(exc), "field": exc.field}, status_code=exc.status)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return JSONResponse({"error": f"{request.method} {request.url.path}: {exc.detail}", "field": None},
                        status_code=exc.status_code)


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unexpected error on %s %s", request.method, request.url.path)
    return JSONResponse({"error": f"{request.method} {request.url.path}: internal error", "field": None},
                        status_code=500)


def create_app(core: SchedulerCore, telemetry: Any = None, secure_cookies: bool = False) -> Starlette:
    """The HTTP app: routes, error mapping, dashboard; the core's lifetime is the caller's."""
    api = Api(core, telemetry, secure_cookies)
    routes = [
        Route("/v1/jobs", api.submit, methods=["POST"]),
        Route("/v1/jobs/{job_id}", api.job, methods=["GET"]),
        Route("/v1/jobs/{job_id}", api.cancel, methods=["DELETE"]),
        Route("/v1/jobs/{job_id}/acquire", api.acquire, methods=["POST"]),
        Route("/v1/jobs/{job_id}/release", api.release, methods=["POST"]),
        Route("/v1/jobs/{job_id}/heartbeat", api.heartbeat, methods=["POST"]),
        Route("/v1/jobs/{job_id}/progress", api.progress, methods=["POST"]),
        Route("/v1/jobs/{job_id}/finish", api.finish, methods=["POST"]),
        Route("/v1/status", api.status, methods=["GET"]),
        Route("/metrics", api.metrics, methods=["GET"]),
        Route("/", api.dashboard, methods=["GET"]),
        Route("/login", api.login_page, methods=["GET"]),
        Route("/login", api.login, methods=["POST"]),
    ]
    return Starlette(routes=routes, exception_handlers={ServiceError: _service_error, HTTPException: _http_error,
                                                        Exception: _unexpected})
