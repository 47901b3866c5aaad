"""The live scheduler's journal store (issues 5 and 10): SQLite and Redis behave the same."""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import redis

from rollmux.live.journal import FailingStore, JournalError, Record, open_store
from rollmux.live.journal_repair import check_store


@pytest.fixture
def store(url):
    s = open_store(url)
    yield s
    s.close()


def test_append_returns_seqs_1_2_3_in_order(store):
    assert [store.append("submit", {"job": j}) for j in range(3)] == [1, 2, 3]


def test_records_returns_kind_and_payload_in_append_order(store):
    store.append("submit", {"job": "a", "gpus": 8, "nested": {"pool": ["r", "t"]}})
    store.append("grant", {"job": "a", "node": 3})
    store.append("finish", {"job": "a", "why": "done ✓"})
    assert store.records() == [Record(1, "submit", {"job": "a", "gpus": 8, "nested": {"pool": ["r", "t"]}}),
                               Record(2, "grant", {"job": "a", "node": 3}),
                               Record(3, "finish", {"job": "a", "why": "done ✓"})]


def test_new_store_has_no_records(store):
    assert store.records() == []


def test_records_after_returns_only_later_records(store):
    for j in range(5):
        store.append("submit", {"job": j})
    assert [r.seq for r in store.records(after=3)] == [4, 5]
    assert store.records(after=5) == []


def test_reopened_store_sees_records_appended_before(url):
    first = open_store(url)
    first.append("submit", {"job": "a"})
    first.append("grant", {"job": "a"})
    first.close()
    again = open_store(url)
    assert [(r.seq, r.kind) for r in again.records()] == [(1, "submit"), (2, "grant")]
    again.close()


def test_reopened_store_continues_the_seq(url):
    first = open_store(url)
    first.append("submit", {})
    first.close()
    again = open_store(url)
    assert again.append("grant", {}) == 2
    again.close()


def test_new_store_has_no_snapshot(store):
    assert store.snapshot() is None


def test_snapshot_round_trips(store):
    store.append("submit", {"job": "a"})
    store.save_snapshot(1, {"jobs": {"a": {"phase": "rollout"}}, "groups": [[0, 1]]})
    assert store.snapshot() == (1, {"jobs": {"a": {"phase": "rollout"}}, "groups": [[0, 1]]})


def test_save_snapshot_replaces_the_previous_one(store):
    store.append("submit", {})
    store.append("grant", {})
    store.save_snapshot(1, {"v": 1})
    store.save_snapshot(2, {"v": 2})
    assert store.snapshot() == (2, {"v": 2})


def test_snapshot_survives_reopen(url):
    first = open_store(url)
    first.append("submit", {})
    first.save_snapshot(1, {"v": 1})
    first.close()
    again = open_store(url)
    assert again.snapshot() == (1, {"v": 1})
    again.close()


def test_snapshot_past_the_last_record_is_refused(store):
    store.append("submit", {})
    with pytest.raises(JournalError, match=r"0\.\.1 \(the last record\), got 2"):
        store.save_snapshot(2, {})
    assert store.snapshot() is None


def test_concurrent_appends_from_8_threads_get_gap_free_unique_seqs(store):
    seqs: list[int] = []
    lock = threading.Lock()

    def worker(t: int) -> None:
        for i in range(25):
            seq = store.append("grant", {"thread": t, "i": i})
            with lock:
                seqs.append(seq)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(seqs) == list(range(1, 201))
    records = store.records()
    assert [r.seq for r in records] == list(range(1, 201))
    # Each seq holds the payload its appender was told it holds.
    assert len({(r.payload["thread"], r.payload["i"]) for r in records}) == 200


def test_non_json_payload_is_refused_naming_the_kind(store):
    with pytest.raises(JournalError, match="'grant'.*not JSON-serializable"):
        store.append("grant", {"when": object()})
    assert store.records() == []


def test_non_dict_payload_is_refused(store):
    with pytest.raises(JournalError, match="must be a dict"):
        store.append("grant", ["not", "a", "dict"])


def test_refused_append_leaves_no_gap_in_seq(store):
    store.append("submit", {})
    with pytest.raises(JournalError):
        store.append("grant", {"bad": {1, 2}})
    assert store.append("grant", {}) == 2


def test_unknown_scheme_is_refused_naming_it():
    with pytest.raises(JournalError, match="unknown scheme 'postgres'"):
        open_store("postgres://db/journal")


def test_unreachable_redis_is_refused_naming_the_url():
    with pytest.raises(JournalError, match=r"cannot reach redis at redis://127\.0\.0\.1:1/0: "):
        open_store("redis://127.0.0.1:1/0")


def test_redis_password_is_not_shown_in_errors():
    with pytest.raises(JournalError) as info:
        open_store("redis://:hunter2@127.0.0.1:1/0")
    assert "hunter2" not in str(info.value) and ":***@" in str(info.value)


def test_empty_redis_prefix_is_refused(redis_port):
    with pytest.raises(JournalError, match="empty \\?prefix="):
        open_store(f"redis://127.0.0.1:{redis_port}/0?prefix=")


def test_redis_prefixes_keep_journals_apart(redis_port):
    a = open_store(f"redis://127.0.0.1:{redis_port}/0?prefix=a-{uuid.uuid4().hex}")
    b = open_store(f"redis://127.0.0.1:{redis_port}/0?prefix=b-{uuid.uuid4().hex}")
    a.append("submit", {"job": "a"})
    assert b.records() == [] and b.append("submit", {"job": "b"}) == 1
    a.close()
    b.close()


def test_sqlite_accepts_absolute_relative_and_bare_path_urls(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for n, url in enumerate([f"sqlite:///{tmp_path / 'j.db'}", "sqlite://j.db", "j.db"], start=1):
        store = open_store(url)
        store.append("submit", {"n": n})
        store.close()  # one writer at a time: the next open needs the lock
    store = open_store(str(tmp_path / "j.db"))
    assert store.url == f"sqlite:///{str(tmp_path / 'j.db').lstrip('/')}"
    assert [r.payload["n"] for r in open_store(store.url, readonly=True).records()] == [1, 2, 3]
    store.close()


def test_sqlite_creates_parent_directories(tmp_path):
    store = open_store(str(tmp_path / "state" / "deep" / "journal.db"))
    assert store.append("submit", {}) == 1
    assert (tmp_path / "state" / "deep" / "journal.db").exists()
    store.close()


def test_sqlite_is_wal_with_full_sync(tmp_path):
    store = open_store(str(tmp_path / "j.db"))
    assert store._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store._conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    store.close()


def test_sqlite_file_that_is_not_a_database_is_refused(tmp_path):
    path = tmp_path / "notes.db"
    path.write_text("these are not the records you are looking for\n" * 100)
    with pytest.raises(JournalError, match=f"{path}: not a rollmux journal"):
        open_store(str(path))


def test_sqlite_database_of_another_program_is_refused_and_left_untouched(tmp_path):
    path = tmp_path / "other.db"
    other = sqlite3.connect(path)
    other.execute("CREATE TABLE users (name TEXT)")
    other.commit()
    other.close()
    before = path.read_bytes()
    with pytest.raises(JournalError, match=f"{path}: not a rollmux journal"):
        open_store(str(path))
    assert path.read_bytes() == before


def test_closed_store_raises_journal_error(url):
    store = open_store(url)
    store.close()
    with pytest.raises(JournalError):
        store.append("submit", {})


# -- group commit (issue 10) --------------------------------------------------------------

def _raw_redis(url: str) -> tuple[redis.Redis, str]:
    """A plain client on a test store's server, and the store's key prefix."""
    parts = urlsplit(url)
    return redis.Redis(port=parts.port), parse_qs(parts.query)["prefix"][0]


def test_staged_records_are_invisible_until_commit(store):
    assert [store.stage("submit", {"job": "a"}), store.stage("place", {"job": "a"})] == [1, 2]
    assert store.pending() == 2
    assert store.records() == []
    store.commit()
    assert store.pending() == 0
    assert [(r.seq, r.kind) for r in store.records()] == [(1, "submit"), (2, "place")]


def test_a_reader_of_the_same_store_never_sees_part_of_a_batch(store):
    # The scheduler thread commits batches of 5 while another thread reads (SQLite shares
    # one connection, which sees its own open transaction: records() must hide it).
    done = threading.Event()
    seen: list[int] = []

    def reader() -> None:
        while True:  # at least one read, however fast the writer is
            seen.append(len(store.records()))
            if done.is_set():
                return

    t = threading.Thread(target=reader)
    t.start()
    try:
        for b in range(20):
            for i in range(5):
                store.stage("grant", {"batch": b, "i": i})
            store.commit()
    finally:
        done.set()
        t.join(timeout=60)
    assert seen and all(n % 5 == 0 for n in seen)
    assert len(store.records()) == 100


def test_rollback_drops_the_batch_and_its_seqs_are_reused(store):
    assert store.append("submit", {"job": "a"}) == 1
    store.stage("place", {"job": "a"})
    store.stage("grant", {"job": "a"})
    store.rollback()
    assert store.pending() == 0
    assert store.records() == [Record(1, "submit", {"job": "a"})]
    assert store.stage("fail", {"job": "a"}) == 2
    store.commit()
    assert store.records() == [Record(1, "submit", {"job": "a"}), Record(2, "fail", {"job": "a"})]


def test_a_reopened_store_sees_exactly_the_committed_records(url):
    first = open_store(url)
    first.append("submit", {"n": 1})
    first.stage("place", {"n": 2})
    first.stage("grant", {"n": 3})
    first.commit()
    first.stage("release", {"n": 4})  # never committed: gone with the close
    first.close()
    again = open_store(url)
    assert [(r.seq, r.kind) for r in again.records()] == [(1, "submit"), (2, "place"), (3, "grant")]
    assert again.append("finish", {}) == 4
    again.close()


def test_a_batch_is_invisible_to_another_reader_until_commit(url):
    writer = open_store(url)
    reader = open_store(url, readonly=True)
    for i in range(3):
        writer.stage("grant", {"i": i})
    assert reader.records() == []
    writer.commit()
    assert [r.seq for r in reader.records()] == [1, 2, 3]
    reader.close()
    writer.close()


def test_a_failed_stage_rolls_the_whole_batch_back(store):
    store.append("submit", {})
    store.stage("place", {})
    with pytest.raises(JournalError, match="not JSON-serializable"):
        store.stage("grant", {"bad": object()})
    assert store.pending() == 0
    assert store.stage("grant", {}) == 2
    store.commit()
    assert [r.kind for r in store.records()] == ["submit", "grant"]


def test_append_commits_an_open_batch_with_its_record(store):
    store.stage("submit", {})
    assert store.append("place", {}) == 2
    assert store.pending() == 0 and [r.seq for r in store.records()] == [1, 2]


def test_commit_with_nothing_staged_is_a_no_op(store):
    store.commit()
    store.rollback()
    assert store.records() == [] and store.append("submit", {}) == 1


def test_a_snapshot_is_refused_while_a_batch_is_open(store):
    store.append("submit", {})
    store.stage("grant", {})
    with pytest.raises(JournalError, match="while 1 staged record"):
        store.save_snapshot(1, {})
    store.commit()
    store.save_snapshot(2, {"v": 2})
    assert store.snapshot() == (2, {"v": 2})


def test_sqlite_failed_commit_leaves_nothing(tmp_path):
    path = tmp_path / "j.db"
    store = open_store(str(path))
    store.append("submit", {})
    store.stage("place", {})
    store.stage("grant", {})
    store._conn.close()  # the COMMIT fails; the open transaction dies with the connection
    with pytest.raises(JournalError, match="cannot commit 2 record"):
        store.commit()
    assert store.pending() == 0
    store.close()
    again = open_store(str(path))
    assert [r.kind for r in again.records()] == ["submit"] and again.append("grant", {}) == 2
    again.close()


@pytest.fixture
def redis_url(redis_port):
    """A fresh Redis store URL (a new key prefix)."""
    return f"redis://127.0.0.1:{redis_port}/0?prefix=test-{uuid.uuid4().hex}"


def test_redis_commit_after_the_lease_was_taken_over_is_refused_and_lands_nothing(redis_url):
    store = open_store(redis_url)
    store.append("submit", {})
    raw, prefix = _raw_redis(redis_url)
    raw.set(f"{prefix}:writer", "999999 4242 thief-host")  # another writer, another token
    store.stage("place", {})
    store.stage("grant", {})
    with pytest.raises(JournalError, match="lost the writer lease"):
        store.commit()
    assert store.pending() == 0
    with pytest.raises(JournalError, match="lost the writer lease"):
        store.save_snapshot(1, {})
    assert [r.kind for r in store.records()] == ["submit"]
    assert raw.get(f"{prefix}:seq") == b"1" and raw.xlen(f"{prefix}:records") == 1
    assert raw.get(f"{prefix}:writer") == b"999999 4242 thief-host"  # the thief's lease is left alone
    assert store._renew_lease() is False
    store.close()
    assert raw.get(f"{prefix}:writer") == b"999999 4242 thief-host"  # close did not delete it either
    raw.close()


def test_redis_writer_whose_lease_expired_is_fenced_off_by_the_next_writer(redis_url):
    old = open_store(redis_url)
    old.append("submit", {})
    raw, prefix = _raw_redis(redis_url)
    raw.delete(f"{prefix}:writer")  # as if the lease had run out while `old` stalled
    new = open_store(redis_url)
    with pytest.raises(JournalError, match="lost the writer lease"):
        old.append("grant", {"from": "old"})
    assert new.append("grant", {"from": "new"}) == 2
    assert [r.payload for r in new.records()] == [{}, {"from": "new"}]
    old.close()
    new.close()
    raw.close()


def test_redis_commit_refused_if_the_journal_changed_underneath(redis_url):
    store = open_store(redis_url)
    store.append("submit", {})
    raw, prefix = _raw_redis(redis_url)
    raw.set(f"{prefix}:seq", 5)
    with pytest.raises(JournalError, match="changed under this store"):
        store.append("grant", {})
    assert raw.xlen(f"{prefix}:records") == 1
    store.close()
    raw.close()


def test_redis_lease_has_a_ttl_is_renewed_and_is_released_on_close(redis_url):
    store = open_store(redis_url)
    raw, prefix = _raw_redis(redis_url)
    key = f"{prefix}:writer"
    token, pid, host = raw.get(key).decode().split(" ")
    assert (int(pid), host) == (os.getpid(), socket.gethostname()) and int(token) > 0
    assert 0 < raw.pttl(key) <= 10_000
    raw.pexpire(key, 1_000_000)
    assert store._renew_lease() is True
    assert 0 < raw.pttl(key) <= 10_000
    store.close()
    assert raw.get(key) is None
    raw.close()


# -- one writer per store ------------------------------------------------------------------

def test_a_second_writer_is_refused_with_one_line_naming_the_holder(url):
    first = open_store(url)
    with pytest.raises(JournalError) as info:
        open_store(url)
    message = str(info.value)
    assert "\n" not in message
    assert message == (f"{first.url}: journal is in use by another rollmux serve "
                       f"(pid {os.getpid()} on host {socket.gethostname()})")
    first.close()
    second = open_store(url)  # free again once the first closes
    assert second.append("submit", {}) == 1
    second.close()


_HOLD = ("import sys; from rollmux.live.journal import open_store; s = open_store(sys.argv[1]); "
         "s.append('submit', {}); print('ready', flush=True); sys.stdin.read(); s.close()")


def test_a_writer_in_another_process_is_named_and_its_exit_frees_the_store(url):
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, url], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=Path(__file__).parents[2])
    try:
        line = holder.stdout.readline()
        assert line == "ready\n", holder.stderr.read()
        with pytest.raises(JournalError, match=rf"in use by another rollmux serve \(pid {holder.pid} on host "):
            open_store(url)
        reader = open_store(url, readonly=True)  # a reader needs no lock
        assert [r.kind for r in reader.records()] == ["submit"]
        reader.close()
    finally:
        holder.communicate(input="", timeout=60)
    store = open_store(url)
    assert store.append("grant", {}) == 2
    store.close()


def test_sqlite_lock_file_names_the_holder(tmp_path):
    store = open_store(str(tmp_path / "j.db"))
    assert (tmp_path / "j.db.lock").read_text() == f"{os.getpid()} {socket.gethostname()}\n"
    store.close()


def test_readonly_store_takes_no_lock_and_refuses_writes(url):
    writer = open_store(url)
    writer.append("submit", {"job": "a"})
    reader = open_store(url, readonly=True)
    assert reader.readonly and reader.records() == [Record(1, "submit", {"job": "a"})]
    for write in (lambda: reader.stage("grant", {}), lambda: reader.append("grant", {}), reader.commit,
                  lambda: reader.save_snapshot(1, {})):
        with pytest.raises(JournalError, match="opened read-only"):
            write()
    reader.close()
    writer.close()


def test_readonly_sqlite_of_a_missing_file_is_refused_and_creates_nothing(tmp_path):
    with pytest.raises(JournalError, match="no journal there"):
        open_store(str(tmp_path / "none.db"), readonly=True)
    assert list(tmp_path.iterdir()) == []


# -- FailingStore --------------------------------------------------------------------------

KINDS = ["config", "submit", "place", "grant", "release", "tail", "regroup", "finish", "fail"]


@pytest.mark.parametrize("kind", KINDS)
def test_failing_store_fails_the_append_of_one_kind_and_writes_nothing(store, kind):
    failing = FailingStore(store, fail_on=lambda k, payload: k == kind)
    for other in KINDS:
        if other != kind:
            failing.append(other, {"k": other})
    with pytest.raises(JournalError, match=f"injected failure staging '{kind}'"):
        failing.append(kind, {"k": kind})
    assert failing.injected == 1
    assert [r.kind for r in store.records()] == [k for k in KINDS if k != kind]
    assert store.append("probe", {}) == len(KINDS)  # no seq was used up


def test_failing_store_can_fail_on_the_payload(store):
    failing = FailingStore(store, fail_on=lambda kind, payload: payload.get("job") == "b")
    failing.append("grant", {"job": "a"})
    with pytest.raises(JournalError, match="injected failure"):
        failing.append("grant", {"job": "b"})
    assert [r.payload for r in failing.records()] == [{"job": "a"}]


def test_failing_store_stage_failure_rolls_the_inner_batch_back(store):
    failing = FailingStore(store, fail_on=lambda kind, payload: kind == "grant")
    failing.stage("place", {})
    with pytest.raises(JournalError, match="injected failure"):
        failing.stage("grant", {})
    assert store.pending() == 0 and failing.pending() == 0
    failing.commit()
    assert store.records() == []


def test_failing_store_fails_a_counted_number_of_commits(store):
    failing = FailingStore(store, fail_commit=1)
    failing.stage("submit", {})
    failing.stage("place", {})
    with pytest.raises(JournalError, match=r"injected failure committing 2 record\(s\)"):
        failing.commit()
    assert store.pending() == 0 and store.records() == []
    assert failing.append("submit", {}) == 1  # the count is used up
    assert [r.kind for r in store.records()] == ["submit"]


def test_failing_store_fail_commit_true_fails_every_commit(store):
    failing = FailingStore(store, fail_commit=True)
    for _ in range(3):
        with pytest.raises(JournalError, match="injected failure committing"):
            failing.append("submit", {})
    assert failing.injected == 3 and store.records() == []
    failing.fail_commit = False
    assert failing.append("submit", {}) == 1


def test_failing_store_fails_snapshots_on_demand_and_delegates_the_rest(store):
    failing = FailingStore(store, fail_snapshot=1)
    failing.append("submit", {})
    with pytest.raises(JournalError, match="injected failure saving the snapshot"):
        failing.save_snapshot(1, {"v": 1})
    assert failing.snapshot() is None
    failing.save_snapshot(1, {"v": 1})
    assert failing.snapshot() == (1, {"v": 1})
    assert failing.url == store.url and failing.scan() == (store.records(), None)
    failing.stage("grant", {})
    failing.rollback()
    assert store.pending() == 0


# -- secrets ---------------------------------------------------------------------------------

def test_redis_password_never_appears_in_url_repr_or_errors(redis_port):
    admin = redis.Redis(port=redis_port)
    user, secret = f"u{uuid.uuid4().hex[:8]}", f"pw-{uuid.uuid4().hex}"
    admin.execute_command("ACL", "SETUSER", user, "on", f">{secret}", "~*", "&*", "+@all")
    try:
        url = f"redis://{user}:{secret}@127.0.0.1:{redis_port}/0?prefix=test-{uuid.uuid4().hex}"
        store = open_store(url)
        store.append("submit", {})
        texts = [store.url, repr(store), repr(FailingStore(store))]
        with pytest.raises(JournalError) as second:
            open_store(url)
        texts.append(str(second.value))
        raw, prefix = _raw_redis(url)
        raw.xadd(f"{prefix}:records", {"kind": "grant", "payload": "{torn"}, id="2-0")
        raw.set(f"{prefix}:seq", 2)
        with pytest.raises(JournalError) as corrupt:
            store.records()
        texts.append(str(corrupt.value))
        report = check_store(url)
        texts += [report.url, report.first_bad, repr(report)]
        store.close()
        with pytest.raises(JournalError) as closed:
            store.append("grant", {})
        texts.append(str(closed.value))
        with pytest.raises(JournalError) as wrong:
            open_store(url.replace(secret, secret + "-wrong"))
        texts.append(str(wrong.value))
        assert all(secret not in text for text in texts), texts
        assert store.url == f"redis://{user}:***@127.0.0.1:{redis_port}/0?prefix={prefix}"
        assert "record 2 ('grant') is corrupt" in str(corrupt.value)
        raw.close()
    finally:
        admin.execute_command("ACL", "DELUSER", user)
        admin.close()
