"""The shared inter-pool link: concurrent weight syncs split its bandwidth."""

from __future__ import annotations

import pytest

from rollmux.core.env import SimEnvironment
from rollmux.sim.link import SharedLink


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
