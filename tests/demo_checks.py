"""What a `rollmux demo` run must show: emulated Ray cluster, three real GRPO jobs (one heavy-tailed) and a TRL
GRPOTrainer job that joins the GRPO jobs' group, multiplexed vs solo: long-tail migration, worker-level double
grants, weight sync through rollmux.weightsync, bit-identical weights. tests/test_packaging.py runs the demo once,
from the wheel installed with its trl extra in a fresh venv, and checks its JSON here (one demo run for both)."""

from __future__ import annotations

import math

KEYS = {"jobs", "idle_share", "on_policy_identical", "warm_switch_s", "cold_switch_s", "timeline_png",
        "long_tail_migrations", "double_grants", "sync"}
JOB_KEYS = {"job_id", "framework", "group_id", "iterations", "final_reward", "mean_iter_s_solo", "mean_iter_s_mux",
            "slo", "weights_identical_to_solo", "reward_curve", "loss_curve"}


def check_demo(result: dict, iterations: int) -> None:
    """Every property of a demo run's JSON result with `iterations` per job and the TRL job in it."""
    assert set(result) == KEYS
    assert set(result["idle_share"]) == {"solo", "mux"}
    assert all(set(v) == {"rollout", "train"} for v in result["idle_share"].values())
    assert [j["job_id"] for j in result["jobs"]] == ["heavy", "large", "small", "trl"]
    assert all(set(j) == JOB_KEYS and j["iterations"] == iterations for j in result["jobs"])
    assert all(len(j["reward_curve"]) == len(j["loss_curve"]) == iterations for j in result["jobs"])
    assert all(math.isfinite(x) for j in result["jobs"] for x in j["reward_curve"] + j["loss_curve"])
    assert result["on_policy_identical"] is True
    assert all(j["weights_identical_to_solo"] is True for j in result["jobs"])
    assert result["idle_share"]["mux"]["train"] < result["idle_share"]["solo"]["train"]
    assert 0 < result["warm_switch_s"] and 0 < result["cold_switch_s"]
    # The heavy-tailed job's stragglers moved off the shared node's freed worker at least once,
    # recomputed where it kept, with no two jobs on one worker (from the phase log) and no drift.
    assert result["long_tail_migrations"] >= 1
    assert result["double_grants"] == 0
    _trl_checks(result)
    assert result["sync"]["strategy"] == "topology" and result["sync"]["mean_s"] > 0
    for j in result["jobs"]:  # every job within its SLO, measured against its own solo run
        assert j["mean_iter_s_mux"] <= j["slo"] * j["mean_iter_s_solo"], j


def _trl_checks(result: dict) -> None:
    """The TRL job ran TRL's GRPOTrainer multiplexed in one group with a GRPO-example job."""
    by_id = {j["job_id"]: j for j in result["jobs"]}
    trl = by_id["trl"]
    assert trl["framework"] == "trl"
    assert {j["framework"] for j in result["jobs"] if j["job_id"] != "trl"} == {"grpo-example"}
    assert any(j["group_id"] == trl["group_id"] for j in result["jobs"] if j["framework"] == "grpo-example")
    assert trl["weights_identical_to_solo"] is True
    assert trl["reward_curve"][-1] > trl["reward_curve"][0]  # the policy learns to say the target letter
