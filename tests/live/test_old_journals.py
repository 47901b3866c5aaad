"""Journals written before the records were typed still replay, in SQLite and in Redis.

tests/live/data/journal_v*.json hold what an older service wrote (tests/live/data/make_old_journals.py):
every record kind it journals, a snapshot, and the state it held. Loaded into a fresh store,
the journal rebuilds that state through today's records (older versions upgraded), from the
first record or from the snapshot, and the service goes on: what it journals next is in
today's format, and a journal of both replays again.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rollmux.live.journal import open_store
from rollmux.live.service import SchedulerCore

DATA = Path(__file__).parent / "data"
JOURNALS = ["journal_v2.json", "journal_v3.json"]  # config record version 2 (flat) and 3 (sectioned)
TIMINGS = {"wait_s": 0.0, "onload_s": 0.0, "run_s": 100.0, "offload_s": 0.0}
# A job's iteration figures, and the times they are computed from, which older services did not keep
# (their figures read the clock): the replay adds them, from the grants' and releases' records.
FIGURES = ("mean_iter_s", "slowdown", "recent_iter_s", "recent_iterations", "last_iteration_at")
TIMES = ("first_phase_at", "timed_from", "iteration_ends")
# What a job's profile view says that those services' did not: the record fields it is planned with,
# and how far a job submitted without phase times is measured (none of theirs was).
NEW_PROFILE_KEYS = ("plans_with", "measuring")


def _load(url: str, doc: dict, from_snapshot: bool) -> None:
    """Write the older service's records (and its snapshot) into the fresh store at `url`."""
    store = open_store(url)
    try:
        for kind, payload in doc["records"]:
            store.stage(kind, payload)
        store.commit()
        if from_snapshot:
            seq, state = doc["snapshot"]
            store.save_snapshot(seq, state)
    finally:
        store.close()


def _status(core: SchedulerCore) -> dict:
    """The parts of the status a replay fixes (not the clock's)."""
    s = core.status()
    jobs = {j: {k: v for k, v in v.items() if k not in FIGURES} for j, v in s["jobs"].items()}
    for v in jobs.values():
        v["profile"] = {k: p for k, p in v["profile"].items() if k not in NEW_PROFILE_KEYS}
    return json.loads(json.dumps({"groups": s["groups"], "jobs": jobs, "grants": s["grants"],
                                  "colocated": s["colocated"], "pools": s["pools"]}))


def _expected_status(doc: dict) -> dict:
    status = dict(doc["status"])
    status["jobs"] = {j: {k: v for k, v in v.items() if k not in FIGURES} for j, v in status["jobs"].items()}
    return status


@pytest.mark.parametrize("name", JOURNALS)
@pytest.mark.parametrize("from_snapshot", [False, True], ids=["records", "snapshot"])
def test_an_older_journal_rebuilds_the_state_its_service_held(url, name, from_snapshot):
    doc = json.loads((DATA / name).read_text())
    assert {k for k, _ in doc["records"]} == {"config", "submit", "place", "grant", "release", "tail", "observe",
                                               "memory", "compact", "movers", "move_out", "leave"}
    _load(url, doc, from_snapshot)
    core = SchedulerCore(None, store=url)
    try:
        assert core.recovered_records == len(doc["records"])
        dump = json.loads(json.dumps(core.dump()))
        dump["jobs"] = {j: {k: v for k, v in r.items() if k not in TIMES} for j, r in dump["jobs"].items()}
        # Those services held a migrant's settling but did not snapshot it: a replay of their
        # records finds it again (m1 moved and has not yet run there); their snapshots lack it.
        assert set(dump.pop("settling", {})) == (set() if from_snapshot else {"m1"})
        assert dump == doc["dump"]
        assert _status(core) == _expected_status(doc)
    finally:
        core.shutdown()


@pytest.mark.parametrize("name", JOURNALS)
def test_after_an_older_journal_the_service_goes_on_and_both_formats_replay(url, name):
    doc = json.loads((DATA / name).read_text())
    tok = doc["tokens"]
    _load(url, doc, from_snapshot=True)
    core = SchedulerCore(None, store=url)
    try:
        assert core.acquire("c", "rollout", tok["c"])["grant_no"] == doc["dump"]["jobs"]["c"]["held"]["rollout"][
            "grant_no"]  # still held: the retried acquire gets the same permit
        core.release("c", "rollout", TIMINGS, tok["c"])
        for phase in ("train", "sync"):
            core.acquire("c", phase, tok["c"])
            core.release("c", phase, TIMINGS, tok["c"])
        core.finish("m3", tok["m3"])
        core.acquire("y", "rollout", tok["y"])
        before = json.loads(json.dumps(core.dump()))
    finally:
        core.shutdown()
    store = open_store(url, readonly=True)
    try:
        later = store.records(after=len(doc["records"]))
    finally:
        store.close()
    assert {r.kind for r in later} >= {"grant", "release", "leave"}
    assert all(r.payload["version"] >= 1 for r in later)  # today's records say their version
    again = SchedulerCore(None, store=url)
    try:
        assert json.loads(json.dumps(again.dump())) == before
    finally:
        again.shutdown()
