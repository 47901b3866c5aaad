"""The GRPO job as `rollmux profile` drives it (the `make_job` entry point, rollmux/harness/profile.py).

    rollmux profile rollmux.jobs.grpo --preset small -o job.yaml
"""

from __future__ import annotations

from typing import Any

from rollmux.shim import tensor_bytes

from .job import GRPOJob, RolloutBatch, make_config

SIDE = {"rollout": "rollout", "train": "trainer"}  # a pool's side of the job


class ProfiledGRPO:
    """A GRPO job's phases and hooks in the profiler's terms (pools, not sides)."""

    def __init__(self, job: GRPOJob) -> None:
        self.job = job

    def rollout(self, max_length: bool = False) -> RolloutBatch:
        """One rollout. Every completion samples all its tokens (what follows EOS is masked out of
        the loss, not skipped); with a heavy tail (some prompts' responses longer), `max_length`
        makes every response as long as the longest."""
        job = self.job
        if not (max_length and getattr(job.config, "tail_prompts", 0) and hasattr(job, "plan")):
            return job.rollout(None, job.iteration)
        plan = job.plan

        def longest(iteration: int):
            prompts, answers, lengths = plan(iteration)
            return prompts, answers, [max(lengths)] * len(lengths)
        job.plan = longest  # the responses read their lengths from the plan
        try:
            return job.rollout(None, job.iteration)
        finally:
            del job.plan

    def train(self, batch: RolloutBatch) -> dict:
        """One GRPO update on the batch."""
        return self.job.train(batch, self.job.iteration)

    def sync(self) -> None:
        """The trainer's weights to the rollout side, wherever each side's state lives (the
        shim's Sync phase runs between offloads: no hooks)."""
        job = self.job
        if job.resident["trainer"]:
            job.sync()
            return
        weights = job.weights()  # a copy of the trainer's host-resident weights
        if job.resident["rollout"]:
            job.rollout_model.load_state_dict(weights)
        else:
            job._host["rollout"] = {"model": weights}

    def onload(self, pool: str) -> None:
        """The pool's side back from host memory."""
        self.job.onload(SIDE[pool])

    def offload(self, pool: str) -> None:
        """The pool's side to host memory."""
        self.job.offload(SIDE[pool])

    def host_bytes(self) -> dict[str, int]:
        """Bytes of the host copies each side holds while offloaded (model, and the trainer's
        Adam state): the host memory the job's state takes on a node of each pool."""
        held = self.job._host
        return {pool: tensor_bytes(held.get(side, {})) for pool, side in SIDE.items()}


def make_job(preset: str | None = None, **overrides: Any) -> ProfiledGRPO:
    """The profiler's entry point: a GRPO job of `preset` (default small) with config overrides."""
    return ProfiledGRPO(GRPOJob(make_config(preset or "small", **overrides)))
