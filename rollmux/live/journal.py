"""The live scheduler's durable journal (DESIGN §8): every state change is appended here
before it takes effect, so a restarted scheduler replays the records after its latest
snapshot. Backends: SQLite (the default: a file path) and Redis; `open_store` picks by URL.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Protocol
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

# Stamped into the SQLite header so a foreign database is refused, never altered.
_APPLICATION_ID = 0x524D5558  # "RMUX"
_SCHEMA_VERSION = 1


class JournalError(Exception):
    """A journal store that cannot be opened, read or written; the message names the store."""


@dataclass(frozen=True)
class Record:
    """One journaled state change."""

    seq: int  # 1, 2, 3, ... in append order, gap-free per store
    kind: str  # e.g. "submit", "grant", "release", "finish", "fail"
    payload: dict  # JSON-serializable


class Store(Protocol):
    """What the scheduler needs of a journal; both backends implement it."""

    url: str

    def append(self, kind: str, payload: dict) -> int:
        """Durably write one record (committed before it returns); returns its seq."""

    def records(self, after: int = 0) -> list[Record]:
        """Every record with seq > after, in order."""

    def save_snapshot(self, seq: int, state: dict) -> None:
        """Store a compacted state as of record `seq` (replaces the previous snapshot)."""

    def snapshot(self) -> tuple[int, dict] | None:
        """The latest snapshot (seq, state), or None."""

    def close(self) -> None:
        """Release the file or connection; the store is unusable afterwards."""


def open_store(url: str) -> Store:
    """`sqlite:///abs/path.db`, `sqlite://relative.db`, a bare file path (SQLite), or `redis://host:port/db[?prefix=name]`."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme in ("", "sqlite"):
        path = url[len("sqlite://"):] if scheme else url
        if not path.strip():
            raise JournalError(f"journal store {url!r}: no file path")
        return SQLiteStore(Path(path).expanduser())
    if scheme in ("redis", "rediss"):
        return RedisStore(url)
    raise JournalError(f"journal store {url!r}: unknown scheme {scheme!r} "
                       "(use sqlite:///abs/path.db, a file path, or redis://host:port/db)")


def _encode(what: str, value: object) -> str:
    """`value` as JSON text; `what` names the record or snapshot in the error."""
    if not isinstance(value, dict):
        raise JournalError(f"{what}: must be a dict, got {type(value).__name__}")
    try:
        return json.dumps(value, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise JournalError(f"{what}: not JSON-serializable ({exc})") from None


def _check_kind(kind: object) -> None:
    """Refuse a kind that would not identify the record on replay."""
    if not isinstance(kind, str) or not kind:
        raise JournalError(f"journal record kind must be a non-empty string, got {kind!r}")


class SQLiteStore:
    """SQLite journal: WAL + synchronous=FULL, so an append is on disk when it returns."""

    def __init__(self, path: Path) -> None:
        self.path = path.absolute()
        self.url = f"sqlite://{self.path}"  # absolute path: sqlite:///abs/path.db
        # One connection shared by the scheduler's threads; the lock serializes them.
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30)
        except (OSError, sqlite3.Error) as exc:
            raise JournalError(f"{self.url}: cannot open journal ({exc})") from None
        try:
            self._init_schema()
        except sqlite3.Error as exc:  # OperationalError: locked, read-only, ...; others: not a database
            self._conn.close()
            what = "cannot open journal" if isinstance(exc, sqlite3.OperationalError) else "not a rollmux journal"
            raise JournalError(f"{self.url}: {what} ({exc})") from None
        except JournalError:
            self._conn.close()
            raise

    def _init_schema(self) -> None:
        """Create the tables in a fresh file; refuse a database that another program owns."""
        c = self._conn
        # Check ownership before any write: journal_mode=WAL would persistently alter a foreign file.
        app_id = c.execute("PRAGMA application_id").fetchone()[0]
        tables = c.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        if app_id != _APPLICATION_ID and (app_id != 0 or tables):
            raise JournalError(f"{self.url}: not a rollmux journal (an SQLite database of another program)")
        c.execute("PRAGMA journal_mode=WAL")
        c.execute("PRAGMA synchronous=FULL")  # fsync the WAL on every commit: durable, not just atomic
        version = c.execute("PRAGMA user_version").fetchone()[0]
        if app_id == _APPLICATION_ID and version != _SCHEMA_VERSION:
            raise JournalError(f"{self.url}: journal schema version {version}, this rollmux reads {_SCHEMA_VERSION}")
        c.execute("BEGIN IMMEDIATE")  # idempotent on an existing journal; serializes two first opens
        c.execute("CREATE TABLE IF NOT EXISTS records (seq INTEGER PRIMARY KEY, kind TEXT NOT NULL, "
                  "payload TEXT NOT NULL, written_at REAL NOT NULL)")
        c.execute("CREATE TABLE IF NOT EXISTS snapshot (id INTEGER PRIMARY KEY CHECK (id = 1), "
                  "seq INTEGER NOT NULL, state TEXT NOT NULL, written_at REAL NOT NULL)")
        c.execute(f"PRAGMA application_id = {_APPLICATION_ID}")
        c.execute(f"PRAGMA user_version = {_SCHEMA_VERSION}")
        c.execute("COMMIT")

    def append(self, kind: str, payload: dict) -> int:
        """Durably write one record (committed before it returns); returns its seq."""
        _check_kind(kind)
        text = _encode(f"journal record {kind!r}", payload)
        with self._lock, self._errors(f"cannot append {kind!r}"):
            # Autocommit: the INSERT is its own transaction. Rows are never deleted, so the
            # rowid (max + 1) is gap-free, and a failed insert consumes no seq.
            cur = self._conn.execute("INSERT INTO records (kind, payload, written_at) VALUES (?, ?, ?)",
                                     (kind, text, time.time()))
            return cur.lastrowid

    def records(self, after: int = 0) -> list[Record]:
        """Every record with seq > after, in order."""
        with self._lock, self._errors("cannot read records"):
            rows = self._conn.execute("SELECT seq, kind, payload FROM records WHERE seq > ? ORDER BY seq",
                                      (after,)).fetchall()
        return [Record(seq, kind, json.loads(text)) for seq, kind, text in rows]

    def save_snapshot(self, seq: int, state: dict) -> None:
        """Store a compacted state as of record `seq` (replaces the previous snapshot)."""
        text = _encode(f"snapshot at seq {seq}", state)
        with self._lock, self._errors("cannot save snapshot"):
            last = self._conn.execute("SELECT coalesce(max(seq), 0) FROM records").fetchone()[0]
            _check_snapshot_seq(self.url, seq, last)
            self._conn.execute("INSERT OR REPLACE INTO snapshot (id, seq, state, written_at) VALUES (1, ?, ?, ?)",
                               (seq, text, time.time()))

    def snapshot(self) -> tuple[int, dict] | None:
        """The latest snapshot (seq, state), or None."""
        with self._lock, self._errors("cannot read snapshot"):
            row = self._conn.execute("SELECT seq, state FROM snapshot WHERE id = 1").fetchone()
        return None if row is None else (row[0], json.loads(row[1]))

    def close(self) -> None:
        """Close the file; later calls raise JournalError."""
        with self._lock:
            self._conn.close()

    def _errors(self, doing: str) -> AbstractContextManager[None]:
        """Turn sqlite3 errors (disk full, closed store, ...) into a JournalError naming the file."""
        return _reraise(sqlite3.Error, f"{self.url}: {doing}")


class RedisStore:
    """Redis journal: a stream whose entry ids are `seq-0`, a counter, and a snapshot hash."""

    # Atomic (Redis runs a script alone). XADD goes first: if it fails nothing is written,
    # whereas an INCR done first would survive the error and leave a gap in seq.
    _APPEND = """
    local seq = string.format('%d', tonumber(redis.call('GET', KEYS[1]) or '0') + 1)
    redis.call('XADD', KEYS[2], seq .. '-0', 'kind', ARGV[1], 'payload', ARGV[2], 'written_at', ARGV[3])
    redis.call('SET', KEYS[1], seq)
    return tonumber(seq)
    """

    def __init__(self, url: str) -> None:
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        parts = urlsplit(url)
        query = parse_qs(parts.query, keep_blank_values=True)
        prefix = query.pop("prefix", ["rollmux"])[-1]
        self.url = url
        self._shown = _hide_password(url)
        if not prefix:
            raise JournalError(f"journal store {self._shown}: empty ?prefix=")
        self._seq_key, self._stream_key, self._snap_key = (f"{prefix}:{k}" for k in ("seq", "records", "snapshot"))
        # redis-py would pass ?prefix= on to the connection, so it is taken out first.
        bare = urlunsplit(parts._replace(query=urlencode(query, doseq=True)))
        self._redis_error = redis.RedisError
        try:
            # No automatic retries: a retried append whose first reply was lost would journal twice.
            self._client = redis.Redis.from_url(bare, retry=Retry(NoBackoff(), 0), socket_connect_timeout=5,
                                                socket_timeout=30, decode_responses=True)
        except ValueError as exc:
            raise JournalError(f"journal store {self._shown}: invalid redis URL ({exc})") from None
        try:
            self._client.ping()
        except redis.RedisError as exc:
            raise JournalError(f"cannot reach redis at {self._shown}: {exc}") from None
        self._append = self._client.register_script(self._APPEND)
        self._closed = False

    def append(self, kind: str, payload: dict) -> int:
        """Durably write one record (committed before it returns); returns its seq."""
        _check_kind(kind)
        text = _encode(f"journal record {kind!r}", payload)
        with self._errors(f"cannot append {kind!r}"):
            return int(self._append(keys=[self._seq_key, self._stream_key], args=[kind, text, time.time()]))

    def records(self, after: int = 0) -> list[Record]:
        """Every record with seq > after, in order."""
        with self._errors("cannot read records"):
            entries = self._client.xrange(self._stream_key, min=f"{max(after, 0) + 1}-0", max="+")
        return [Record(int(eid.split("-")[0]), f["kind"], json.loads(f["payload"])) for eid, f in entries]

    def save_snapshot(self, seq: int, state: dict) -> None:
        """Store a compacted state as of record `seq` (replaces the previous snapshot)."""
        text = _encode(f"snapshot at seq {seq}", state)
        with self._errors("cannot save snapshot"):
            _check_snapshot_seq(self._shown, seq, int(self._client.get(self._seq_key) or 0))
            self._client.hset(self._snap_key, mapping={"seq": seq, "state": text, "written_at": time.time()})

    def snapshot(self) -> tuple[int, dict] | None:
        """The latest snapshot (seq, state), or None."""
        with self._errors("cannot read snapshot"):
            fields = self._client.hgetall(self._snap_key)
        return (int(fields["seq"]), json.loads(fields["state"])) if fields else None

    def close(self) -> None:
        """Close the connections; later calls raise JournalError."""
        self._closed = True
        self._client.close()

    def _errors(self, doing: str) -> AbstractContextManager[None]:
        """Turn Redis errors into a JournalError naming the server."""
        if self._closed:  # redis-py would silently reconnect
            raise JournalError(f"{self._shown}: {doing} (store is closed)")
        return _reraise(self._redis_error, f"{self._shown}: {doing}")


def _check_snapshot_seq(place: str, seq: object, last: int) -> None:
    """A snapshot is as of an existing record (or 0, before any); anything else is a caller bug."""
    if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq <= last:
        raise JournalError(f"{place}: snapshot seq must be an int in 0..{last} (the last record), got {seq!r}")


def _hide_password(url: str) -> str:
    """The URL as safe to print: a password in it becomes ***."""
    password = urlsplit(url).password
    return url if password is None else url.replace(f":{password}@", ":***@", 1)


@contextmanager
def _reraise(errors: type[BaseException], place: str) -> Iterator[None]:
    """Re-raise `errors` as a JournalError prefixed with `place`."""
    try:
        yield
    except errors as exc:
        raise JournalError(f"{place} ({exc})") from None
