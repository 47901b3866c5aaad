"""An entrypoint's exit as a job's departure reason: one bounded line, without control characters or tokens.

`rollmux run` keeps the last line its entrypoint wrote to stderr and reports it with the exit code
(POST /v1/jobs/{id}/exit); the service makes the job's reason of it (`exit_reason`). Both sides clean
the line (`clean_line`): the reason shows in `GET /v1/jobs/{id}`, `rollmux status`, the dashboard and
the log, so ANSI escapes, other control characters and line breaks go, and it is cut to
`REASON_LINE_CHARS`. A secret never reaches it: the launcher blanks the tokens it holds, and the
service every word that is a token it knows (`redact`).
"""

from __future__ import annotations

import re
import signal
from collections.abc import Callable

REASON_LINE_CHARS = 300    # the most characters of the entrypoint's error line a reason keeps
EXIT_LINE_CHARS = 4096     # the longest line the exit route accepts (400 past it)
REDACTED = "[redacted]"
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]")
_WORD = re.compile(r"[A-Za-z0-9_\-.~+/=]{16,}")  # what a bearer token looks like (at least 16 characters)
_BEARER = re.compile(r"(?i)\b(bearer\s+)\S+")


def clean_line(text: str, limit: int = REASON_LINE_CHARS) -> str:
    """`text` as one line fit to show: escapes and control characters dropped, whitespace collapsed, at
    most `limit` characters (a cut one ends with '...')."""
    text = "".join(c if c.isprintable() else " " for c in _ANSI.sub("", text))
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def last_line(tail: str) -> str:
    """The last line of output that is not blank (a progress bar's carriage returns end lines too)."""
    for line in reversed(re.split(r"[\r\n]", tail)):
        if clean_line(line):
            return line
    return ""


def redact(text: str, is_secret: Callable[[str], bool]) -> str:
    """`text` with every token-like word `is_secret` says is one, and whatever follows 'Bearer', blanked."""
    text = _BEARER.sub(lambda m: m.group(1) + REDACTED, text)
    return _WORD.sub(lambda m: REDACTED if is_secret(m.group()) else m.group(), text)


def exit_reason(code: int, line: str) -> str:
    """A job's reason for an entrypoint that ended before the job finished: how it ended, and its last error line."""
    if code < 0:
        try:
            how = f"entrypoint killed by signal {-code} ({signal.Signals(-code).name})"
        except ValueError:
            how = f"entrypoint killed by signal {-code}"
    elif code == 0:
        how = "entrypoint exited with code 0 before the job finished"
    else:
        how = f"entrypoint exited with code {code}"
    line = clean_line(line)
    return f"{how}: {line}" if line else how
