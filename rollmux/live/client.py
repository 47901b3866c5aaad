"""The job side of the live plane: the shim's permit client over the scheduler's HTTP API.

It carries each job's bearer token on every call, sends heartbeats from a
background thread, long-polls for permits (a 204 means "ask again"), and rides
out a restart of the server: connection errors and 503s are retried until
`retry_for_s`, and so is a 401 that directly follows one (the server was restarting or
rolling a failed write back; any other 401 is final), a release the old instance already applied is recognised (409
after a retry), and `last_grant` lets the server tell a lost reply from an
acquire that overtook its release.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import urllib3

from rollmux.core.group_controller import Grant
from rollmux.live.refusals import (
    AuthError,
    BadRequest,
    Conflict,
    Forbidden,
    JobGone,
    NotFound,
    ServiceError,
    Unavailable,
)
from rollmux.shim import PhaseTimings

_GRANT_FIELDS = set(Grant.__dataclass_fields__)
_BY_STATUS = {400: BadRequest, 401: AuthError, 403: Forbidden, 404: NotFound, 409: Conflict, 410: JobGone,
              503: Unavailable}
MAX_WAIT_S = 30.0


def _grant(d: dict) -> Grant:
    """The permit from its JSON form (lists back to the tuples a frozen Grant holds)."""
    return Grant(**{**{k: v for k, v in d.items() if k in _GRANT_FIELDS}, "nodes": tuple(d["nodes"]),
                    "workers": tuple(tuple(w) for w in d.get("workers", ())),
                    "keep": tuple(tuple(k) for k in d.get("keep", ())),
                    "train_held": tuple(d.get("train_held", ())),
                    "node_ids": tuple(d.get("node_ids") or ()), "train_held_ids": tuple(d.get("train_held_ids") or ())})


def _error(method: str, path: str, resp: urllib3.BaseHTTPResponse) -> ServiceError:
    """The server's refusal as the matching ServiceError (its message, never a token)."""
    try:
        body = json.loads(resp.data)
        msg, field = body.get("error", ""), body.get("field")
    except ValueError:
        msg, field = resp.data.decode(errors="replace").strip() or resp.reason, None
    return _BY_STATUS.get(resp.status, ServiceError)(f"{method} {path}: {resp.status} {msg}", field)


class HttpPermitClient:
    """Permits from the scheduler's HTTP API for the jobs registered here (thread-safe)."""

    def __init__(self, base_url: str, admin_token: str | None = None, heartbeat_s: float | None = None,
                 retry_for_s: float = 120.0, verify: bool | str = True, wait_s: float = MAX_WAIT_S) -> None:
        self.base_url = base_url.rstrip("/")
        self._admin = admin_token
        self.tokens: dict[str, str] = {}
        self.nodes: dict[str, list[str]] = {}     # job -> Ray node ids its workers run on
        self._last_grant: dict[str, int] = {}     # job -> newest grant_no received
        self._held: dict[tuple[str, str], int] = {}  # (job, phase) -> grant_no of the permit held
        self.retry_for_s, self.wait_s = retry_for_s, wait_s
        self.retries = 0
        # urllib3 (http.client underneath) sends headers and body in one write with TCP_NODELAY:
        # a permit round trip costs about half of what httpx's client adds.
        tls = ({} if verify is True else {"cert_reqs": "CERT_NONE"} if verify is False
               else {"cert_reqs": "CERT_REQUIRED", "ca_certs": str(verify)})
        self._http = urllib3.PoolManager(maxsize=1024, retries=False,
                                         timeout=urllib3.Timeout(connect=10.0, read=wait_s + 30.0), **tls)
        self._stop = threading.Event()
        if heartbeat_s:
            threading.Thread(target=self._beat, args=(heartbeat_s,), name="rollmux-heartbeat", daemon=True).start()

    # -- admin ---------------------------------------------------------------------------
    def submit(self, record: dict) -> dict:
        """Submit a job (admin token) and keep its token; returns the server's answer."""
        out = self._call("POST", "/v1/jobs", self._admin, record)
        self.tokens[out["job_id"]] = out["token"]
        return out

    def status(self, offset: int = 0, limit: int | None = None) -> dict:
        """The admin's status view (a page of groups and jobs: `limit` defaults to the server's)."""
        query = f"?offset={offset}" + (f"&limit={limit}" if limit is not None else "")
        return self._call("GET", f"/v1/status{query}", self._admin)

    def cancel(self, job_id: str) -> dict:
        """Cancel a job (admin token if set, else the job's own)."""
        return self._call("DELETE", f"/v1/jobs/{job_id}", self._admin or self.tokens.get(job_id))

    def report_exit(self, job_id: str, code: int, reason: str) -> dict:
        """How the job's entrypoint ended (admin token: `rollmux run`); the job's status and reason after it."""
        return self._call("POST", f"/v1/jobs/{job_id}/exit", self._admin, {"code": code, "reason": reason})

    # -- a job's calls -----------------------------------------------------------------------
    def register(self, job_id: str, token: str) -> None:
        """Act for a job submitted elsewhere."""
        self.tokens[job_id] = token

    def job(self, job_id: str) -> dict:
        """The job's status (with its own token, or else the admin's)."""
        return self._call("GET", f"/v1/jobs/{job_id}", self.tokens.get(job_id) or self._admin)

    def acquire(self, job_id: str, phase: str) -> Grant:
        """Block until the permit is granted."""
        return _grant(self.acquire_dict(job_id, phase))

    def acquire_dict(self, job_id: str, phase: str) -> dict:
        """The permit as the server sent it (with the job's placement, epoch and lease)."""
        while True:
            body = {"phase": phase, "last_grant": self._last_grant.get(job_id), "wait_s": self.wait_s}
            d = self._call("POST", f"/v1/jobs/{job_id}/acquire", self.tokens.get(job_id), body)
            if d is not None:  # None: 204, the long poll ran out; ask again
                break
        self._last_grant[job_id] = max(d.get("grant_no", 0), self._last_grant.get(job_id, 0))
        self._held[(job_id, phase)] = d.get("grant_no")
        return d

    def set_nodes(self, job_id: str, node_ids: list[str]) -> None:
        """The Ray nodes the job's workers run on (sent with every heartbeat, and at once)."""
        self.nodes[job_id] = list(node_ids)
        self.heartbeat(job_id)

    def heartbeat(self, job_id: str, readmit: str | None = None) -> dict:
        """Tell the server the job is alive (and where its workers run)."""
        body: dict[str, Any] = {"nodes": self.nodes.get(job_id)}
        if readmit is not None:
            body["readmit"] = readmit
        return self._call("POST", f"/v1/jobs/{job_id}/heartbeat", self.tokens.get(job_id), body)

    def progress(self, job_id: str, done: int, total: int) -> dict:
        """Finished/total responses of the running rollout."""
        return self._call("POST", f"/v1/jobs/{job_id}/progress", self.tokens.get(job_id),
                          {"done": done, "total": total})

    def tail_started(self, job_id: str) -> None:
        """The shim saw its rollout become tail-bound."""
        self.progress(job_id, 1, 1)

    def release(self, timings: PhaseTimings) -> None:
        """Hand the permit back with the measured timings."""
        key = (timings.job_id, timings.phase)
        body = {"grant_no": self._held.pop(key, None), "phase": timings.phase,
                "timings": {k: v for k, v in asdict(timings).items() if k not in ("job_id", "phase")}}
        self._call("POST", f"/v1/jobs/{timings.job_id}/release", self.tokens.get(timings.job_id), body,
                   resent_ok=True)

    def drain(self) -> None:
        """Releases are confirmed when `release` returns: nothing to wait for."""

    def finish(self, job_id: str) -> None:
        """The job is done: it leaves its group."""
        self._call("POST", f"/v1/jobs/{job_id}/finish", self.tokens.get(job_id), {}, resent_ok=True)
        self.tokens.pop(job_id, None)

    def readmit(self, job_id: str, reason: str) -> dict:
        """The job lost its workers: be placed again like a new arrival."""
        return self.heartbeat(job_id, readmit=reason)

    def close(self) -> None:
        """Stop heartbeats and close the connections."""
        self._stop.set()
        self._http.clear()

    # -- internals ------------------------------------------------------------------------
    def _call(self, method: str, path: str, token: str | None, body: dict | None = None,
              resent_ok: bool = False) -> Any:
        """One API call, retried through a restarting server; raises the server's refusal."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        deadline = time.monotonic() + self.retry_for_s
        retried = unavailable = False
        while True:
            try:
                resp = self._http.request(method, self.base_url + path, body=data, headers=headers)
            except urllib3.exceptions.HTTPError:
                resp = None
            if resp is not None and resp.status == 401 and unavailable and time.monotonic() <= deadline:
                unavailable = False  # once per 503: a token the server does not know stays refused
                self.retries += 1
                time.sleep(0.1)
                continue
            unavailable = resp is None or resp.status in (502, 503, 504)
            if not unavailable:
                if resp.status == 204:
                    return None
                if 200 <= resp.status < 300:
                    return json.loads(resp.data)
                if resent_ok and retried and resp.status in (409, 410):
                    return None  # the first attempt was applied before the connection broke
                raise _error(method, path, resp)
            if time.monotonic() > deadline:
                raise Unavailable(f"{method} {path}: the scheduler did not answer for {self.retry_for_s:g}s")
            retried = True
            self.retries += 1
            time.sleep(0.1)  # the server is restarting (it replays its journal) or busy committing

    def _beat(self, every_s: float) -> None:
        wait = every_s
        while not self._stop.wait(wait):
            wait = every_s
            for job_id, token in list(self.tokens.items()):
                try:
                    self._http.request("POST", f"{self.base_url}/v1/jobs/{job_id}/heartbeat",
                                       body=json.dumps({"nodes": self.nodes.get(job_id)}).encode(),
                                       headers={"Authorization": f"Bearer {token}",
                                                "Content-Type": "application/json"},
                                       timeout=urllib3.Timeout(connect=every_s * 4, read=every_s * 4))
                except urllib3.exceptions.HTTPError:  # a restarting server: beat again soon
                    wait = min(every_s, 0.1)


# The environment `rollmux run` (and `rollmux profile --run`) gives a job: the service's address, the
# job's id and the path of its token file (never the token itself); a CA bundle to trust, if any.
ENV_URL, ENV_JOB, ENV_TOKEN, ENV_CA = "ROLLMUX_URL", "ROLLMUX_JOB_ID", "ROLLMUX_TOKEN_FILE", "ROLLMUX_CA"
JOB_ENV = (ENV_URL, ENV_JOB, ENV_TOKEN)


def write_token(token_dir: Path, job_id: str, token: str) -> Path:
    """The job's token in `token_dir/JOB.token`, created readable by its owner only."""
    token_dir.mkdir(parents=True, exist_ok=True)
    path = token_dir / f"{job_id}.token"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    os.chmod(path, 0o600)  # (an older file of the same name keeps its mode otherwise)
    return path


def job_env(url: str, job_id: str, token_file: Path) -> dict[str, str]:
    """The variables that launch `job_id` against the service at `url` (`from_env` reads them back)."""
    return {ENV_URL: url, ENV_JOB: job_id, ENV_TOKEN: str(token_file.resolve())}


def from_env(heartbeat_s: float = 1.0) -> tuple[str, HttpPermitClient]:
    """The job `rollmux run` launched: its id and a client acting for it, from the environment
    (`JOB_ENV`; `ROLLMUX_CA`: a CA bundle to trust). RuntimeError naming what is missing."""
    missing = [n for n in JOB_ENV if not os.environ.get(n)]
    if missing:
        raise RuntimeError(f"rollmux.init(): {', '.join(missing)} not set (launch the job with rollmux run)")
    url, job_id, token_file = (os.environ[n] for n in JOB_ENV)
    try:
        token = open(token_file).read().strip()
    except OSError as exc:
        raise RuntimeError(f"rollmux.init(): {ENV_TOKEN} {token_file}: {exc.strerror}") from None
    client = HttpPermitClient(url, heartbeat_s=heartbeat_s, verify=os.environ.get(ENV_CA) or True)
    client.register(job_id, token)
    return job_id, client
