"""The TRL adapter's rollout side: one generator copy of the policy per worker slot (docs/adapters.md).

TRL's `rollout_func` seam hands a generation batch's prompts to `Engine.rollout_func`. A *unit* is
one prompt's group of `num_generations` completions; units are dealt to the worker slots the
running rollout's permit covers, one at a time each, and every finished unit reports
`shim.progress`. Each unit samples with transformers' own `generate` on its slot's copy, with TRL's
sampling settings (temperature, top-k, top-p, min-p as logits warpers, repetition penalty and the
rest from TRL's generation config) and a generator of its own, seeded from (job seed, step, unit):
Gumbel-max in a `LogitsProcessor`, because `generate`'s own sampling draws from the process's
global RNG, which threads share. So it does not matter which slot computes a unit. When the tail
migrates, `on_tail` (`_Rollout.give_up`) sets the stop event of the slots given up; a
`StoppingCriteria` ends their `generate` at the next token, the cut units go back to the queue and
are recomputed on the kept slots, to the same tokens, and the given-up copies are offloaded
before the scheduler hands those slots on.
"""

from __future__ import annotations

import copy
import threading
import time
from collections import deque
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from typing import Any

import torch
from transformers import (
    LogitsProcessor,
    LogitsProcessorList,
    MinPLogitsWarper,
    StoppingCriteria,
    StoppingCriteriaList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from rollmux.adapters.state import Offloadable
from rollmux.shim import JobShim, slots_given_up


class _GumbelMax(LogitsProcessor):
    """Sampling with the unit's own generator: argmax of logits + Gumbel noise is a draw from the
    softmax (generate's own sampling draws from the process's global RNG, shared by every thread)."""

    def __init__(self, gen: torch.Generator) -> None:
        self.gen = gen

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        u = torch.rand(scores.shape, generator=self.gen).clamp_(min=1e-20).to(scores.device)
        return scores - torch.log(-torch.log(u))


class _Abort(StoppingCriteria):
    """Stops generate between two tokens once the slot's stop event is set; `fired` tells a cut unit."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop, self.fired = stop, False

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any) -> torch.BoolTensor:
        self.fired = self.fired or self.stop.is_set()
        return torch.full((input_ids.shape[0],), self.fired, dtype=torch.bool, device=input_ids.device)


def _unit_seed(seed: int, step: int, unit: int) -> int:
    return (seed * 1_000_003 + step * 7_919 + unit * 104_729 + 17) % (2**63 - 1)


def generator_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of the trainer's policy to generate with, on tensors of its own. TRL patches the policy's
    `forward` for training (its fused LM head, an fp32 LM head) with closures over the trainer's own
    modules, which a deep copy would keep calling; the copy gets the class's forward back (TRL's fused
    head falls back to it for generation anyway), an fp32 LM head casting its input as TRL's did."""
    twin = copy.deepcopy(model).eval()
    for m in twin.modules():
        if m.__dict__.pop("forward", None) is not None and isinstance(m, torch.nn.Linear):
            m.register_forward_pre_hook(lambda mod, args: tuple(a.to(mod.weight.dtype) for a in args))
    return twin


def sampling(trainer: Any) -> tuple[Any, list[LogitsProcessor]]:
    """TRL's generation config without its sampling (the unit's Gumbel-max draws instead), and TRL's
    sampling settings as the logits warpers transformers would apply, in its order."""
    cfg = copy.deepcopy(trainer.generation_config)
    warpers: list[LogitsProcessor] = []
    if trainer.temperature not in (None, 1.0):
        warpers.append(TemperatureLogitsWarper(trainer.temperature))
    if trainer.top_k:
        warpers.append(TopKLogitsWarper(trainer.top_k))
    if trainer.top_p is not None and trainer.top_p < 1.0:
        warpers.append(TopPLogitsWarper(trainer.top_p))
    if trainer.min_p:
        warpers.append(MinPLogitsWarper(trainer.min_p))
    cfg.do_sample, cfg.temperature, cfg.top_k, cfg.top_p, cfg.min_p = False, None, None, None, None
    return cfg, warpers


class Engine:
    """The rollout side: generator copies of the trainer's policy, one per worker slot, fed a unit at a time."""

    def __init__(self, trainer: Any, slots: int) -> None:
        self.trainer = trainer
        self.seed = trainer.args.seed
        self.threads = torch.get_num_threads()  # every slot computes with the trainer's intra-op thread count
        self.eos = set(trainer.eos_token_ids)
        self.gen_config, self.warpers = sampling(trainer)
        self.copies: list[Offloadable] = [Offloadable(generator_copy(trainer.model))]
        self.pools: list[ThreadPoolExecutor] = []
        self.shim: JobShim | None = None
        self.current: _Rollout | None = None  # the rollout running now (its give_up is the tail hook)
        self.aborted = 0                      # units cut by tail migrations (and recomputed)
        self.segments: list[tuple[tuple[int, ...], int, float, float]] = []  # (slots, step, start, end)
        self.ensure(slots)

    def ensure(self, slots: int) -> None:
        """At least `slots` generator copies (the new ones copied from the first, wherever it is)."""
        while len(self.copies) < slots:
            self.copies.append(self.copies[0].twin())
        while len(self.pools) < len(self.copies):
            self.pools.append(ThreadPoolExecutor(1, thread_name_prefix=f"trl-slot{len(self.pools)}"))

    def rollout_func(self, prompts: list, trainer: Any) -> dict[str, Any]:
        """TRL's rollout_func: every row's prompt and completion ids (rows b*G .. b*G+G-1 share prompt b)."""
        g = trainer.num_generations
        units = prompts[::g]
        if [p for p in units for _ in range(g)] != list(prompts):
            raise ValueError("rollmux GRPOTrainer: expected each prompt repeated num_generations times in a row")
        ids, images, _ = trainer._tokenize_prompts(units)  # TRL's own: a chat template for conversations
        if images is not None:
            raise ValueError("rollmux GRPOTrainer: prompts with images are not supported under RollMux")
        ids = [list(x) for x in ids]
        self.current = _Rollout(self, trainer.state.global_step, ids, self.granted_slots())
        try:
            parts = self.current.run()
        finally:
            self.current = None
        return {"prompt_ids": [ids[b] for b in range(len(units)) for _ in range(g)],
                "completion_ids": [c for part in parts for c in part], "logprobs": None}

    def granted_slots(self) -> list[int]:
        """The worker slots the running rollout's permit covers on its node (every copy when the permit
        does not count slots)."""
        grant = self.shim.grant if self.shim is not None else None
        return list(grant.slots(0) if grant is not None else ()) or list(range(len(self.copies)))

    def respond(self, slot: int, step: int, unit: int, prompt_ids: list[int],
                stop: threading.Event) -> list[list[int]] | None:
        """One unit's completions (each cut after its first EOS) on `slot`'s copy; None if stopped midway."""
        if torch.get_num_threads() != self.threads:
            torch.set_num_threads(self.threads)
        model = self.copies[slot].module
        gen = torch.Generator().manual_seed(_unit_seed(self.seed, step, unit))
        x = torch.tensor([prompt_ids] * self.trainer.num_generations, device=self.copies[slot].device)
        abort = _Abort(stop)
        with torch.no_grad():
            out = model.generate(
                input_ids=x, attention_mask=torch.ones_like(x), generation_config=self.gen_config,
                logits_processor=LogitsProcessorList([*self.warpers, _GumbelMax(gen)]),
                stopping_criteria=StoppingCriteriaList([abort]))
        if abort.fired:
            return None
        rows = out[:, x.shape[1]:].tolist()
        return [row[:next((i + 1 for i, t in enumerate(row) if t in self.eos), len(row))] for row in rows]

    def onload(self, slots: list[int]) -> None:
        """Onload the generator copies of `slots`."""
        for s in slots:
            self.copies[s].onload()

    def offload(self, slots: list[int] | None = None) -> None:
        """Offload the generator copies of `slots` (default: every one)."""
        for s in range(len(self.copies)) if slots is None else slots:
            self.copies[s].offload()

    def host_bytes(self) -> int:
        """Bytes the offloaded generator copies hold in host memory."""
        return sum(c.host_bytes() for c in self.copies)

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
        gone = slots_given_up(grant, self.active, "rollmux GRPOTrainer")
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
