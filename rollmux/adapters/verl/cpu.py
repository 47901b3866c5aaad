"""veRL on CPU through veRL's own plugin seams: a CPU platform, its FSDP engine, and a stand-in rollout server.

Imported in every process of a veRL job by the adapter's veRL plugin (rollmux/adapters/verl/plugin.py,
which veRL loads through `VERL_USE_EXTERNAL_MODULES` when it is imported, before anything asks for the
platform) when `VERL_PLATFORM=cpu`; `activate()` sets both in the environment Ray's workers inherit.
What it registers:

- `CPUPlatform` in veRL's `PlatformRegistry` as "cpu": device "cpu", collectives over Gloo, and Ray's
  "GPU" resource as the unit of a worker slot (start Ray with `num_gpus=` slots on a CPU machine:
  veRL counts and places its workers by that resource).
- veRL's own FSDP engines (`FSDPEngineWithLMHead`, `FSDPEngineWithValueHead`) in its `EngineRegistry`
  for the device "cpu" (veRL registers them for cuda and npu only).
- rollout name `rollmux_cpu`: a STAND-IN for the GPU-bound inference server (vLLM, SGLang), built on
  veRL's `RolloutReplica` (`RolloutReplicaRegistry`) and `BaseRollout` (its rollout registry): one
  `cpu_server.CPUServer` actor per replica, sampling with transformers on CPU and sleeping and waking
  as veRL's vLLM server does (`rollout.full_determinism=True` makes veRL's request ids `det-<index>`,
  which the server's per-request seeds need). It serves veRL's hybrid replicas (`RayPPOTrainer`'s);
  a standalone replica's own worker group (veRL's `init_standalone`) is not built on CPU.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import torch

from verl.plugin.platform.platform_base import PlatformBase
from verl.plugin.platform.platform_manager import PlatformRegistry

from rollmux.adapters.verl.cpu_server import CPUServer

NAME = "rollmux_cpu"  # the rollout name (actor_rollout_ref.rollout.name)
PLUGIN = "rollmux.adapters.verl.plugin"
PLATFORM = "cpu"


def _no_op(*args: Any, **kwargs: Any) -> None:
    return None


def _host_memory() -> tuple[int, int]:
    pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    return pages * size, pages * size


# What veRL calls on `get_torch_device()`, for the CPU: no caches, streams or per-device memory to manage.
DEVICE_MODULE = SimpleNamespace(
    is_available=lambda: True, device_count=lambda: 1, current_device=lambda: "cpu", set_device=_no_op,
    synchronize=_no_op, empty_cache=_no_op, ipc_collect=_no_op, manual_seed=torch.manual_seed,
    manual_seed_all=torch.manual_seed, get_rng_state=torch.get_rng_state, set_rng_state=torch.set_rng_state,
    memory_allocated=lambda *a: 0, memory_reserved=lambda *a: 0, max_memory_allocated=lambda *a: 0,
    max_memory_reserved=lambda *a: 0, reset_peak_memory_stats=_no_op, mem_get_info=lambda *a: _host_memory(),
    set_per_process_memory_fraction=_no_op, get_device_name=lambda *a: "cpu", is_initialized=lambda: True,
    current_stream=lambda *a: SimpleNamespace(synchronize=_no_op, wait_stream=_no_op),
)


@PlatformRegistry.register(platform=PLATFORM)
class CPUPlatform(PlatformBase):
    """veRL's platform interface for the CPU: Gloo collectives, Ray's GPU resource as the worker slot."""

    device_name = "cpu"
    vendor_name = "cpu"
    device_module = DEVICE_MODULE

    def is_available(self) -> bool:
        """Always: the CPU is there."""
        return True

    def current_device(self) -> str:
        """The device veRL moves tensors to (`.to(get_device_id())`)."""
        return "cpu"

    def device_count(self) -> int:
        """One device per process."""
        return 1

    def set_device(self, device_index: int) -> None:
        """Nothing to select."""

    def synchronize(self, device_index: int | None = None) -> None:
        """CPU work is synchronous."""

    def manual_seed(self, seed: int) -> None:
        """Seed the CPU generator."""
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        """Seed the CPU generator."""
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        """No device allocator."""

    def empty_cache(self) -> None:
        """No device cache."""

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        """No compute capability."""
        return None, None

    def communication_backend_name(self) -> str:
        """Collectives over Gloo."""
        return "gloo"

    def visible_devices_envvar(self) -> str:
        """Ray sets it for its GPU resource; nothing reads it on the CPU."""
        return "CUDA_VISIBLE_DEVICES"

    @contextmanager
    def nvtx_range(self, msg: str):
        """No profiler ranges."""
        yield

    def profiler_start(self) -> None:
        """No device profiler."""

    def profiler_stop(self) -> None:
        """No device profiler."""

    def ray_resource_name(self) -> str:
        """Ray's GPU resource counts worker slots (veRL's resource check reads it)."""
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        """Nothing to keep Ray from setting."""
        return []

    def is_ipc_supported(self) -> bool:
        """No device IPC."""
        return False

    def cudart(self) -> None:
        """No CUDA runtime."""
        return None


def activate() -> None:
    """Make every process of the job load the adapter's veRL plugin and pick the CPU platform (before Ray starts)."""
    os.environ["VERL_PLATFORM"] = PLATFORM
    modules = [m for m in os.environ.get("VERL_USE_EXTERNAL_MODULES", "").split(",") if m]
    if PLUGIN not in modules:
        os.environ["VERL_USE_EXTERNAL_MODULES"] = ",".join([*modules, PLUGIN])


def _register_engines() -> None:
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead, FSDPEngineWithValueHead

    for model_type, cls in (("language_model", FSDPEngineWithLMHead), ("value_model", FSDPEngineWithValueHead)):
        if PLATFORM not in EngineRegistry._engines.get(model_type, {}).get("fsdp", {}):
            EngineRegistry.register(model_type=model_type, backend=["fsdp", "fsdp2"], device=PLATFORM)(cls)


def _register_rollout() -> None:
    from verl.workers.rollout import base
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    base._ROLLOUT_REGISTRY[(NAME, "async")] = f"{__name__}.ServerAdapter"
    RolloutReplicaRegistry.register(NAME, lambda: CPUReplica)


class ServerAdapter:
    """The rollout object inside veRL's hybrid worker (`BaseRollout`): forwards to its replica's server."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any = None, **kwargs: Any) -> None:
        from verl.utils.config import omega_conf_to_dataclass

        self.config = omega_conf_to_dataclass(config)
        self.server = None  # set by CPUReplica.launch_servers
        self.replica_rank = int(os.environ.get("RANK", 0))
        self.is_leader_rank = True

    async def resume(self, tags: list[str]) -> None:
        """Weights or KV cache back on the server."""
        await self.server.resume.remote(tags)

    async def release(self) -> None:
        """Free the server's weights and KV cache."""
        await self.server.release.remote()

    async def update_weights(self, weights: Any, global_steps: int | None = None, **kwargs: Any) -> None:
        """The trainer's tensors, (name, tensor) pairs, to the server."""
        named = {}
        for name, tensor in weights:
            named[name] = tensor.detach().to("cpu", copy=True)
        await self.server.load_weights.remote(named, global_steps)


def _attach(worker: Any, server: Any) -> None:
    # Runs inside veRL's worker actor: hand the server to the rollout object of its ActorRolloutRefWorker.
    for inner in vars(worker).get("worker_dict", {}).values() or [worker]:
        rollout = getattr(inner, "rollout", None)
        if isinstance(rollout, ServerAdapter):
            rollout.server = server


from verl.workers.rollout.replica import RolloutReplica  # noqa: E402 -- only once the platform is registered


class CPUReplica(RolloutReplica):
    """veRL's `RolloutReplica` for the stand-in: one `CPUServer` actor per replica."""

    async def launch_servers(self) -> None:
        """Start the server actor and, for a hybrid replica, hand it to the workers' rollout objects."""
        import ray

        path = getattr(self.model_config, "local_path", None) or self.model_config.path
        server = ray.remote(CPUServer).options(num_cpus=0, max_concurrency=1).remote(
            path, self.config.seed, self.config.response_length, self.rollout_mode.value, self.replica_rank,
            self.config.free_cache_engine)
        self.servers = [server]
        self._server_handle, self._server_address = server, f"{NAME}://{self.replica_rank}{self.name_suffix}"
        for worker in self.workers:
            await worker.__ray_call__.remote(_attach, server)


# Registration runs wherever veRL loads this module; the platform first, before anything asks for it.
_register_engines()
_register_rollout()


def worker_classes() -> tuple[type, type]:
    """veRL's actor and critic worker classes for the CPU: the process group is Gloo's alone (veRL's default
    backend string names the device twice when the device is the CPU)."""
    from verl.utils.distributed import initialize_global_process_group_ray
    from verl.workers.engine_workers import ActorRolloutRefWorker, TrainingWorker

    class CPUActorRolloutRefWorker(ActorRolloutRefWorker):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            initialize_global_process_group_ray(backend="gloo")
            super().__init__(*args, **kwargs)

    class CPUTrainingWorker(TrainingWorker):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            initialize_global_process_group_ray(backend="gloo")
            super().__init__(*args, **kwargs)

    return CPUActorRolloutRefWorker, CPUTrainingWorker
