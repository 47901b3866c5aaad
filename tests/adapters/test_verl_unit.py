"""The veRL adapter's parts that need no Ray: VeRLPhases (rollmux/adapters/verl/phases.py) on the calls veRL's
RayPPOTrainer.fit makes, in its order, with a real JobShim on a permit client that grants at once and sides
that record their moves; the installed veRL's source the forced sleep relies on; the documentation's job
record; the GPU script's permits."""

from __future__ import annotations

import ast
import importlib.util
import logging
from pathlib import Path

import pytest
from factories import GrantAtOnce
from verl_job import doc_blocks, gpu_script

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


def _branches(source: str, cls: str, method: str) -> dict[str, str]:
    """Each `if`/`elif` test of `cls.method` in `source`, with its body's source."""
    klass = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef) and n.name == cls)
    fn = next(f for f in klass.body if isinstance(f, ast.AsyncFunctionDef) and f.name == method)
    return {ast.unparse(n.test): "\n".join(ast.unparse(b) for b in n.body) for n in ast.walk(fn) if isinstance(n, ast.If)}


def test_verls_vllm_server_sleeps_colocated_replicas_keeping_weights_and_skips_standalone_ones():
    # The seam the forced sleep relies on, read from the installed veRL (importing vLLM needs its GPU build).
    root = Path(importlib.util.find_spec("verl").submodule_search_locations[0])
    source = (root / "workers/rollout/vllm_rollout/vllm_async_server.py").read_text()
    sleep, wake = (_branches(source, "vLLMHttpServer", m) for m in ("sleep", "wake_up"))
    assert sleep["self.rollout_mode == RolloutMode.COLOCATED"] == "await self.engine.sleep(level=1)"
    assert sleep["self.rollout_mode == RolloutMode.STANDALONE"] == "logger.info('skip sleep in standalone mode')"
    assert "self.engine.wake_up(tags=self._get_wake_up_tags())" in wake["self.rollout_mode == RolloutMode.COLOCATED"]
    assert wake["self.rollout_mode == RolloutMode.STANDALONE"] == "logger.info('skip wake_up in standalone mode')"



def test_the_docs_job_record_is_valid_and_declines_what_the_adapter_cannot_do():
    import yaml

    from rollmux.core.spec import JobSpec
    from rollmux.core.vocabulary import Mode

    (record,) = doc_blocks("yaml")
    job = JobSpec.model_validate(yaml.safe_load(record))
    assert job.cannot == (Mode.MOVE, Mode.TAIL_MIGRATION) and job.measure  # no phase times: measured as it runs


def test_the_gpu_scripts_permits_come_from_a_one_member_group():
    client, env = gpu_script().permits()
    try:
        grant = client.acquire("verl-gpu", "init")
        assert grant.phase == "init" and grant.tail_share == 0
    finally:
        env.stop()
