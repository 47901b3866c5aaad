"""A co-located job's permits (core/colo_controller.py): at once, every phase on its training nodes."""

from __future__ import annotations

import pytest

from rollmux.core.colo_controller import ColocatedController
from rollmux.core.colo_model import colocated_group
from rollmux.core.env import SimEnvironment
from factories import intra, make_cluster, make_job

CFG = intra(warm_switch_s=2.0)


def _controller(rollout_gpus: int = 8) -> ColocatedController:
    job = make_job("x", rollout=100.0, train=300.0, rollout_gpus=rollout_gpus)
    return ColocatedController(SimEnvironment(), colocated_group(4, job, make_cluster(), 400.0), CFG)


def _grant(ctl: ColocatedController, phase: str):
    got = []
    ctl.request("x", phase, got.append)
    assert len(got) == 1, "granted at once"
    return got[0]


def test_every_phase_is_granted_at_once_on_the_training_nodes():
    ctl = _controller(rollout_gpus=16)  # G = 16 GPUs: two training nodes
    init = _grant(ctl, "init")
    assert (init.pool, init.nodes, init.switch_s) == ("train", (0, 1), 0.0)
    ctl.release("x", "init")
    switches = []
    for _ in range(2):
        for phase in ("rollout", "train"):
            g = _grant(ctl, phase)
            assert (g.pool, g.nodes, g.group_id, g.tail_share) == ("train", (0, 1), 4, 0.0)
            switches.append(g.switch_s)
            ctl.release("x", phase)
        sync = _grant(ctl, "sync")
        assert (sync.pool, sync.nodes) == ("link", ())
    assert switches == [0.0, 2.0, 2.0, 2.0]  # offload one phase's state, onload the other's
    assert ctl.whose_turn() == {"rollout": [], "train": ["x", "x"]}


def test_a_retried_permit_switches_nothing_and_a_tail_frees_nothing():
    ctl = _controller()
    _grant(ctl, "rollout")
    ctl.tail_started("x")
    assert ctl.holder == "rollout"
    assert _grant(ctl, "rollout").switch_s == 0.0  # its state is the one loaded


def test_an_unknown_job_or_phase_is_refused():
    ctl = _controller()
    with pytest.raises(KeyError):
        ctl.request("y", "rollout", lambda g: None)
    with pytest.raises(ValueError, match="unknown phase"):
        ctl.request("x", "eval", lambda g: None)


def test_its_state_survives_an_export_and_import():
    ctl = _controller()
    _grant(ctl, "train")
    again = _controller()
    again.import_state(ctl.export_state())
    assert (again.holder, again.last) == ("train", "train")
    assert _grant(again, "rollout").switch_s == 2.0
    again.withdraw("x")
    assert again.holder is None
