"""FailingStore (`rollmux.live.journal.failing`), the fault-injection seam: it fails what it is told
to, writes nothing when it does, and passes the rest through."""

from __future__ import annotations

import pytest

from rollmux.live.journal import FailingStore, JournalError

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
