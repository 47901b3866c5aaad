"""`RayPPOTrainer`: veRL's trainer with its loop under RollMux's permits (rollmux/adapters/verl/phases.py).

It overrides two methods of veRL's `RayPPOTrainer` and adds a keyword: `init_workers` opens the init
phase before veRL builds anything and wires the two managers veRL loaded from the config hooks to the
job's phases; `fit` closes whatever phase is open when veRL's loop ends (or fails). Everything else,
the loop included, is veRL's. The training side's moves run in veRL's workers through Ray's
`__ray_call__` (as veRL's own replicas query their workers): each worker's `TrainingWorker.to` (veRL's
FSDP `offload_fsdp_model_to_cpu` / `offload_fsdp_optimizer` and their load twins), then a device
synchronize, so a move's time is the copy's.
"""

from __future__ import annotations

import time
from typing import Any

from rollmux.errors import raise_missing_extra

try:
    import ray
    from omegaconf import open_dict
    from verl.trainer.ppo import ray_trainer as _verl
    from verl.utils.device import get_torch_device

    from rollmux.adapters.verl.managers import AGENT_LOOP_MANAGER, CHECKPOINT_MANAGER, AgentLoopManager
    from rollmux.adapters.verl.managers import CheckpointEngineManager
except ModuleNotFoundError as _missing:  # the extra is not installed: say which, in one line
    raise_missing_extra(_missing, "rollmux.adapters.verl", "verl")
from rollmux.adapters.verl.phases import VeRLPhases

__all__ = ["RayPPOTrainer", "use_rollmux_managers"]


def use_rollmux_managers(config: Any) -> None:
    """Point veRL's two config hooks at the adapter's managers (a user's own must subclass them)."""
    rollout = config.actor_rollout_ref.rollout
    with open_dict(config):
        for key, fqn, cls in (("agent.agent_loop_manager_class", AGENT_LOOP_MANAGER, AgentLoopManager),
                              ("checkpoint_manager_class", CHECKPOINT_MANAGER, CheckpointEngineManager)):
            node, leaf = (rollout.agent, "agent_loop_manager_class") if "." in key else (rollout, key)
            current = node.get(leaf)
            if current and current != fqn:
                from verl.utils.import_utils import load_class_from_fqn
                if not issubclass(load_class_from_fqn(current, leaf), cls):
                    raise ValueError(f"actor_rollout_ref.rollout.{key}={current} must subclass {fqn} under RollMux")
            else:
                node[leaf] = fqn


def _inner_workers(worker: Any) -> list:
    return list(getattr(worker, "worker_dict", {}).values()) or [worker]


def _trainers(worker: Any) -> list:
    """The TrainingWorkers (actor, critic) in one of veRL's worker actors; not the forward-only reference."""
    out = []
    for inner in _inner_workers(worker):
        trainer = inner if hasattr(inner, "engine") else getattr(inner, "actor", None)
        if trainer is not None and not trainer.engine.engine_config.forward_only:
            out.append(trainer)
    return out


def _local_bytes(tensors: Any) -> int:
    total = 0
    for t in tensors:
        local = t.to_local() if hasattr(t, "to_local") else t
        total += local.numel() * local.element_size()
    return total


def state_bytes(worker: Any) -> int:
    """Bytes of the training state (parameters and optimizer state) of one veRL worker actor (runs in it)."""
    total = 0
    for trainer in _trainers(worker):
        engine = trainer.engine
        total += _local_bytes(engine.module.parameters())
        if engine.optimizer is not None:
            total += _local_bytes(v for st in engine.optimizer.state.values() for v in st.values()
                                  if hasattr(v, "element_size"))
    return total


def move(worker: Any, device: str) -> tuple[float, int]:
    """Move one worker actor's training state to "device" or "cpu" with veRL's `TrainingWorker.to`; the
    seconds (after a device synchronize) and the bytes it holds (runs in the worker)."""
    t0 = time.perf_counter()
    for trainer in _trainers(worker):
        trainer.to(device)
    get_torch_device().synchronize()
    return time.perf_counter() - t0, state_bytes(worker)


def actor_weights(worker: Any) -> dict:
    """The actor's full weights by HF name, as veRL sends them to the rollout (runs in the worker)."""
    for inner in _inner_workers(worker):
        actor = getattr(inner, "actor", None)
        if actor is not None:
            params, _ = actor.engine.get_per_tensor_param()
            return {name: t.detach().to("cpu", copy=True) for name, t in params}
    raise RuntimeError("no actor in this worker")


class TrainSide:
    """The training side of one veRL job: its worker groups' state on the device or in host memory."""

    def __init__(self, groups: list, nodes: int) -> None:
        # one per process: veRL colocates the critic's and the actor's workers in the same processes
        self.workers = list({w._actor_id: w for g in groups for w in g.workers}.values())
        self.nodes = max(nodes, 1)
        self.moves: list[tuple[str, float, int]] = []  # (device, seconds of the slowest worker, bytes moved)
        self._bytes = sum(ray.get([w.__ray_call__.remote(state_bytes) for w in self.workers]))

    def _move(self, device: str) -> None:
        done = ray.get([w.__ray_call__.remote(move, device) for w in self.workers])
        self._bytes = sum(b for _, b in done)
        self.moves.append((device, max(s for s, _ in done), self._bytes))

    def load(self) -> None:
        """veRL's load twins: model, optimizer and gradients onto the device."""
        self._move("device")

    def offload(self) -> None:
        """veRL's `offload_fsdp_model_to_cpu` and `offload_fsdp_optimizer`."""
        self._move("cpu")

    def host_bytes(self) -> int:
        """The training state's bytes, per training node (what an offload leaves in host memory)."""
        return self._bytes // self.nodes


class RayPPOTrainer(_verl.RayPPOTrainer):
    """veRL's RayPPOTrainer, multiplexed by RollMux when a job context is there: `job_id` and `client`
    (a permit client), or neither under `rollmux run` (the environment's); otherwise exactly veRL's."""

    def __init__(self, *args: Any, job_id: str | None = None, client: Any | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rollmux = VeRLPhases.for_job(job_id, client)
        if self.rollmux.active:
            use_rollmux_managers(self.config)

    def init_workers(self) -> None:
        """veRL's init_workers inside the init phase, then the managers report to the job's phases."""
        self.rollmux.on_init_workers()
        try:
            super().init_workers()
            if self.rollmux.active:
                self._attach()
        except BaseException as exc:
            self.rollmux.finish(exc)
            raise

    def _attach(self) -> None:
        groups = [self.actor_rollout_wg] + ([self.critic_wg] if self.use_critic else [])
        train = TrainSide(groups, self.config.trainer.nnodes)
        self.checkpoint_manager.weight_bytes = self._weight_bytes()
        self.rollmux.attach(self.checkpoint_manager, train)
        for manager in (self.checkpoint_manager, self.async_rollout_manager):
            if not isinstance(manager, (CheckpointEngineManager, AgentLoopManager)):
                raise TypeError(f"{type(manager).__name__} is not the RollMux adapter's manager")
            manager.rollmux = self.rollmux

    def _weight_bytes(self) -> int:
        import torch
        from verl.utils.torch_dtypes import PrecisionType

        dtype = PrecisionType.to_dtype(self.config.actor_rollout_ref.rollout.get("dtype", "bfloat16"))
        shapes = ray.get(self.actor_rollout_wg.workers[0].__ray_call__.remote(
            lambda w: [p.numel() for p in _trainers(w)[0].engine.module.parameters()]))
        return sum(shapes) * torch.empty(0, dtype=dtype).element_size()

    def fit(self) -> Any:
        """veRL's fit; whatever phase is open at its end (or failure) closes."""
        try:
            out = super().fit()
        except BaseException as exc:
            self.rollmux.finish(exc)
            raise
        self.rollmux.finish()
        return out

    def actor_weights(self) -> dict:
        """The actor's current weights by HF name (rank 0's full tensors)."""
        return ray.get(self.actor_rollout_wg.workers[0].__ray_call__.remote(actor_weights))
