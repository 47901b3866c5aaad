"""The SQLite journal (`rollmux.live.journal.sqlite`): URLs, the file and its header, WAL with full
sync, the lock file, a failed commit."""

from __future__ import annotations

import os
import socket
import sqlite3

import pytest

from rollmux.live.journal import JournalError, open_store


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


def test_sqlite_lock_file_names_the_holder(tmp_path):
    store = open_store(str(tmp_path / "j.db"))
    assert (tmp_path / "j.db.lock").read_text() == f"{os.getpid()} {socket.gethostname()}\n"
    store.close()


def test_readonly_sqlite_of_a_missing_file_is_refused_and_creates_nothing(tmp_path):
    with pytest.raises(JournalError, match="no journal there"):
        open_store(str(tmp_path / "none.db"), readonly=True)
    assert list(tmp_path.iterdir()) == []
