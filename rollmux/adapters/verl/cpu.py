"""veRL on CPU through veRL's own plugin seams: a CPU platform, its FSDP engine, and a stand-in rollout server.

Loaded in every process of a veRL job by veRL's `VERL_USE_EXTERNAL_MODULES` (each Ray worker imports
`verl`, which imports this module before anything asks for the platform); `activate()` sets that and
`VERL_PLATFORM=cpu` in the environment Ray's workers inherit. What it registers:

- `CPUPlatform` in veRL's `PlatformRegistry` as "cpu": device "cpu", collectives over Gloo, and Ray's
  "GPU" resource as the unit of a worker slot (start Ray with `num_gpus=` slots on a CPU machine:
  veRL counts and places its workers by that resource).
- veRL's own FSDP engines (`FSDPEngineWithLMHead`, `FSDPEngineWithValueHead`) in its `EngineRegistry`
  for the device "cpu" (veRL registers them for cuda and npu only).
- rollout name `rollmux_cpu`: a STAND-IN for the GPU-bound inference server (vLLM, SGLang), built on
  veRL's `RolloutReplica` (`RolloutReplicaRegistry`) and `BaseRollout` (its rollout registry). One
  server actor per replica samples with transformers on CPU, token by token, each request seeded
  from (rollout seed, weight version, request id) (`rollout.full_determinism=True` makes veRL's
  request ids `det-<index>`). It sleeps and wakes the way veRL's vLLM server does: a hybrid replica's
  sleep frees its weights and KV cache (level 2; the next weight update restores them), a colocated
  one's keeps a host copy of the weights (level 1), and a standalone one skips both ("skip sleep in
  standalone mode"). Every sleep, wake and weight load is logged with the bytes then resident.
"""

from __future__ import annotations

import os
import re
import time
import zlib
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import torch

from verl.plugin.platform.platform_base import PlatformBase
from verl.plugin.platform.platform_manager import PlatformRegistry

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


# ------------------------------------------------------------------ the stand-in rollout server

def request_seed(seed: int, version: int, request_id: str) -> int:
    """The sampling seed of one request: the rollout seed, the weight version and the request id."""
    return zlib.crc32(f"{seed}:{version}:{request_id}".encode()) + seed * 2**32


class CPUServer:
    """One replica's inference server on CPU (a Ray actor): an HF model sampled token by token."""

    def __init__(self, config: Any, model_config: Any, rollout_mode: Any, replica_rank: int) -> None:
        from transformers import AutoModelForCausalLM

        torch.set_num_threads(1)
        self.config, self.mode, self.replica_rank = config, rollout_mode, replica_rank
        path = getattr(model_config, "local_path", None) or model_config.path  # a dataclass or veRL's DictConfig
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        self.shapes = {k: (v.shape, v.dtype) for k, v in self.model.named_parameters()}
        self.host: dict[str, torch.Tensor] | None = None  # level-1 sleep: the weights' host copy
        self.weights, self.kv = True, True  # what is resident (the KV cache is a flag: generate allocates it)
        self.version = 0
        self.log: list[tuple[str, float, int]] = []  # (event, time, weight bytes resident after it)
        self.requests = 0

    def _record(self, event: str) -> None:
        self.log.append((event, time.time(), self.resident_bytes()))

    def resident_bytes(self) -> int:
        """Bytes of the weights resident in the server's model."""
        return sum(p.numel() * p.element_size() for p in self.model.parameters())

    def _free(self, keep_host: bool) -> None:
        params = dict(self.model.named_parameters())  # (buffers such as rotary tables stay: no update carries them)
        if keep_host and self.host is None:
            self.host = {k: t.detach().clone() for k, t in params.items()}
        for t in params.values():
            t.data = torch.empty(0, dtype=t.dtype)
        self.weights = False

    def _alloc(self) -> None:
        for name, t in self.model.named_parameters():
            shape, dtype = (self.host[name].shape, self.host[name].dtype) if self.host else self.shapes[name]
            t.data = self.host[name] if self.host else torch.zeros(shape, dtype=dtype)
        self.host, self.weights = None, True

    def sleep(self, level: int | None = None) -> None:
        """veRL's server sleep: hybrid frees weights and KV (level 2), colocated keeps a host copy (level 1),
        standalone skips it (as veRL's vLLM server does)."""
        from verl.workers.rollout.replica import RolloutMode

        if self.mode == RolloutMode.STANDALONE and level is None:
            self._record("skip sleep")
            return
        level = level or (2 if self.mode == RolloutMode.HYBRID else 1)
        if self.weights:
            self._free(keep_host=level == 1)
        self.kv = False
        self._record(f"sleep level {level}")

    def wake_up(self, tags: list[str] | None = None, force: bool = False) -> None:
        """veRL's server wake: a hybrid replica's weights come back with the next weight update; `force`
        wakes a standalone one (which veRL's server skips)."""
        from verl.workers.rollout.replica import RolloutMode

        if self.mode == RolloutMode.STANDALONE and not force:
            self._record("skip wake_up")
            return
        self.resume(tags or ["weights", "kv_cache"])

    def resume(self, tags: list[str]) -> None:
        """Weights and/or KV cache back (a level-2 sleep's weights come back empty until loaded)."""
        if "weights" in tags and not self.weights:
            self._alloc()
        if "kv_cache" in tags:
            self.kv = True
        self._record(f"resume {'+'.join(tags)}")

    def release(self) -> None:
        """Free weights and KV cache (the hybrid worker's `BaseRollout.release`)."""
        self._free(keep_host=False)
        self.kv = False
        self._record("release")

    def load_weights(self, weights: dict[str, torch.Tensor], version: int | None) -> None:
        """New weights from the trainer (veRL's naive weight update), into resident storage."""
        if not self.weights:
            self._alloc()
        missing = self.model.load_state_dict({k: v.to(torch.float32) for k, v in weights.items()}, strict=False)
        if missing.unexpected_keys:
            raise KeyError(f"{NAME}: weights the model does not have: {missing.unexpected_keys[:5]}")
        if version is not None:
            self.version = version
        self._record(f"load weights v{self.version}")

    def set_global_steps(self, global_steps: int) -> None:
        """The weight version (veRL's server method)."""
        self.version = global_steps

    def generate(self, request_id: str, prompt_ids: list[int], sampling_params: dict[str, Any],
                 **kwargs: Any) -> Any:
        """One request: sample up to the response length, seeded from the request."""
        from verl.workers.rollout.replica import TokenOutput

        if not (self.weights and self.kv):
            raise RuntimeError(f"{NAME} replica {self.replica_rank}: generate while asleep "
                               f"(weights {self.weights}, kv {self.kv})")
        gen = torch.Generator().manual_seed(request_seed(self.config.seed, self.version, request_id))
        tokens, logprobs = self._sample(prompt_ids, sampling_params, gen)
        self.requests += 1
        return TokenOutput(token_ids=tokens, log_probs=logprobs if sampling_params.get("logprobs") else None,
                           stop_reason="completed", num_preempted=0, extra_fields={"global_steps": self.version})

    @torch.no_grad()
    def _sample(self, prompt_ids: list[int], params: dict[str, Any], gen: torch.Generator):
        temperature = float(params.get("temperature", 1.0))
        ids, past, tokens, logprobs = torch.tensor([prompt_ids]), None, [], []
        eos = self.model.config.eos_token_id
        for _ in range(self.config.response_length):
            out = self.model(input_ids=ids if past is None else ids[:, -1:], past_key_values=past, use_cache=True)
            past, logits = out.past_key_values, out.logits[0, -1].float()
            lp = torch.log_softmax(logits / temperature if temperature > 0 else logits, dim=-1)
            tok = (torch.multinomial(lp.exp(), 1, generator=gen) if temperature > 0 else lp.argmax(-1, True)).item()
            tokens.append(tok)
            logprobs.append(lp[tok].item())
            if tok == eos:
                break
            ids = torch.cat([ids, torch.tensor([[tok]])], dim=1)
        return tokens, logprobs

    def events(self) -> list[tuple[str, float, int]]:
        """Every sleep, wake and weight load so far (for tests and measurements)."""
        return list(self.log)

    # veRL's server methods with nothing to do on CPU: requests run one at a time and finish.
    abort_all_requests = resume_generation = clear_kv_cache = release_kv_cache = resume_kv_cache = _no_op
    start_profile = stop_profile = _no_op


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


def _replica_base():
    from verl.workers.rollout.replica import RolloutReplica
    return RolloutReplica


class CPUReplica(_replica_base()):
    """veRL's `RolloutReplica` for the stand-in: one `CPUServer` actor, named per job and replica."""

    async def launch_servers(self) -> None:
        """Start the server actor and, for a hybrid replica, hand it to the workers' rollout objects."""
        import ray

        tag = re.sub(r"\W", "_", os.environ.get("ROLLMUX_VERL_JOB", "job"))
        name = f"{NAME}_{tag}_{self.replica_rank}{self.name_suffix}_{os.getpid()}"
        server = ray.remote(CPUServer).options(name=name, num_cpus=0, max_concurrency=1).remote(
            self.config, self.model_config, self.rollout_mode, self.replica_rank)
        self.servers = [server]
        self._server_handle, self._server_address = server, f"{NAME}://{name}"
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
