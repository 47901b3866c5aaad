"""The demo GRPO job (rollmux/jobs/grpo): learning, determinism, suspend/resume, presets."""

from __future__ import annotations

import statistics
import time

import pytest

torch = pytest.importorskip("torch")
from rollmux.jobs.grpo import GRPOJob, make_config, run_solo  # noqa: E402

N = 6  # iterations for the bit-identity tests


def assert_same_weights(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def solo_weights(size: str = "small", seed: int = 0, n: int = N) -> dict:
    job = GRPOJob(make_config(size, seed=seed))
    run_solo(job, n)
    return job.weights()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_reward_rises_over_30_iterations(seed):
    rewards = run_solo(GRPOJob(make_config("small", seed=seed)), 30)
    first, last = statistics.mean(rewards[:5]), statistics.mean(rewards[-5:])
    assert last > first + 0.25, (first, last)


def test_same_seed_gives_bit_identical_weights():
    assert_same_weights(solo_weights(seed=3), solo_weights(seed=3))


def test_different_seed_gives_different_weights():
    a, b = solo_weights(seed=0, n=2), solo_weights(seed=1, n=2)
    assert any(not torch.equal(a[k], b[k]) for k in a)


def test_offload_onload_between_every_phase_keeps_weights_bit_identical():
    job = GRPOJob(make_config("small", seed=0))
    for it in range(N):
        job.offload(); job.onload("rollout")
        batch = job.rollout(None, it)
        job.offload(); job.onload("trainer")
        job.train(batch, it)
        job.offload(); job.onload("trainer")
        job.sync()                       # rollout side still offloaded: updates its host copy
        job.offload(); job.onload()
    assert_same_weights(job.weights(), solo_weights())


def test_checkpoint_restore_mid_run_gives_bit_identical_weights(tmp_path):
    job = GRPOJob(make_config("small", seed=0))
    run_solo(job, N // 2)
    job.checkpoint(tmp_path / "ck.pt")
    del job
    cold = GRPOJob.from_checkpoint(tmp_path / "ck.pt")
    assert cold.iteration == N // 2
    run_solo(cold, N - N // 2)
    assert_same_weights(cold.weights(), solo_weights())


def test_restore_rejects_checkpoint_of_other_config(tmp_path):
    GRPOJob(make_config("small", seed=0)).checkpoint(tmp_path / "ck.pt")
    with pytest.raises(ValueError):
        GRPOJob(make_config("small", seed=1)).restore(tmp_path / "ck.pt")


def test_interleaved_phases_of_two_jobs_match_solo_runs():
    a, b = GRPOJob(make_config("small", seed=0)), GRPOJob(make_config("large", seed=5))
    with torch.random.fork_rng():
        for it in range(N):
            ba = a.rollout(None, it)
            torch.rand(7)                   # other code drawing from the global RNG is harmless
            bb = b.rollout(None, it)
            a.train(ba, it); b.train(bb, it)
            b.sync(); a.sync()
    assert_same_weights(a.weights(), solo_weights("small", 0))
    assert_same_weights(b.weights(), solo_weights("large", 5))


def phase_ratio(size: str, iters: int = 4) -> float:
    job = GRPOJob(make_config(size, seed=0))
    run_solo(job, 1)                       # warm-up
    ratios = []
    for _ in range(iters):
        t0 = time.perf_counter(); batch = job.rollout()
        t1 = time.perf_counter(); job.train(batch)
        t2 = time.perf_counter(); job.sync()
        ratios.append((t1 - t0) / (t2 - t1))
    return statistics.median(ratios)


def test_size_presets_have_ordered_rollout_train_ratios():
    r = {s: phase_ratio(s) for s in ("medium", "small", "large")}
    # measured ~1.5 / ~0.17 / ~0.04: rollout-heavy > in between > train-heavy
    assert r["medium"] > 3 * r["small"], r
    assert r["small"] > 1.5 * r["large"], r
    assert r["medium"] > 1.0 > r["large"] * 5, r


def test_offload_releases_all_live_model_tensors():
    job = GRPOJob(make_config("small", seed=0))
    run_solo(job, 1)
    modules = [job.model, job.rollout_model]
    optimizer = job.optimizer
    job.offload()
    assert job.model is None and job.optimizer is None and job.rollout_model is None
    # The module shells stay (a lightweight suspend) but hold no elements.
    assert sum(t.numel() for m in modules for t in (*m.parameters(), *m.buffers())) == 0
    assert len(optimizer.state) == 0
    assert job.resident == {"trainer": False, "rollout": False}
    with pytest.raises(RuntimeError):
        job.rollout()
    with pytest.raises(RuntimeError):
        job.sync()
    job.onload()
    assert job.resident == {"trainer": True, "rollout": True}


def test_heavy_preset_has_a_few_much_longer_responses():
    job = GRPOJob(make_config("heavy", seed=0))
    c = job.config
    for it in range(3):
        lengths = job.plan(it)[2]
        assert sorted(lengths) == [c.gen_len] * (c.prompts_per_batch - c.tail_prompts) + [c.gen_len + c.tail_len] * 2
        assert c.gen_len + c.tail_len >= 10 * c.gen_len


def test_a_heavy_tail_needs_per_response_seeds():
    with pytest.raises(ValueError, match="response_seeds"):
        make_config("medium", tail_len=5, tail_prompts=1)


def test_aborted_responses_recomputed_elsewhere_give_bit_identical_weights():
    """Responses aborted mid-way and recomputed on another worker copy, in another order: the
    batch and the weights are those of the solo run (per-response seeds)."""
    cfg = make_config("heavy", seed=4)
    trainer, workers = GRPOJob(cfg), [GRPOJob(cfg), GRPOJob(cfg)]
    n, aborted = cfg.prompts_per_batch, 0
    for it in range(3):
        parts = {}
        for b in reversed(range(n)):  # another order than the solo run's
            tokens = iter(range(10**6))
            part = workers[0].respond(it, b, abort=lambda: next(tokens) >= 3)  # stop after 3 tokens
            if part is None:  # the long ones: recomputed from scratch on the other worker
                aborted += 1
                part = workers[1].respond(it, b)
            parts[b] = part
        trainer.train(trainer.assemble(it, list(parts.values())), it)
        for w in workers:
            w.offload("rollout")  # a sync lands in the host copy of an offloaded worker
            w.set_rollout_weights(trainer.sync())
            w.onload("rollout")
    assert aborted == 3 * cfg.tail_prompts
    assert_same_weights(trainer.weights(), solo_weights("heavy", seed=4, n=3))


def test_assemble_refuses_a_missing_response():
    job = GRPOJob(make_config("heavy", seed=0))
    parts = [job.respond(0, b) for b in range(1, job.config.prompts_per_batch)]
    with pytest.raises(ValueError, match="one response per prompt"):
        job.assemble(0, parts)
