"""The journal's Store contract (`rollmux.live.journal.base.Store`, opened by `open_store`):
SQLite and Redis behave the same, every test runs on both."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from rollmux.live.journal import JournalError, Record, open_store


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


def test_closed_store_raises_journal_error(url):
    store = open_store(url)
    store.close()
    with pytest.raises(JournalError):
        store.append("submit", {})


# -- group commit: stage, commit, rollback ---------------------------------------------------

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
                              stderr=subprocess.PIPE, text=True, cwd=Path(__file__).parents[3])
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
