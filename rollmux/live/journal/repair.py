"""Checking and repairing a journal (`rollmux journal check|repair`): find the first torn or
corrupt record, and cut the journal back to the last good one after taking a backup. An SQLite
file damaged below the records (torn, truncated or overwritten pages: SQLite cannot read it) is
read page by page instead (`salvage`): check names the first bad page and record, repair keeps
the damaged file aside, recovers every valid record a replay can use and says what it lost.
"""

from __future__ import annotations

import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

from rollmux.live.journal import open_store
from rollmux.live.journal.base import JournalCorrupt, Store, damage_report
from rollmux.live.journal.pages import first_damage
from rollmux.live.journal.redis import RedisStore
from rollmux.live.journal.salvage import keep_damaged, read_salvage, take_lock, write_journal, write_tokens
from rollmux.live.journal.sqlite import SQLiteStore


@dataclass(frozen=True)
class CheckReport:
    """What `check_store` found."""

    url: str  # the store (a password shown as ***)
    records: int  # good records, 1..last_good_seq
    last_good_seq: int  # the last record before the first damage (0: none)
    first_bad: str | None  # one line: the first damaged record, gap or snapshot; None if all is well
    snapshot_seq: int | None  # the snapshot's seq if it is readable, else None
    ok: bool
    salvaged: int = 0  # records an earlier page-level repair kept unreplayed (table `salvaged`)


@dataclass(frozen=True)
class RepairReport:
    """What `repair_store` did."""

    backup: str  # where the journal was copied before any change (a file path or a redis URL)
    kept: int  # records kept (1..kept)
    dropped: int  # stored records (or stray stream entries) removed after the last good one
    dropped_snapshot: bool = False  # the snapshot was corrupt or beyond the last good record
    damage: str | None = None  # page-level damage (SQLite could not read the file): what, where
    lost: int = 0  # records written (as far as the pages tell) that the repaired journal lacks
    first_lost: int | None = None
    last_lost: int | None = None
    snapshot_seq: int | None = None  # the snapshot the repaired journal holds, if any
    requeued: tuple[str, ...] = ()  # jobs submitted past the gap, written again to be placed anew
    salvaged: int = 0  # valid records kept unreplayed (table `salvaged`): past the gap, or before the snapshot
    reissued: tuple[str, ...] = ()  # jobs whose submit was lost, queued again under a new token
    tokens_file: str | None = None  # where the new tokens are (the owner's only)
    left: tuple[str, ...] = ()  # jobs that left past the gap, their departure written again
    unplaced: tuple[str, ...] = ()  # jobs named past the gap that no surviving record holds the profile of
    written: int = 0  # of `kept`, the records written after the replayed run (the jobs' submits and departures)

    def summary(self) -> str:
        """One line: what was kept, what was lost, where the backup is."""
        line = f"kept {self.kept} records, dropped {self.dropped}"
        if self.damage is not None:
            snap = f" and the snapshot as of record {self.snapshot_seq}" if self.snapshot_seq else ""
            lost = (f"lost {self.lost} record(s), seq {self.first_lost}..{self.last_lost}" if self.lost
                    else "lost no record the remaining pages name")
            if "truncated" in self.damage:
                lost += f" (and whatever records after seq {self.last_lost or self.kept} the missing pages held)"
            line = f"damaged pages ({self.damage}): recovered {self.kept - self.written} records to replay{snap}"
            if self.written:
                line += f" (and wrote {self.written} after them: the jobs below)"
            if self.salvaged:
                line += f", and {self.salvaged} more kept unreplayed in table 'salvaged'"
            line += f"; {lost}{self._jobs()}"
        return f"{line}; backup {self.backup}"

    def _jobs(self) -> str:
        """What became of the jobs the records past the gap name."""
        parts = []
        for jobs, what in ((self.requeued, "submitted past the gap are queued to be placed anew"),
                           (self.reissued, f"whose submit was lost are queued again under new tokens "
                                           f"(in {self.tokens_file})"),
                           (self.left, "left past the gap and are recorded as left"),
                           (self.unplaced, "are named past the gap but no surviving record holds their "
                                           "profile: resubmit them")):
            if jobs:
                more = " ..." if len(jobs) > 10 else ""
                parts.append(f"{len(jobs)} job(s) {what}: {', '.join(jobs[:10])}{more}")
        return "".join(f"; {p}" for p in parts)


def check_store(url: str) -> CheckReport:
    """Read a journal without the writer lock (safe while a server runs) and report its first damage."""
    path = _sqlite_file(url)
    damage = first_damage(path) if path is not None else None
    if damage is not None:
        return _check_pages(path, damage)
    store = open_store(url, readonly=True)
    try:
        good, problem = store.scan()
        last = good[-1].seq if good else 0
        snap_seq, snap_problem = _snapshot_state(store, last)
    finally:
        store.close()
    first_bad = problem or snap_problem
    return CheckReport(store.url, len(good), last, first_bad, snap_seq, first_bad is None,
                       _salvaged_count(path) if path is not None else 0)


def repair_store(url: str) -> RepairReport:
    """Back the journal up, then drop every record after the last good one (and a bad snapshot).

    Takes the writer lock, so it refuses while a server runs. A sound journal is backed up
    and otherwise left untouched."""
    path = _sqlite_file(url)
    damage = first_damage(path) if path is not None else None
    if damage is not None:
        return _repair_pages(path, damage)
    store = open_store(url)
    try:
        good, problem = store.scan()
        last = good[-1].seq if good else 0
        _, snap_problem = _snapshot_state(store, last)
        stored = _stored_count(store)
        backup = _backup(store)
        if problem is not None or snap_problem is not None:
            _truncate(store, last, drop_snapshot=snap_problem is not None)
        return RepairReport(backup, kept=len(good), dropped=stored - len(good),
                            dropped_snapshot=snap_problem is not None)
    finally:
        store.close()


def _sqlite_file(url: str) -> Path | None:
    """The file of an SQLite store URL that exists, else None (a Redis URL, or no file yet)."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme not in ("", "sqlite"):
        return None
    path = Path(url[len("sqlite://"):] if scheme else url).expanduser().absolute()
    return path if path.is_file() and path.stat().st_size else None


def _salvaged_count(path: Path) -> int:
    """The records an earlier page-level repair kept unreplayed in the file (0 if none)."""
    conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    try:
        has = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'salvaged'").fetchone()
        return conn.execute("SELECT count(*) FROM salvaged").fetchone()[0] if has else 0
    finally:
        conn.close()


def _check_pages(path: Path, damage: str) -> CheckReport:
    """Check a file SQLite cannot read: the first bad page, and the first record no page holds."""
    salvage = read_salvage(path.read_bytes())
    missing = salvage.first_missing()
    record = (f"record {missing} is the first no page holds whole" if missing is not None
              else f"records 1..{max(salvage.records, default=0)} read whole")
    lost, first, last = salvage.lost
    what = (f"{damage}; {record}; a repair would replay {len(salvage.kept)} records, keep "
            f"{len(salvage.archived)} more unreplayed"
            + (f" and lose {lost} (seq {first}..{last})" if lost else ""))
    return CheckReport(f"sqlite://{path}", len(salvage.kept), salvage.last_kept,
                       damage_report(f"sqlite://{path}", what), salvage.snapshot[0] if salvage.snapshot else None,
                       False)


def _repair_pages(path: Path, damage: str) -> RepairReport:
    """Keep the damaged file aside, then write a journal of every valid record its pages hold."""
    fd = take_lock(path)
    try:
        backup = keep_damaged(path)
        salvage = read_salvage(path.read_bytes())
        tokens = write_tokens(path, salvage.gap.reissued) if salvage.gap.reissued else None
        write_journal(path, salvage)
    finally:
        os.close(fd)
    lost, first, last = salvage.lost
    snap = salvage.replayed_snapshot[0] if salvage.replayed_snapshot else None
    gap = salvage.gap
    return RepairReport(str(backup), kept=len(salvage.kept) + len(gap.appended), dropped=0,
                        dropped_snapshot=salvage.snapshot is not None and snap is None, damage=damage,
                        lost=lost, first_lost=first, last_lost=last, snapshot_seq=snap,
                        requeued=tuple(gap.requeued), salvaged=len(salvage.archived) + len(salvage.earlier),
                        reissued=tuple(gap.reissued), tokens_file=str(tokens) if tokens else None,
                        left=tuple(gap.left), unplaced=tuple(gap.unplaced), written=len(gap.appended))


def _snapshot_state(store: Store, last_good: int) -> tuple[int | None, str | None]:
    """The snapshot's seq (None if none or unreadable) and what is wrong with it, if anything."""
    try:
        snap = store.snapshot()
    except JournalCorrupt as exc:
        return None, str(exc)
    if snap is None:
        return None, None
    if snap[0] > last_good:  # a snapshot must be as of a record that replay can reach
        return snap[0], damage_report(store.url, f"the snapshot is as of record {snap[0]}, "
                                                 f"beyond the last good record {last_good}")
    return snap[0], None


def _stamp() -> str:
    """The UTC time as a name suffix: 20240501T120000Z."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


# The backends' internals are reached from here so that `sqlite` and `redis` keep to the write path.

def _stored_count(store: Store) -> int:
    """Every stored record, good or not."""
    if isinstance(store, SQLiteStore):
        with store._lock, store._errors("cannot count records"):
            return store._conn.execute("SELECT count(*) FROM records").fetchone()[0]
    assert isinstance(store, RedisStore)
    with store._errors("cannot count records"):
        return store._client.xlen(store._stream_key)


def _backup(store: Store) -> str:
    """Copy the journal aside; returns where (a file path, or the URL of a prefix holding the copy)."""
    if isinstance(store, SQLiteStore):
        for n in range(1, 1000):  # a second repair within the same second gets its own file
            path = Path(f"{store.path}.bak-{_stamp()}" + ("" if n == 1 else f"-{n}"))
            if not path.exists():
                break
        os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600))  # the owner's only, whatever the umask
        with store._lock, store._errors(f"cannot back up into {path}"):
            target = sqlite3.connect(path)
            try:
                store._conn.backup(target)  # a consistent copy, WAL contents included
            finally:
                target.close()
        return str(path)
    assert isinstance(store, RedisStore)
    keys = {"seq": store._seq_key, "records": store._stream_key, "snapshot": store._snap_key}
    with store._errors("cannot back up"):
        for n in range(1, 1000):
            prefix = f"{store.prefix}:backup-{_stamp()}" + ("" if n == 1 else f"-{n}")
            if not store._client.exists(*(f"{prefix}:{name}" for name in keys)):
                break
        pipe = store._client.pipeline(transaction=True)  # MULTI: the copy is of one instant
        for name, key in keys.items():
            pipe.copy(key, f"{prefix}:{name}")
        pipe.execute()
    parts = urlsplit(store.url)
    query = {**parse_qs(parts.query), "prefix": [prefix]}
    return urlunsplit(parts._replace(query=urlencode(query, doseq=True, safe=":")))


# KEYS: writer, seq, stream, snapshot. ARGV: token, last good seq, drop snapshot (1/0).
# Fenced by the lease only: the seq counter may be the damage being repaired.
_TRUNCATE = """
local lease = redis.call('GET', KEYS[1])
if not lease or string.sub(lease, 1, #ARGV[1] + 1) ~= ARGV[1] .. ' ' then
  return redis.error_reply('lost the writer lease (it ran out, or another writer took the journal)')
end
local last = tonumber(ARGV[2])
local entries = redis.call('XRANGE', KEYS[3], '(' .. string.format('%d-0', last), '+')
for _, entry in ipairs(entries) do redis.call('XDEL', KEYS[3], entry[1]) end
if last == 0 then
  redis.call('DEL', KEYS[3])
elseif redis.call('EXISTS', KEYS[3]) == 1 then
  redis.call('XSETID', KEYS[3], string.format('%d-0', last))  -- so that XADD last+1 is accepted again
end
redis.call('SET', KEYS[2], string.format('%d', last))
if ARGV[3] == '1' then redis.call('DEL', KEYS[4]) end
return #entries
"""


def _truncate(store: Store, last_good: int, drop_snapshot: bool) -> None:
    """Delete every record after `last_good` (and the snapshot if asked), in one transaction."""
    if isinstance(store, SQLiteStore):
        with store._lock, store._errors("cannot truncate"):
            conn = store._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute("DELETE FROM records WHERE seq > ?", (last_good,))
                if drop_snapshot:
                    conn.execute("DELETE FROM snapshot")
                conn.execute("COMMIT")
            except sqlite3.Error:
                conn.execute("ROLLBACK")
                raise
        return
    assert isinstance(store, RedisStore)
    with store._errors("cannot truncate"):
        store._client.eval(_TRUNCATE, 4, store._writer_key, store._seq_key, store._stream_key, store._snap_key,
                           store._token, last_good, int(drop_snapshot))
