"""The TRL adapter's rollout side when TRL generates with vLLM in colocate mode (docs/adapters.md).

TRL 1.16 keeps its engine at `trainer.vllm_generation.llm` (a `vllm.LLM`, built with
`enable_sleep_mode=args.vllm_enable_sleep_mode`, put to sleep at level 2 right after it is built
when that is set). With sleep mode on, TRL itself wakes the engine inside every `generate` and puts
it back to sleep at its end, and re-pushes the trainer's weights (`sync_weights`) because level 2
discards them. Under RollMux the trainer's tensors are in host memory during a rollout, so the
adapter takes both over: `enable_sleep_mode` is cleared on TRL's generation object (the engine
itself was built sleepable), and

- `onload` (the rollout phase starts): `llm.wake_up()`, then TRL's own `sync_weights()` reading the
  trainer's weights from their host copies (`Offloadable.host_view`): one host-to-device copy of the
  weights into the engine, the rollout's warm start; TRL is told its engine holds this step's
  weights (`_last_loaded_step`), so it does not push them again;
- `offload` (the rollout phase ends, before the train phase): `llm.sleep(level=2)`. Level 2 keeps no
  host copy: the next wake gets the weights from the trainer's host copy, which the train phase
  has updated, so a level-1 copy of the engine's weights would only be a stale duplicate.

`finish` hands sleep mode back to TRL (asleep, weights to be re-pushed), so an `evaluate()` after
`train()` runs TRL's own path. Every wake, push and sleep is timed (`timings`).
"""

from __future__ import annotations

import time
from typing import Any

from rollmux.adapters.state import Offloadable

SLEEP_LEVEL = 2  # vLLM's: 1 moves the weights to host memory and drops the KV cache, 2 drops both


class VLLMSide:
    """TRL's colocated vLLM engine as the rollout side's state: woken for a rollout, asleep otherwise."""

    def __init__(self, trainer: Any, train_state: Offloadable, timings: dict[str, list[float]]) -> None:
        self.trainer, self.train_state, self.timings = trainer, train_state, timings
        self.generation = trainer.vllm_generation
        self.generation.enable_sleep_mode = False  # the phases sleep and wake the engine, not TRL's generate
        self.awake = not self.generation._llm_weights_sleeping  # TRL put it to sleep once it was built

    @property
    def llm(self) -> Any:
        """The engine, where TRL keeps it."""
        return self.generation.llm

    def _timed(self, what: str, t0: float) -> None:
        self.timings.setdefault(what, []).append(time.perf_counter() - t0)

    def onload(self) -> None:
        """Wake the engine and push the trainer's weights into it from their host copies."""
        t0 = time.perf_counter()
        self.llm.wake_up()
        self.awake = True
        self._timed("vllm_wake", t0)
        t0 = time.perf_counter()
        with self.train_state.host_view():
            self.generation.sync_weights()
        self.trainer._last_loaded_step = self.trainer.state.global_step
        self.generation._llm_weights_sleeping = False
        self._timed("vllm_push", t0)

    def offload(self) -> None:
        """Put the engine to sleep (nothing of it stays on the device)."""
        if not self.awake:
            return
        t0 = time.perf_counter()
        self.llm.sleep(level=SLEEP_LEVEL)
        self.awake = False
        self.generation._llm_weights_sleeping = True
        self._timed("vllm_sleep", t0)

    def finish(self) -> None:
        """Give sleep mode back to TRL: asleep, its weights to be pushed again at the next generate."""
        self.offload()
        self.generation.enable_sleep_mode = True
