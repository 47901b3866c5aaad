"""The TRL adapter: TRL's real GRPOTrainer under the shim, multiplexed with a GRPO-example job."""

from __future__ import annotations

import math
import os
import threading
import time

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded: the model and tokenizer are built here
pytest.importorskip("trl")
torch = pytest.importorskip("torch")

from factories import intra, make_group, make_job  # noqa: E402
from transformers import TrainerCallback  # noqa: E402

from rollmux.adapters.trl import TRLJob, TRLJobConfig, build_model, build_tokenizer  # noqa: E402
from rollmux.core.env import WallClockEnvironment  # noqa: E402
from rollmux.core.group_controller import GroupController  # noqa: E402
from rollmux.jobs.grpo import GRPOJob, make_config  # noqa: E402
from rollmux.shim import JobShim, LocalPermitClient  # noqa: E402

ITERATIONS = 4
CFG = TRLJobConfig(seed=0)


class _ProbedJob(TRLJob):
    """The TRL job with probes: where its state lives inside each phase, and a straggler on slot 1
    that waits until the tail migration stops it (so every rollout aborts and recomputes a unit)."""

    def __init__(self, cfg: TRLJobConfig) -> None:
        super().__init__(cfg)
        self.in_rollout: list[tuple[bool, list[bool]]] = []  # (trainer resident, each generator copy resident)
        self.in_train: list[tuple[bool, list[bool]]] = []

    def where(self) -> tuple[bool, list[bool]]:
        """Measured on the tensors: the trainer's, and each generator copy's."""
        return self.state.resident, [c.resident for c in self.engine.copies]

    def _build(self, iterations: int, callbacks: list) -> None:
        super()._build(iterations, callbacks)
        respond = self.engine.respond

        def probed(slot, step, unit, prompt_ids, stop):
            self.in_rollout.append(self.where())
            if slot == 1:
                assert stop.wait(30), "the tail migration never stopped slot 1"
            return respond(slot, step, unit, prompt_ids, stop)
        self.engine.respond = probed


class _TrainProbe(TrainerCallback):
    def __init__(self, job: _ProbedJob) -> None:
        self.job = job

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self.job.in_train.append(self.job.where())


def _grpo_example(shim: JobShim, iterations: int, log: list, lock: threading.Lock) -> None:
    """The GRPO example job's loop under its shim; its phase intervals (with slots) go to `log`."""
    job = GRPOJob(make_config("small", seed=5))
    weights = None
    for it in range(iterations):
        with shim.phase("rollout") as g:
            t = time.perf_counter()
            batch = job.rollout(weights, it)
            with lock:
                log.append(("b", "rollout", g.slots(0), t, time.perf_counter()))
        with shim.phase("train"):
            t = time.perf_counter()
            job.train(batch, it)
            with lock:
                log.append(("b", "train", (0,), t, time.perf_counter()))
        with shim.phase("sync"):
            weights = job.sync()


@pytest.fixture(scope="module")
def runs():
    """The TRL job multiplexed with a GRPO-example job (one rollout node, one training node, tail
    migration on), then the same TRL job solo."""
    env = WallClockEnvironment()
    group = make_group([(make_job("a", tail_frac=0.3), (0,)), (make_job("b", tail_frac=0.3), (0,))], 1)
    ctl = GroupController(env, group, intra(warm_switch_s=0.0, tail_worker_frac=0.5))
    client = LocalPermitClient(env, {"a": ctl, "b": ctl})
    threading.Thread(target=env.serve, daemon=True).start()
    job = _ProbedJob(CFG)
    shim = job.attach("a", client, tail_threshold=0.5)
    log: list = []
    lock = threading.Lock()
    out: dict = {}
    b = threading.Thread(target=_grpo_example, args=(JobShim("b", client), ITERATIONS, log, lock))
    try:
        b.start()
        out["mux"] = job.run(ITERATIONS, callbacks=[_TrainProbe(job)])
        b.join(120)
        assert not b.is_alive(), "the GRPO-example job did not finish"
    finally:
        env.stop()
    out.update(job=job, shim=shim, log=log, solo=TRLJob(CFG).run(ITERATIONS))
    return out


def _same(w1: dict, w2: dict) -> bool:
    return set(w1) == set(w2) and all(torch.equal(w1[k], w2[k]) for k in w1)


def test_multiplexed_weights_are_bit_identical_to_the_solo_run(runs):
    mux, solo = runs["mux"], runs["solo"]
    assert _same(mux.weights, solo.weights)
    assert mux.rewards == solo.rewards and mux.losses == solo.losses


def test_every_tail_migrated_and_its_aborted_unit_was_recomputed(runs):
    # Slot 1 holds its unit until the tail stops it: one unit aborted and recomputed per rollout.
    assert runs["shim"].migrations == ITERATIONS
    assert runs["mux"].aborted == ITERATIONS


def test_rewards_and_losses_are_recorded_finite_and_the_reward_moves(runs):
    mux = runs["mux"]
    assert len(mux.rewards) == len(mux.losses) == ITERATIONS
    assert all(math.isfinite(x) for x in mux.rewards + mux.losses)
    assert mux.rewards[-1] > mux.rewards[0]  # the policy learns to say the target letter
    assert len(mux.sync_s) == ITERATIONS  # one weight sync (rollmux.weightsync) per step


def test_state_is_off_the_device_outside_its_phase(runs):
    job = runs["job"]
    # rollout: the trainer's tensors are empty; the generator copies that run are resident
    assert job.in_rollout and all(not trainer and any(gens) for trainer, gens in job.in_rollout)
    # train: the trainer is resident, every generator copy offloaded
    assert len(job.in_train) == ITERATIONS
    assert all(trainer and not any(gens) for trainer, gens in job.in_train)


def test_the_host_memory_hook_reports_the_offloaded_bytes(runs):
    model = build_model(CFG, build_tokenizer())
    params = sum(p.nbytes for p in model.parameters())
    state = params + sum(b.nbytes for b in model.buffers())
    history = runs["shim"].history
    rollouts = [t.host_bytes for t in history if t.phase == "rollout"]
    trains = [t.host_bytes for t in history if t.phase == "train"]
    assert [t.phase for t in history[:2]] == ["init", "rollout"]
    assert history[0].host_bytes == {"rollout": CFG.slots * state, "train": state}  # built, then offloaded
    assert all(h["rollout"] == CFG.slots * state for h in rollouts)  # every generator copy back in host memory
    # model + AdamW's two moments (and step counters): the optimizer state moved too
    assert all(h["train"] >= state + 2 * params for h in trains)


def test_the_two_jobs_never_shared_a_worker_slot(runs):
    job, log = runs["job"], runs["log"]
    a = [("a", "rollout", slots, s, e) for slots, _, s, e in job.engine.segments]
    a += [("a", "train", (0,), s, e) for _, s, e in job.train_intervals]
    b = [r for r in log if r[0] == "b"]
    assert len([r for r in b if r[1] == "train"]) == ITERATIONS
    for _, pa, sa, s1, e1 in a:
        for _, pb, sb, s2, e2 in b:
            if (pa == "train") == (pb == "train") and set(sa) & set(sb):
                assert e1 <= s2 or e2 <= s1, f"a {pa} {sa} [{s1}, {e1}] overlaps b {pb} {sb} [{s2}, {e2}]"


def test_a_different_seed_gives_different_weights(runs):
    other = TRLJob(TRLJobConfig(seed=1)).run(ITERATIONS)
    assert not _same(other.weights, runs["solo"].weights)


def test_a_bad_config_names_the_field():
    with pytest.raises(ValueError, match="num_generations"):
        TRLJobConfig(num_generations=1)
    with pytest.raises(ValueError, match="iterations"):
        TRLJob().run(0)


class _Granting:
    """A permit client that grants every phase at once and records what was asked and released."""

    def __init__(self) -> None:
        self.acquired: list[str] = []
        self.released: list[str] = []

    def acquire(self, job_id, phase):
        from rollmux.core.group_controller import Grant
        self.acquired.append(phase)
        return Grant(0, job_id, phase, "rollout" if phase == "rollout" else "train", (0,), 0.0, 0.0, 0.0, units=2)

    def tail_started(self, job_id):
        pass

    def release(self, timings):
        self.released.append(timings.phase)


class _FailSecondStep(TrainerCallback):
    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        if state.global_step == 1:
            raise RuntimeError("optimizer blew up")


def test_a_failing_step_releases_its_permit_and_the_error_propagates():
    client = _Granting()
    job = TRLJob(CFG)
    job.attach("a", client)
    with pytest.raises(RuntimeError, match="optimizer blew up"):
        job.run(3, callbacks=[_FailSecondStep()])
    assert client.acquired == client.released == ["init", "rollout", "train", "sync", "rollout", "train"]
