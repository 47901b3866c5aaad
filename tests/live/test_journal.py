"""The live scheduler's journal store (issue 5): SQLite and Redis behave the same."""

from __future__ import annotations

import sqlite3
import threading
import uuid

import pytest

from rollmux.live.journal import JournalError, Record, open_store


@pytest.fixture(params=["sqlite", "redis"])
def url(request, tmp_path):
    """A fresh, empty store URL of each backend (a new file, or a new key prefix)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'journal.db'}"
    port = request.getfixturevalue("redis_port")
    return f"redis://127.0.0.1:{port}/0?prefix=test-{uuid.uuid4().hex}"


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
    open_store(f"sqlite:///{tmp_path / 'j.db'}").append("submit", {"n": 1})
    open_store("sqlite://j.db").append("submit", {"n": 2})
    open_store("j.db").append("submit", {"n": 3})
    store = open_store(str(tmp_path / "j.db"))
    assert store.url == f"sqlite:///{str(tmp_path / 'j.db').lstrip('/')}"
    assert [r.payload["n"] for r in open_store(store.url).records()] == [1, 2, 3]


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
