"""VeRLPhases (rollmux/adapters/verl/phases.py) on the calls veRL's RayPPOTrainer.fit makes, in its order,
with a real JobShim on a permit client that grants at once and sides that record their moves."""

from __future__ import annotations

import logging

import pytest
from factories import GrantAtOnce

from rollmux.adapters.verl.phases import VeRLPhases
from rollmux.core.grant import Grant


class _Side:
    """The rollout or training side: records each move."""

    def __init__(self, name: str, log: list, host: int) -> None:
        self.name, self.log, self.host = name, log, host

    def wake(self, step: int) -> None:
        self.log.append(("wake", step))

    def sleep(self) -> None:
        self.log.append(("sleep",))

    def load(self) -> None:
        self.log.append(("load",))

    def offload(self) -> None:
        self.log.append(("offload",))

    def host_bytes(self) -> int:
        return self.host


def _job(client=None):
    client = client or GrantAtOnce()
    phases = VeRLPhases.for_job("v", client)
    log: list = []
    return phases, client, log, _Side("rollout", log, 0), _Side("train", log, 1000)


def _fit(phases: VeRLPhases, rollout, train, steps: int, validate_at: tuple[int, ...] = ()) -> None:
    """The calls of veRL's init_workers and fit (ray_trainer.py), the validation ones at `validate_at`."""
    phases.on_init_workers()
    phases.on_sleep()          # init_workers ends with checkpoint_manager.sleep_replicas()
    phases.attach(rollout, train)
    phases.on_update(0)        # fit: checkpoint_manager.update_weights(0) before the loop
    for step in range(1, steps + 1):
        phases.on_generate()   # gen: async_rollout_manager.generate_sequences(...)
        phases.on_sleep()      # then checkpoint_manager.sleep_replicas()
        phases.on_update(step)  # update_weights, after update_actor
        if step in validate_at:
            phases.on_generate()  # _validate: one generation per validation batch, no sleep between
            phases.on_generate()
    phases.finish()


def test_the_phases_and_moves_follow_verls_loop():
    phases, client, log, rollout, train = _job()
    _fit(phases, rollout, train, steps=2)
    assert [t.phase for t in client.released] == ["init", "rollout", "train", "sync", "rollout", "train", "sync"]
    # init ends with the trainer offloaded (the replicas are asleep already); each rollout wakes with the
    # weights veRL last asked to send (0, then 1) and sleeps at its end; each train phase loads and offloads
    assert log == [("offload",), ("wake", 0), ("sleep",), ("load",), ("offload",),
                   ("wake", 1), ("sleep",), ("load",), ("offload",)]
    assert client.released[0].host_bytes == {"rollout": 0, "train": 1000}


def test_validation_batches_share_one_rollout_phase_which_the_end_of_fit_closes():
    phases, client, log, rollout, train = _job()
    _fit(phases, rollout, train, steps=2, validate_at=(2,))
    assert [t.phase for t in client.released][-4:] == ["rollout", "train", "sync", "rollout"]
    assert log[-2:] == [("wake", 2), ("sleep",)]  # the validation wakes with step 2's weights, then sleeps
    assert phases.phase is None


def test_solo_every_call_is_verls_own():
    phases = VeRLPhases.for_job()  # no job id, no client, no rollmux run environment
    assert not phases.active
    phases.on_generate()
    assert phases.phase is None
    assert phases.on_update(0) is True and phases.on_sleep() is True and phases.on_update(1) is True


def test_a_failure_inside_a_phase_releases_it_with_the_error():
    phases, client, log, rollout, train = _job()
    phases.on_init_workers()
    phases.attach(rollout, train)
    phases.on_update(0)
    phases.on_generate()
    phases.finish(RuntimeError("generation failed"))
    assert [t.phase for t in client.released] == ["init", "rollout"]
    assert log[-1] == ("sleep",) and phases.phase is None


class _TailGrant(GrantAtOnce):
    def acquire(self, job_id, phase):
        return Grant(0, job_id, phase, "rollout" if phase == "rollout" else "train", (0,), 0.0, 0.0,
                     0.5 if phase == "rollout" else 0.0)


def test_a_permit_that_allows_tail_migration_is_told_once(caplog):
    phases, client, log, rollout, train = _job(_TailGrant())
    with caplog.at_level(logging.WARNING, logger="rollmux.adapters.verl"):
        _fit(phases, rollout, train, steps=2)
    assert [r.getMessage() for r in caplog.records].count(
        "v: the permit allows tail migration, which the veRL adapter does not offer; "
        "the job record should say `cannot: [tail_migration]`") == 1


def test_a_move_onto_other_machines_is_refused_and_one_without_them_is_counted():
    phases, *_ = _job()
    grant = Grant(0, "v", "rollout", "rollout", (0,), 0.0, 0.0, 0.0, epoch=1)
    phases.on_move(grant)
    assert phases.events[-1][:2] == ("move", "rollout")
    with pytest.raises(RuntimeError, match=r"cannot: \[move\]"):
        phases.on_move(Grant(0, "v", "rollout", "rollout", (0,), 0.0, 0.0, 0.0, epoch=2, node_ids=("n7",)))
