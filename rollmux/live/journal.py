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
from urllib.parse import parse_qs, unquote, urlencode, urlsplit, urlunsplit

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
_FENCE = """
local lease = redis.call('GET', KEYS[1])
if not lease or string.sub(lease, 1, #ARGV[1] + 1) ~= ARGV[1] .. ' ' then
  return redis.error_reply('lost the writer lease (it ran out, or another writer took the journal)')
end
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
if last ~= tonumber(ARGV[2]) then
  return redis.error_reply('the journal changed under this store (seq ' .. tostring(last) .. ')')
end
"""


class RedisStore(_Journal):
    """Redis journal: a stream whose entry ids are `seq-0`, a seq counter, a snapshot hash and a writer lease."""

    LEASE_TTL_S = 10.0  # a dead writer's lease frees the journal after this long; renewed every TTL/3

    # KEYS: writer, seq, stream. ARGV: token, last seq, n, then (kind, payload, written_at) n times.
    # A script runs alone, so a batch lands whole. Nothing is written before the first XADD,
    # and if that one succeeds (its id is above the stream's) so do the later, higher ones.
    _COMMIT = _FENCE + """
for i = 1, tonumber(ARGV[3]) do
  local j = 1 + 3 * i
  redis.call('XADD', KEYS[3], string.format('%d-0', last + i), 'kind', ARGV[j], 'payload', ARGV[j + 1],
             'written_at', ARGV[j + 2])
end
redis.call('SET', KEYS[2], string.format('%d', last + tonumber(ARGV[3])))
return last + tonumber(ARGV[3])
"""
    # KEYS: writer, seq, snapshot. ARGV: token, last seq, seq, state, written_at.
    _SNAPSHOT = _FENCE + """
redis.call('HSET', KEYS[3], 'seq', ARGV[3], 'state', ARGV[4], 'written_at', ARGV[5])
"""
    # KEYS: writer, fence. ARGV: holder ("pid host"), ttl ms. Returns {token, ''} or {0, lease held}.
    _ACQUIRE = """
local held = redis.call('GET', KEYS[1])
if held then return {0, held} end
local token = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], string.format('%d ', token) .. ARGV[1], 'PX', ARGV[2])
return {token, ''}
"""
    # KEYS: writer. ARGV: token, ttl ms (0: release). Touches the lease only while it is ours.
    _RENEW = """
local lease = redis.call('GET', KEYS[1])
if not lease or string.sub(lease, 1, #ARGV[1] + 1) ~= ARGV[1] .. ' ' then return 0 end
if ARGV[2] == '0' then redis.call('DEL', KEYS[1]) else redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 1
"""

    def __init__(self, url: str, readonly: bool = False) -> None:
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        parts = urlsplit(url)
        query = parse_qs(parts.query, keep_blank_values=True)
        prefix = query.pop("prefix", ["rollmux"])[-1]
        self.url = _hide_password(url)  # the real URL (with its password) is never kept
        self.readonly = readonly
        self._secrets = [s for s in (parts.password, unquote(parts.password or "")) if s]
        if not prefix:
            raise JournalError(f"journal store {self.url}: empty ?prefix=")
        self.prefix = prefix
        self._seq_key, self._stream_key, self._snap_key, self._writer_key, self._fence_key = (
            f"{prefix}:{k}" for k in ("seq", "records", "snapshot", "writer", "fence"))
        self._lock = threading.RLock()
        self._batch: list[tuple[str, str, float]] = []
        self._token = ""
        self._closed = False
        self._release: Callable[[], Any] = lambda: None
        # redis-py would pass ?prefix= on to the connection, so it is taken out first.
        bare = urlunsplit(parts._replace(query=urlencode(query, doseq=True)))
        self._redis_error = redis.RedisError
        try:
            # No automatic retries: a retried commit whose first reply was lost would journal twice.
            # Bytes, not str: a payload that is not UTF-8 must reach the corruption check, not crash the read.
            self._client = redis.Redis.from_url(bare, retry=Retry(NoBackoff(), 0), socket_connect_timeout=5,
                                                socket_timeout=30, decode_responses=False)
        except ValueError as exc:
            raise JournalError(f"journal store {self.url}: invalid redis URL ({self._scrub(exc)})") from None
        try:
            self._client.ping()
        except redis.RedisError as exc:
            self._client.close()
            raise JournalError(f"cannot reach redis at {self.url}: {self._scrub(exc)}") from None
        self._commit_script, self._snapshot_script, self._acquire_script, self._renew_script = (
            self._client.register_script(s) for s in (self._COMMIT, self._SNAPSHOT, self._ACQUIRE, self._RENEW))
        try:
            if not readonly:
                self._take_lease()
            self._durable = self._read_counter()  # the only writer: its commits keep this current
        except JournalError:
            self.close()
            raise

    def _take_lease(self) -> None:
        """Take the writer lease (or refuse naming its holder) and start renewing it until close."""
        with self._errors("cannot take the writer lease"):
            token, held = self._acquire_script(keys=[self._writer_key, self._fence_key],
                                               args=[f"{os.getpid()} {socket.gethostname()}",
                                                     int(self.LEASE_TTL_S * 1000)])
        if not token:
            raise JournalError(_in_use(self.url, held.decode(errors="replace").split(" ", 1)[-1]))
        self._token = str(token)
        stop = threading.Event()
        # Neither the finalizer nor the renewing thread holds the store: an unclosed store can be
        # collected, and its lease is released then (or at exit) rather than held for good.
        self._release = weakref.finalize(self, _release_lease, stop, self._renew_script, self._writer_key,
                                         self._token)
        threading.Thread(target=_keep_lease, args=(weakref.ref(self), stop, self.LEASE_TTL_S / 3),
                         name=f"rollmux-journal-lease-{self.prefix}", daemon=True).start()

    def stage(self, kind: str, payload: dict) -> int:
        """Buffer one record in the open batch (nothing reaches Redis before commit); returns its seq."""
        self._writable(f"stage {kind!r}")
        with self._lock:
            text = self._checked(kind, payload)
            try:
                if self._closed:
                    raise JournalError(f"{self.url}: cannot stage {kind!r} (store is closed)")
                if self._durable is None:
                    self._durable = self._read_counter()
                if self._durable is None:
                    raise JournalCorrupt(_damage(self.url, "the seq counter is not a number"))
            except JournalError:
                self.rollback()
                raise
            self._batch.append((kind, text, time.time()))
            return self._durable + len(self._batch)

    def commit(self) -> None:
        """Append the whole batch in one fenced Lua script call: all of it lands or none."""
        self._writable("commit")
        with self._lock:
            batch, self._batch = self._batch, []  # dropped either way: a failed commit rolls back
            if not batch:
                return
            args: list[object] = [self._token, self._durable, len(batch)]
            for record in batch:
                args.extend(record)
            try:
                with self._errors(f"cannot commit {len(batch)} record(s)"):
                    self._durable = int(self._commit_script(keys=[self._writer_key, self._seq_key, self._stream_key],
                                                            args=args))
            except JournalError:
                self._durable = None  # unknown after a lost reply: read the counter again
                raise

    def rollback(self) -> None:
        """Drop the buffered batch; its seqs are reused."""
        with self._lock:
            self._batch.clear()

    def pending(self) -> int:
        """How many records are staged and not yet committed."""
        return len(self._batch)

    def scan(self, after: int = 0) -> tuple[list[Record], str | None]:
        """The good committed records with seq > after, and the first damage (one line) or None."""
        with self._errors("cannot read records"):
            pipe = self._client.pipeline(transaction=True)  # MULTI: stream and counter as of one instant
            # From "-" (or exclusive of after-0) so a stray entry such as 0-1 or 3-5 is seen, not skipped.
            pipe.xrange(self._stream_key, min="-" if after <= 0 else f"({after}-0", max="+")
            pipe.get(self._seq_key)
            entries, counter = pipe.execute()
        good, problem = _parse_records(self.url, (_stream_row(eid, fields) for eid, fields in entries), after)
        if problem is None:
            last = good[-1].seq if good else max(after, 0)
            count = _int_or_none(counter or b"0")
            if count is None:
                problem = _damage(self.url, f"the seq counter {counter!r} is not a number")
            elif count > last:
                problem = _damage(self.url, f"record {last + 1} is missing (the seq counter is at {count})")
            elif good and count < last:
                problem = _damage(self.url, f"the seq counter ({count}) is behind record {last}")
        return good, problem

    def save_snapshot(self, seq: int, state: dict) -> None:
        """Store a compacted state as of record `seq` (replaces the previous snapshot)."""
        self._writable("save a snapshot")
        text = _encode(f"snapshot at seq {seq}", state)
        with self._lock:
            _no_open_batch(self.url, len(self._batch))
            with self._errors("cannot save snapshot"):
                last = self._durable if self._durable is not None else self._read_counter()
                if last is None:
                    raise JournalCorrupt(_damage(self.url, "the seq counter is not a number"))
                _check_snapshot_seq(self.url, seq, last)
                self._snapshot_script(keys=[self._writer_key, self._seq_key, self._snap_key],
                                      args=[self._token, last, seq, text, time.time()])

    def snapshot(self) -> tuple[int, dict] | None:
        """The latest snapshot (seq, state), or None; JournalCorrupt if it is damaged."""
        with self._errors("cannot read snapshot"):
            fields = self._client.hgetall(self._snap_key)
        if not fields:
            return None
        missing = [f for f in ("seq", "state") if f.encode() not in fields]
        seq = _int_or_none(fields.get(b"seq", b""))
        if missing or seq is None:
            why = f"missing field(s) {', '.join(missing)}" if missing else f"seq {fields[b'seq']!r} is not a number"
            raise JournalCorrupt(_damage(self.url, f"the snapshot is corrupt ({why})"))
        return _parse_snapshot(self.url, seq, fields[b"state"])

    def close(self) -> None:
        """Release the writer lease and the connections; later calls raise JournalError."""
        with self._lock:
            self._batch.clear()
            self._closed = True
            self._release()
            self._client.close()

    def _renew_lease(self) -> bool:
        """Extend the writer lease by a TTL; False if it is no longer ours (then it is left alone)."""
        with self._errors("cannot renew the writer lease"):
            return bool(self._renew_script(keys=[self._writer_key], args=[self._token, int(self.LEASE_TTL_S * 1000)]))

    def _read_counter(self) -> int | None:
        """The last committed seq, or None if the counter is damaged."""
        with self._errors("cannot read the seq counter"):
            return _int_or_none(self._client.get(self._seq_key) or b"0")

    def _scrub(self, exc: BaseException) -> str:
        """An error's text with the password (if the URL has one) hidden."""
        text = str(exc)
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    @contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        """Turn Redis errors into a JournalError naming the server (never its password)."""
        if self._closed:  # redis-py would silently reconnect
            raise JournalError(f"{self.url}: {doing} (store is closed)")
        try:
            yield
        except self._redis_error as exc:
            raise JournalError(f"{self.url}: {doing} ({self._scrub(exc)})") from None


def _keep_lease(ref: weakref.ref, stop: threading.Event, period: float) -> None:
    """Renew a store's lease every `period` s until it closes, is collected, or loses the lease."""
    while not stop.wait(period):
        store = ref()
        if store is None:
            return
        try:
            if not store._renew_lease():
                return  # taken over: the fence refuses this store's writes from now on
        except JournalError:
            pass  # redis unreachable for now: try again; if the lease runs out meanwhile, writes are refused
        del store  # hold no reference while waiting, so an unclosed store can still be collected


def _release_lease(stop: threading.Event, renew: Any, writer_key: str, token: str) -> None:
    """Stop renewing and delete the lease if it is still ours (on close, collection or exit)."""
    stop.set()
    try:
        renew(keys=[writer_key], args=[token, 0])
    except Exception:  # noqa: BLE001 - best effort: an unreleased lease expires by itself
        pass


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


def _stream_row(eid: bytes, fields: dict) -> tuple[int, object, object, str | None]:
    """A Redis stream entry as a (seq, kind, payload text, damage) row."""
    ms, _, sub = eid.decode().partition("-")
    if sub != "0":
        return int(ms), None, None, f"stream entry {eid.decode()} is not a journal record (ids are <seq>-0)"
    missing = [f for f in ("kind", "payload") if f.encode() not in fields]
    if missing:
        return int(ms), None, None, f"record {ms} is corrupt (missing field(s) {', '.join(missing)})"
    try:
        kind: object = fields[b"kind"].decode()
    except UnicodeDecodeError:
        kind = fields[b"kind"]
    return int(ms), kind, fields[b"payload"], None


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
