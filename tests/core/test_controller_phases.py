"""The group controller's init and sync phases and the worker slots of long-tail migration."""

from __future__ import annotations

import pytest

from rollmux.core.config import IntraConfig
from rollmux.core.env import SimEnvironment
from rollmux.core.group_controller import Grant, GroupController
from factories import intra, make_group, make_job


def _controller(cfg: IntraConfig | None = None, tail: float = 0.3) -> GroupController:
    """Jobs a and b sharing rollout node 0 and training node 0."""
    group = make_group([(make_job("a", tail_frac=tail), (0,)), (make_job("b", tail_frac=tail), (0,))], 1)
    return GroupController(SimEnvironment(), group, cfg or intra(warm_switch_s=0.0))


def _ask(ctl: GroupController, job: str, phase: str, got: dict) -> None:
    ctl.request(job, phase, lambda g: got.__setitem__((job, phase), g))


def test_sync_is_granted_at_once_and_holds_no_node():
    ctl, got = _controller(), {}
    _ask(ctl, "a", "rollout", got)
    _ask(ctl, "b", "sync", got)  # a holds the shared nodes
    g = got[("b", "sync")]
    assert g.nodes == () and g.pool == "link"
    ctl.release("b", "sync")
    assert ctl.nodes["rollout"][0].holder == "a"  # b's sync release freed nothing of a's
    assert ctl.whose_turn()["rollout"] == ["b"]   # and the turn order did not move


def test_init_waits_for_every_node_of_the_job_and_blocks_new_phases_there():
    ctl, got = _controller(), {}
    _ask(ctl, "a", "rollout", got)
    _ask(ctl, "b", "init", got)
    assert ("b", "init") not in got  # a holds the rollout node
    ctl.release("a", "rollout")
    g = got[("b", "init")]           # both nodes free now
    assert (g.nodes, g.train_held) == ((0,), (0,))
    _ask(ctl, "a", "train", got)
    assert ("a", "train") not in got  # b's init holds the training node too
    ctl.release("b", "init")
    assert ("a", "train") in got
    assert ctl.whose_turn()["rollout"] == ["b"]  # init did not move b's turn


def test_a_pending_init_is_not_starved_by_the_round_robin():
    ctl, got = _controller(), {}
    _ask(ctl, "a", "rollout", got)
    _ask(ctl, "b", "init", got)
    _ask(ctl, "b", "rollout", got)   # hypothetical queue behind the init
    ctl.release("a", "rollout")
    assert ("b", "init") in got and ("b", "rollout") not in got


def test_unknown_phase_is_refused():
    with pytest.raises(ValueError, match="unknown phase 'eval'"):
        _controller().request("a", "eval", lambda g: None)


def test_a_migrated_tail_keeps_its_slots_and_the_next_rollout_gets_the_others():
    ctl, got = _controller(intra(warm_switch_s=0.0, tail_worker_frac=0.25)), {}
    _ask(ctl, "a", "rollout", got)
    a: Grant = got[("a", "rollout")]
    assert a.tail_share > 0 and a.units == 4
    assert a.slots(0) == (0, 1, 2, 3) and a.kept(0) == (0,)
    _ask(ctl, "b", "rollout", got)
    assert ("b", "rollout") not in got
    ctl.tail_started("a")
    b: Grant = got[("b", "rollout")]
    assert b.slots(0) == (1, 2, 3)            # never slot 0, which a's tail keeps
    assert b.kept(0) == (1,)                  # b's own tail would keep its lowest slot
    ctl.release("a", "rollout")
    ctl.release("b", "rollout")
    assert ctl.nodes["rollout"][0].kept == {}


def test_slots_survive_export_and_import():
    ctl, got = _controller(intra(warm_switch_s=0.0, tail_worker_frac=0.5)), {}
    _ask(ctl, "a", "rollout", got)
    ctl.tail_started("a")
    _ask(ctl, "b", "rollout", got)
    copy = _controller(intra(warm_switch_s=0.0, tail_worker_frac=0.5))
    copy.import_state(ctl.export_state())
    assert copy.nodes["rollout"][0].kept == {"a": (0,)} and copy.nodes["rollout"][0].slots == (1,)


def test_no_tail_means_no_slot_bookkeeping():
    ctl, got = _controller(tail=0.0), {}
    _ask(ctl, "a", "rollout", got)
    g = got[("a", "rollout")]
    assert g.tail_share == 0 and g.workers == () and g.keep == () and g.slots(0) == (0, 1, 2, 3)
