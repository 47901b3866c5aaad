"""A failed journal write changes nothing: memory always equals a replay of the journal."""

from __future__ import annotations

import pytest
from factories import make_job

from rollmux.core.spec import default_cluster
from rollmux.live.journal import FailingStore, open_store
from rollmux.live.service import SchedulerCore, Unavailable

CLUSTER = default_cluster().model_dump()
TIMINGS = {"wait_s": 0.0, "onload_s": 0.0, "run_s": 0.01, "offload_s": 0.0}
KINDS = ("submit", "place", "grant", "release", "tail", "movers", "move_out", "leave")
# a and b complement each other; c is a tight-SLO job alone; when b leaves, a fits with c for less.
JOBS = [make_job("a", rollout=100, train=20, tail_frac=0.3), make_job("b", rollout=20, train=100, tail_frac=0.3),
        make_job("c", rollout=20, train=100, slo=1.05)]


def _steps(core: SchedulerCore, tok: dict) -> list:
    """A run that writes every record kind at least once."""
    def submit(job):
        tok[job.job_id] = core.submit(job.model_dump(exclude_none=True))["token"]
    return [
        lambda: submit(JOBS[0]), lambda: submit(JOBS[1]), lambda: submit(JOBS[2]),   # submit, place
        lambda: core.acquire("a", "rollout", tok["a"]),                              # grant
        lambda: core.request("progress", "a", "a", 9, 10).result(),                 # tail
        lambda: core.release("a", "rollout", TIMINGS, tok["a"]),                    # release
        lambda: core.finish("b", tok["b"]),                                          # leave, movers
        lambda: core.acquire("a", "train", tok["a"]),
        lambda: core.release("a", "train", TIMINGS, tok["a"]),                      # move_out, place
        lambda: core.finish("c", tok["c"]),
    ]


def _replayed(path: str) -> dict:
    """The state a fresh service rebuilds from what the journal holds."""
    other = SchedulerCore(None, store=open_store(path, readonly=True))
    try:
        return other.dump()
    finally:
        other.shutdown()


def _kinds(path: str) -> set[str]:
    return {r.kind for r in open_store(path, readonly=True).records()}


def test_the_run_writes_every_record_kind(tmp_path):
    path = str(tmp_path / "j.db")
    core = SchedulerCore(CLUSTER, store=path, snapshot_every=0)
    try:
        for step in _steps(core, {}):
            step()
    finally:
        core.shutdown()
    assert set(KINDS) <= _kinds(path)


@pytest.mark.parametrize("kind", KINDS)
def test_a_failed_stage_of_each_record_kind_changes_nothing(tmp_path, kind):
    path = str(tmp_path / "j.db")
    armed = [True]
    store = FailingStore(open_store(path), fail_on=lambda k, p: armed[0] and k == kind)
    core = SchedulerCore(CLUSTER, store=store, snapshot_every=0)
    tok: dict = {}
    try:
        for step in _steps(core, tok):
            try:
                step()
            except Unavailable:
                assert core.dump() == _replayed(path)  # nothing of the failed decision is left
                armed[0] = False
                step()  # the same request, asked again, goes through
        assert store.injected == 1
        assert core.dump() == _replayed(path)
        assert set(KINDS) <= _kinds(path)  # the retried decision was journaled (a tail is not lost)
        assert set(core._seen) <= set(core.state.jobs)  # no heartbeat watch on a rolled-back job
    finally:
        core.shutdown()


def test_a_failed_commit_rolls_the_batch_back_and_the_service_goes_on(tmp_path):
    path = str(tmp_path / "j.db")
    store = FailingStore(open_store(path))
    core = SchedulerCore(CLUSTER, store=store, snapshot_every=0)
    try:
        tok = {j.job_id: core.submit(j.model_dump(exclude_none=True))["token"] for j in JOBS[:2]}
        store.fail_commit = 1
        with pytest.raises(Unavailable):
            core.acquire("a", "rollout", tok["a"])
        assert core.dump() == _replayed(path) and core.dump()["grants"] == 0
        assert core.acquire("a", "rollout", tok["a"])["grant_no"] == 1  # the turn counter was not advanced
        core.release("a", "rollout", TIMINGS, tok["a"])
        assert core.acquire("b", "rollout", tok["b"])["job_id"] == "b"
        assert core.dump() == _replayed(path)
    finally:
        core.shutdown()


def test_a_failed_release_write_leaves_the_permit_held_and_a_retry_releases_it(tmp_path):
    path = str(tmp_path / "j.db")
    armed = [True]
    store = FailingStore(open_store(path), fail_on=lambda k, p: armed[0] and k == "release")
    core = SchedulerCore(CLUSTER, store=store, snapshot_every=0)
    try:
        tok = {j.job_id: core.submit(j.model_dump(exclude_none=True))["token"] for j in JOBS[:2]}
        first = core.acquire("a", "rollout", tok["a"])
        with pytest.raises(Unavailable):
            core.release("a", "rollout", TIMINGS, tok["a"])
        assert core.status()["jobs"]["a"]["held"] == ["rollout"]
        armed[0] = False
        core.release("a", "rollout", TIMINGS, tok["a"])
        assert core.acquire("a", "train", tok["a"], first["grant_no"])["job_id"] == "a"  # not stuck
    finally:
        core.shutdown()


def test_a_failed_snapshot_is_not_fatal(tmp_path):
    path = str(tmp_path / "j.db")
    store = FailingStore(open_store(path), fail_snapshot=True)
    core = SchedulerCore(CLUSTER, store=store, snapshot_every=3)
    try:
        tok = {j.job_id: core.submit(j.model_dump(exclude_none=True))["token"] for j in JOBS[:2]}
        for _ in range(3):
            for phase in ("rollout", "train"):
                for j in "ab":
                    core.acquire(j, phase, tok[j])
                    core.release(j, phase, TIMINGS, tok[j])
        assert store.injected >= 1
        assert core.status()["jobs"]["a"]["iterations"] == 3
        assert core.dump() == _replayed(path)
    finally:
        core.shutdown()
