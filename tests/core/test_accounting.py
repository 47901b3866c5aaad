"""Ledger: every policy pays for the nodes it holds, per GPU-hour (DESIGN §6, §7)."""

from __future__ import annotations

import pytest

from rollmux.core.accounting import Ledger
from factories import make_cluster

CLUSTER = make_cluster(rollout_price=1.0, train_price=3.0)  # nodes: $8/h and $24/h


def test_cost_integrates_node_hours_times_price():
    led = Ledger(CLUSTER)
    led.provision("rollout", 2, 0.0)       # 2 rollout nodes for 2 h
    led.provision("train", 1, 1800.0)      # 1 train node for 1.5 h
    led.release("rollout", 2, 7200.0)
    led.release("train", 1, 7200.0)
    led.close(7200.0)
    assert led.cost_usd() == pytest.approx(2 * 2 * 8.0 + 1.5 * 24.0)


def test_cost_stops_accruing_after_release():
    led = Ledger(CLUSTER)
    led.provision("train", 1, 0.0)
    led.release("train", 1, 3600.0)
    led.close(10 * 3600.0)
    assert led.cost_usd() == pytest.approx(24.0)


def test_close_accounts_nodes_still_held():
    led = Ledger(CLUSTER)
    led.provision("rollout", 1, 0.0)
    led.close(1800.0)
    assert led.cost_usd() == pytest.approx(4.0)


def test_peak_counts_the_most_nodes_held_at_once():
    led = Ledger(CLUSTER)
    led.provision("rollout", 3, 0.0)
    led.provision("rollout", 2, 10.0)
    led.release("rollout", 4, 20.0)
    led.provision("rollout", 1, 30.0)
    led.close(40.0)
    assert led.peak_nodes["rollout"] == 5
    assert led.peak_gpus("rollout") == 40
    assert led.peak_gpus("train") == 0


def test_idle_share_is_unbusy_share_of_held_gpu_time():
    led = Ledger(CLUSTER)
    led.provision("rollout", 1, 0.0)
    led.busy("rollout", 8, 250.0)
    led.busy("rollout", 4, 500.0)
    led.close(1000.0)
    assert led.idle_share("rollout") == pytest.approx(1 - (8 * 250 + 4 * 500) / (8 * 1000))


def test_idle_share_is_zero_when_nothing_provisioned():
    assert Ledger(CLUSTER).idle_share("train") == 0.0


def test_idle_share_never_negative():
    led = Ledger(CLUSTER)
    led.provision("train", 1, 0.0)
    led.busy("train", 16, 100.0)
    led.close(100.0)
    assert led.idle_share("train") == 0.0


def test_release_more_than_held_raises():
    led = Ledger(CLUSTER)
    led.provision("rollout", 1, 0.0)
    with pytest.raises(ValueError):
        led.release("rollout", 2, 5.0)


def test_failed_release_leaves_nodes_unchanged():
    led = Ledger(CLUSTER)
    led.provision("rollout", 1, 0.0)
    with pytest.raises(ValueError):
        led.release("rollout", 2, 5.0)
    assert led.nodes["rollout"] == 1


def test_rate_changes_record_the_cost_rate_timeline():
    led = Ledger(CLUSTER)
    led.provision("rollout", 1, 0.0)
    led.provision("train", 1, 10.0)
    led.provision("train", 0, 15.0)  # no change, no entry
    led.release("rollout", 1, 20.0)
    assert led.rate_changes == [(0.0, 8.0), (10.0, 32.0), (20.0, 24.0)]
    assert led.rate_per_hour() == 24.0


def test_span_runs_from_first_provisioning_to_close():
    led = Ledger(CLUSTER)
    assert led.span_s() == 0.0
    led.provision("train", 1, 100.0)
    led.release("train", 1, 400.0)
    led.close(500.0)
    assert led.span_s() == 400.0
