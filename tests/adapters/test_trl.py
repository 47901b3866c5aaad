"""The drop-in TRL trainer: TRL's real GRPOTrainer under the shim, multiplexed with a GRPO-example job,
against the same job alone and against TRL itself (examples/trl_grpo.py's model, data and reward)."""

from __future__ import annotations

import math
import os
import threading
import time

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded: the model and tokenizer are built here
pytest.importorskip("trl")
torch = pytest.importorskip("torch")

import trl  # noqa: E402
from factories import intra, make_group, make_job  # noqa: E402
from transformers import TrainerCallback  # noqa: E402
from trl_support import ITERATIONS, Granting, folder, logged, same, trainer, weights  # noqa: E402, F401

from rollmux.adapters.trl import ENVIRONMENT, GRPOTrainer, RollMuxSide  # noqa: E402
from rollmux.core.env import WallClockEnvironment  # noqa: E402
from rollmux.core.group_controller import Grant, GroupController  # noqa: E402
from rollmux.jobs.grpo import GRPOJob, make_config  # noqa: E402
from rollmux.shim import JobShim, LocalPermitClient  # noqa: E402

SLOTS = 2  # tail_worker_frac 0.5: two worker slots per rollout node, a migrated tail keeps one


class _Probe(TrainerCallback):
    """Where the trainer's and the generator copies' state lives right before each optimizer step."""

    def __init__(self) -> None:
        self.trainer = None
        self.in_train: list[tuple[bool, list[bool]]] = []

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self.in_train.append(where(self.trainer.rollmux))


def where(side: RollMuxSide) -> tuple[bool, list[bool]]:
    """Measured on the tensors: the trainer's, and each generator copy's."""
    return side.train_state[0].resident, [c.resident for c in side.engine.copies]


def straggle(t, in_rollout: list) -> None:
    """Slot 1 holds its unit until the tail migration stops it: every rollout aborts and recomputes one."""
    engine = t.rollmux.engine
    respond = engine.respond

    def probed(slot, step, unit, prompt_ids, stop):
        in_rollout.append(where(t.rollmux))
        if slot == 1:
            assert stop.wait(30), "the tail migration never stopped slot 1"
        return respond(slot, step, unit, prompt_ids, stop)
    engine.respond = probed


def _grpo_example(shim: JobShim, log: list, lock: threading.Lock) -> None:
    """The GRPO example job's loop under its shim; its phase intervals (with slots) go to `log`."""
    job = GRPOJob(make_config("small", seed=5))
    w = None
    for it in range(ITERATIONS):
        with shim.phase("rollout") as g:
            t = time.perf_counter()
            batch = job.rollout(w, it)
            with lock:
                log.append(("rollout", g.slots(0), t, time.perf_counter()))
        with shim.phase("train"):
            t = time.perf_counter()
            job.train(batch, it)
            with lock:
                log.append(("train", (0,), t, time.perf_counter()))
        with shim.phase("sync"):
            w = job.sync()


def _local(jobs: list[str]) -> tuple[WallClockEnvironment, LocalPermitClient]:
    """A running local group controller for `jobs` on one rollout and one training node, tails migrating."""
    env = WallClockEnvironment()
    group = make_group([(make_job(j, tail_frac=0.3), (0,)) for j in jobs], 1)
    ctl = GroupController(env, group, intra(warm_switch_s=0.0, tail_worker_frac=1 / SLOTS))
    threading.Thread(target=env.serve, daemon=True).start()
    return env, LocalPermitClient(env, {j: ctl for j in jobs})


@pytest.fixture(scope="module")
def runs(folder):
    """The trainer multiplexed with a GRPO-example job, then alone under RollMux, then outside RollMux
    beside trl.GRPOTrainer itself."""
    out: dict = {"log": [], "in_rollout": []}
    env, client = _local(["a", "b"])
    probe = _Probe()
    try:
        mux = probe.trainer = trainer(folder, rollmux_job_id="a", rollmux_client=client, rollmux_tail_threshold=0.5,
                                      callbacks=[probe])
        straggle(mux, out["in_rollout"])
        b = threading.Thread(target=_grpo_example, args=(JobShim("b", client), out["log"], threading.Lock()))
        b.start()
        mux.train()
        b.join(120)
        assert not b.is_alive(), "the GRPO-example job did not finish"
    finally:
        env.stop()
    env, client = _local(["a"])
    try:
        solo = trainer(folder, rollmux_job_id="a", rollmux_client=client)
        solo.train()
    finally:
        env.stop()
    plain = trainer(folder)  # each built right before it trains, as a script does (TRL seeds in both)
    plain.train()
    theirs = trainer(folder, cls=trl.GRPOTrainer)
    theirs.train()
    out.update(mux=mux, solo=solo, plain=plain, theirs=theirs, probe=probe)
    return out


def test_multiplexed_weights_are_bit_identical_to_the_job_alone_under_rollmux(runs):
    mux, solo = runs["mux"], runs["solo"]
    assert same(weights(mux), weights(solo))
    assert logged(mux, "reward") == logged(solo, "reward") and logged(mux, "loss") == logged(solo, "loss")


def test_outside_rollmux_it_is_trl_itself(runs):
    plain, theirs = runs["plain"], runs["theirs"]
    assert plain.rollmux is None and plain.rollout_func is None  # no shim, no client, TRL's own generation
    assert same(weights(plain), weights(theirs))
    assert logged(plain, "reward") == logged(theirs, "reward")
    assert not same(weights(plain), weights(runs["mux"]))  # under RollMux the generator copies sample


def test_every_tail_migrated_and_its_aborted_unit_was_recomputed(runs):
    side = runs["mux"].rollmux
    assert side.shim.migrations == ITERATIONS and side.engine.aborted == ITERATIONS
    assert len(side.engine.copies) == SLOTS  # one generator copy per worker slot the permit names


def test_every_iteration_ran_its_phases_and_the_reward_moves(runs):
    side, rewards = runs["mux"].rollmux, logged(runs["mux"], "reward")
    phases = [h.phase for h in side.shim.history]
    assert phases == ["init"] + ["rollout", "train", "sync"] * ITERATIONS
    assert side.iterations == ITERATIONS and side.finished and len(side.sync_s) == ITERATIONS
    assert len(rewards) == ITERATIONS and all(math.isfinite(x) for x in rewards + logged(runs["mux"], "loss"))
    assert rewards[-1] > rewards[0]  # the policy learns to say the target letter


def test_state_is_off_the_device_outside_its_phase(runs):
    # rollout: the trainer's tensors are empty, the running generator copies resident
    assert runs["in_rollout"] and all(not t and any(g) for t, g in runs["in_rollout"])
    # train: the trainer resident, every generator copy offloaded; after train() the trainer is back
    assert len(runs["probe"].in_train) == ITERATIONS and all(t and not any(g) for t, g in runs["probe"].in_train)
    assert where(runs["mux"].rollmux) == (True, [False] * SLOTS)


def test_the_host_memory_hook_reports_the_offloaded_bytes(runs):
    model = runs["plain"].model
    params = sum(p.nbytes for p in model.parameters())
    state = params + sum(b.nbytes for b in model.buffers())
    history = runs["mux"].rollmux.shim.history
    assert history[0].host_bytes == {"rollout": SLOTS * state, "train": state}  # built, then offloaded
    assert all(h.host_bytes["rollout"] == SLOTS * state for h in history if h.phase == "rollout")
    # model + AdamW's two moments (and step counters): the optimizer state moved too
    assert all(h.host_bytes["train"] >= state + 2 * params for h in history if h.phase == "train")


def test_the_two_jobs_never_shared_a_worker_slot(runs):
    side = runs["mux"].rollmux
    a = [("rollout", slots, s, e) for slots, _, s, e in side.engine.segments]
    a += [("train", (0,), s, e) for s, e in side.train_intervals]
    b = runs["log"]
    assert len(a) >= 2 * ITERATIONS and len([r for r in b if r[0] == "train"]) == ITERATIONS
    for pa, sa, s1, e1 in a:
        for pb, sb, s2, e2 in b:
            if pa == pb and set(sa) & set(sb):
                assert e1 <= s2 or e2 <= s1, f"a {pa} {sa} [{s1}, {e1}] overlaps b {pb} {sb} [{s2}, {e2}]"


def test_accumulation_several_steps_per_generation_and_a_reference_model_run_a_phase_per_generation(folder):
    # 2 generations of 2 optimizer steps, each of 2 micro-steps: the batch is scored (with the reference
    # model's log-probs) and trained on inside the train phase
    client = Granting(units=3)
    t = trainer(folder, steps=4, rollmux_job_id="a", rollmux_client=client, config=dict(
        gradient_accumulation_steps=2, steps_per_generation=2, num_iterations=2, beta=0.1,
        per_device_train_batch_size=8))
    t.train()
    assert client.acquired == ["init"] + ["rollout", "train", "sync"] * 2
    assert t.rollmux.iterations == 2 and len(t.rollmux.engine.copies) == 3
    assert len(t.rollmux.train_state) == 2 and t.ref_model is t.rollmux.train_state[1].module  # moved with train
    assert t.state.global_step == 4 and all(math.isfinite(x) for x in logged(t, "kl"))


def test_a_peft_config_goes_to_trl_and_the_adapters_state_moves_with_the_train_pool(folder):
    from peft import LoraConfig
    client = Granting()
    t = trainer(folder, steps=2, rollmux_job_id="a", rollmux_client=client,
                peft_config=LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    t.train()
    assert client.acquired == ["init"] + ["rollout", "train", "sync"] * 2
    state = sum(x.nbytes for x in [*t.model.parameters(), *t.model.buffers()])
    lora = sum(x.nbytes for x in t.model.parameters() if x.requires_grad)
    assert 0 < lora < state / 10  # the trainable LoRA weights only have AdamW moments
    trains = [r.host_bytes["train"] for r in client.released if r.phase == "train"]
    assert len(trains) == 2 and all(state + 2 * lora <= b < state + 3 * lora for b in trains)  # (+ step counters)


class _FailSecondStep(TrainerCallback):
    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        if state.global_step == 1:
            raise RuntimeError("optimizer blew up")


def test_a_failing_step_releases_its_permit_and_the_error_propagates(folder):
    client = Granting()
    t = trainer(folder, steps=3, rollmux_job_id="a", rollmux_client=client, callbacks=[_FailSecondStep()])
    with pytest.raises(RuntimeError, match="optimizer blew up"):
        t.train()
    assert client.acquired == [r.phase for r in client.released] == [
        "init", "rollout", "train", "sync", "rollout", "train"]
    assert not t.rollmux.finished


@pytest.mark.parametrize("setting,words", [
    (dict(gradient_accumulation_steps=2, steps_per_generation=1), "steps_per_generation x num_iterations (1 x 1)"),
    (dict(eval_strategy="steps", eval_steps=1), "eval_strategy='steps'"),
    (dict(use_vllm=True, vllm_mode="server"), "vllm_mode='server'"),
    (dict(use_vllm=True, vllm_mode="colocate"), "vllm_enable_sleep_mode=False"),
    (dict(use_transformers_continuous_batching=True), "use_transformers_continuous_batching=True"),
])
def test_a_setting_the_adapter_cannot_honour_is_refused_in_one_line_naming_it(folder, setting, words):
    client = Granting()
    with pytest.raises(ValueError, match="rollmux GRPOTrainer") as exc:
        trainer(folder, rollmux_job_id="a", rollmux_client=client, config=setting)
    assert words in str(exc.value) and "\n" not in str(exc.value)
    assert client.acquired == []  # refused before it asked for anything


def test_a_permit_naming_several_rollout_nodes_is_refused_naming_both_counts():
    grant = Grant(0, "a", "init", "rollout", (0, 1), 0.0, 0.0, 0.0, units=4)
    with pytest.raises(ValueError, match="names 2 rollout nodes, but one trainer process generates on 1"):
        RollMuxSide._one_node(grant)


def test_half_of_rollout_runs_environment_is_named(folder, monkeypatch):
    for name in ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ROLLMUX_URL", "http://127.0.0.1:9")
    with pytest.raises(RuntimeError, match="ROLLMUX_JOB_ID, ROLLMUX_TOKEN_FILE not set"):
        trainer(folder)
