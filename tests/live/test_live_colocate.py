"""The live plane runs the co-located mode (core/placement/options/colocated.py) when its config asks: every phase
of a co-located job on its own training nodes (core/colo_controller.py); off by default."""

from __future__ import annotations

import pytest

from rollmux.core.colo_model import verl_rollout_scale
from rollmux.core.env import SimEnvironment
from rollmux.core.spec import default_cluster
from rollmux.live.live_state import LiveState
from rollmux.live.service import SchedulerCore
from factories import BALANCED_COLO, GROUPS, ROLLOUT_HEAVY_COLO, TRAIN_HEAVY_COLO, config, make_cluster, make_job

CLUSTER = default_cluster().model_dump()
COLO = config(GROUPS, colocate=True)
TIMINGS = {"wait_s": 0.0, "onload_s": 0.0, "run_s": 0.01, "offload_s": 0.0}


def _train_heavy(job_id: str, **kw) -> dict:
    """An 8:8 job co-located placement prefers to a group of its own (0.58 of its cost)."""
    return make_job(job_id, rollout=100.0, train=300.0, slo=2.0, colo=TRAIN_HEAVY_COLO, **kw).model_dump(exclude_none=True)


def _rollout_heavy_wide(job_id: str) -> dict:
    """A 16:8 job: co-located it would need 16 H800 GPUs, so it founds a group; x fits its bubbles."""
    return make_job(job_id, rollout=300.0, train=100.0, rollout_gpus=16, slo=2.0,
                    colo=ROLLOUT_HEAVY_COLO).model_dump(exclude_none=True)


def _iteration(core: SchedulerCore, job_id: str, token: str) -> list[dict]:
    grants = []
    for phase in ("rollout", "train", "sync"):
        grants.append(core.acquire(job_id, phase, token))
        core.release(job_id, phase, TIMINGS, token)
    return grants


@pytest.fixture
def core():
    c = SchedulerCore(CLUSTER, cfg=COLO)
    yield c
    c.shutdown()


def test_the_default_config_places_without_it():
    state = LiveState(SimEnvironment(), make_cluster(), GROUPS)
    assert not state.cluster.policy.colocate and "colocated" not in state.cluster.cases


def test_a_colocated_job_gets_every_permit_on_its_training_nodes(core):
    got = core.submit(_train_heavy("x"))
    assert got["case"] == "colocated" and got["mode"] == "colocated"
    assert got["nodes"] == {"rollout": [], "train": [0]}
    assert core.state.cluster.ledger.nodes == {"rollout": 0, "train": 1}
    first, second = _iteration(core, "x", got["token"]), _iteration(core, "x", got["token"])
    for rollout, train, sync in (first, second):
        assert (rollout["pool"], rollout["nodes"]) == ("train", [0]) == (train["pool"], train["nodes"])
        assert (sync["pool"], sync["nodes"]) == ("link", [])
        assert train["switch_s"] == 2.0  # the rollout's state is offloaded, the trainer's onloaded
    assert first[0]["switch_s"] == 0.0 and second[0]["switch_s"] == 2.0  # nothing loaded before the first
    status = core.status()
    assert status["groups"] == [] and status["page"]["colocated_total"] == 1
    assert status["colocated"][0]["job_id"] == "x" and status["jobs"]["x"]["iterations"] == 2
    core.finish("x", got["token"])
    assert core.state.cluster.ledger.nodes == {"rollout": 0, "train": 0} and core.status()["colocated"] == []


def test_a_held_colocated_permit_counts_its_training_node_busy(core):
    tok = core.submit(_train_heavy("x"))["token"]
    core.acquire("x", "rollout", tok)
    pools = core.status()["pools"]
    assert pools["train"]["busy_gpus"] == 8 and pools["rollout"]["busy_gpus"] == 0


def test_a_colocated_rollout_lease_follows_the_verl_model(core):
    tok = core.submit(_train_heavy("x"))["token"]
    grant = core.acquire("x", "rollout", tok)
    spec = core.state.planning_spec("x")
    scale = verl_rollout_scale(spec, core.state.cluster.cluster)
    assert scale != 1.0 and grant["lease_s"] == pytest.approx(max(60.0, 2.0 * spec.rollout_s.max * scale))


def test_another_jobs_token_gets_no_colocated_permit(core):
    tok_x = core.submit(_train_heavy("x"))["token"]
    tok_z = core.submit(_train_heavy("z"))["token"]
    with pytest.raises(Exception, match="forbidden|another job"):
        core.acquire("x", "rollout", tok_z)
    with pytest.raises(Exception, match="token"):
        core.acquire("x", "rollout", "not-a-token")
    assert core.acquire("x", "rollout", tok_x)["job_id"] == "x"


@pytest.mark.parametrize("snapshot_every", [2000, 3])
def test_a_restart_rebuilds_a_colocated_job_and_its_held_permit(url, snapshot_every):
    store = url  # each backend (tests/live/conftest.py)
    core = SchedulerCore(CLUSTER, cfg=COLO, store=store, snapshot_every=snapshot_every)
    tok = core.submit(_train_heavy("x"))["token"]
    _iteration(core, "x", tok)
    held = core.acquire("x", "rollout", tok)
    before = core.status()
    core.shutdown()
    again = SchedulerCore(None, store=store)
    try:
        assert again.state.cfg.colocation.enabled and again.status()["colocated"] == before["colocated"]
        assert again.status()["jobs"]["x"]["held"] == ["rollout"]
        assert again.acquire("x", "rollout", tok)["grant_no"] == held["grant_no"]  # the same permit
        again.release("x", "rollout", TIMINGS, tok)
        train = again.acquire("x", "train", tok)
        assert (train["pool"], train["nodes"], train["switch_s"]) == ("train", [0], 2.0)
        assert again.state.cluster.ledger.nodes == {"rollout": 0, "train": 1}
    finally:
        again.shutdown()


def test_a_colocated_job_moves_into_a_group_that_appears_with_room_for_it():
    """x and z co-located; y founds a group whose bubbles fit x; z's departure runs the
    consolidation pass, and x moves at its next iteration boundary (colo_regroup)."""
    core = SchedulerCore(CLUSTER, cfg=config(COLO, colo_regroup=True))
    try:
        _moves_into_a_group(core)
    finally:
        core.shutdown()


def _moves_into_a_group(core: SchedulerCore) -> None:
    tok = {"x": core.submit(_train_heavy("x"))["token"], "z": core.submit(_train_heavy("z"))["token"]}
    y = core.submit(_rollout_heavy_wide("y"))
    assert y["case"] == "isolated"
    tok["y"] = y["token"]
    core.finish("z", tok["z"])
    assert core.state.jobs["x"].migrate
    core.acquire("x", "rollout", tok["x"])
    core.release("x", "rollout", TIMINGS, tok["x"])
    core.acquire("x", "train", tok["x"])
    core.release("x", "train", TIMINGS, tok["x"])  # its boundary: it leaves its training node
    status = core.status()
    assert status["colocated"] == [] and status["groups"][0]["members"] == ["y", "x"]
    assert core.state.jobs["x"].case == "colocated"  # how it was admitted
    core.acquire("y", "rollout", tok["y"])  # round robin: y's turn comes first on their node
    core.release("y", "rollout", TIMINGS, tok["y"])
    rollout = core.acquire("x", "rollout", tok["x"])
    assert rollout["pool"] == "rollout" and rollout["switch_s"] > 100  # its migration: a cold start
    assert core.state.cluster.ledger.nodes == {"rollout": 2, "train": 1}


def _balanced(job_id: str) -> dict:
    """An 8:8 job with phases as long as each other: co-located alone, two of them interleave."""
    return make_job(job_id, rollout=150.0, train=150.0, slo=1.5, colo=BALANCED_COLO).model_dump(exclude_none=True)


PAIR = config(COLO, colo_pair=True)


def _paired(core: SchedulerCore) -> dict:
    tok = {"x": core.submit(_balanced("x"))["token"]}
    _iteration(core, "x", tok["x"])
    y = core.submit(_balanced("y"))
    assert y["case"] == "paired" and y["mode"] == "disaggregated" and y["nodes"] == {"rollout": [0], "train": [0]}
    tok["y"] = y["token"]
    assert core.state.jobs["x"].migrate and "x" in core.state.cluster.arriving
    return tok


def test_an_arrival_founds_a_group_with_a_colocated_job_that_moves_in():
    core = SchedulerCore(CLUSTER, cfg=PAIR)
    try:
        tok = _paired(core)
        _iteration(core, "x", tok["x"])  # its boundary: it leaves its training node
        status = core.status()
        assert status["colocated"] == [] and status["groups"][0]["members"] == ["y", "x"]
        core.acquire("y", "rollout", tok["y"])
        core.release("y", "rollout", TIMINGS, tok["y"])
        rollout = core.acquire("x", "rollout", tok["x"])
        assert rollout["pool"] == "rollout" and rollout["switch_s"] > 100  # its migration: a cold start
        assert core.state.cluster.ledger.nodes == {"rollout": 1, "train": 1}
        assert core.state.cluster.cases == {"colocated": 1, "paired": 1}
    finally:
        core.shutdown()


def test_without_colo_pair_the_arrival_runs_colocated(core):
    core.submit(_balanced("x"))
    assert core.submit(_balanced("y"))["case"] == "colocated" and not core.state.cluster.arriving


def test_a_restart_keeps_the_pairing_and_the_movers_reserved_slot(url):
    core = SchedulerCore(CLUSTER, cfg=PAIR, store=url)
    tok = _paired(core)
    before = core.status()
    core.shutdown()
    again = SchedulerCore(None, store=url)
    try:
        assert again.state.cfg.colocation.pair and again.status()["groups"] == before["groups"]
        assert again.state.jobs["x"].migrate and again.state.jobs["y"].case == "paired"
        _iteration(again, "x", tok["x"])
        assert again.status()["groups"][0]["members"] == ["y", "x"] and again.status()["colocated"] == []
    finally:
        again.shutdown()


FOLD = config(PAIR, dotted={"colocation.fold": True})


def test_the_last_member_of_a_group_folds_into_colocation_at_its_boundary():
    core = SchedulerCore(CLUSTER, cfg=FOLD)
    try:
        tok = _paired(core)
        _iteration(core, "x", tok["x"])  # its boundary: it moves into y's group
        core.finish("y", tok["y"])  # x is left alone: co-located it costs less
        assert core.state.jobs["x"].migrate and core.state.cluster.folded == 1
        moved = _iteration(core, "x", tok["x"])  # its last iteration in the group, then it folds
        assert moved[0]["pool"] == "rollout"
        status = core.status()
        assert status["groups"] == [] and status["colocated"][0]["job_id"] == "x"
        rollout, train, _ = _iteration(core, "x", tok["x"])
        assert (rollout["pool"], train["pool"]) == ("train", "train") and rollout["switch_s"] > 100  # its move
        assert core.state.cluster.ledger.nodes == {"rollout": 0, "train": 1}
    finally:
        core.shutdown()


def test_a_restart_keeps_a_folds_reserved_placement(url):
    core = SchedulerCore(CLUSTER, cfg=FOLD, store=url)
    tok = _paired(core)
    _iteration(core, "x", tok["x"])
    core.finish("y", tok["y"])
    core.shutdown()
    again = SchedulerCore(None, store=url)
    try:
        assert again.state.cfg.colocation.fold and again.state.jobs["x"].migrate
        _iteration(again, "x", tok["x"])
        assert again.status()["groups"] == [] and again.status()["colocated"][0]["job_id"] == "x"
        rollout = again.acquire("x", "rollout", tok["x"])
        assert rollout["pool"] == "train" and rollout["switch_s"] > 100
    finally:
        again.shutdown()


def _heavy(job_id: str) -> dict:
    """A rollout-heavy 8:8 job (the authors' 8B-32k): co-located alone, three to a group."""
    return make_job(job_id, rollout=888.0, train=559.5, sync=10.0, slo=1.5, duration=200_000.0,
                    colo=ROLLOUT_HEAVY_COLO).model_dump(exclude_none=True)


def test_an_arrival_founds_a_group_with_two_colocated_jobs_that_move_in():
    core = SchedulerCore(CLUSTER, cfg=FOLD)
    try:
        tok = {j: core.submit(_heavy(j))["token"] for j in ("a", "b")}
        assert [core.state.jobs[j].case for j in ("a", "b")] == ["colocated", "colocated"]
        c = core.submit(_heavy("c"))
        assert c["case"] == "paired" and all(core.state.jobs[j].migrate for j in ("a", "b"))
        for j in ("a", "b"):
            _iteration(core, j, tok[j])  # each one's boundary: it leaves its training node
        (group,) = core.status()["groups"]
        assert sorted(group["members"]) == ["a", "b", "c"] and core.status()["colocated"] == []
        assert core.state.cluster.ledger.nodes == {"rollout": 2, "train": 1}
    finally:
        core.shutdown()
