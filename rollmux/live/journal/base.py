"""The live scheduler's durable journal (DESIGN §8): every state change is written here
before it takes effect, so a restarted scheduler replays the records after its latest
snapshot. Backends: SQLite (the default: a file path) and Redis; `open_store` picks by URL.
Checking and repairing a damaged journal lives in `journal_repair`.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sqlite3
import threading
import time
import weakref
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Protocol
from urllib.parse import urlsplit

# Stamped into the SQLite header so a foreign database is refused, never altered.
_APPLICATION_ID = 0x524D5558  # "RMUX"
_SCHEMA_VERSION = 1
_NO_LIMIT = 2**63 - 1


class JournalError(Exception):
    """A journal store that cannot be opened, read or written; the message names the store."""


class JournalCorrupt(JournalError):
    """A torn or corrupt record or snapshot; the message names it and says how to repair."""


@dataclass(frozen=True)
class Record:
    """One journaled state change."""

    seq: int  # 1, 2, 3, ... in commit order, gap-free per store
    kind: str  # e.g. "submit", "grant", "release", "finish", "fail"
    payload: dict  # JSON-serializable


class Store(Protocol):
    """What the scheduler needs of a journal; both backends implement it.

    Writer lock: a store opened for writing (the default) holds an exclusive lock on its
    journal until close() (SQLite: flock on `<path>.lock`; Redis: a leased `<prefix>:writer`
    key whose fencing token every write checks), so a second writer, `journal repair`
    included, is refused with one line naming the holder. `open_store(url, readonly=True)`
    takes no lock and refuses every write.

    Group commit: stage() records into an open batch, then commit() makes the whole batch
    durable at once, or rollback() drops it (its seqs are reused). Staged records are not
    visible to records() until committed. A failed stage or commit rolls the batch back.
    """

    url: str  # safe to print: a password in it is shown as ***
    readonly: bool

    def stage(self, kind: str, payload: dict) -> int:
        """Add one record to the open batch (opening one if none); returns its seq."""

    def commit(self) -> None:
        """Make every staged record durable at once (all or none)."""

    def rollback(self) -> None:
        """Drop the open batch; none of it is ever visible."""

    def pending(self) -> int:
        """How many records are staged and not yet committed."""

    def append(self, kind: str, payload: dict) -> int:
        """stage + commit (committing any open batch with it); returns the record's seq."""

    def records(self, after: int = 0) -> list[Record]:
        """Every committed record with seq > after, in order; JournalCorrupt at a damaged one."""

    def scan(self, after: int = 0) -> tuple[list[Record], str | None]:
        """Like records(), but returns the good records before the first damage and its one-line reason."""

    def save_snapshot(self, seq: int, state: dict) -> None:
        """Store a compacted state as of record `seq` (replaces the previous snapshot)."""

    def snapshot(self) -> tuple[int, dict] | None:
        """The latest snapshot (seq, state), or None; JournalCorrupt if it is damaged."""

    def close(self) -> None:
        """Drop an open batch, release the writer lock and the file or connection."""


def open_store(url: str, *, readonly: bool = False) -> Store:
    """`sqlite:///abs/path.db`, `sqlite://relative.db`, a bare file path (SQLite), or `redis://host:port/db[?prefix=name]`."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme in ("", "sqlite"):
        path = url[len("sqlite://"):] if scheme else url
        if not path.strip():
            raise JournalError(f"journal store {url!r}: no file path")
        return SQLiteStore(Path(path).expanduser(), readonly=readonly)
    if scheme in ("redis", "rediss"):
        from rollmux.live.journal_redis import RedisStore  # redis-py only where a Redis store is used
        return RedisStore(url, readonly=readonly)
    raise JournalError(f"journal store {_hide_password(url)!r}: unknown scheme {scheme!r} "
                       "(use sqlite:///abs/path.db, a file path, or redis://host:port/db)")


class _Journal:
    """What both backends share: append and records on top of stage/commit and scan."""

    url: str
    readonly: bool
    _lock: threading.RLock

    def append(self, kind: str, payload: dict) -> int:
        """stage + commit (committing any open batch with it); returns the record's seq."""
        with self._lock:  # one thread's stage and commit, never interleaved with another's
            seq = self.stage(kind, payload)
            self.commit()
            return seq

    def records(self, after: int = 0) -> list[Record]:
        """Every committed record with seq > after, in order; JournalCorrupt at a damaged one."""
        good, problem = self.scan(after)
        if problem is not None:
            raise JournalCorrupt(problem)
        return good

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r}{', readonly' if self.readonly else ''})"

    def _writable(self, doing: str) -> None:
        """Refuse a write on a store opened read-only."""
        if self.readonly:
            raise JournalError(f"{self.url}: opened read-only, cannot {doing}")

    def _checked(self, kind: str, payload: dict) -> str:
        """The payload as JSON text, or JournalError (after dropping the batch) if kind or payload is bad."""
        try:
            _check_kind(kind)
            return _encode(f"journal record {kind!r}", payload)
        except JournalError:
            self.rollback()  # a failed stage leaves the store as it was before the batch
            raise


class SQLiteStore(_Journal):
    """SQLite journal: WAL + synchronous=FULL, so a commit is on disk when it returns."""

    def __init__(self, path: Path, readonly: bool = False) -> None:
        self.path = path.absolute()
        self.url = f"sqlite://{self.path}"  # absolute path: sqlite:///abs/path.db
        self.readonly = readonly
        # One connection shared by the scheduler's threads; the lock serializes them.
        self._lock = threading.RLock()
        self._staged = 0  # records in the open transaction
        self._durable = 0  # the last committed seq, while a batch is open
        self._release: Callable[[], Any] = lambda: None
        try:
            if readonly:
                if not self.path.is_file():
                    raise JournalError(f"{self.url}: no journal there (no such file)")
                self._conn = sqlite3.connect(f"{self.path.as_uri()}?mode=ro", uri=True, isolation_level=None,
                                             check_same_thread=False, timeout=30)
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._release = weakref.finalize(self, os.close, self._take_writer_lock())
                self._conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30)
        except (OSError, sqlite3.Error) as exc:
            self._release()
            raise JournalError(f"{self.url}: cannot open journal ({exc})") from None
        except JournalError:
            self._release()
            raise
        try:
            self._check_owner()
            if not readonly:
                self._init_schema()
        except sqlite3.Error as exc:  # OperationalError: locked, read-only, ...; others: not a database
            self.close()
            what = "cannot open journal" if isinstance(exc, sqlite3.OperationalError) else "not a rollmux journal"
            raise JournalError(f"{self.url}: {what} ({exc})") from None
        except JournalError:
            self.close()
            raise

    def _take_writer_lock(self) -> int:
        """flock `<path>.lock` (held until close; the kernel drops it if the process dies) and write who holds it."""
        fd = os.open(f"{self.path}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 512).decode(errors="replace")
            os.close(fd)
            raise JournalError(_in_use(self.url, holder)) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {socket.gethostname()}\n".encode(), 0)
        return fd

    def _check_owner(self) -> None:
        """Refuse a database that another program owns, or one written by another schema version."""
        c = self._conn
        # Checked before any write: journal_mode=WAL would persistently alter a foreign file.
        app_id = c.execute("PRAGMA application_id").fetchone()[0]
        tables = c.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        if app_id != _APPLICATION_ID and (app_id != 0 or tables):
            raise JournalError(f"{self.url}: not a rollmux journal (an SQLite database of another program)")
        if app_id != _APPLICATION_ID and self.readonly:
            raise JournalError(f"{self.url}: not a rollmux journal (an empty database)")
        version = c.execute("PRAGMA user_version").fetchone()[0]
        if app_id == _APPLICATION_ID and version != _SCHEMA_VERSION:
            raise JournalError(f"{self.url}: journal schema version {version}, this rollmux reads {_SCHEMA_VERSION}")

    def _init_schema(self) -> None:
        """Create the tables in a fresh file (idempotent on an existing journal)."""
        c = self._conn
        c.execute("PRAGMA journal_mode=WAL")
        c.execute("PRAGMA synchronous=FULL")  # fsync the WAL on every commit: durable, not just atomic
        c.execute("BEGIN IMMEDIATE")
        c.execute("CREATE TABLE IF NOT EXISTS records (seq INTEGER PRIMARY KEY, kind TEXT NOT NULL, "
                  "payload TEXT NOT NULL, written_at REAL NOT NULL)")
        c.execute("CREATE TABLE IF NOT EXISTS snapshot (id INTEGER PRIMARY KEY CHECK (id = 1), "
                  "seq INTEGER NOT NULL, state TEXT NOT NULL, written_at REAL NOT NULL)")
        c.execute(f"PRAGMA application_id = {_APPLICATION_ID}")
        c.execute(f"PRAGMA user_version = {_SCHEMA_VERSION}")
        c.execute("COMMIT")

    def stage(self, kind: str, payload: dict) -> int:
        """Add one record to the open batch (BEGIN IMMEDIATE + INSERT); returns its seq."""
        self._writable(f"stage {kind!r}")
        with self._lock:
            text = self._checked(kind, payload)
            try:
                with self._errors(f"cannot stage {kind!r}"):
                    if not self._staged:
                        self._conn.execute("BEGIN IMMEDIATE")
                    # seq is the rowid (max + 1): rows only go away from the tail (rollback,
                    # repair), so seqs stay gap-free and a rolled-back seq is reused.
                    seq = self._conn.execute("INSERT INTO records (kind, payload, written_at) VALUES (?, ?, ?)",
                                             (kind, text, time.time())).lastrowid
            except JournalError:
                self.rollback()
                raise
            if not self._staged:
                self._durable = seq - 1
            self._staged += 1
            return seq

    def commit(self) -> None:
        """COMMIT the open batch: durable (synchronous=FULL) and atomic."""
        self._writable("commit")
        with self._lock:
            if not self._staged:
                return
            try:
                with self._errors(f"cannot commit {self._staged} record(s)"):
                    self._conn.execute("COMMIT")
            except JournalError:
                self.rollback()
                raise
            self._staged = 0

    def rollback(self) -> None:
        """Drop the open batch (ROLLBACK); its seqs are reused."""
        with self._lock:
            self._staged = 0
            try:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # a closed connection holds no transaction; nothing was committed either way

    def pending(self) -> int:
        """How many records are staged and not yet committed."""
        return self._staged

    def scan(self, after: int = 0) -> tuple[list[Record], str | None]:
        """The good committed records with seq > after, and the first damage (one line) or None."""
        with self._lock, self._errors("cannot read records"):
            # The connection sees its own open batch; staged rows are not records yet.
            limit = self._durable if self._staged else _NO_LIMIT
            rows = self._conn.execute("SELECT seq, kind, payload FROM records WHERE seq > ? AND seq <= ? "
                                      "ORDER BY seq", (after, limit)).fetchall()
        return _parse_records(self.url, ((seq, kind, text, None) for seq, kind, text in rows), after)

    def save_snapshot(self, seq: int, state: dict) -> None:
        """Store a compacted state as of record `seq` (replaces the previous snapshot)."""
        self._writable("save a snapshot")
        text = _encode(f"snapshot at seq {seq}", state)
        with self._lock, self._errors("cannot save snapshot"):
            _no_open_batch(self.url, self._staged)
            last = self._conn.execute("SELECT coalesce(max(seq), 0) FROM records").fetchone()[0]
            _check_snapshot_seq(self.url, seq, last)
            self._conn.execute("INSERT OR REPLACE INTO snapshot (id, seq, state, written_at) VALUES (1, ?, ?, ?)",
                               (seq, text, time.time()))

    def snapshot(self) -> tuple[int, dict] | None:
        """The latest snapshot (seq, state), or None; JournalCorrupt if it is damaged."""
        with self._lock, self._errors("cannot read snapshot"):
            row = self._conn.execute("SELECT seq, state FROM snapshot WHERE id = 1").fetchone()
        return None if row is None else _parse_snapshot(self.url, row[0], row[1])

    def close(self) -> None:
        """Close the file and release the writer lock; later calls raise JournalError."""
        with self._lock:
            self._staged = 0  # closing discards an open transaction
            if hasattr(self, "_conn"):
                self._conn.close()
            self._release()

    def _errors(self, doing: str) -> AbstractContextManager[None]:
        """Turn sqlite3 errors (disk full, closed store, ...) into a JournalError naming the file."""
        return _reraise(sqlite3.Error, f"{self.url}: {doing}")


# Every Redis write runs as a script that first checks the writer lease still carries this
# store's fencing token: a writer that stalled past its lease (and was replaced) writes nothing.
class FailingStore:
    """A Store that fails on demand (tests' fault-injection seam); everything else goes to `inner`.

    stage/append fail when fail_on(kind, payload) is true; commit fails while fail_commit is
    True or a positive count (each failure uses one up), save_snapshot likewise with fail_snapshot.
    A failure writes nothing and rolls the inner batch back, as a real failure would.
    """

    def __init__(self, inner: Store, fail_on: Callable[[str, dict], bool] = lambda kind, payload: False,
                 fail_commit: bool | int = False, fail_snapshot: bool | int = False) -> None:
        self.inner = inner
        self.fail_on = fail_on
        self.fail_commit = fail_commit
        self.fail_snapshot = fail_snapshot
        self.injected = 0  # failures raised so far

    def stage(self, kind: str, payload: dict) -> int:
        """inner.stage, unless fail_on(kind, payload)."""
        if self.fail_on(kind, payload):
            raise self._fail(f"staging {kind!r}")
        return self.inner.stage(kind, payload)

    def append(self, kind: str, payload: dict) -> int:
        """stage + commit through this wrapper, so either can be made to fail."""
        seq = self.stage(kind, payload)
        self.commit()
        return seq

    def commit(self) -> None:
        """inner.commit, unless fail_commit says to fail this one."""
        if self._take("fail_commit"):
            raise self._fail(f"committing {self.inner.pending()} record(s)")
        self.inner.commit()

    def save_snapshot(self, seq: int, state: dict) -> None:
        """inner.save_snapshot, unless fail_snapshot says to fail this one."""
        if self._take("fail_snapshot"):
            raise self._fail(f"saving the snapshot at seq {seq}")
        self.inner.save_snapshot(seq, state)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)  # url, records, scan, snapshot, rollback, pending, close, ...

    def __repr__(self) -> str:
        return f"FailingStore({self.inner!r})"

    def _take(self, flag: str) -> bool:
        """Whether the flag says fail now; a count goes down by one per failure."""
        value = getattr(self, flag)
        if value is True or (type(value) is int and value > 0):
            if value is not True:
                setattr(self, flag, value - 1)
            return True
        return False

    def _fail(self, doing: str) -> JournalError:
        """Roll the inner batch back and make the injected error."""
        self.inner.rollback()
        self.injected += 1
        return JournalError(f"{self.inner.url}: injected failure {doing}")


def _parse_records(place: str, rows: Iterable[tuple[int, object, object, str | None]],
                   after: int) -> tuple[list[Record], str | None]:
    """Decode (seq, kind, payload text, damage the backend saw) rows up to the first damaged or missing one."""
    good: list[Record] = []
    expect = max(after, 0) + 1
    for seq, kind, text, damage in rows:
        if damage is not None:
            return good, _damage(place, damage)
        if seq != expect:
            return good, _damage(place, f"record {expect} is missing (the next one is record {seq})")
        if not isinstance(kind, str) or not kind:
            return good, _damage(place, f"record {seq} is corrupt (kind {kind!r} is not a non-empty string)")
        try:
            payload = _load_object(text)
        except ValueError as exc:
            return good, _damage(place, f"record {seq} ({kind!r}) is corrupt ({exc})")
        good.append(Record(seq, kind, payload))
        expect += 1
    return good, None


def _parse_snapshot(place: str, seq: int, text: object) -> tuple[int, dict]:
    """A stored snapshot's (seq, state), or JournalCorrupt."""
    try:
        return seq, _load_object(text)
    except ValueError as exc:
        raise JournalCorrupt(_damage(place, f"the snapshot as of record {seq} is corrupt ({exc})")) from None


_JSON_TYPES = {list: "array", str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}


def _load_object(text: object) -> dict:
    """Stored JSON text as a dict; ValueError saying why not."""
    try:
        value = json.loads(text)  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        raise ValueError(f"not JSON: {' '.join(str(exc).split())}") from None
    if not isinstance(value, dict):
        raise ValueError(f"a JSON {_JSON_TYPES.get(type(value), type(value).__name__)}, not an object")
    return value


def _damage(place: str, what: str) -> str:
    """The one-line damage report: what is wrong where, and the command that repairs it."""
    return f"{place}: {what}; run 'rollmux journal repair {place}'"


def _in_use(place: str, holder: str) -> str:
    """The one-line refusal of a second writer, naming the holder ("pid host") if known."""
    pid, _, host = holder.strip().partition(" ")
    who = f"pid {pid} on host {host}" if pid and host else "holder unknown"
    return f"{place}: journal is in use by another rollmux serve ({who})"


def _int_or_none(value: object) -> int | None:
    """A stored counter as an int, or None if it is not one."""
    try:
        return int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return None


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


def _no_open_batch(place: str, staged: int) -> None:
    """A snapshot must not ride in (or be rolled back with) an open batch."""
    if staged:
        raise JournalError(f"{place}: cannot save a snapshot while {staged} staged record(s) await commit")


def _check_snapshot_seq(place: str, seq: object, last: int) -> None:
    """A snapshot is as of an existing record (or 0, before any); anything else is a caller bug."""
    if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq <= last:
        raise JournalError(f"{place}: snapshot seq must be an int in 0..{last} (the last record), got {seq!r}")


def _hide_password(url: str) -> str:
    """The URL as safe to print: a password in it becomes ***."""
    try:
        password = urlsplit(url).password
    except ValueError:
        return url
    return url if password is None else url.replace(f":{password}@", ":***@", 1)


@contextmanager
def _reraise(errors: type[BaseException], place: str) -> Iterator[None]:
    """Re-raise `errors` as a JournalError prefixed with `place`."""
    try:
        yield
    except errors as exc:
        raise JournalError(f"{place} ({exc})") from None
