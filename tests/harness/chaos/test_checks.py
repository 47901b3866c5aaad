"""The double-grant check at worker level: two jobs on one node overlap only if they share a worker slot."""

from __future__ import annotations

from rollmux.harness.chaos.checks import double_grants


def _iv(job: str, slots: list[int] | None, start: float, end: float, phase: str = "rollout") -> dict:
    iv = {"job": job, "phase": phase, "group_id": 0, "pool": "rollout", "nodes": [0], "iter": 0,
          "start": start, "end": end}
    if slots is not None:
        iv["slots"] = [slots]
    return iv


def test_a_migrated_tail_beside_the_next_rollout_is_no_double_grant():
    # a's head on both slots, its tail on slot 0; b on slot 1 meanwhile
    ivs = [_iv("a", [0, 1], 0.0, 1.0), _iv("a", [0], 1.0, 2.0), _iv("b", [1], 1.0, 1.5)]
    assert double_grants(ivs) == []


def test_two_jobs_on_one_worker_are_a_double_grant():
    found = double_grants([_iv("a", [0], 1.0, 2.0), _iv("b", [0, 1], 1.5, 3.0)])
    assert len(found) == 1 and "worker(s) [0]" in found[0]


def test_without_slots_the_whole_node_counts():
    assert len(double_grants([_iv("a", None, 0.0, 2.0), _iv("b", [1], 1.0, 3.0)])) == 1
