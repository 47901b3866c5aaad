"""The Redis journal (`rollmux.live.journal.redis`): URLs and prefixes, the writer lease and its
fencing token, and a password that never shows."""

from __future__ import annotations

import os
import socket
import uuid

import pytest
import redis
from redis_raw import raw_redis

from rollmux.live.journal import FailingStore, JournalError, open_store
from rollmux.live.journal.repair import check_store


@pytest.fixture
def redis_url(redis_port):
    """A fresh Redis store URL (a new key prefix)."""
    return f"redis://127.0.0.1:{redis_port}/0?prefix=test-{uuid.uuid4().hex}"


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


# -- the writer lease and its fencing token ----------------------------------------------------

def test_redis_commit_after_the_lease_was_taken_over_is_refused_and_lands_nothing(redis_url):
    store = open_store(redis_url)
    store.append("submit", {})
    raw, prefix = raw_redis(redis_url)
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
    raw, prefix = raw_redis(redis_url)
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
    raw, prefix = raw_redis(redis_url)
    raw.set(f"{prefix}:seq", 5)
    with pytest.raises(JournalError, match="changed under this store"):
        store.append("grant", {})
    assert raw.xlen(f"{prefix}:records") == 1
    store.close()
    raw.close()


def test_redis_lease_has_a_ttl_is_renewed_and_is_released_on_close(redis_url):
    store = open_store(redis_url)
    raw, prefix = raw_redis(redis_url)
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
        raw, prefix = raw_redis(url)
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
