"""Repairing an SQLite journal damaged at the page level (`rollmux journal repair` when SQLite
itself cannot read the file): the damaged file is kept aside as `<store>.damaged-<n>`, every
readable row is read from its pages (`pages.scan_pages`), each record is validated by the
record models (core/records.py), and a new journal is written with every valid record:
- replayed: the snapshot, if one survived, and the gap-free run of records after it (or from
  record 1), then what the records past the gap still tell (`past_gap`: the jobs they name,
  submitted again, and their departures);
- kept unreplayed, in table `salvaged` with their own seqs: every other valid record.
What no page holds is counted and its seqs named.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from pydantic import ValidationError

from rollmux.core.records import config_from, parse
from rollmux.core.vocabulary import TERMINAL
from rollmux.live.journal.base import JournalError, in_use
from rollmux.live.journal.pages import Row, scan_pages
from rollmux.live.journal.past_gap import PastGap, past_gap
from rollmux.live.journal.sqlite import PRIVATE, SQLiteStore

# The records a repaired journal keeps but does not replay (past a gap, or before its snapshot):
# six columns, so that a later page-level repair never reads one of its rows as a record.
SALVAGED_TABLE = ("CREATE TABLE IF NOT EXISTS salvaged (id INTEGER PRIMARY KEY, seq INTEGER NOT NULL, "
                  "kind TEXT NOT NULL, payload TEXT NOT NULL, written_at REAL NOT NULL, repaired_at REAL NOT NULL)")


@dataclass(frozen=True)
class Salvage:
    """What the pages of a damaged journal hold, and what the repaired journal makes of it."""

    records: dict[int, tuple[str, str, float]]  # seq -> (kind, payload text, written_at): every valid one read
    snapshot: tuple[int, str, float] | None     # (seq, state text, written_at), if a valid one was read
    kept: list[int] = field(default_factory=list)  # the seqs the repaired journal replays
    invalid: int = 0                              # rows read whole that no record model accepts
    gap: PastGap = field(default_factory=PastGap)  # what the records past the kept run still tell
    earlier: list[tuple[int, str, str, float, float]] = field(default_factory=list)  # an earlier repair's

    @property
    def last_kept(self) -> int:
        """The last record a replay reaches (the snapshot's when it has none after it)."""
        return self.kept[-1] if self.kept else (self.snapshot[0] if self.snapshot else 0)

    @property
    def replayed_snapshot(self) -> tuple[int, str, float] | None:
        """The snapshot the repaired journal holds: the one read, if a replay reaches its record."""
        return self.snapshot if self.snapshot is not None and self.snapshot[0] <= self.last_kept else None

    @property
    def archived(self) -> list[int]:
        """Every valid record the repaired journal keeps without replaying it (table `salvaged`)."""
        kept = set(self.kept)
        return sorted(q for q in self.records if q not in kept)

    @property
    def lost_seqs(self) -> list[int]:
        """The records (up to the last one the pages name) that no page holds readable and valid;
        those before the snapshot the repaired journal holds are not lost (it holds their effect)."""
        covered = self.replayed_snapshot[0] if self.replayed_snapshot else 0
        top = max([*self.records, covered], default=0)
        return [seq for seq in range(covered + 1, top + 1) if seq not in self.records]

    @property
    def lost(self) -> tuple[int, int | None, int | None]:
        """(how many, first seq, last seq) of the records no page holds readable and valid."""
        seqs = self.lost_seqs
        return (len(seqs), seqs[0], seqs[-1]) if seqs else (0, None, None)

    def first_missing(self) -> int | None:
        """The first record (from 1) no page holds readable and valid, if any."""
        seq = 1
        while seq in self.records:
            seq += 1
        return seq if seq <= max(self.records, default=0) else None


def read_salvage(data: bytes) -> Salvage:
    """The valid records and snapshot the file's pages hold, and which of them a replay can use."""
    records: dict[int, tuple[str, str, float]] = {}
    snapshots: list[tuple[int, str, float]] = []
    earlier: dict[tuple, tuple[int, str, str, float, float]] = {}
    for row in scan_pages(data):
        if _is_record(row) and row.rowid not in records:
            records[row.rowid] = (row.values[1], row.values[2], float(row.values[3]))
        elif _is_snapshot(row):
            snapshots.append((row.values[1], row.values[2], float(row.values[3])))
        elif _is_salvaged(row):
            earlier.setdefault(row.values[1:4], (*row.values[1:4], float(row.values[4]), float(row.values[5])))
    snapshot = max(snapshots, default=None)  # an older snapshot's freed page may still hold its row
    intra = _intra(_config(records, snapshot))
    invalid = [seq for seq, (kind, text, _) in records.items() if not _valid(kind, text, intra)]
    for seq in invalid:
        del records[seq]
    kept = _replayable(records, snapshot)
    salvage = Salvage(records, snapshot, kept, len(invalid), earlier=sorted(earlier.values()))
    if not kept and snapshot is None:  # nothing replays: no state to bring jobs back into
        return salvage
    known = _known(records, salvage.replayed_snapshot, kept)
    return replace(salvage, gap=past_gap(records, salvage.last_kept, known))


def _job_of(text: str) -> str | None:
    """The job a record's payload names (a submit's job, or a record's job_id)."""
    payload = _object(text) or {}
    job = payload.get("job")
    return job.get("job_id") if isinstance(job, dict) else payload.get("job_id")


def _known(records: dict, snapshot, kept: list[int]) -> dict[str, bool]:
    """The jobs a replay of the kept run knows, and whether each has left."""
    state = (_object(snapshot[1]) or {}) if snapshot is not None else {}
    known = {j: r.get("status") in TERMINAL for j, r in state.get("jobs", {}).items()}
    for seq in kept:
        kind, text, _ = records[seq]
        if kind in ("submit", "leave"):
            known[_job_of(text)] = kind == "leave"
    return known


def _is_record(row: Row) -> bool:
    v = row.values
    return (row.rowid > 0 and len(v) == 4 and v[0] is None and isinstance(v[1], str) and bool(v[1])
            and isinstance(v[2], str) and isinstance(v[3], (int, float)))


def _is_salvaged(row: Row) -> bool:
    """A row of an earlier repair's `salvaged` table: (id, seq, kind, payload, written_at, repaired_at)."""
    v = row.values
    return (len(v) == 6 and v[0] is None and isinstance(v[1], int) and isinstance(v[2], str)
            and isinstance(v[3], str) and all(isinstance(x, (int, float)) for x in v[4:]))


def _is_snapshot(row: Row) -> bool:
    v = row.values
    return (row.rowid == 1 and len(v) == 4 and v[0] is None and isinstance(v[1], int) and not isinstance(v[1], bool)
            and isinstance(v[2], str) and isinstance(v[3], (int, float)) and _object(v[2]) is not None)


def _object(text: str) -> dict | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _config(records: dict, snapshot) -> dict | None:
    """The journal's config payload (record 1's, or the snapshot's), if it survived."""
    if 1 in records and records[1][0] == "config":
        return _object(records[1][1])
    state = _object(snapshot[1]) if snapshot else None
    return state.get("config") if state else None


def _intra(config: dict | None):
    """The planner's view the journal's config gives (group records are read with it), or None."""
    if config is None:
        return None
    try:
        spec, cfg = config_from(config)
    except (ValidationError, ValueError, TypeError, KeyError):
        return None
    return cfg.intra_for(spec)


def _valid(kind: str, text: str, intra) -> bool:
    """The record reads back through its model (core/records.py)."""
    payload = _object(text)
    if payload is None:
        return False
    try:
        parse(kind, payload, intra)
    except (ValidationError, ValueError, TypeError, KeyError):
        return False
    return True


def _replayable(records: dict, snapshot) -> list[int]:
    """The gap-free run of records a replay can use: from record 1, or after the snapshot when
    a record at or before it is gone (the snapshot holds their effect)."""
    start = 1
    if snapshot is not None and any(s not in records for s in range(1, snapshot[0] + 1)):
        start = snapshot[0] + 1
    kept = []
    while start in records:
        kept.append(start)
        start += 1
    if start == 1 or (kept and kept[0] == 1 and records[1][0] != "config"):
        return []  # without its config record (and no snapshot) nothing replays
    return kept


def take_lock(path: Path) -> int:
    """The journal's writer lock (as `rollmux serve` takes it): a running server is never repaired under."""
    fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, PRIVATE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 512).decode(errors="replace")
        os.close(fd)
        raise JournalError(in_use(f"sqlite://{path}", holder)) from None
    return fd


def keep_damaged(path: Path) -> Path:
    """Copy the damaged file (and its -wal) aside, byte for byte: `<path>.damaged-<n>`."""
    n = 1
    while Path(f"{path}.damaged-{n}").exists():
        n += 1
    backup = Path(f"{path}.damaged-{n}")
    shutil.copy2(path, backup)
    os.chmod(backup, PRIVATE)
    if Path(f"{path}-wal").exists():
        shutil.copy2(f"{path}-wal", f"{backup}-wal")
    return backup


def write_journal(path: Path, salvage: Salvage) -> None:
    """Replace the journal at `path` by a new one: the salvage's kept records and snapshot, the
    records written after them (`past_gap`), and every other valid record in table `salvaged`."""
    tmp = Path(f"{path}.repairing")
    for stale in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
        stale.unlink(missing_ok=True)
    store = SQLiteStore(tmp)
    try:
        _fill(store._conn, salvage)
    finally:
        store.close()
    Path(f"{tmp}.lock").unlink(missing_ok=True)
    for old in (Path(f"{path}-wal"), Path(f"{path}-shm")):  # the damaged file's: never applied to the new one
        old.unlink(missing_ok=True)
    for part in ("-wal", "-shm"):
        Path(f"{tmp}{part}").unlink(missing_ok=True)
    os.replace(tmp, path)


def _fill(conn, salvage: Salvage) -> None:
    """Write the repaired journal's tables in one transaction."""
    conn.execute("BEGIN IMMEDIATE")
    conn.execute(SALVAGED_TABLE)
    conn.executemany("INSERT INTO records (seq, kind, payload, written_at) VALUES (?, ?, ?, ?)",
                     [(seq, *salvage.records[seq]) for seq in salvage.kept]
                     + [(salvage.last_kept + i, *row) for i, row in enumerate(salvage.gap.appended, 1)])
    now = time.time()
    conn.executemany("INSERT INTO salvaged (seq, kind, payload, written_at, repaired_at) VALUES (?, ?, ?, ?, ?)",
                     salvage.earlier + [(seq, *salvage.records[seq], now) for seq in salvage.archived])
    if salvage.replayed_snapshot is not None:
        conn.execute("INSERT INTO snapshot (id, seq, state, written_at) VALUES (1, ?, ?, ?)", salvage.replayed_snapshot)
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def write_tokens(path: Path, tokens: dict[str, str]) -> Path:
    """The new tokens of the jobs a repair queued again (`<path>.tokens-<n>`, JSON, the owner's only)."""
    n = 1
    while Path(f"{path}.tokens-{n}").exists():
        n += 1
    target = Path(f"{path}.tokens-{n}")
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE)
    with os.fdopen(fd, "w") as f:
        json.dump(tokens, f, indent=1, sort_keys=True)
    return target
