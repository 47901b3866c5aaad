"""The live scheduler's durable journal (DESIGN §8): every state change is written to a store
before it takes effect, so a restarted scheduler replays the records after its latest snapshot;
one writer per store.

Modules: `base` (the Store protocol, Record, the errors, the helpers both backends share),
`sqlite` (the default backend, a file), `redis` (the production backend), `memory` (a store that
keeps nothing, for throwaway services), `failing` (a store that fails on demand, the fault seam),
`repair` (`rollmux journal check|repair`). `open_store` is here, above both backends, so that no
backend imports another and `base` imports none of them.
"""

from __future__ import annotations

from pathlib import Path

from rollmux.live.journal.base import JournalCorrupt, JournalError, Record, Store, hide_password
from rollmux.live.journal.failing import FailingStore
from rollmux.live.journal.memory import MemoryStore
from rollmux.live.journal.sqlite import SQLiteStore

__all__ = ["FailingStore", "JournalCorrupt", "JournalError", "MemoryStore", "Record", "SQLiteStore", "Store",
           "open_store"]


def open_store(url: str, *, readonly: bool = False, password: str | None = None) -> Store:
    """`sqlite:///abs/path.db`, `sqlite://relative.db`, a bare file path (SQLite), or `redis://host:port/db[?prefix=name]`
    (`password`: Redis's, default $ROLLMUX_REDIS_PASSWORD; never put it in the URL of a command line)."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme in ("", "sqlite"):
        path = url[len("sqlite://"):] if scheme else url
        if not path.strip():
            raise JournalError(f"journal store {url!r}: no file path")
        return SQLiteStore(Path(path).expanduser(), readonly=readonly)
    if scheme in ("redis", "rediss"):
        from rollmux.live.journal.redis import RedisStore  # redis-py only where a Redis store is used
        return RedisStore(url, readonly=readonly, password=password)
    raise JournalError(f"journal store {hide_password(url)!r}: unknown scheme {scheme!r} "
                       "(use sqlite:///abs/path.db, a file path, or redis://host:port/db)")
