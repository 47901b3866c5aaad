"""veRL's two loop objects, through veRL's own config hooks, reporting to the job's `VeRLPhases`.

- `AgentLoopManager` (`actor_rollout_ref.rollout.agent.agent_loop_manager_class`): veRL's agent-loop
  manager; `generate_sequences` first tells the phases a generation starts.
- `CheckpointEngineManager` (`actor_rollout_ref.rollout.checkpoint_manager_class`): veRL's checkpoint
  engine manager; `sleep_replicas` and `update_weights` tell the phases and run veRL's own call only
  where they say so. It is also the rollout side the phases move (`wake`, `sleep`, `host_bytes`):
  veRL's sleep for hybrid replicas (their weights come back with the next weight update), and for
  standalone (disaggregated) replicas, which veRL's servers refuse to sleep ("skip sleep in
  standalone mode"), veRL's colocated sleep and wake, which keep the weights (vLLM's level-1 sleep
  to host memory, SGLang's memory release with the weights restored on wake): the server's
  `rollout_mode` reads colocated for the length of that call.
"""

from __future__ import annotations

import asyncio
from typing import Any

import ray
from verl.checkpoint_engine import base as _checkpoint
from verl.experimental.agent_loop import agent_loop as _agent_loop
from verl.workers.rollout.replica import RolloutMode

AGENT_LOOP_MANAGER = f"{__name__}.AgentLoopManager"
CHECKPOINT_MANAGER = f"{__name__}.CheckpointEngineManager"


class AgentLoopManager(_agent_loop.AgentLoopManager):
    """veRL's AgentLoopManager; a generation opens the job's rollout phase first."""

    rollmux = None  # the job's VeRLPhases (set by rollmux.adapters.verl.RayPPOTrainer)

    def generate_sequences(self, prompts: Any) -> Any:
        """veRL's generate_sequences, inside the rollout phase."""
        if self.rollmux is not None:
            self.rollmux.on_generate()
        return super().generate_sequences(prompts)


def _set_mode(server: Any, mode: str) -> None:
    # Runs inside the server actor (Ray's __ray_call__, which veRL's own replicas use too), in the type
    # its rollout_mode has there (veRL's RolloutMode enum, or its value).
    server.rollout_mode = type(server.rollout_mode)(mode)


class CheckpointEngineManager(_checkpoint.CheckpointEngineManager):
    """veRL's CheckpointEngineManager: sleep and weight updates where the job's phases put them."""

    rollmux = None  # the job's VeRLPhases (set by rollmux.adapters.verl.RayPPOTrainer)
    weight_bytes = 0  # one replica's weights in the rollout dtype (set with `rollmux`)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.loaded_step: int | None = None  # the weight version the replicas hold (None: unknown)

    def sleep_replicas(self) -> None:
        """veRL's call after generation: the phases decide (veRL's own sleep outside RollMux)."""
        if self.rollmux is None:
            super().sleep_replicas()
        elif self.rollmux.on_sleep():
            self.sleep()

    def update_weights(self, global_steps: int | None = None) -> dict:
        """veRL's call after the actor update: the phases decide (veRL's own update outside RollMux)."""
        if self.rollmux is None or self.rollmux.on_update(global_steps):
            return self._update(global_steps)
        return {}

    def _update(self, step: int | None) -> dict:
        out = super().update_weights(step)
        self.loaded_step = step
        return out or {}

    # ---------------------------------------------------------------- the rollout side the phases move

    def _standalone(self) -> list:
        return [r for r in self.replicas if r.rollout_mode == RolloutMode.STANDALONE]

    def _as_colocated(self, replicas: list, call: str) -> None:
        servers = [s for r in replicas for s in r.servers]
        ray.get([s.__ray_call__.remote(_set_mode, RolloutMode.COLOCATED.value) for s in servers])
        try:
            _run_all(replicas, call)
        finally:
            ray.get([s.__ray_call__.remote(_set_mode, RolloutMode.STANDALONE.value) for s in servers])

    def sleep(self) -> None:
        """Every replica off its device: veRL's sleep, forced for standalone replicas."""
        standalone = self._standalone()
        if standalone:
            self._as_colocated(standalone, "sleep")
        others = [r for r in self.replicas if r not in standalone]
        if others:
            _run_all(others, "sleep")
        if any(r.rollout_mode == RolloutMode.HYBRID for r in others):
            self.loaded_step = None  # a hybrid sleep drops the weights (the next update restores them)

    def wake(self, step: int) -> None:
        """Every replica on its device with the weights of step `step`: a hybrid replica wakes through
        veRL's weight update (which resumes weights, loads them and resumes the KV cache), a standalone
        one through the colocated wake, then the update if its weights are older."""
        standalone = self._standalone()
        if standalone:
            self._as_colocated(standalone, "wake_up")
            if self.loaded_step == step and len(standalone) == len(self.replicas):
                return
        self._update(step)

    def host_bytes(self) -> int:
        """The weights asleep standalone replicas keep in host memory (a hybrid sleep keeps none)."""
        if self.rollmux is None or self.rollmux.awake:
            return 0
        return self.weight_bytes * len(self._standalone())


def _run_all(replicas: list, call: str) -> None:
    async def every() -> None:
        await asyncio.gather(*[getattr(r, call)() for r in replicas])
    asyncio.run(every())
