"""`rollmux serve`: the HTTP control plane in one process (uvicorn around `create_app`).

Start-up failures (a store another server holds, a torn journal, a bad admin
token file) are one line and a non-zero exit; SIGINT and SIGTERM answer every
long poll at once (503: ask the next instance), let in-flight requests finish
for up to `GRACE_S`, then commit and close the journal. Every connection passes the door
(live/door.py): bounded heads, timeouts for heads, bodies and idle keep-alive, connection caps.
"""

from __future__ import annotations

import gc
import logging
import os
import resource
import secrets
import signal
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn

from rollmux.errors import InputError
from rollmux.live.app import create_app
from rollmux.live.door import DoorLimits, uvicorn_options
from rollmux.live.service import SchedulerCore

MIN_TOKEN_CHARS = 16  # the shortest admin token accepted
GRACE_S = 2.0  # in-flight requests get this long after a stop signal (the whole stop stays within 5 s)
log = logging.getLogger("rollmux.server")


@dataclass(frozen=True)
class Listen:
    """Where the server listens."""

    host: str
    port: int


def parse_listen(text: str) -> Listen:
    """HOST:PORT (IPv6 as [::1]:PORT); InputError naming the flag otherwise."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535 or not host:
        raise InputError(f"--listen {text!r}", "expected HOST:PORT, e.g. 127.0.0.1:8470")
    return Listen(host.strip("[]"), int(port))


def admin_token(path: Path) -> str:
    """The admin token in `path`, created (mode 0600) with a fresh random token if missing."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    except OSError as exc:
        raise InputError(f"--admin-token-file {path}", f"cannot create ({exc.strerror})") from None
    else:
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(32) + "\n")
        log.info("created admin token file %s (mode 0600)", path)
    try:
        mode = path.stat().st_mode
        token = path.read_text().strip()
    except OSError as exc:
        raise InputError(f"--admin-token-file {path}", f"cannot read ({exc.strerror})") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise InputError(f"--admin-token-file {path}",
                         f"readable by others (mode {stat.S_IMODE(mode):o}); chmod 600 it")
    if len(token) < MIN_TOKEN_CHARS:
        raise InputError(f"--admin-token-file {path}", f"the token must be at least {MIN_TOKEN_CHARS} characters")
    return token


def read_secret(path: Path, flag: str, min_chars: int = 1) -> str:
    """The secret in a file only its owner may read (a password, a scrape token): its text, stripped;
    InputError naming `flag` for a missing, unreadable, shared or too short file. The secret is never shown."""
    try:
        mode = path.stat().st_mode
        secret = path.read_text().strip()
    except OSError as exc:
        raise InputError(f"{flag} {path}", f"cannot read ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise InputError(f"{flag} {path}", "not UTF-8 text") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise InputError(f"{flag} {path}", f"readable by others (mode {stat.S_IMODE(mode):o}); chmod 600 it")
    if len(secret) < min_chars:
        raise InputError(f"{flag} {path}", f"the file must hold at least {min_chars} character(s)")
    return secret


def tune_gc(freeze_every_s: float = 5.0, full_every_s: float = 600.0) -> threading.Thread:
    """Keep the cyclic collector from pausing the server for seconds at scale.

    With 10,000 jobs and as many parked long polls, a full collection walks millions of
    long-lived objects (seconds each, every few seconds, freeing nothing): the p99 of
    every request. Objects that lived `freeze_every_s` go to the permanent generation
    (`gc.freeze`), young collections run 100x less often, and every `full_every_s` the
    frozen objects are thawed and collected once, so cyclic garbage is not kept for ever."""
    gc.set_threshold(100_000, 50, 100)

    def loop() -> None:
        last_full = time.monotonic()
        while True:
            time.sleep(freeze_every_s)  # a periodic housekeeping tick, not a wait for a condition
            if time.monotonic() - last_full > full_every_s:
                gc.unfreeze()
                gc.collect()
                last_full = time.monotonic()
            gc.freeze()

    thread = threading.Thread(target=loop, name="rollmux-gc", daemon=True)
    thread.start()
    return thread


def _raise_open_file_limit() -> None:
    """Every waiting long poll is an open connection: allow as many as the hard limit does."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else 1 << 20, hard))
        except (ValueError, OSError) as exc:  # a container may forbid it: serve with what there is
            log.warning("could not raise the open-file limit from %d: %s", soft, exc)


class _Server(uvicorn.Server):
    """uvicorn, plus: a stop signal answers every long poll at once instead of waiting it out, and
    every tick of its loop tells the core the server is serving (fair liveness, live/supervision.py)."""

    core: SchedulerCore

    def handle_exit(self, sig: int, frame: Any) -> None:
        # Not uvicorn's: it re-raises the signal after shutting down, which would kill the
        # process before the journal is committed and closed (and exit non-zero).
        self.stopped_by = signal.Signals(sig).name
        if not self.should_exit:
            self.core.request("stop_waiting")  # posted to the scheduler thread; never blocks here
            self.should_exit = True
        elif sig == signal.SIGINT:
            self.force_exit = True

    async def on_tick(self, counter: int) -> bool:
        """uvicorn's tick (every 0.1 s on the event loop): also a sign of life for the watchdog."""
        self.core.note_serving()
        return await super().on_tick(counter)


def build_server(core: SchedulerCore, listen: Listen, telemetry: Any = None, tls_cert: Path | None = None,
                 tls_key: Path | None = None, door: DoorLimits | None = None,
                 metrics_token: str | None = None) -> _Server:
    """The uvicorn server around `core`'s app, behind the door's limits (`door`, default DoorLimits());
    `metrics_token`: the scrape token GET /metrics then requires (or the admin's)."""
    app = create_app(core, telemetry, secure_cookies=tls_cert is not None, metrics_token=metrics_token)
    config = uvicorn.Config(app, host=listen.host, port=listen.port, log_level="warning", access_log=False,
                            ssl_certfile=str(tls_cert) if tls_cert else None,
                            ssl_keyfile=str(tls_key) if tls_key else None,
                            timeout_graceful_shutdown=GRACE_S, backlog=4096, **uvicorn_options(door or DoorLimits()))
    server = _Server(config)
    server.core, server.stopped_by = core, None
    return server


def serve(core: SchedulerCore, listen: Listen, telemetry: Any = None, tls_cert: Path | None = None,
          tls_key: Path | None = None, door: DoorLimits | None = None, metrics_token: str | None = None) -> None:
    """Serve until SIGINT/SIGTERM, then stop cleanly (journal committed and closed)."""
    _raise_open_file_limit()
    tune_gc()
    server = build_server(core, listen, telemetry, tls_cert, tls_key, door, metrics_token)
    try:
        server.run()
    finally:
        core.shutdown()
    if server.stopped_by:
        log.warning("stopped on %s; journal committed and closed", server.stopped_by)
    if not server.started:
        raise InputError(f"--listen {listen.host}:{listen.port}: the server could not start (port in use?)")
