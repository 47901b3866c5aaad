"""The quick-start job: a tiny RL job (CPU only, pure Python, seconds) under RollMux.

It learns which of ten answers is right (answer 7) with a policy gradient, and marks its
phases the way any job does (docs/job-protocol.md):

- `rollmux.init(job=job)` once: the job's context from the environment `rollmux run` sets
  (service URL, job id, token file), and its hooks from the job object's methods;
- `with rollmux.phase("init")` once, then `rollout`, `train` and `sync` every iteration:
  each blocks until the scheduler grants the phase;
- `onload(pool)` / `offload(pool)`: the shim moves a pool's state ("rollout" or "train")
  between the device and host memory around its phases; `host_bytes()` says what the
  offloaded state holds;
- `rollmux.progress(done, total)` inside the rollout (past 80% a long tail may migrate).

Run it against a scheduler (docs/tutorial.md):

    rollmux run examples/quickstart_job.yaml --local -- python examples/quickstart_job.py

The same object is what `rollmux profile examples.quickstart_job` measures (`make_job`).
"""

from __future__ import annotations

import argparse
import math
import random

import rollmux

ANSWERS, RIGHT = 10, 7


class QuickstartJob:
    """A softmax policy over ten answers: the rollout side samples, the trainer updates."""

    def __init__(self, prompts: int = 64, seed: int = 0, lr: float = 0.5) -> None:
        self.prompts, self.lr = prompts, lr
        self.rng = random.Random(seed)
        self.device: dict[str, dict] = {}  # live state per pool (what a real job keeps on its GPUs)
        self.host: dict[str, dict] = {}    # offloaded state per pool (host memory)
        self.rewards: list[float] = []

    # -- the phases' work
    def init(self) -> None:
        """Build both pools' state (inside the init phase; the shim offloads both at its end)."""
        self.device = {"rollout": {"logits": [0.0] * ANSWERS},
                       "train": {"logits": [0.0] * ANSWERS, "momentum": [0.0] * ANSWERS}}

    def rollout(self, max_length: bool = False) -> list[tuple[int, float]]:
        """Sample one answer per prompt; report progress as the responses finish."""
        probs = _softmax(self.device["rollout"]["logits"])
        batch = []
        for done in range(1, self.prompts + 1):
            answer = self.rng.choices(range(ANSWERS), probs)[0]
            batch.append((answer, 1.0 if answer == RIGHT else 0.0))
            rollmux.progress(done, self.prompts)
        return batch

    def train(self, batch: list[tuple[int, float]]) -> float:
        """One policy-gradient step (with a mean-reward baseline and momentum); the mean reward."""
        state = self.device["train"]
        probs = _softmax(state["logits"])
        mean = sum(r for _, r in batch) / len(batch)
        grad = [0.0] * ANSWERS
        for answer, reward in batch:
            for a in range(ANSWERS):
                grad[a] += (reward - mean) * ((a == answer) - probs[a]) / len(batch)
        for a in range(ANSWERS):
            state["momentum"][a] = 0.9 * state["momentum"][a] + grad[a]
            state["logits"][a] += self.lr * 10 * state["momentum"][a]
        self.rewards.append(mean)
        return mean

    def sync(self) -> None:
        """The trainer's weights to the rollout side's copy (both are in host memory during sync)."""
        trained = (self.device.get("train") or self.host["train"])["logits"]
        (self.device.get("rollout") or self.host["rollout"])["logits"] = list(trained)

    # -- the shim's hooks: every one takes a pool, "rollout" or "train"
    def onload(self, pool: str) -> None:
        """The pool's state back from host memory."""
        self.device[pool] = self.host.pop(pool)

    def offload(self, pool: str) -> None:
        """The pool's state to host memory."""
        self.host[pool] = self.device.pop(pool)

    def host_bytes(self) -> dict[str, int]:
        """Bytes the offloaded state holds, per pool (8 per number)."""
        return {pool: 8 * sum(len(v) for v in state.values()) for pool, state in self.host.items()}


def _softmax(logits: list[float]) -> list[float]:
    top = max(logits)
    exp = [math.exp(x - top) for x in logits]
    return [e / sum(exp) for e in exp]


def make_job(preset: str | None = None, **options) -> QuickstartJob:
    """`rollmux profile examples.quickstart_job`'s entry point: the same job object."""
    if preset is not None:
        raise ValueError(f"no presets (got {preset!r}); use --set prompts=N, seed=N, lr=X")
    return QuickstartJob(**options)


def main(argv: list[str] | None = None) -> int:
    """init, then `--iterations` of rollout, train and sync, each phase under the scheduler's permit."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    job = QuickstartJob(seed=args.seed)
    shim = rollmux.init(job=job)  # the environment `rollmux run` set; the hooks are job's methods
    with rollmux.phase("init"):
        job.init()
    for it in range(1, args.iterations + 1):
        with rollmux.phase("rollout"):
            batch = job.rollout()
        with rollmux.phase("train"):
            reward = job.train(batch)
        with rollmux.phase("sync"):
            job.sync()
        print(f"quickstart: iteration {it}/{args.iterations}, mean reward {reward:.2f}", flush=True)
    shim.client.finish(shim.job_id)
    print(f"quickstart: finished {args.iterations} iterations as {shim.job_id}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
