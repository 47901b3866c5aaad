"""What the scheduler service refuses, one class per HTTP status (the API maps them 1:1), and how a
caller's string is shown in a log line (`shown`)."""

from __future__ import annotations

SHOWN_CHARS = 80  # the most characters of a caller's string a log line shows


def shown(value: object, limit: int = SHOWN_CHARS, quoted: bool = True) -> str:
    """A caller-supplied value as safe to log: at most `limit` characters of it, newlines, ANSI escapes and
    every other unprintable character escaped, then how many characters were left out. A string is
    quoted (its repr) unless `quoted=False` (a message the server built around such values)."""
    text = value if isinstance(value, str) else repr(value)
    cut = text[:limit]
    out = repr(cut) if quoted and isinstance(value, str) else _escaped(cut)
    return out if len(text) <= limit else f"{out}...(+{len(text) - limit} chars)"


def _escaped(text: str) -> str:
    """`text` with each unprintable character written as its escape (\\n, \\x1b, \\u2028)."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


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


class RateLimited(ServiceError):
    """Too many failed attempts from one client address in a while (429; the answer says when to retry)."""

    status, reason = 429, "rate_limited"


class Unavailable(ServiceError):
    """The journal could not record the decision: nothing changed, ask again (503)."""

    status, reason = 503, "unavailable"
