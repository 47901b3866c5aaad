"""The dashboard's routes and its login sessions: the page, sign-in, sign-out, and what a session cookie may do.

A session cookie is an admin credential, so everything about it lives on the server: a session is
created by a sign-in with the admin token (`POST /login`), expires `SESSION_TTL_S` after that
whatever the cookie says, is removed by `POST /logout`, and at most `MAX_SESSIONS` live at once
(a new sign-in past the cap ends the oldest). Each session has its own CSRF token, written into
the dashboard page (`<meta name="csrf-token">`) and nowhere else.

A request the cookie authenticates may read (GET, HEAD) freely; one that would change something
(`POST /v1/jobs`, `DELETE /v1/jobs/{id}`, `POST /logout`, any other method) must come from the
dashboard's own origin (an `Origin` header equal to the request's scheme and Host: a missing or
`null` Origin is refused) and carry the session's token in `X-CSRF-Token`; otherwise 403. Bearer
tokens are not cookies a browser attaches by itself: requests carrying one skip these checks.
A sign-in from another origin is refused; sign-ins are rate-limited per client address
(`LOGIN_FAILURES` failures per `LOGIN_WINDOW_S`, then 429 with Retry-After).
"""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from rollmux.live.dashboard import page
from rollmux.live.in_process import ADMIN
from rollmux.live.refusals import BadRequest, Forbidden, RateLimited, shown

SESSION_COOKIE = "rollmux_session"
CSRF_HEADER = "x-csrf-token"
SESSION_TTL_S = 12 * 3600.0    # a session ends this long after its sign-in, whatever the cookie says
MAX_SESSIONS = 64              # live sessions at once; a sign-in past it ends the oldest
LOGIN_FAILURES = 5             # failed sign-ins one client address may make per window ...
LOGIN_WINDOW_S = 60.0          # ... of this many seconds; then 429 until the oldest failure leaves it
MAX_CLIENTS = 10_000           # client addresses whose failures are remembered (the oldest forgotten)
MAX_FORM_BYTES = 4096          # a sign-in form is one token
SAFE_METHODS = frozenset({"GET", "HEAD"})


@dataclass
class Session:
    """One signed-in browser: when it signed in (the sessions' clock) and its CSRF token."""

    created: float
    csrf: str


class Sessions:
    """Live sessions by the SHA-256 of their id (the id itself is only in the browser's cookie)."""

    def __init__(self, ttl_s: float = SESSION_TTL_S, cap: int = MAX_SESSIONS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s, self.cap, self.clock = ttl_s, cap, clock
        self._live: dict[str, Session] = {}  # in creation order: the first is the oldest

    def __len__(self) -> int:
        return len(self._live)

    def open(self) -> tuple[str, Session]:
        """A new session: its id (for the cookie) and its record; the oldest ends if the cap is reached."""
        self.prune()
        while len(self._live) >= self.cap:
            del self._live[next(iter(self._live))]
        sid = secrets.token_urlsafe(32)
        session = self._live[_digest(sid)] = Session(self.clock(), secrets.token_urlsafe(32))
        return sid, session

    def get(self, sid: str | None) -> Session | None:
        """The live session of a cookie's id, or None (no id, unknown, ended or expired)."""
        if not sid:
            return None
        key = _digest(sid)
        session = self._live.get(key)
        if session is None:
            return None
        if self.clock() - session.created >= self.ttl_s:
            del self._live[key]
            return None
        return session

    def close(self, sid: str) -> None:
        """End the session of `sid` (nothing if there is none)."""
        self._live.pop(_digest(sid), None)

    def prune(self) -> None:
        """Remove every expired session."""
        now = self.clock()
        for key in [k for k, s in self._live.items() if now - s.created >= self.ttl_s]:
            del self._live[key]


class LoginLimiter:
    """Failed sign-ins per client address over a sliding window."""

    def __init__(self, failures: int = LOGIN_FAILURES, window_s: float = LOGIN_WINDOW_S,
                 clock: Callable[[], float] = time.monotonic, max_clients: int = MAX_CLIENTS) -> None:
        self.failures, self.window_s, self.clock, self.max_clients = failures, window_s, clock, max_clients
        self._failed: dict[str, deque[float]] = {}

    def retry_after(self, client: str) -> float | None:
        """Seconds until `client` may try again, or None if it may now."""
        times = self._failed.get(client)
        if times is None:
            return None
        now = self.clock()
        while times and now - times[0] >= self.window_s:
            times.popleft()
        if not times:
            del self._failed[client]
            return None
        return self.window_s - (now - times[0]) if len(times) >= self.failures else None

    def failed(self, client: str) -> None:
        """Count one failed sign-in of `client`."""
        times = self._failed.pop(client, None) or deque(maxlen=self.failures)
        times.append(self.clock())
        self._failed[client] = times  # re-inserted: the dict stays in order of last failure
        while len(self._failed) > self.max_clients:
            del self._failed[next(iter(self._failed))]


def _digest(sid: str) -> str:
    return hashlib.sha256(sid.encode()).hexdigest()


def same_origin(request: Request) -> bool:
    """Whether the request's Origin header names the origin it was sent to (scheme and Host)."""
    origin, host = request.headers.get("origin"), request.headers.get("host")
    if not origin or not host or origin == "null":
        return False
    return origin.lower() == f"{request.url.scheme}://{host}".lower()


def _client(request: Request) -> str:
    return request.client.host if request.client is not None else "unknown"


class Dashboard:
    """The dashboard's pages and sign-in over one core; `admin_by_cookie` is what a session may do."""

    def __init__(self, core: Any, secure_cookies: bool = False, clock: Callable[[], float] = time.monotonic) -> None:
        self.core, self.secure_cookies = core, secure_cookies
        self.sessions = Sessions(clock=clock)
        self.limiter = LoginLimiter(clock=clock)

    def routes(self) -> list[Route]:
        """GET /, GET and POST /login, POST /logout."""
        return [Route("/", self.dashboard, methods=["GET"]), Route("/login", self.login_page, methods=["GET"]),
                Route("/login", self.login, methods=["POST"]), Route("/logout", self.logout, methods=["POST"])]

    def admin_by_cookie(self, request: Request, job_id: Any = None) -> bool:
        """Whether a live session cookie makes the caller the admin; Forbidden (403) for a request that
        would change something without the dashboard's Origin and the session's CSRF token."""
        session = self.sessions.get(request.cookies.get(SESSION_COOKIE))
        if session is None:
            return False
        if request.method not in SAFE_METHODS:
            self._check_change(request, session, job_id)
        return True

    def _check_change(self, request: Request, session: Session, job_id: Any) -> None:
        """Refuse (403) a cookie-authenticated change from another origin or without the CSRF token."""
        if not same_origin(request):
            raise self.core._refuse("csrf check", job_id, f"a {request.method} by session cookie without this "
                                    f"origin's Origin header (got {shown(request.headers.get('origin'))})",
                                    Forbidden)
        sent = request.headers.get(CSRF_HEADER, "")
        if not hmac.compare_digest(sent.encode(), session.csrf.encode()):
            raise self.core._refuse("csrf check", job_id, f"a {request.method} by session cookie without the "
                                    "session's X-CSRF-Token", Forbidden)

    # -- handlers ---------------------------------------------------------------------------
    async def dashboard(self, request: Request) -> Response:
        """The dashboard page (with its session's CSRF token), or a redirect to sign in."""
        session = self.sessions.get(request.cookies.get(SESSION_COOKIE))
        if session is None:
            return RedirectResponse("/login", status_code=303)
        return _page("index.html", session.csrf)

    async def login_page(self, request: Request) -> Response:
        """The sign-in page."""
        return _page("login.html")

    async def login(self, request: Request) -> Response:
        """Sign in with the admin token: a session cookie, or back to the form; 429 past the failure limit."""
        client = _client(request)
        wait = self.limiter.retry_after(client)
        if wait is not None:
            retry = str(max(1, math.ceil(wait)))
            self.core._refuse("login", None, f"too many failed sign-ins from {shown(client)}", RateLimited)
            return PlainTextResponse(f"too many failed sign-ins: try again in {retry} s\n", status_code=429,
                                     headers={"Retry-After": retry})
        if "origin" in request.headers and not same_origin(request):
            raise self.core._refuse("login", None, f"a sign-in from another origin "
                                    f"({shown(request.headers['origin'])})", Forbidden)
        token = (await _form(request)).get("token")
        if not isinstance(token, str) or self.core.identify(token) != ADMIN:
            self.limiter.failed(client)
            self.core._refuse("login", None, "wrong admin token", Forbidden)
            return RedirectResponse("/login?failed=1", status_code=303)
        sid, _ = self.sessions.open()
        resp = RedirectResponse("/", status_code=303)
        resp.set_cookie(SESSION_COOKIE, sid, httponly=True, samesite="strict", secure=self.secure_cookies,
                        max_age=int(self.sessions.ttl_s))
        return resp

    async def logout(self, request: Request) -> Response:
        """End this browser's session (same-origin, with its CSRF token) and clear the cookie: 204."""
        sid = request.cookies.get(SESSION_COOKIE)
        session = self.sessions.get(sid)
        if session is not None and sid is not None:
            self._check_change(request, session, None)
            self.sessions.close(sid)
        resp = Response(status_code=204)
        resp.delete_cookie(SESSION_COOKIE, httponly=True, samesite="strict", secure=self.secure_cookies)
        return resp


async def _form(request: Request) -> dict[str, str]:
    """A small urlencoded form's fields (the last value of each); BadRequest past MAX_FORM_BYTES."""
    raw = bytearray()
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_FORM_BYTES:
            raise BadRequest(f"POST /login: form over {MAX_FORM_BYTES} bytes")
    try:
        fields = parse_qs(raw.decode(), keep_blank_values=True, max_num_fields=8)
    except (UnicodeDecodeError, ValueError):
        raise BadRequest("POST /login: the form is not urlencoded UTF-8") from None
    return {k: v[-1] for k, v in fields.items()}


def _page(name: str, csrf: str | None = None) -> Response:
    """A dashboard page with a fresh script nonce in its Content-Security-Policy (and `csrf` in a meta tag)."""
    nonce = secrets.token_urlsafe(16)
    html = page(name).replace("<script>", f'<script nonce="{nonce}">')
    if csrf is not None:  # token_urlsafe: nothing in it needs escaping in an attribute
        html = html.replace("<head>", f'<head>\n<meta name="csrf-token" content="{csrf}">', 1)
    csp = (f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'unsafe-inline'; connect-src 'self'; "
           "img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
    return HTMLResponse(html, headers={"Content-Security-Policy": csp, "X-Content-Type-Options": "nosniff",
                                       "Cache-Control": "no-store"})
