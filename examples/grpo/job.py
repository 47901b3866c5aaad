"""A small but real GRPO job whose phases a scheduler can run one at a time.

Phases (each an explicit method, each runnable in isolation):

* ``rollout(weights, iteration) -> RolloutBatch`` – the inference side samples
  ``group_size`` completions per prompt and scores them with the verifier;
* ``train(batch, iteration) -> dict`` – the trainer does the GRPO update
  (group-normalised advantages, clipped policy-gradient loss, Adam);
* ``sync() -> weights`` – the trainer's new weights are pushed to the rollout side.

Plus the suspend/resume hooks ``offload()`` / ``onload()`` (live state <-> host
copies; on CPU a move into plain dicts) and ``checkpoint(path)`` / ``restore(path)``
(cold start from disk).

Determinism: every random draw comes from an explicit ``torch.Generator`` seeded
from ``(seed, iteration)`` (or ``seed`` for the init), and every phase runs with a
fixed intra-op thread count, so a job's weights after N iterations are
bit-identical however its phases are suspended, checkpointed or interleaved with
other jobs' phases in the same process.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from typing import Iterator

import torch
import torch.nn.functional as F

from .model import EOS, build_policy, make_prompts, prompt_len, reward

Weights = dict[str, torch.Tensor]


@dataclass(frozen=True)
class GRPOConfig:
    seed: int = 0
    d_model: int = 32
    n_layers: int = 2
    n_heads: int = 2
    prompts_per_batch: int = 16
    group_size: int = 8          # G completions per prompt
    gen_len: int = 1             # generated tokens per completion (answer + EOS tail)
    difficulty: int = 1          # digits summed in a prompt (1 = echo the digit)
    lr: float = 1e-2
    ppo_epochs: int = 4          # optimizer steps per batch (ratio clipping kicks in when > 1)
    clip_eps: float = 0.2
    adv_eps: float = 1e-6
    format_bonus: float = 0.0
    threads: int = 1             # intra-op threads used inside every phase

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# Presets with different rollout/train time ratios:
#   medium: many long samples per prompt, 2 optimizer steps     -> rollout-heavy
#   small : 16 short samples per prompt, 2 optimizer steps     -> in between
#   large : wider/deeper model, few samples, 8 optimizer steps -> train-heavy
PRESETS: dict[str, dict] = {
    "small": dict(d_model=32, n_layers=2, n_heads=2, prompts_per_batch=16, group_size=16,
                  gen_len=1, ppo_epochs=2),
    "medium": dict(d_model=32, n_layers=2, n_heads=2, prompts_per_batch=16, group_size=32,
                   gen_len=12, ppo_epochs=2, format_bonus=0.1),
    "large": dict(d_model=96, n_layers=4, n_heads=4, prompts_per_batch=16, group_size=4,
                  gen_len=1, ppo_epochs=8, lr=3e-3),
}


def make_config(size: str = "small", seed: int = 0, **overrides) -> GRPOConfig:
    if size not in PRESETS:
        raise ValueError(f"unknown size {size!r}; choose from {sorted(PRESETS)}")
    return GRPOConfig(seed=seed, **{**PRESETS[size], **overrides})


@dataclass
class RolloutBatch:
    """What the rollout side hands to the trainer."""
    iteration: int
    group_size: int
    prompts: torch.Tensor        # (B, P) long
    answers: torch.Tensor        # (B,) long
    completions: torch.Tensor    # (B*G, L) long; rows b*G .. b*G+G-1 belong to prompt b
    rewards: torch.Tensor        # (B*G,) float32

    @property
    def mean_reward(self) -> float:
        return float(self.rewards.mean())


def _stream_seed(seed: int, iteration: int, stream: int) -> int:
    return (seed * 1_000_003 + iteration * 7_919 + stream * 104_729) % (2**63 - 1)


@contextlib.contextmanager
def _threads(n: int) -> Iterator[None]:
    """Run a phase with ``n`` intra-op threads.

    The setting is left in place afterwards: flipping the count back and forth
    makes torch rebuild its thread pool (tens of ms per switch), and every job in
    a process is expected to use the same count anyway.
    """
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    yield


def _sides(side: str) -> tuple[str, ...]:
    if side == "all":
        return ("trainer", "rollout")
    if side not in ("trainer", "rollout"):
        raise ValueError(f"side must be 'trainer', 'rollout' or 'all', not {side!r}")
    return (side,)


def _clone(sd: dict) -> dict:
    return {k: (v.detach().clone() if isinstance(v, torch.Tensor) else v) for k, v in sd.items()}


class GRPOJob:
    """One RL job: a trainer (policy + Adam) and a rollout side (policy copy)."""

    def __init__(self, config: GRPOConfig | None = None, **overrides):
        self.config = dataclasses.replace(config or GRPOConfig(), **overrides)
        c = self.config
        self.prompt_len = prompt_len(c.difficulty)
        self.max_len = self.prompt_len + c.gen_len
        self.iteration = 0                      # next iteration to train
        self._host: dict[str, dict] = {}        # offloaded state, by side
        self._shell: dict[str, tuple] = {}      # offloaded side's (module, optimizer) with no live tensors
        with _threads(c.threads):
            init = torch.Generator().manual_seed(_stream_seed(c.seed, -1, 0))
            self.model = build_policy(c.d_model, c.n_layers, c.n_heads, self.max_len, init)
            self.optimizer = self._new_optimizer(self.model)
            self.rollout_model = self._new_model()
            self.rollout_model.load_state_dict(self.model.state_dict())

    # ------------------------------------------------------------------ helpers
    def _new_model(self):
        c = self.config
        return build_policy(c.d_model, c.n_layers, c.n_heads, self.max_len)

    def _new_optimizer(self, model):
        return torch.optim.Adam(model.parameters(), lr=self.config.lr, foreach=False)

    def _require(self, side: str) -> None:
        if side in self._host:
            raise RuntimeError(f"{side} state is offloaded; call onload() first")

    @property
    def resident(self) -> dict[str, bool]:
        return {s: s not in self._host for s in ("trainer", "rollout")}

    # ------------------------------------------------------------------ phases
    @torch.no_grad()
    def rollout(self, weights: Weights | None = None, iteration: int | None = None) -> RolloutBatch:
        """Sample G completions per prompt from ``weights`` (default: the synced ones)."""
        self._require("rollout")
        c = self.config
        it = self.iteration if iteration is None else iteration
        with _threads(c.threads):
            if weights is not None:
                self.rollout_model.load_state_dict(weights)
            gen = torch.Generator().manual_seed(_stream_seed(c.seed, it, 1))
            prompts, answers = make_prompts(c.prompts_per_batch, c.difficulty, gen)
            seqs = prompts.repeat_interleave(c.group_size, dim=0)
            for _ in range(c.gen_len):
                probs = self.rollout_model(seqs)[:, -1].float().softmax(dim=-1)
                nxt = torch.multinomial(probs, 1, generator=gen)
                seqs = torch.cat([seqs, nxt], dim=1)
            completions = seqs[:, self.prompt_len:]
            rewards = reward(completions, answers.repeat_interleave(c.group_size), c.format_bonus)
        return RolloutBatch(it, c.group_size, prompts, answers, completions, rewards)

    def _logprobs(self, seqs: torch.Tensor) -> torch.Tensor:
        logits = self.model(seqs[:, :-1])[:, self.prompt_len - 1:]
        return torch.gather(F.log_softmax(logits, dim=-1), 2, seqs[:, self.prompt_len:, None])[..., 0]

    def train(self, batch: RolloutBatch, iteration: int | None = None) -> dict:
        """GRPO update on one rollout batch; returns metrics."""
        self._require("trainer")
        c = self.config
        it = batch.iteration if iteration is None else iteration
        with _threads(c.threads):
            g = batch.group_size
            r = batch.rewards.view(-1, g)
            adv = ((r - r.mean(dim=1, keepdim=True)) / (r.std(dim=1, keepdim=True) + c.adv_eps)).reshape(-1, 1)
            seqs = torch.cat([batch.prompts.repeat_interleave(g, dim=0), batch.completions], dim=1)
            mask = _until_eos(batch.completions)
            old = None
            loss_v = 0.0
            for _ in range(c.ppo_epochs):
                logp = self._logprobs(seqs)
                if old is None:  # the first step's weights are the behaviour policy's: no extra pass
                    old = logp.detach()
                ratio = torch.exp(logp - old)
                surr = torch.minimum(ratio * adv, ratio.clamp(1 - c.clip_eps, 1 + c.clip_eps) * adv)
                loss = -(surr * mask).sum() / mask.sum()
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                self.optimizer.step()
                loss_v = float(loss.detach())
        self.iteration = it + 1
        return {"iteration": it, "mean_reward": batch.mean_reward,
                "accuracy": float((batch.completions[:, 0] == batch.answers.repeat_interleave(g)).float().mean()),
                "loss": loss_v, "optimizer_steps": c.ppo_epochs}

    def sync(self) -> Weights:
        """Push the trainer's weights to the rollout side; returns the copy pushed."""
        self._require("trainer")
        with _threads(self.config.threads):
            weights = _clone(self.model.state_dict())
            if "rollout" in self._host:          # rollout side suspended: update its host copy
                self._host["rollout"] = {"model": _clone(weights)}
            else:
                self.rollout_model.load_state_dict(weights)
        return weights

    def weights(self) -> Weights:
        """Copy of the trainer's current weights (wherever they live)."""
        if "trainer" in self._host:
            return _clone(self._host["trainer"]["model"])
        return _clone(self.model.state_dict())

    # ------------------------------------------------------------------ suspend / resume
    def offload(self, side: str = "all") -> None:
        """Move live state into host copies and free every live tensor.

        The module objects stay alive as empty shells (like a real suspend keeps
        the process and its communicators), so onload is a copy, not a rebuild.
        """
        sides = _sides(side)
        with _threads(self.config.threads):
            for s in sides:
                if s in self._host:
                    continue
                model = self.model if s == "trainer" else self.rollout_model
                host = {"model": _clone(model.state_dict())}
                if s == "trainer":
                    host["optim"] = _clone_optim(self.optimizer.state_dict())
                    self.optimizer.state.clear()
                    self._shell[s] = (model, self.optimizer)
                    self.model = self.optimizer = None
                else:
                    self._shell[s] = (model, None)
                    self.rollout_model = None
                for t in (*model.parameters(), *model.buffers()):
                    t.data = _EMPTY  # drop the live storage; the shell keeps no elements
                self._host[s] = host

    def onload(self, side: str = "all") -> None:
        """Restore live state exactly from the host copies (which are released)."""
        sides = _sides(side)
        with _threads(self.config.threads):
            for s in sides:
                host = self._host.pop(s, None)
                if host is None:
                    continue
                model, optimizer = self._shell.pop(s, (None, None))
                if model is None:  # restored from a checkpoint: no shell yet
                    model = self._new_model()
                    optimizer = self._new_optimizer(model) if s == "trainer" else None
                tensors = dict(model.named_parameters())
                tensors.update(model.named_buffers())
                with torch.no_grad():
                    for name, t in tensors.items():
                        t.data = host["model"][name].clone()  # the host-to-device copy of a real job
                if s == "trainer":
                    optimizer.load_state_dict(host["optim"])
                    self.model, self.optimizer = model, optimizer
                else:
                    self.rollout_model = model

    # ------------------------------------------------------------------ cold start
    def checkpoint(self, path) -> None:
        """Everything needed to resume bit-exactly, saved with torch.save."""
        trainer = self._host.get("trainer") or {"model": self.model.state_dict(),
                                                "optim": self.optimizer.state_dict()}
        rollout = self._host.get("rollout") or {"model": self.rollout_model.state_dict()}
        torch.save({"config": self.config.to_dict(), "iteration": self.iteration,
                    "trainer": trainer, "rollout": rollout}, path)

    def restore(self, path) -> None:
        """Cold start: replace all state (live or offloaded) with a checkpoint's."""
        ck = torch.load(path, weights_only=True)
        if ck["config"] != self.config.to_dict():
            raise ValueError("checkpoint was written by a job with a different config")
        self.model = self.optimizer = self.rollout_model = None
        self._shell = {}
        self._host = {"trainer": ck["trainer"], "rollout": ck["rollout"]}
        self.iteration = ck["iteration"]
        self.onload()

    @classmethod
    def from_checkpoint(cls, path) -> "GRPOJob":
        ck = torch.load(path, weights_only=True)
        job = cls(GRPOConfig(**ck["config"]))
        job.restore(path)
        return job


_EMPTY = torch.empty(0)


def _until_eos(completions: torch.Tensor) -> torch.Tensor:
    """1.0 for each completion's tokens up to and including its first EOS, 0.0 after it:
    a completion ends at EOS, so what is sampled past it takes no part in the loss."""
    eos = (completions == EOS).int()
    before = eos.cumsum(dim=1) - eos  # EOS tokens strictly before each position
    return (before == 0).float()


def _clone_optim(sd: dict) -> dict:
    return {"state": {k: _clone(v) for k, v in sd["state"].items()},
            "param_groups": [dict(g, params=list(g["params"])) for g in sd["param_groups"]]}


def run_solo(job: GRPOJob, iterations: int) -> list[float]:
    """rollout -> train -> sync, ``iterations`` times; mean reward per iteration."""
    rewards = []
    weights = None
    for _ in range(iterations):
        batch = job.rollout(weights, job.iteration)
        rewards.append(job.train(batch, job.iteration)["mean_reward"])
        weights = job.sync()
    return rewards
