"""The shared inter-pool link: concurrent weight syncs split its bandwidth."""

from __future__ import annotations

import pytest

from rollmux.core.env import SimEnvironment
from rollmux.sim.link import SharedLink
from factories import make_policy


def test_one_transfer_gets_the_whole_link():
    env, done = SimEnvironment(), {}
    link = SharedLink(env, gbps=10.0)
    link.send("a", 100.0, lambda: done.setdefault("a", env.now()))
    env.run()
    assert done == {"a": pytest.approx(10.0)}


def test_concurrent_transfers_share_and_the_survivor_speeds_up():
    env, done = SimEnvironment(), {}
    link = SharedLink(env, gbps=10.0)
    link.send("a", 100.0, lambda: done.setdefault("a", env.now()))
    env.call_at(5.0, link.send, "b", 50.0, lambda: done.setdefault("b", env.now()))
    env.run()
    # 0-5 s: a alone sends 50; then both at 5 Gb/s: b's 50 and a's last 50 end together at 15 s.
    assert done == {"a": pytest.approx(15.0), "b": pytest.approx(15.0)}
    assert link.peak_transfers == 2


def test_a_cancelled_transfer_never_completes_and_frees_its_share():
    env, done = SimEnvironment(), {}
    link = SharedLink(env, gbps=10.0)
    link.send("a", 100.0, lambda: done.setdefault("a", env.now()))
    link.send("b", 100.0, lambda: done.setdefault("b", env.now()))
    env.call_at(4.0, link.cancel, "b")  # 0-4 s: 5 Gb/s each; then a alone sends its last 80 at 10 Gb/s
    env.call_at(5.0, link.cancel, "nobody")  # (no such transfer: nothing happens)
    env.run()
    assert done == {"a": pytest.approx(12.0)}


def _syncing_jobs(n: int):
    from factories import make_job
    return [make_job(f"j{i}", rollout=100, train=100, sync=1.0, slo=5.0, duration=201.0 * 20,
                     rollout_gpus=16, weights_gb=10.0) for i in range(n)]


def _run(jobs, gbps, **cfg):
    from factories import GROUPS, make_cluster

    from rollmux.sim.simulator import simulate
    cluster = make_cluster().model_copy(update={"inter_pool_gbps": gbps})
    return simulate(jobs, cluster, GROUPS, make_policy(), **cfg)


def test_without_a_link_bandwidth_behaviour_is_unchanged():
    jobs = _syncing_jobs(3)
    plain = _run([j.model_copy(update={"weights_gb": None}) for j in jobs], None)
    assert _run(jobs, None).cost_usd == plain.cost_usd


def test_a_narrow_shared_link_slows_syncs_and_flat_sync_slows_them_more():
    jobs = _syncing_jobs(3)
    wide, narrow = _run(jobs, 10_000.0), _run(jobs, 8.0)
    flat = _run(jobs, 8.0, flat_sync=True)  # two rollout nodes each: two copies per sync
    span = [max(o.finish_s for o in r.outcomes) for r in (wide, narrow, flat)]
    assert span[0] < span[1] < span[2]
