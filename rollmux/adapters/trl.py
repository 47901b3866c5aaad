"""TRL's GRPOTrainer, drop-in, under RollMux's permits (docs/adapters.md §2).

    from rollmux.adapters.trl import GRPOTrainer   # the one line a user changes (was: from trl import GRPOTrainer)

`GRPOTrainer` is `trl.GRPOTrainer` (TRL 1.16) with TRL's own constructor: `model` (a path or a
module), `reward_funcs`, `args` (a `GRPOConfig`), `train_dataset`, `processing_class`,
`peft_config` and the rest go to TRL unchanged. Outside RollMux (none of `rollmux run`'s
variables in the environment) it is TRL and nothing else: the same calls, the same weights.

Under `rollmux run` (`ROLLMUX_URL`, `ROLLMUX_JOB_ID`, `ROLLMUX_TOKEN_FILE`; or `rollmux_job_id=` and
`rollmux_client=` given, as a test or a benchmark does with a local permit client) the job's shim
is built from them (`rollmux.init()`'s plumbing) and TRL's own loop runs in RollMux's phases:

- init: TRL's constructor (the model loaded, the reference model, the vLLM engine) runs inside the
  init permit; then the generator copies (one per worker slot the permit names, `grant.units`) and
  the weight-sync group are built, and everything is offloaded to host memory;
- rollout: `GRPOTrainer._generate` (the completions, decoded): through TRL's `rollout_func` seam to
  `trl_engine.Engine` (the generator copies, with progress and tail migration), or TRL's colocated
  vLLM engine, woken for the phase and put to sleep after it (`trl_vllm`);
- train: from the completions to the next generation batch's rollout: rewards, old and reference
  log-probs, advantages, every micro-step and optimizer step TRL takes on that batch
  (`steps_per_generation`, `num_iterations`, `gradient_accumulation_steps`), logging, saving;
- sync: the trainer's weights to every generator copy through `rollmux.weightsync` (into the host
  copies, where they are offloaded); with vLLM, the next wake pushes them instead.

The end of `train()` closes the last iteration, puts the trainer's state back on its device (so
`save_model` works), and tells the service the job finished. Settings the adapter cannot honour
are refused in one line (`refusal`). Determinism: the generator copies sample per unit from a
seed (job seed, step, unit), so the same script gives bit-identical weights alone or multiplexed;
TRL's loop draws from the process's global RNG too, so one job runs per process, and both runs
need the same intra-op thread count (`torch.set_num_threads`).
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import time
from typing import Any, Callable

from rollmux.errors import raise_missing_extra

try:
    import torch
    import trl

    from rollmux.adapters.state import Offloadable, WeightSync
    from rollmux.adapters.trl_engine import Engine
    from rollmux.adapters.trl_vllm import VLLMSide
except ModuleNotFoundError as _missing:  # the extra is not installed: say which, in one line
    raise_missing_extra(_missing, "rollmux.adapters.trl", "trl")
from rollmux.job import JOB_ENV
from rollmux.job import init as rollmux_init
from rollmux.shim import JobShim, PermitClient

__all__ = ["ENVIRONMENT", "GRPOTrainer", "RollMuxSide", "refusal"]
ENVIRONMENT = JOB_ENV  # what `rollmux run` sets
PLACE = "rollmux GRPOTrainer"
_TRL_INIT = inspect.signature(trl.GRPOTrainer.__init__)
log = logging.getLogger("rollmux.adapters.trl")


def _value(x: Any) -> Any:
    return getattr(x, "value", x)  # transformers' enums (IntervalStrategy) as their strings


def refusal(given: dict[str, Any]) -> str | None:
    """Why TRL's constructor arguments `given` cannot run under RollMux (None: they can), one line."""
    for name in ("rollout_func", "tools", "environment_factory"):
        if given.get(name):
            return (f"{name}: RollMux generates through TRL's rollout_func seam with the trainer's state in host "
                    "memory; a trainer with its own rollout_func, tools or environments is not supported")
    args = given.get("args")
    if args is None:  # TRL's defaults: one process, no evaluation, one generation per optimizer step
        return None
    every = args.steps_per_generation * args.num_iterations
    checks = [
        (args.world_size > 1, f"GRPOConfig runs {args.world_size} processes; a job under RollMux is one process"),
        (_value(args.eval_strategy) != "no", f"GRPOConfig.eval_strategy={_value(args.eval_strategy)!r}: evaluation "
         "would generate outside a rollout permit; set eval_strategy='no' and evaluate after train()"),
        (every % args.gradient_accumulation_steps != 0, f"GRPOConfig.steps_per_generation x num_iterations "
         f"({args.steps_per_generation} x {args.num_iterations}) is not a multiple of gradient_accumulation_steps "
         f"({args.gradient_accumulation_steps}): a rollout would fall inside a gradient accumulation"),
        (args.use_vllm and args.vllm_mode != "colocate", f"GRPOConfig.vllm_mode={args.vllm_mode!r}: a vLLM server "
         "is a process of its own the adapter cannot put to sleep; use vllm_mode='colocate'"),
        (args.use_vllm and not args.vllm_enable_sleep_mode, "GRPOConfig.vllm_enable_sleep_mode=False: RollMux "
         "sleeps and wakes the vLLM engine between phases, which vLLM allows only if built so; set it to True"),
        (args.use_transformers_continuous_batching, "GRPOConfig.use_transformers_continuous_batching=True: under "
         "RollMux the completions come from the adapter's per-slot generator copies; set it to False"),
    ]
    return next((why for refused, why in checks if refused), None)


class RollMuxSide:
    """A GRPOTrainer's side of RollMux: its shim, the hooks that move its state, the phase bookkeeping."""

    def __init__(self, trainer: "GRPOTrainer", job_id: str | None, client: PermitClient | None,
                 tail_threshold: float) -> None:
        if (job_id is None) != (client is None):
            raise ValueError(f"{PLACE}: give both rollmux_job_id and rollmux_client, or neither (rollmux run's)")
        self.trainer = trainer
        self.own_client = client is None  # built from the environment: closed here when the job ends
        self.shim: JobShim = rollmux_init(job_id, client, onload=self.onload, offload=self.offload,
                                          on_tail=self.on_tail, on_move=self.on_move,
                                          host_memory=self.host_memory, tail_threshold=tail_threshold)
        self.timings: dict[str, list[float]] = {}  # the vLLM engine's wake, push and sleep, each time
        self.train_state: list[Offloadable] = []   # the trainer (model + optimizer), its reference model, reward models
        self.engine: Engine | None = None
        self.vllm: VLLMSide | None = None
        self.sync: WeightSync | None = None
        self.train_intervals: list[tuple[float, float]] = []  # (start, end) of each train phase
        self.sync_s: list[float] = []  # each weight push through rollmux.weightsync
        self.iterations = self.moves = 0
        self.finished = False
        self._train_cm: Any = None
        self._train_start = 0.0

    # -- init
    def build(self, grant: Any) -> None:
        """Inside init, after TRL's constructor: what moves with each pool, and the rollout side."""
        t = self.trainer
        self._one_node(grant)
        self.train_state = [Offloadable(t.model, lambda: t.optimizer)]
        extra = [t.ref_model, *(f for f in t.reward_funcs if isinstance(f, torch.nn.Module))]
        self.train_state += [Offloadable(m) for m in extra if m is not None]
        if t.use_vllm:
            self.vllm = VLLMSide(t, self.train_state[0], self.timings)
            return
        self.engine = Engine(t, max(grant.units, 1))  # a permit that counts no slots: one copy
        self.engine.shim = self.shim
        self.sync = WeightSync(len(self.engine.copies))
        t.rollout_func = self.engine.rollout_func

    @staticmethod
    def _one_node(grant: Any) -> None:
        if len(grant.nodes) > 1:
            raise ValueError(f"{PLACE}: the {grant.phase} permit names {len(grant.nodes)} rollout nodes, but one "
                             "trainer process generates on 1; submit the job with one node's rollout GPUs")

    # -- the shim's hooks (each takes a pool, "rollout" or "train")
    def onload(self, pool: str) -> None:
        """The pool's state from host memory onto its device: the trainer's, or the granted slots' copies."""
        if pool == "train":
            for s in self.train_state:
                s.onload()
        elif self.vllm is not None:
            self.vllm.onload()
        else:
            self._one_node(self.shim.grant)
            slots = self.engine.granted_slots()
            self.engine.ensure(max(slots) + 1)  # a permit naming more slots than init's: more copies
            self.engine.onload(slots)

    def offload(self, pool: str) -> None:
        """The pool's state to host memory (the init phase offloads both)."""
        if pool == "train":
            for s in self.train_state:
                s.offload()
        elif self.vllm is not None:
            self.vllm.offload()
        else:
            self.engine.offload()

    def host_memory(self) -> dict[str, int]:
        """Bytes of offloaded state per pool: the generator copies (rollout), the trainer's modules and
        AdamW state (train)."""
        rollout = self.engine.host_bytes() if self.engine is not None else 0
        return {"rollout": rollout, "train": sum(s.host_bytes() for s in self.train_state)}

    def on_tail(self, grant: Any) -> None:
        """The tail migrates: the running rollout gives up the slots the permit does not keep."""
        if self.engine is not None and self.engine.current is not None:
            self.engine.current.give_up(grant)

    def on_move(self, grant: Any) -> None:
        """Re-placed. One process holds both sides and its state sits in host memory between phases, so
        nothing is rebuilt; a job spread over nodes would rebuild its sync group here."""
        self.moves += 1
        log.info("%s re-placed (epoch %s)", self.shim.job_id, grant.epoch)

    # -- phase boundaries inside TRL's loop
    def rollout(self, generate: Callable[[], Any]) -> Any:
        """The previous batch's train phase and sync end; `generate()` runs in the rollout phase; the train
        phase opens on its completions."""
        self.end_train()
        with self.shim.phase("rollout"):
            out = generate()
        self._train_cm = self.shim.phase("train")
        self._train_cm.__enter__()
        self._train_start = time.perf_counter()
        return out

    def end_train(self, exc: BaseException | None = None) -> None:
        """Leave the open train phase (with the error that ended it, if one did); after a clean one, sync."""
        cm, self._train_cm = self._train_cm, None
        if cm is None:
            return
        self.train_intervals.append((self._train_start, time.perf_counter()))
        cm.__exit__(type(exc) if exc else None, exc, exc.__traceback__ if exc else None)
        if exc is None:
            with self.shim.phase("sync"):
                self._push()
            self.iterations += 1

    def _push(self) -> None:
        """The trainer's weights (its host copies) to every generator copy; with vLLM the next wake does it."""
        if self.engine is None:
            return
        n = len(self.engine.copies)
        if len(self.sync.rollout) != n:  # more copies than the group has ranks: a group of the right size
            self.sync.close()
            self.sync = WeightSync(n)
        for copy_, weights in zip(self.engine.copies, self.sync.push(self.train_state[0].state_dict())):
            copy_.load(weights)
        self.sync_s.append(self.sync.seconds[-1])

    # -- the end
    def check_train(self, args: tuple, kwargs: dict) -> None:
        """ValueError for a train() call RollMux cannot run (a second one, a resumed one)."""
        if self.finished:
            raise ValueError(f"{PLACE}: train() runs once under RollMux; the job {self.shim.job_id} has finished")
        if (args[0] if args else kwargs.get("resume_from_checkpoint")) not in (None, False):
            raise ValueError(f"{PLACE}: resume_from_checkpoint is not supported under RollMux (the trainer's "
                             "state is in host memory when TRL would load it)")

    def finish(self) -> None:
        """train() returned: the last iteration ends, the trainer's state comes back, the job finishes."""
        self.end_train()
        for s in self.train_state:
            s.onload()  # save_model and evaluate after train() see the trained weights
        if self.vllm is not None:
            self.vllm.finish()
        self.trainer.rollout_func = None  # evaluate() after train() generates as TRL does
        self.close(clean=True)
        finish = getattr(self.shim.client, "finish", None)
        if finish is not None:  # (a local permit client has no service to tell)
            finish(self.shim.job_id)
        self.finished = True
        self.close_client()

    def fail(self, exc: BaseException) -> None:
        """train() raised: release the open permit, stop the slots and the sync group, stop heartbeats."""
        self.end_train(exc)
        self.close(clean=False)
        self.close_client()

    def close(self, clean: bool) -> None:
        """Stop the slots' threads and leave the sync group (without waiting for peers after a failure)."""
        if self.engine is not None:
            self.engine.close()
        if self.sync is not None:
            self.sync.close(wait=clean)
            self.sync = None

    def close_client(self) -> None:
        """Stop the heartbeats of a client built from the environment."""
        if self.own_client and hasattr(self.shim.client, "close"):
            self.shim.client.close()


class GRPOTrainer(trl.GRPOTrainer):
    """`trl.GRPOTrainer` with TRL's constructor; under `rollmux run` its loop runs in RollMux's phases."""

    def __init__(self, *args: Any, rollmux_job_id: str | None = None, rollmux_client: PermitClient | None = None,
                 rollmux_tail_threshold: float = 0.8, **kwargs: Any) -> None:
        self.rollmux: RollMuxSide | None = None
        if rollmux_client is None and rollmux_job_id is None and not any(os.environ.get(n) for n in ENVIRONMENT):
            super().__init__(*args, **kwargs)  # outside RollMux: TRL as it is
            return
        why = refusal(_TRL_INIT.bind(self, *args, **kwargs).arguments)
        if why is not None:
            raise ValueError(f"{PLACE}: {why}")
        side = RollMuxSide(self, rollmux_job_id, rollmux_client, rollmux_tail_threshold)
        try:
            with side.shim.phase("init") as grant:
                super().__init__(*args, **kwargs)
                side.build(grant)
        except BaseException:
            side.close(clean=False)
            side.close_client()
            raise
        self.rollmux = side

    def _generate(self, prompts: list) -> tuple:
        """TRL's generation; under RollMux, in a rollout phase, with the train phase opening after it."""
        if self.rollmux is None or not self.model.training:
            return super()._generate(prompts)
        return self.rollmux.rollout(functools.partial(super()._generate, prompts))

    def train(self, *args: Any, **kwargs: Any) -> Any:
        """TRL's train(); under RollMux its last phase ends with it and the job finishes."""
        side = self.rollmux
        if side is None:
            return super().train(*args, **kwargs)
        side.check_train(args, kwargs)
        try:
            out = super().train(*args, **kwargs)
        except BaseException as exc:
            side.fail(exc)
            raise
        side.finish()
        return out
