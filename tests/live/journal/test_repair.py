"""Torn and corrupt journals (`rollmux.live.journal.repair`): one-line errors, check_store and repair_store,
on both backends."""

from __future__ import annotations

import re
import sqlite3
import uuid
from pathlib import Path

import pytest
from redis_raw import raw_redis

from rollmux.live.journal import JournalCorrupt, JournalError, Record, open_store
from rollmux.live.journal.repair import CheckReport, check_store, repair_store


def _fill(url: str, n: int = 5, snapshot_at: int | None = None) -> list[Record]:
    """Write n records (kinds submit, grant, ...) and optionally a snapshot; returns them."""
    kinds = ["submit", "grant", "release", "grant", "release", "finish", "submit", "grant"]
    store = open_store(url)
    for i in range(n):
        store.append(kinds[i % len(kinds)], {"job": "a", "i": i})
    if snapshot_at is not None:
        store.save_snapshot(snapshot_at, {"v": snapshot_at})
    records = store.records()
    store.close()
    return records


def _sqlite_path(url: str) -> Path:
    return Path(url[len("sqlite://"):])


def _tamper(url: str, sql: str, on_redis) -> None:
    """Change the store behind its back: `sql` on SQLite, `on_redis(raw, prefix)` on Redis."""
    if url.startswith("sqlite"):
        with sqlite3.connect(_sqlite_path(url)) as conn:
            conn.execute(sql)
        conn.close()
    else:
        raw, prefix = raw_redis(url)
        on_redis(raw, prefix)
        raw.close()


def _corrupt(url: str, seq: int, payload: str | bytes) -> None:
    """Overwrite record seq's payload behind the store's back (a torn write)."""
    if url.startswith("sqlite"):
        with sqlite3.connect(_sqlite_path(url)) as conn:
            conn.execute("UPDATE records SET payload = ? WHERE seq = ?", (payload, seq))
        conn.close()
        return
    raw, prefix = raw_redis(url)
    key = f"{prefix}:records"
    # A stream entry cannot be edited in place: write the stream again with that one changed.
    entries = raw.xrange(key)
    pipe = raw.pipeline(transaction=True)
    pipe.delete(key)
    for eid, fields in entries:
        if eid == f"{seq}-0".encode():
            fields = {**fields, b"payload": payload}
        pipe.xadd(key, fields, id=eid)
    pipe.execute()
    raw.close()


def _raw_rows(url: str) -> list[tuple]:
    """Every stored record exactly as stored (the corrupt ones too)."""
    if url.startswith("sqlite"):
        return _raw_sqlite_rows(_sqlite_path(url))
    raw, prefix = raw_redis(url)
    rows = [(eid, fields.get(b"kind"), fields.get(b"payload")) for eid, fields in raw.xrange(f"{prefix}:records")]
    raw.close()
    return rows


def _raw_sqlite_rows(path: Path) -> list[tuple]:
    conn = sqlite3.connect(path)
    rows = conn.execute("SELECT seq, kind, payload FROM records ORDER BY seq").fetchall()
    conn.close()
    return rows


def _one_line_error(url: str, call) -> str:
    """The JournalCorrupt message `call` raises, checked to be one line naming the store and the repair."""
    with pytest.raises(JournalCorrupt) as info:
        call()
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{url}: ") and message.endswith(f"; run 'rollmux journal repair {url}'")
    return message


# -- the one-line errors ------------------------------------------------------------------------

def test_a_torn_record_is_one_line_naming_its_seq_and_kind(url):
    _fill(url)
    _corrupt(url, 4, '{"job": "a" "i": 3}')
    store = open_store(url, readonly=True)
    message = _one_line_error(store.url, store.records)
    assert re.search(r": record 4 \('grant'\) is corrupt \(not JSON: Expecting ',' delimiter: line 1 column 13", message)
    assert [r.seq for r in store.records(after=4)] == [5]  # reading past the damage works
    store.close()


def test_garbage_bytes_and_non_object_payloads_are_corrupt(url):
    _fill(url)
    _corrupt(url, 2, b"\xff\x00\x13garbage")
    store = open_store(url, readonly=True)
    assert "record 2 ('grant') is corrupt (not JSON: " in _one_line_error(store.url, store.records)
    store.close()
    _corrupt(url, 2, "[1, 2]")
    store = open_store(url, readonly=True)
    assert "record 2 ('grant') is corrupt (a JSON array, not an object)" in _one_line_error(store.url, store.records)
    store.close()


def test_a_record_that_is_not_json_never_escapes_as_a_raw_decode_error(url):
    _fill(url, 2)
    _corrupt(url, 1, "")
    store = open_store(url, readonly=True)
    with pytest.raises(JournalError) as info:
        store.records()
    assert type(info.value) is JournalCorrupt and info.value.__cause__ is None
    store.close()


def test_a_missing_record_is_named(url):
    _fill(url)
    _tamper(url, "DELETE FROM records WHERE seq = 3", lambda raw, prefix: raw.xdel(f"{prefix}:records", "3-0"))
    store = open_store(url, readonly=True)
    assert ": record 3 is missing (the next one is record 4)" in _one_line_error(store.url, store.records)
    store.close()


def test_sqlite_bad_kind_is_corrupt(tmp_path):
    url = f"sqlite://{tmp_path / 'j.db'}"
    _fill(url, 2)
    with sqlite3.connect(tmp_path / "j.db") as conn:
        conn.execute("UPDATE records SET kind = '' WHERE seq = 2")
    conn.close()
    store = open_store(url, readonly=True)
    assert "record 2 is corrupt (kind '' is not a non-empty string)" in _one_line_error(url, store.records)
    store.close()


def test_redis_entry_missing_fields_or_with_a_foreign_id_is_corrupt(redis_port):
    url = f"redis://127.0.0.1:{redis_port}/0?prefix=test-{uuid.uuid4().hex}"
    _fill(url, 2)
    raw, prefix = raw_redis(url)
    raw.xadd(f"{prefix}:records", {"kind": "grant"}, id="3-0")
    raw.set(f"{prefix}:seq", 3)
    store = open_store(url, readonly=True)
    assert ": record 3 is corrupt (missing field(s) payload)" in _one_line_error(store.url, store.records)
    raw.xdel(f"{prefix}:records", "3-0")
    raw.xadd(f"{prefix}:records", {"kind": "grant", "payload": "{}"}, id="3-7")
    assert ": stream entry 3-7 is not a journal record (ids are <seq>-0)" in _one_line_error(store.url, store.records)
    store.close()
    raw.close()


def test_redis_seq_counter_ahead_of_the_records_is_a_missing_record(redis_port):
    url = f"redis://127.0.0.1:{redis_port}/0?prefix=test-{uuid.uuid4().hex}"
    _fill(url, 2)
    raw, prefix = raw_redis(url)
    raw.set(f"{prefix}:seq", 4)
    store = open_store(url, readonly=True)
    assert ": record 3 is missing (the seq counter is at 4)" in _one_line_error(store.url, store.records)
    store.close()
    raw.close()


def test_a_corrupt_snapshot_is_one_line(url):
    _fill(url, 3, snapshot_at=2)
    _tamper(url, "UPDATE snapshot SET state = 'nope'", lambda raw, prefix: raw.hset(f"{prefix}:snapshot", "state", "nope"))
    store = open_store(url, readonly=True)
    assert ": the snapshot as of record 2 is corrupt (not JSON: Expecting value" in _one_line_error(
        store.url, store.snapshot)
    store.close()


# -- check_store --------------------------------------------------------------------------------

def test_check_of_a_sound_journal_is_ok(url):
    _fill(url, 4, snapshot_at=3)
    report = check_store(url)
    reader = open_store(url, readonly=True)
    shown = reader.url
    reader.close()
    assert report == CheckReport(url=shown, records=4, last_good_seq=4, first_bad=None, snapshot_seq=3, ok=True)


def test_check_reports_the_first_damage_while_a_writer_holds_the_store(url):
    _fill(url, 6, snapshot_at=2)
    _corrupt(url, 4, "{torn")
    writer = open_store(url)  # a running server: check needs no lock
    report = check_store(url)
    assert (report.ok, report.records, report.last_good_seq, report.snapshot_seq) == (False, 3, 3, 2)
    assert f"{writer.url}: record 4 ('grant') is corrupt (not JSON: " in report.first_bad
    writer.close()


def test_check_reports_a_snapshot_beyond_the_last_good_record(url):
    _fill(url, 5, snapshot_at=4)
    _corrupt(url, 2, "{torn")
    report = check_store(url)
    assert (report.ok, report.last_good_seq, report.snapshot_seq) == (False, 1, 4)
    assert ": record 2 ('grant') is corrupt" in report.first_bad


# -- repair_store ---------------------------------------------------------------------------------

def test_repair_backs_up_truncates_after_the_last_good_record_and_the_store_reads_cleanly(url):
    good = _fill(url, 6, snapshot_at=2)
    _corrupt(url, 4, '{"job": "a" "i": 3}')
    before = _raw_rows(url)
    report = repair_store(url)
    assert (report.kept, report.dropped, report.dropped_snapshot) == (3, 3, False)
    # The backup holds the journal as it was, corrupt record included.
    if url.startswith("sqlite"):
        backup = Path(report.backup)
        assert backup.name.startswith("journal.db.bak-") and backup.parent == _sqlite_path(url).parent
        assert _raw_sqlite_rows(backup) == before
    else:
        assert ":backup-" in report.backup
        raw, prefix = raw_redis(report.backup)
        assert {k.decode() for k in raw.keys(f"{prefix}:*")} == {f"{prefix}:{k}" for k in ("seq", "records", "snapshot")}
        assert _raw_rows(report.backup) == before
        raw.close()
    backup_store = open_store(report.backup, readonly=True)
    assert backup_store.scan()[0] == good[:3]
    backup_store.close()
    # The journal itself: the good records, the snapshot, and appends carry on from seq 4.
    store = open_store(url)
    assert store.records() == good[:3] and store.snapshot() == (2, {"v": 2})
    assert store.append("fail", {"job": "a"}) == 4
    store.close()
    assert check_store(url).ok


def test_repair_drops_a_snapshot_beyond_the_last_good_record(url):
    good = _fill(url, 5, snapshot_at=4)
    _corrupt(url, 3, "nope")
    report = repair_store(url)
    assert (report.kept, report.dropped, report.dropped_snapshot) == (2, 3, True)
    store = open_store(url)
    assert store.records() == good[:2] and store.snapshot() is None
    store.close()


def test_repair_drops_a_corrupt_snapshot_and_keeps_every_record(url):
    good = _fill(url, 3, snapshot_at=3)
    _tamper(url, "UPDATE snapshot SET state = '[]'", lambda raw, prefix: raw.hdel(f"{prefix}:snapshot", "state"))
    report = repair_store(url)
    assert (report.kept, report.dropped, report.dropped_snapshot) == (3, 0, True)
    store = open_store(url)
    assert store.records() == good and store.snapshot() is None
    store.close()


def test_repair_of_a_corrupt_first_record_empties_the_journal_and_seq_restarts_at_1(url):
    _fill(url, 3)
    _corrupt(url, 1, "{")
    report = repair_store(url)
    assert (report.kept, report.dropped) == (0, 3)
    store = open_store(url)
    assert store.records() == [] and store.append("config", {}) == 1
    store.close()


def test_repair_of_a_sound_journal_changes_nothing(url):
    good = _fill(url, 4, snapshot_at=2)
    before = _raw_rows(url)
    report = repair_store(url)
    assert (report.kept, report.dropped, report.dropped_snapshot) == (4, 0, False)
    assert report.backup  # a backup is still taken: repair always leaves one
    assert _raw_rows(url) == before
    store = open_store(url)
    assert store.records() == good and store.snapshot() == (2, {"v": 2})
    store.close()


def test_two_repairs_in_a_row_keep_two_backups(url):
    _fill(url, 2)
    first, second = repair_store(url), repair_store(url)
    assert first.backup != second.backup


def test_repair_refuses_while_another_writer_holds_the_store(url):
    _fill(url, 3)
    _corrupt(url, 2, "{")
    before = _raw_rows(url)
    server = open_store(url)
    with pytest.raises(JournalError, match=r"journal is in use by another rollmux serve \(pid \d+ on host "):
        repair_store(url)
    assert _raw_rows(url) == before
    server.close()
    assert repair_store(url).dropped == 2


def test_redis_repair_fixes_a_seq_counter_that_ran_ahead(redis_port):
    url = f"redis://127.0.0.1:{redis_port}/0?prefix=test-{uuid.uuid4().hex}"
    good = _fill(url, 2)
    raw, prefix = raw_redis(url)
    raw.set(f"{prefix}:seq", 9)
    raw.close()
    assert repair_store(url).dropped == 0
    store = open_store(url)
    assert store.records() == good and store.append("grant", {}) == 3
    store.close()


def test_redis_repair_drops_stray_stream_entries(redis_port):
    url = f"redis://127.0.0.1:{redis_port}/0?prefix=test-{uuid.uuid4().hex}"
    good = _fill(url, 2)
    raw, prefix = raw_redis(url)
    raw.xadd(f"{prefix}:records", {"kind": "grant", "payload": "{}"}, id="2-5")
    raw.close()
    report = repair_store(url)
    assert (report.kept, report.dropped) == (2, 1)
    store = open_store(url)
    assert store.records() == good and store.append("grant", {}) == 3
    store.close()
