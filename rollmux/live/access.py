"""Who may call the scheduler core (DESIGN §8's threat model): tokens, scopes, refusals.

A mixin of `SchedulerCore`. A bearer token proves an identity (`identify`): the admin, or the
one job whose token it is (tokens are kept only as SHA-256 hashes and compared in constant
time). Every operation is listed in the core's table (`OPS`) with its `Op.scope`, and
`_admit` checks the caller against it before the operation runs; a refusal is logged,
counted and returned as the `ServiceError` the HTTP layer maps to its status code.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rollmux.core.spec import JobSpec
from rollmux.live.in_process import ADMIN
from rollmux.live.refusals import AuthError, BadRequest, Forbidden, JobGone, NotFound, NoToken, ServiceError, shown

log = logging.getLogger("rollmux.service")


def hash_token(token: str) -> str:
    """How a token is stored and compared: its SHA-256, hex."""
    return hashlib.sha256(token.encode()).hexdigest()


# Who may call an operation (`Op.scope`).
INTERNAL = "internal"          # the embedding program and the scheduler's own timers: no caller
ADMIN_ONLY = "admin"           # the admin token only
JOB = "job"                    # the job's own token (the admin token cannot act as a job)
JOB_OR_ADMIN = "job_or_admin"  # the job's own token or the admin's
ADMIN_ON_JOB = "admin_on_job"  # the admin token only, about one job (unknown: 404)


@dataclass(frozen=True)
class Op:
    """One operation of the core: the method that runs it on the scheduler thread, who may call
    it, and for a job's operations whether the job must still be scheduled (else 410)."""

    run: Callable[..., Any]  # (core, *args); a caller-scoped op takes (caller, job or job_id, ...)
    scope: str
    active: bool = False
    denied: str = ""         # ADMIN_ONLY: the refusal's words for another caller


class Access:
    """Tokens, scopes and refusals (a mixin of SchedulerCore)."""

    state: Any
    telemetry: Any
    refused: deque[dict]
    refused_count: int
    _admin_hash: str | None
    _token_of: dict[str, str]
    _seen: dict[str, float]
    _heard: Callable[[str], None]  # (Supervision's: a call from the job was heard)

    def _refuse(self, op: str, job_id: Any, why: str, exc: type[ServiceError] = BadRequest,
                field: str | None = None) -> ServiceError:
        # The job id and the reason can carry a caller's strings: bounded and escaped (`shown`).
        if job_id is None:  # an admin route: `op` names it
            log.warning("refused %s: %s", op, shown(why, 240, quoted=False))
        else:
            log.warning("refused %s for job %s: %s", op, shown(job_id), shown(why, 240, quoted=False))
        self.refused.append({"op": op, "job_id": str(job_id), "why": why, "at": time.time()})
        self.refused_count += 1
        if self.telemetry is not None:
            self.telemetry.refused(exc.reason)
        return exc(f"{op} for job {job_id!r}: {why}" if job_id is not None else f"{op}: {why}", field)

    # -- who is calling ---------------------------------------------------------------------
    def identify(self, token: Any) -> str | None:
        """The identity a bearer token proves: ADMIN, a job id, or None (no or unknown token)."""
        if not isinstance(token, str) or not token:
            return None
        h = hash_token(token)
        if self._admin_hash is not None and hmac.compare_digest(h, self._admin_hash):
            return ADMIN
        # Read once each: a rollback swaps the map and the state whole (never a half-built one).
        jid = self._token_of.get(h)
        job = self.state.jobs.get(jid) if jid is not None else None
        # The dict lookup found the candidate; the stored hash is still compared in constant time.
        return jid if job is not None and hmac.compare_digest(h, job.token_hash) else None

    def _is_token(self, word: str) -> bool:
        """Whether `word` is the admin token or a job's (what a string the service shows must not hold)."""
        h = hash_token(word)
        return h in self._token_of or (self._admin_hash is not None and hmac.compare_digest(h, self._admin_hash))

    def caller(self, token: Any, job_id: Any = None, route: str | None = None) -> str:
        """The identity of `token`, or AuthError (401) naming the job it was meant for, or else the route."""
        who = self.identify(token)
        if who is None:
            op = "auth" if job_id is not None or not route else f"auth on {str(route)[:80]}"
            if not token:
                raise self._refuse(op, job_id, "no bearer token", NoToken)
            raise self._refuse(op, job_id, "missing or wrong token", AuthError)
        return who

    def _authorize(self, op: str, caller: str, job_id: Any, admin_ok: bool = False):
        """The job `caller` may act on with `op`, or the refusal (403 / 404)."""
        if caller == ADMIN and not admin_ok:
            raise self._refuse(op, job_id, "the admin token cannot act as a job", Forbidden)
        if caller != ADMIN and caller != job_id:
            raise self._refuse(op, job_id, "this token belongs to another job", Forbidden)
        job = self.state.jobs.get(job_id) if isinstance(job_id, str) else None
        if job is None:
            raise self._refuse(op, job_id, "unknown job id", NotFound)
        if caller != ADMIN and job.active:
            self._heard(job_id)
        return job

    def _active(self, op: str, job):
        """Refuse (410) an operation on a job that is no longer scheduled."""
        if not job.active:
            raise self._refuse(op, job.spec.job_id,
                               f"job is {job.status}" + (f" ({job.reason})" if job.reason else ""), JobGone)
        return job

    def _admit(self, op: str, entry: Op, args: tuple) -> None:
        """Refuse a caller `entry.scope` does not admit (401/403/404), or a job no longer
        scheduled where the operation needs one (410): before the operation runs."""
        if entry.scope == ADMIN_ONLY and args[0] != ADMIN:
            subject = args[1] if len(args) > 1 else None
            raise self._refuse(op, subject.job_id if isinstance(subject, JobSpec) else None, entry.denied, Forbidden)
        if entry.scope == ADMIN_ON_JOB:
            if args[0] != ADMIN:  # (before any lookup: a job learns nothing about other ids)
                raise self._refuse(op, args[1], entry.denied, Forbidden)
            self._authorize(op, ADMIN, args[1], admin_ok=True)
        if entry.scope in (JOB, JOB_OR_ADMIN):
            job = self._authorize(op, args[0], args[1], admin_ok=entry.scope == JOB_OR_ADMIN)
            if entry.active:
                self._active(op, job)
