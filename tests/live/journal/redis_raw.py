"""A plain Redis client beside a test store, to read or damage its keys behind its back."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import redis


def raw_redis(url: str) -> tuple[redis.Redis, str]:
    """A plain client on a test store's server, and the store's key prefix."""
    parts = urlsplit(url)
    return redis.Redis(port=parts.port), parse_qs(parts.query)["prefix"][0]
