"""The service's structured log lines: one line per event (a submit, a placement, a move, a job
leaving: done, cancelled or failed), `event=NAME key=value ...`, on the `rollmux.events` logger at
info (`rollmux --log-level info serve`).

Values are bounded (a caller's strings among them) and quoted where they hold a space, a quote,
an `=` or anything unprintable; a field whose name says it is a secret is never written.
"""

from __future__ import annotations

import json
import logging
from enum import Enum
from typing import Any

log = logging.getLogger("rollmux.events")

MAX_VALUE = 120  # characters of one value, before quoting
_SECRET = ("token", "password", "secret", "key")


def event(name: str, **fields: Any) -> None:
    """Log one event as a single key=value line at info (fields that are None are left out)."""
    if log.isEnabledFor(logging.INFO):
        log.info("%s", event_line(name, **fields))


def event_line(name: str, **fields: Any) -> str:
    """The event's line: `event=NAME` then each field as key=value, secrets left out."""
    parts = [f"event={_value(name)}"]
    for key, value in fields.items():
        if value is None or any(word in key.lower() for word in _SECRET):
            continue
        parts.append(f"{key}={_value(value)}")
    return " ".join(parts)


def _value(value: Any) -> str:
    """One value as written: bounded, and quoted (JSON string escapes) unless it is a plain word."""
    if isinstance(value, Enum):
        value = value.value
    text = f"{value:g}" if isinstance(value, float) else str(value)
    if len(text) > MAX_VALUE:
        text = text[:MAX_VALUE] + "..."
    if not text or not text.isprintable() or not text.isascii() or any(c in text for c in ' "=\\'):
        return json.dumps(text)
    return text
