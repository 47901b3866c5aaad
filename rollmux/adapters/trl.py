"""TRL's GRPOTrainer under the RollMux shim: a thin subclass plus a callback (docs/adapters.md).

The real library runs: TRL 1.16's `GRPOTrainer` (its prompt batching, reward and advantage code,
GRPO loss) inside transformers' `Trainer` loop (backward, AdamW step, scheduler). The adapter only
marks where each phase starts and ends and owns the generator side:

- rollout: `_generate_and_score_completions` runs inside the `rollout` phase. Generation goes
  through TRL's `rollout_func` seam to `Engine`: one generator copy of the policy per worker slot
  of the permit, each prompt's group of `num_generations` completions one unit, sampled by
  transformers' `generate` with its own seed (job seed, step, prompt). Units finishing report
  `progress`; on a tail migration (`on_tail`) the units on the slots given up stop at their next
  token and are recomputed on the kept slots, to the same tokens.
- train: from the end of `_prepare_inputs` (the batch is scored) to `on_step_end` (TRL's loss,
  backward, the optimizer and scheduler steps, zero_grad all done).
- sync: the trainer's state dict goes to every generator copy through `rollmux.weightsync`
  (training rank 0, one rollout rank per slot, Gloo on an in-process store), into the host copy
  of a generator that is offloaded.
- init: the trainer, the generator copies and the sync group are built, then offloaded.

Onload/offload (`rollmux.adapters.state.Offloadable`): parameters, buffers and (trainer) AdamW
state move to host copies (`.data` is swapped for an empty tensor; host copies are pinned when CUDA
is there) and back; `host_memory` reports their bytes per pool. The tiny model, tokenizer, prompts
and reward are in `trl_tiny`.

Determinism: the model is initialised from the seed, TRL's sampler is seeded, every unit has its
own generator and every phase uses the same intra-op thread count, so the same seed gives
bit-identical weights solo or multiplexed. TRL's loop also draws from the process's global torch
RNG (its set_seed, its batch shuffle): run one TRL job per process.
"""

from __future__ import annotations

import copy
import logging
import tempfile
import threading
import time
import warnings
from collections import deque
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

from rollmux.errors import extra_for

try:
    import torch
    from transformers import (
        GenerationConfig,
        LogitsProcessor,
        LogitsProcessorList,
        PreTrainedTokenizerFast,
        StoppingCriteria,
        StoppingCriteriaList,
        TrainerCallback,
    )
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from rollmux.adapters.state import Offloadable, WeightSync
    from rollmux.adapters.trl_tiny import (
        TARGET,
        TRLJobConfig,
        build_dataset,
        build_model,
        build_tokenizer,
        target_reward,
    )
except ModuleNotFoundError as _missing:  # the extra is not installed: say which, in one line
    if extra_for(_missing) is None:
        raise
    raise ImportError(f"rollmux.adapters.trl needs the trl extra ({_missing.name} is missing): "
                      "pip install 'rollmux[trl]'", name=_missing.name) from None
from rollmux.shim import JobShim, PermitClient, slots_given_up

__all__ = ["Engine", "ShimGRPOTrainer", "TRLJob", "TRLJobConfig", "TRLRun", "build_model", "build_tokenizer"]
log = logging.getLogger("rollmux.adapters.trl")


# ---------------------------------------------------------------- generation: units on worker slots

class _GumbelMax(LogitsProcessor):
    """Sampling with the unit's own generator: argmax of logits + Gumbel noise is a draw from the
    softmax (generate's own sampling draws from the process's global RNG, shared by every thread)."""

    def __init__(self, gen: torch.Generator) -> None:
        self.gen = gen

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        u = torch.rand(scores.shape, generator=self.gen).clamp_(min=1e-20)
        return scores - torch.log(-torch.log(u))


class _Abort(StoppingCriteria):
    """Stops generate between two tokens once the slot's stop event is set; `fired` tells a cut unit."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop, self.fired = stop, False

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any) -> torch.BoolTensor:
        self.fired = self.fired or self.stop.is_set()
        return torch.full((input_ids.shape[0],), self.fired, dtype=torch.bool)


def _unit_seed(seed: int, step: int, unit: int) -> int:
    return (seed * 1_000_003 + step * 7_919 + unit * 104_729 + 17) % (2**63 - 1)


class Engine:
    """The rollout side: one generator copy of the policy per worker slot, fed one prompt's group at a time."""

    def __init__(self, cfg: TRLJobConfig, model: torch.nn.Module, tokenizer: PreTrainedTokenizerFast) -> None:
        self.cfg, self.tokenizer = cfg, tokenizer
        self.copies = [Offloadable(copy.deepcopy(model).eval()) for _ in range(cfg.slots)]
        self.pools = [ThreadPoolExecutor(1, thread_name_prefix=f"trl-slot{s}") for s in range(cfg.slots)]
        self.gen_config = GenerationConfig(max_new_tokens=cfg.max_completion_length, do_sample=False,
                                           pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
        self.shim: JobShim | None = None
        self.current: _Rollout | None = None  # the rollout running now (its give_up is the tail hook)
        self.aborted = 0                      # units cut by tail migrations (and recomputed)
        self.segments: list[tuple[tuple[int, ...], int, float, float]] = []  # (slots, step, start, end)

    def rollout_func(self, prompts: list[str], trainer: GRPOTrainer) -> dict[str, Any]:
        """TRL's rollout_func: every row's prompt and completion ids (rows b*G .. b*G+G-1 share prompt b)."""
        g = trainer.num_generations
        units = prompts[::g]
        if [p for p in units for _ in range(g)] != list(prompts):
            raise ValueError("rollout_func: expected each prompt repeated num_generations times in a row")
        ids = [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in units]
        slots = self.granted_slots()
        if max(slots) >= self.cfg.slots:
            raise ValueError(f"rollout_func: the permit covers worker slots {slots} but the job has "
                             f"{self.cfg.slots} generator copies; set TRLJobConfig.slots >= {max(slots) + 1}")
        self.current = _Rollout(self, trainer.state.global_step, ids, slots)
        try:
            parts = self.current.run()
        finally:
            self.current = None
        return {"prompt_ids": [ids[b] for b in range(len(units)) for _ in range(g)],
                "completion_ids": [c for part in parts for c in part], "logprobs": None}

    def granted_slots(self) -> list[int]:
        """The worker slots the running rollout's permit covers on its node (every slot when solo, or
        when the permit does not count slots)."""
        grant = self.shim.grant if self.shim is not None else None
        return list(grant.slots(0) if grant is not None else ()) or list(range(self.cfg.slots))

    def respond(self, slot: int, step: int, unit: int, prompt_ids: list[int],
                stop: threading.Event) -> list[list[int]] | None:
        """One unit's completions (each cut after its first EOS) on `slot`'s copy; None if stopped midway."""
        if torch.get_num_threads() != self.cfg.threads:
            torch.set_num_threads(self.cfg.threads)
        gen = torch.Generator().manual_seed(_unit_seed(self.cfg.seed, step, unit))
        x = torch.tensor([prompt_ids] * self.cfg.num_generations)
        abort = _Abort(stop)
        with torch.no_grad():
            out = self.copies[slot].module.generate(
                input_ids=x, attention_mask=torch.ones_like(x), generation_config=self.gen_config,
                logits_processor=LogitsProcessorList([_GumbelMax(gen)]), stopping_criteria=StoppingCriteriaList([abort]))
        if abort.fired:
            return None
        eos = self.tokenizer.eos_token_id
        rows = out[:, x.shape[1]:].tolist()
        return [row[:row.index(eos) + 1] if eos in row else row for row in rows]

    def onload(self, slots) -> None:
        """Onload the generator copies of `slots`."""
        for s in slots:
            self.copies[s].onload()

    def offload(self, slots=None) -> None:
        """Offload the generator copies of `slots` (default: every one)."""
        for s in range(self.cfg.slots) if slots is None else slots:
            self.copies[s].offload()

    def close(self) -> None:
        """Stop the slots' threads."""
        for p in self.pools:
            p.shutdown()


class _Rollout:
    """One rollout: units dealt to slots, one at a time each; `give_up` is the shim's on_tail hook."""

    def __init__(self, engine: Engine, step: int, ids: list[list[int]], slots: list[int]) -> None:
        self.engine, self.step, self.ids, self.active = engine, step, ids, list(slots)
        self.n = len(ids)
        self.queue: deque[int] = deque(range(self.n))
        self.busy: dict[int, tuple[Any, int]] = {}  # slot -> (future, unit)
        self.done: dict[int, list[list[int]]] = {}
        self.stop = {s: threading.Event() for s in slots}
        self.seg_start = time.perf_counter()

    def run(self) -> list[list[list[int]]]:
        """Every unit's completions, in unit order."""
        e = self.engine
        while len(self.done) < self.n:
            for s in self.active:
                if s not in self.busy and self.queue:
                    b = self.queue.popleft()
                    self.busy[s] = (e.pools[s].submit(e.respond, s, self.step, b, self.ids[b], self.stop[s]), b)
            wait([f for f, _ in self.busy.values()], return_when=FIRST_COMPLETED)
            for s in [s for s, (f, _) in self.busy.items() if f.done()]:
                f, b = self.busy.pop(s)
                self.done[b] = f.result()  # a kept slot is never stopped, so never None
            if e.shim is not None:
                e.shim.progress(len(self.done), self.n)  # may call give_up
        self._segment()
        return [self.done[b] for b in range(self.n)]

    def give_up(self, grant: Any) -> None:
        """The tail migrates: stop the units on the slots given up, offload those copies, keep the rest."""
        gone = slots_given_up(grant, self.active, "trl")
        for s in gone:
            self.stop[s].set()
        for s in gone:
            if s in self.busy:
                f, b = self.busy.pop(s)
                part = f.result()  # the unit stops at its next token
                if part is None:   # recomputed from scratch on a kept slot, to the same tokens
                    self.queue.appendleft(b)
                    self.engine.aborted += 1
                else:
                    self.done[b] = part
        self.engine.offload(gone)
        self._segment()
        self.active = [s for s in self.active if s not in gone]

    def _segment(self) -> None:
        now = time.perf_counter()
        self.engine.segments.append((tuple(self.active), self.step, self.seg_start, now))
        self.seg_start = now



# ---------------------------------------------------------------- the trainer and the job

class ShimGRPOTrainer(GRPOTrainer):
    """TRL's GRPOTrainer with generate-and-score inside `rollout` and the step through the optimizer inside `train`."""

    def __init__(self, *args: Any, job: "TRLJob", **kwargs: Any) -> None:
        self.rollmux_job = job
        super().__init__(*args, **kwargs)

    def _generate_and_score_completions(self, inputs: list[dict]) -> dict:
        """TRL's own step, inside the rollout phase; records the batch's mean reward."""
        with self.rollmux_job.phase("rollout"):
            out = super()._generate_and_score_completions(inputs)
        self.rollmux_job.rewards.append(self._metrics["train"]["reward"][-1])
        return out

    def _prepare_inputs(self, generation_batch: dict) -> dict:
        """TRL's own batching; the train phase opens once the batch is ready."""
        inputs = super()._prepare_inputs(generation_batch)
        if self.model.training:
            self.rollmux_job.begin_train()
        return inputs

    def training_step(self, model: torch.nn.Module, inputs: dict, num_items_in_batch: Any = None) -> torch.Tensor:
        """TRL's loss and backward; records the loss."""
        loss = super().training_step(model, inputs, num_items_in_batch)
        self.rollmux_job.losses.append(float(loss))
        return loss


class _StepEnd(TrainerCallback):
    """After the Trainer's optimizer step: close the train phase, then sync."""

    def __init__(self, job: "TRLJob") -> None:
        self.job = job

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.job.end_step()


@dataclass
class TRLRun:
    """What one run of a TRL job measured."""

    rewards: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    weights: dict[str, torch.Tensor] = field(default_factory=dict)
    sync_s: list[float] = field(default_factory=list)
    aborted: int = 0
    iter_s: float = 0.0


class TRLJob:
    """One TRL GRPO job: `run(iterations)` builds it (init) and runs TRL's loop, solo or under a shim."""

    def __init__(self, cfg: TRLJobConfig | None = None) -> None:
        self.cfg = cfg or TRLJobConfig()
        self.shim: JobShim | None = None
        self.rewards: list[float] = []
        self.losses: list[float] = []
        self.train_intervals: list[tuple[int, float, float]] = []  # (step, start, end)
        self.moves = 0
        self.trainer: ShimGRPOTrainer | None = None
        self.engine: Engine | None = None
        self.state: Offloadable | None = None
        self.sync: WeightSync | None = None
        self._train_cm = None
        self._train_start = 0.0
        self._tmp: tempfile.TemporaryDirectory | None = None

    # -- the shim and its hooks
    def attach(self, job_id: str, client: PermitClient, tail_threshold: float = 0.8) -> JobShim:
        """Run under RollMux: a shim for `job_id` on `client`, wired to this job's hooks."""
        self.shim = JobShim(job_id, client, onload=self._onload, offload=self._offload, on_tail=self._on_tail,
                            on_move=self._on_move, host_memory=self.host_memory, tail_threshold=tail_threshold)
        return self.shim

    def phase(self, name: str):
        """The shim's phase marker (no permit, nothing moves when the job runs solo)."""
        return self.shim.phase(name) if self.shim is not None else nullcontext()

    def _onload(self, pool: str) -> None:
        if pool == "rollout":
            self.engine.onload(self.engine.granted_slots())
        else:
            self.state.onload()

    def _offload(self, pool: str) -> None:  # the init phase offloads both pools
        if pool == "rollout":
            self.engine.offload()
        else:
            self.state.offload()

    def _on_tail(self, grant: Any) -> None:
        self.engine.current.give_up(grant)

    def _on_move(self, grant: Any) -> None:
        # One process holds both sides and its state is in host memory between phases, so a new
        # placement needs nothing rebuilt here; a job spread over nodes rebuilds its sync group.
        self.moves += 1
        log.info("trl job re-placed (epoch %s)", grant.epoch)

    def host_memory(self) -> dict[str, int]:
        """Bytes of offloaded state per pool: the generator copies (rollout), model + AdamW state (train)."""
        rollout = sum(c.host_bytes() for c in self.engine.copies) if self.engine else 0
        return {"rollout": rollout, "train": self.state.host_bytes() if self.state else 0}

    # -- phase boundaries inside TRL's loop
    def begin_train(self) -> None:
        """Enter the train phase (called by the trainer once the batch is ready)."""
        self._train_cm = self.phase("train")
        self._train_cm.__enter__()
        self._train_start = time.perf_counter()

    def end_step(self) -> None:
        """Leave the train phase after the optimizer step, then hand the weights to the generators."""
        cm, self._train_cm = self._train_cm, None
        step = len(self.train_intervals)
        self.train_intervals.append((step, self._train_start, time.perf_counter()))
        cm.__exit__(None, None, None)
        with self.phase("sync"):
            for copy_, weights in zip(self.engine.copies, self.sync.push(self.state.state_dict())):
                copy_.load(weights)

    # -- the run
    def _build(self, iterations: int, callbacks: list) -> None:
        cfg = self.cfg
        tokenizer = build_tokenizer()
        model = build_model(cfg, tokenizer)
        self.engine = Engine(cfg, model, tokenizer)
        self.engine.shim = self.shim
        self.sync = WeightSync(cfg.slots)
        self._tmp = tempfile.TemporaryDirectory(prefix="rollmux-trl-")
        args = GRPOConfig(
            output_dir=self._tmp.name, max_steps=iterations, seed=cfg.seed, data_seed=cfg.seed, use_cpu=True,
            per_device_train_batch_size=cfg.prompts_per_step * cfg.num_generations,
            num_generations=cfg.num_generations, gradient_accumulation_steps=1, steps_per_generation=1,
            num_iterations=1, beta=0.0, learning_rate=cfg.lr, lr_scheduler_type="constant", warmup_steps=0,
            max_completion_length=cfg.max_completion_length, temperature=1.0, optim="adamw_torch",
            save_strategy="no", report_to="none", logging_steps=1, disable_tqdm=True, dataloader_num_workers=0)
        self.trainer = ShimGRPOTrainer(
            model=model, reward_funcs=[target_reward(tokenizer.convert_tokens_to_ids(TARGET),
                                                     cfg.max_completion_length)],
            args=args, train_dataset=build_dataset(cfg, cfg.dataset_size),
            processing_class=tokenizer, rollout_func=self.engine.rollout_func,
            callbacks=[_StepEnd(self), *callbacks], job=self)
        self.trainer.remove_callback(PrinterCallback)  # the metrics are kept here (rewards, losses), not printed
        self.state = Offloadable(model, lambda: self.trainer.optimizer if self.trainer else None)

    def run(self, iterations: int, callbacks: list | None = None) -> TRLRun:
        """init (build, then offload), then TRL's loop for `iterations` steps; what it measured."""
        if iterations < 1:
            raise ValueError(f"TRLJob.run: iterations must be >= 1, not {iterations!r}")
        torch.set_num_threads(self.cfg.threads)
        with warnings.catch_warnings():
            # TRL 1.16 calls transformers 5's deprecated gradient_checkpointing names, and flags rollout_func
            # (the seam this adapter uses) as experimental: known, and not the user's to act on.
            warnings.filterwarnings("ignore", category=FutureWarning, message=".*gradient_checkpointing.*")
            warnings.filterwarnings("ignore", category=UserWarning, message=".*'rollout_func'.*experimental.*")
            return self._run(iterations, callbacks or [])

    def _run(self, iterations: int, callbacks: list) -> TRLRun:
        self.rewards, self.losses, self.train_intervals = [], [], []  # a run measures only itself
        clean = False
        try:
            with self.phase("init"):
                self._build(iterations, callbacks)
            t0 = time.perf_counter()
            try:
                self.trainer.train()
            except BaseException as exc:
                if self._train_cm is not None:  # a failed step still releases its permit
                    cm, self._train_cm = self._train_cm, None
                    cm.__exit__(type(exc), exc, exc.__traceback__)
                raise
            iter_s = (time.perf_counter() - t0) / iterations
            clean = True
        finally:
            self._close(clean)
        return TRLRun(list(self.rewards), list(self.losses),
                      {k: v.detach().clone() for k, v in self.state.state_dict().items()},
                      list(self.sync.seconds), self.engine.aborted, iter_s)

    def _close(self, clean: bool) -> None:
        """Stop the slots' threads and leave the sync group (without waiting for peers after a failure)."""
        if self.engine is not None:
            self.engine.close()
        if self.sync is not None:
            self.sync.close(wait=clean)
        if self._tmp is not None:
            self._tmp.cleanup()
