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
  POST   /v1/jobs/{id}/exit          admin        {code, reason}: its entrypoint exited (rollmux run says); a job
                                                  not finished is failed, its reason the code and that line
  GET    /v1/status                  admin        groups, members, turns, jobs, pools, timeline
  GET    /metrics                    anyone, or   Prometheus text exposition; with a scrape token (serve
                                     admin/scrape --metrics-token-file) only for it or the admin, and without
                                                  one no series names a job
  GET    /healthz                    anyone       liveness: 200 "ok" once the process answers (no work done)
  GET    /readyz                     anyone       readiness: 200 "ready", or 503 with a one-line reason when
                                                  the scheduler thread has stopped or the journal is closed
  GET    /                           admin login  the dashboard (an HttpOnly session cookie; dashboard/routes.py:
                                                  POST /login, POST /logout, Origin and CSRF checks)

No or unknown token: 401; a valid token for another job, or a job's token on an
admin route: 403; an unknown job (admin only): 404. A path id that is no valid job id
(core/spec.py `job_id_problem`) is 404 before any lookup. Each job route's body is read
into its model (live/wire.py): an unknown field, a wrong type or a number out of range is
400 naming the field's path.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import math
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from rollmux.core.spec import JOB_ID_PATTERN, job_id_problem
from rollmux.live import wire
from rollmux.live.dashboard.routes import Dashboard
from rollmux.live.handoff import bridge
from rollmux.live.journal import JournalError
from rollmux.live.refusals import AuthError, BadRequest, Forbidden, NotFound, NoToken, ServiceError, shown
from rollmux.live.service import ADMIN, SchedulerCore
from rollmux.live.views import MAX_PAGE, PAGE

MAX_BODY = 1 << 20       # a job record is a few hundred bytes; 1 MiB leaves room and bounds memory
MAX_WAIT_S, DEFAULT_WAIT_S = wire.MAX_WAIT_S, wire.DEFAULT_WAIT_S  # the longest long poll; the default
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
        wire.check_depth(bytes(raw))
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise BadRequest(f"{request.url.path}: body is not JSON we read ({exc})") from None
    if not isinstance(body, dict):
        raise BadRequest(f"{request.url.path}: body must be a JSON object, not {type(body).__name__}")
    return body


def _json(out: Any) -> Response:
    """`out` as JSON; a value that is not a finite number (JSON has none) is sent as null."""
    try:
        return JSONResponse(out)
    except ValueError:  # (json refuses inf and NaN; found rarely, so only then is the view walked)
        log.warning("a view held a non-finite number; sent as null")
        return JSONResponse(_finite(out))


def _finite(v: Any) -> Any:
    """`v` with every float that is not finite replaced by None (dicts and lists walked)."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_finite(x) for x in v]
    return v


def _int_param(request: Request, name: str, default: int, low: int, high: int | None) -> int:
    """An integer query parameter within [low, high]; BadRequest naming it otherwise."""
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if not raw.isdigit() or int(raw) < low or (high is not None and int(raw) > high):
        raise BadRequest(f"{request.url.path}: ?{name}= must be an integer in {low}..{high or 'inf'}", name)
    return int(raw)


def not_ready(core: SchedulerCore) -> str | None:
    """Why `core` cannot serve (one line naming no job), or None: its scheduler thread runs and its journal reads."""
    if core._stopping.is_set():
        return "the scheduler is shutting down"
    if not core._thread.is_alive():
        return "the scheduler thread has stopped"
    scan = getattr(core.journal, "scan", None)  # (the in-memory stand-in has nothing to read, nor to close)
    if scan is not None:
        try:  # one indexed read past the last record: nothing comes back, but a closed store raises
            scan(core._last_seq)
        except JournalError:
            return f"the journal {core.journal.url} cannot be read (closed?)"
    return None


class Api:
    """The route handlers over one core (the dashboard's pages and sessions: `dashboard`)."""

    def __init__(self, core: SchedulerCore, telemetry: Any = None, secure_cookies: bool = False,
                 metrics_token: str | None = None) -> None:
        self.core, self.telemetry = core, telemetry
        self.dashboard = Dashboard(core, secure_cookies)
        # With a scrape token /metrics wants it (or the admin's) and shows every series; without one it
        # answers anyone and names no job.
        self._metrics_hash = hashlib.sha256(metrics_token.encode()).hexdigest() if metrics_token else None

    async def _do(self, op: str, *args: Any) -> Any:
        return await self.core.request(op, *args, loop=asyncio.get_running_loop())

    def _caller(self, request: Request, job_id: str | None = None) -> str:
        token = _bearer(request)
        if token is None and self.dashboard.admin_by_cookie(request, job_id):
            return ADMIN
        return self.core.caller(token, job_id, f"{request.method} {request.url.path}")

    # -- jobs -----------------------------------------------------------------------------
    async def submit(self, request: Request) -> Response:
        caller = self._caller(request)
        if caller != ADMIN:
            raise self.core._refuse("submit", None, "only the admin may submit jobs", Forbidden)
        job = self.core.parse_job(await _body(request))
        out = await self._do("submit", caller, job)
        # 202: accepted, waiting in the placement queue for nodes (its position in the answer).
        return JSONResponse(out, status_code=202 if out.get("status") == "queued" else 201)

    def _job_id(self, request: Request, op: str) -> str:
        """The job id in the path; NotFound (no job can have it) for one that is not a valid job id."""
        jid = request.path_params["job_id"]
        if job_id_problem(jid) is not None:
            raise self.core._refuse(op, jid[:80], f"no such job: job ids match {JOB_ID_PATTERN} and are not "
                                    "reserved names", NotFound, field="job_id")
        return jid

    async def _read(self, request: Request, op: str, jid: str, model: type[wire.W]) -> wire.W:
        """The request's body as the route's wire model (live/wire.py); BadRequest naming the field."""
        try:
            return wire.read(model, await _body(request))
        except wire.WireError as exc:
            raise self.core._refuse(op, jid, str(exc), field=exc.field) from None

    async def job(self, request: Request) -> Response:
        jid = self._job_id(request, "job")
        return _json(await self._do("job", self._caller(request, jid), jid))

    async def cancel(self, request: Request) -> Response:
        jid = self._job_id(request, "cancel")
        return JSONResponse(await self._do("cancel", self._caller(request, jid), jid))

    async def acquire(self, request: Request) -> Response:
        jid = self._job_id(request, "acquire")
        caller = self._caller(request, jid)
        body = await self._read(request, "acquire", jid, wire.AcquireBody)
        wait_s = body.wait_s
        permit = await self._do("acquire", caller, jid, body.phase, body.last_grant)
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
        jid = self._job_id(request, "release")
        caller = self._caller(request, jid)
        body = await self._read(request, "release", jid, wire.ReleaseBody)
        return JSONResponse(await self._do("release", caller, jid, body.phase, body.timings.model_dump(),
                                           body.grant_no))

    async def heartbeat(self, request: Request) -> Response:
        jid = self._job_id(request, "heartbeat")
        caller = self._caller(request, jid)
        body = await self._read(request, "heartbeat", jid, wire.HeartbeatBody)
        return JSONResponse(await self._do("heartbeat", caller, jid, body.nodes, body.readmit))

    async def progress(self, request: Request) -> Response:
        jid = self._job_id(request, "progress")
        caller = self._caller(request, jid)
        body = await self._read(request, "progress", jid, wire.ProgressBody)
        return JSONResponse(await self._do("progress", caller, jid, body.done, body.total))

    async def finish(self, request: Request) -> Response:
        jid = self._job_id(request, "finish")
        caller = self._caller(request, jid)
        await self._read(request, "finish", jid, wire.EmptyBody)
        return JSONResponse(await self._do("finish", caller, jid))

    async def exit(self, request: Request) -> Response:
        jid = self._job_id(request, "exit")
        caller = self._caller(request, jid)
        body = await self._read(request, "exit", jid, wire.ExitBody)
        return JSONResponse(await self._do("exit", caller, jid, body.code, body.reason))

    async def status(self, request: Request) -> Response:
        caller = self._caller(request)
        offset = _int_param(request, "offset", 0, 0, None)
        limit = _int_param(request, "limit", PAGE, 1, MAX_PAGE)
        return _json(await self._do("status", caller, offset, limit))

    # -- probes ----------------------------------------------------------------------------------
    async def healthz(self, request: Request) -> Response:
        """Liveness: 200 whenever the process answers (no token, no work)."""
        return Response("ok\n", media_type="text/plain")

    async def readyz(self, request: Request) -> Response:
        """Readiness: 200, or 503 with `not_ready`'s one line (no token; names no job)."""
        reason = await run_in_threadpool(not_ready, self.core)
        if reason is not None:
            return Response(f"not ready: {reason}\n", status_code=503, media_type="text/plain")
        return Response("ready\n", media_type="text/plain")

    # -- metrics ---------------------------------------------------------------------------------
    async def metrics(self, request: Request) -> Response:
        if self.telemetry is None:
            return Response("metrics are off\n", status_code=404, media_type="text/plain")
        if self._metrics_hash is not None:
            self._scraper(request)
        data, content_type = await run_in_threadpool(self.telemetry.exposition, self._metrics_hash is not None)
        return Response(data, media_type=content_type)

    def _scraper(self, request: Request) -> None:
        """Refuse (401) a scrape without the scrape token or the admin's."""
        token = _bearer(request)
        if token is None:
            raise self.core._refuse("metrics", None, "no bearer token (the scrape token or the admin's)", NoToken)
        digest = hashlib.sha256(token.encode()).hexdigest()
        if not (hmac.compare_digest(digest, self._metrics_hash or "") or self.core.identify(token) == ADMIN):
            raise self.core._refuse("metrics", None, "not the scrape token nor the admin's", AuthError)


async def _service_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ServiceError)
    return JSONResponse({"error": str(exc), "field": exc.field}, status_code=exc.status)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return JSONResponse({"error": f"{request.method} {request.url.path}: {exc.detail}", "field": None},
                        status_code=exc.status_code)


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unexpected error on %s %s", shown(request.method, 16), shown(request.url.path))
    return JSONResponse({"error": f"{request.method} {request.url.path}: internal error", "field": None},
                        status_code=500)


def create_app(core: SchedulerCore, telemetry: Any = None, secure_cookies: bool = False,
               metrics_token: str | None = None) -> Starlette:
    """The HTTP app: routes, error mapping, dashboard; the core's lifetime is the caller's.
    `metrics_token`: the scrape token /metrics then requires (or the admin's)."""
    api = Api(core, telemetry, secure_cookies, metrics_token)
    routes = [
        Route("/v1/jobs", api.submit, methods=["POST"]),
        Route("/v1/jobs/{job_id}", api.job, methods=["GET"]),
        Route("/v1/jobs/{job_id}", api.cancel, methods=["DELETE"]),
        Route("/v1/jobs/{job_id}/acquire", api.acquire, methods=["POST"]),
        Route("/v1/jobs/{job_id}/release", api.release, methods=["POST"]),
        Route("/v1/jobs/{job_id}/heartbeat", api.heartbeat, methods=["POST"]),
        Route("/v1/jobs/{job_id}/progress", api.progress, methods=["POST"]),
        Route("/v1/jobs/{job_id}/finish", api.finish, methods=["POST"]),
        Route("/v1/jobs/{job_id}/exit", api.exit, methods=["POST"]),
        Route("/v1/status", api.status, methods=["GET"]),
        Route("/metrics", api.metrics, methods=["GET"]),
        Route("/healthz", api.healthz, methods=["GET"]),
        Route("/readyz", api.readyz, methods=["GET"]),
        *api.dashboard.routes(),
    ]
    app = Starlette(routes=routes, exception_handlers={ServiceError: _service_error, HTTPException: _http_error,
                                                       Exception: _unexpected})
    app.state.dashboard = api.dashboard  # its sessions and sign-in limiter, for inspection
    return app
