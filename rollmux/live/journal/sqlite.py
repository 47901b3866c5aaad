"""The SQLite journal (the default backend; DESIGN §8): one file in WAL mode with
synchronous=FULL, so a commit is on disk when it returns; one writer, held by an flock on
`<path>.lock`; a header stamp (application_id, user_version) so that a foreign database is
refused, never altered.
"""

from __future__ import annotations

import fcntl
import os
import socket
import sqlite3
import threading
import time
import weakref
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from rollmux.live.journal.base import (
    BaseStore,
    JournalError,
    Record,
    check_snapshot_seq,
    encode,
    in_use,
    no_open_batch,
    parse_records,
    parse_snapshot,
)

# Stamped into the SQLite header so a foreign database is refused, never altered.
_APPLICATION_ID = 0x524D5558  # "RMUX"
_SCHEMA_VERSION = 1
_NO_LIMIT = 2**63 - 1
PRIVATE = 0o600  # the journal, its -wal, -shm and lock files: the owner's only, whatever the umask


def _create_private(path: Path) -> None:
    """Create a new journal file owner-only (an existing file is left as it is until it is known to be ours)."""
    try:
        os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, PRIVATE))
    except FileExistsError:
        pass


def _make_private(path: Path) -> None:
    """Make a journal of ours and its -wal and -shm files owner-only (one an older rollmux left 0644)."""
    for name in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        try:
            os.chmod(name, PRIVATE)
        except FileNotFoundError:
            pass


class SQLiteStore(BaseStore):
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
                _create_private(self.path)  # (SQLite gives its -wal and -shm files the database file's mode)
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
                _make_private(self.path)
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
        fd = os.open(f"{self.path}.lock", os.O_RDWR | os.O_CREAT, PRIVATE)
        os.fchmod(fd, PRIVATE)  # whatever the umask, or the mode an older rollmux gave it
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 512).decode(errors="replace")
            os.close(fd)
            raise JournalError(in_use(self.url, holder)) from None
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
        return parse_records(self.url, ((seq, kind, text, None) for seq, kind, text in rows), after)

    def save_snapshot(self, seq: int, state: dict) -> None:
        """Store a compacted state as of record `seq` (replaces the previous snapshot)."""
        self._writable("save a snapshot")
        text = encode(f"snapshot at seq {seq}", state)
        with self._lock, self._errors("cannot save snapshot"):
            no_open_batch(self.url, self._staged)
            last = self._conn.execute("SELECT coalesce(max(seq), 0) FROM records").fetchone()[0]
            check_snapshot_seq(self.url, seq, last)
            self._conn.execute("INSERT OR REPLACE INTO snapshot (id, seq, state, written_at) VALUES (1, ?, ?, ?)",
                               (seq, text, time.time()))

    def snapshot(self) -> tuple[int, dict] | None:
        """The latest snapshot (seq, state), or None; JournalCorrupt if it is damaged."""
        with self._lock, self._errors("cannot read snapshot"):
            row = self._conn.execute("SELECT seq, state FROM snapshot WHERE id = 1").fetchone()
        return None if row is None else parse_snapshot(self.url, row[0], row[1])

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


@contextmanager
def _reraise(errors: type[BaseException], place: str) -> Iterator[None]:
    """Re-raise `errors` as a JournalError prefixed with `place`."""
    try:
        yield
    except errors as exc:
        raise JournalError(f"{place} ({exc})") from None
