"""What the scheduler service refuses, one class per HTTP status (the API maps them 1:1)."""

from __future__ import annotations


class ServiceError(Exception):
    """A request the service refused; nothing changed."""

    status = 400
    reason = "bad_request"  # the refusal metric's label (a bounded set)

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class BadRequest(ServiceError):
    """Malformed input: the message (and `field`) say what is wrong."""


class AuthError(ServiceError):
    """No token, or a token the service does not know (401)."""

    status, reason = 401, "bad_token"


class NoToken(AuthError):
    """No bearer token at all (401)."""

    reason = "no_token"


class Forbidden(AuthError):
    """A valid token that may not do this: another job's, or a job's on an admin route (403)."""

    status, reason = 403, "forbidden"


class NotFound(ServiceError):
    """No such job (404; only the admin learns that an id is unknown)."""

    status, reason = 404, "not_found"


class Conflict(ServiceError):
    """The request contradicts the state: a live job id resubmitted, a double release (409)."""

    status, reason = 409, "conflict"


class JobGone(ServiceError):
    """The job is no longer scheduled (finished, failed or cancelled: the message says why) (410)."""

    status, reason = 410, "gone"


class Unavailable(ServiceError):
    """The journal could not record the decision: nothing changed, ask again (503)."""

    status, reason = 503, "unavailable"
