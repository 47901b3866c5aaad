"""The journal's contract (DESIGN §8): the `Store` protocol every backend implements, the
record type, the errors, and the helpers the backends share (record and snapshot decoding,
the one-line damage and in-use reports, JSON encoding, password hiding).

Every state change of the live scheduler is written to a store before it takes effect, so a
restarted scheduler replays the records after its latest snapshot. The backends are
`sqlite` (the default: a file path) and `redis`; `rollmux.live.journal.open_store` picks one
by URL. Checking and repairing a damaged journal lives in `repair`.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Iterable, Protocol
from urllib.parse import urlsplit


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


class BaseStore:
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
            return encode(f"journal record {kind!r}", payload)
        except JournalError:
            self.rollback()  # a failed stage leaves the store as it was before the batch
            raise


def parse_records(place: str, rows: Iterable[tuple[int, object, object, str | None]],
                  after: int) -> tuple[list[Record], str | None]:
    """Decode (seq, kind, payload text, damage the backend saw) rows up to the first damaged or missing one."""
    good: list[Record] = []
    expect = max(after, 0) + 1
    for seq, kind, text, seen in rows:
        if seen is not None:
            return good, damage_report(place, seen)
        if seq != expect:
            return good, damage_report(place, f"record {expect} is missing (the next one is record {seq})")
        if not isinstance(kind, str) or not kind:
            return good, damage_report(place, f"record {seq} is corrupt (kind {kind!r} is not a non-empty string)")
        try:
            payload = _load_object(text)
        except ValueError as exc:
            return good, damage_report(place, f"record {seq} ({kind!r}) is corrupt ({exc})")
        good.append(Record(seq, kind, payload))
        expect += 1
    return good, None


def parse_snapshot(place: str, seq: int, text: object) -> tuple[int, dict]:
    """A stored snapshot's (seq, state), or JournalCorrupt."""
    try:
        return seq, _load_object(text)
    except ValueError as exc:
        raise JournalCorrupt(damage_report(place, f"the snapshot as of record {seq} is corrupt ({exc})")) from None


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


def damage_report(place: str, what: str) -> str:
    """The one-line damage report: what is wrong where, and the command that repairs it."""
    return f"{place}: {what}; run 'rollmux journal repair {place}'"


def in_use(place: str, holder: str) -> str:
    """The one-line refusal of a second writer, naming the holder ("pid host") if known."""
    pid, _, host = holder.strip().partition(" ")
    who = f"pid {pid} on host {host}" if pid and host else "holder unknown"
    return f"{place}: journal is in use by another rollmux serve ({who})"


def int_or_none(value: object) -> int | None:
    """A stored counter as an int, or None if it is not one."""
    try:
        return int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return None


def encode(what: str, value: object) -> str:
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


def no_open_batch(place: str, staged: int) -> None:
    """A snapshot must not ride in (or be rolled back with) an open batch."""
    if staged:
        raise JournalError(f"{place}: cannot save a snapshot while {staged} staged record(s) await commit")


def check_snapshot_seq(place: str, seq: object, last: int) -> None:
    """A snapshot is as of an existing record (or 0, before any); anything else is a caller bug."""
    if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq <= last:
        raise JournalError(f"{place}: snapshot seq must be an int in 0..{last} (the last record), got {seq!r}")


def hide_password(url: str) -> str:
    """The URL as safe to print: a password in it becomes ***."""
    try:
        password = urlsplit(url).password
    except ValueError:
        return url
    return url if password is None else url.replace(f":{password}@", ":***@", 1)


