"""One veRL job of the adapter tests (tests/adapters/test_verl.py), in a process of its own.

veRL names some of a job's Ray actors the same for every job (`reward_loop_worker_0`), so two veRL jobs
need two Ray namespaces, which is one driver process each. Each job's process attaches to the test's
Ray cluster in a namespace of its own and asks the test's `GroupController` for its permits through a
`multiprocessing` manager that serves the test's `LocalPermitClient` (`serve_permits` / `Recorded`).

What a job runs (`main`): veRL's GRPO on the tiny job through `rollmux.adapters.verl` under RollMux
(`build(config, job_id=, client=)`, `init_workers()`, `fit()`), with veRL's own step-0 checkpoint saved
between the two; then the same trainer solo (no shim, so exactly veRL's loop) from that checkpoint, so the
solo run starts from the multiplexed run's initial weights, optimizer, scheduler and RNG state without
starting its workers again. It saves both runs' final actor weights and what it observed.
"""

from __future__ import annotations

import importlib.util
import re
import threading
import time
from multiprocessing.managers import BaseManager
from pathlib import Path
from typing import Any


JOBS = {"a": 0, "b": 1}  # job id -> seed (model, data and sampling)
ROOT = Path(__file__).resolve().parents[2]


def doc_blocks(kind: str) -> list[str]:
    """The fenced `kind` blocks of docs/adapters.md's veRL section, verbatim."""
    text = (ROOT / "docs" / "adapters.md").read_text()
    section = text[text.index("### veRL"):text.index("### OpenRLHF")]
    return re.findall(rf"^```{kind}\n(.*?)^```", section, re.M | re.S)


def gpu_script():
    """benchmarks/gpu/verl_grpo.py as a module."""
    spec = importlib.util.spec_from_file_location("verl_grpo", ROOT / "benchmarks" / "gpu" / "verl_grpo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Permits(BaseManager):
    """Serves (in the test) or reaches (in a job) the test's permit client."""


def serve_permits(client: Any, authkey: bytes) -> tuple[tuple[str, int], Any]:
    """Serve `client` to job processes from a thread of this process; (address, server)."""
    _Permits.register("client", callable=lambda: client)
    server = _Permits(address=("127.0.0.1", 0), authkey=authkey).get_server()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server.address, server


class Recorded:
    """The job's permit client: the test's, through the manager, with each grant and release timed here
    (`time.monotonic`, one clock for every process of the machine)."""

    def __init__(self, address: tuple[str, int], authkey: bytes) -> None:
        _Permits.register("client")
        manager = _Permits(address=address, authkey=authkey)
        manager.connect()
        self.inner = manager.client()
        self.log: list[tuple[str, str, float]] = []  # ("grant" | "release", phase, time)

    def acquire(self, job_id: str, phase: str) -> Any:
        """The test's controller's permit."""
        grant = self.inner.acquire(job_id, phase)
        self.log.append(("grant", phase, time.monotonic()))
        return grant

    def tail_started(self, job_id: str) -> None:
        """Forwarded (the veRL adapter never reports a tail)."""
        self.inner.tail_started(job_id)

    def release(self, timings: Any) -> None:
        """Forwarded, after the time is taken."""
        self.log.append(("release", timings.phase, time.monotonic()))
        self.inner.release(timings)


def main(spec: dict, out: str) -> None:
    """Run job `spec` multiplexed, then solo from its step-0 checkpoint; save what was seen to `out`."""
    import ray
    import torch
    from omegaconf import open_dict

    from rollmux.adapters.verl import cpu, tiny
    from rollmux.adapters.verl.main_ppo import build
    from rollmux.adapters.verl.phases import VeRLPhases

    cpu.activate()
    ray.init(address=spec["ray"], namespace=spec["job_id"], log_to_driver=False)
    job = tiny.TinyJob(Path(spec["root"]), seed=spec["seed"])
    client = Recorded(spec["permits"], spec["authkey"])
    trainer = build(tiny.config(job, steps=spec["steps"], seed=spec["seed"]), job_id=spec["job_id"], client=client)
    trainer.init_workers()
    trainer.global_steps = 0
    trainer._save_checkpoint()  # veRL's own checkpoint of step 0 (actor, optimizer, scheduler, RNG, data)
    initial = trainer.actor_weights()
    trainer.fit()
    phases = trainer.rollmux
    seen = {"initial": initial, "mux": trainer.actor_weights(), "history": phases.shim.history,
            "permits": client.log, "events": phases.events, "moves": phases.train.moves,
            "server": ray.get(trainer.checkpoint_manager.replicas[0].servers[0].events.remote()),
            "weight_bytes": trainer.checkpoint_manager.weight_bytes}
    trainer.rollmux = VeRLPhases()  # solo: veRL's own calls from here on
    trainer.checkpoint_manager.rollmux = trainer.async_rollout_manager.rollmux = None
    with open_dict(trainer.config):
        trainer.config.trainer.resume_mode = "resume_path"
        trainer.config.trainer.resume_from_path = str(Path(trainer.config.trainer.default_local_dir) / "global_step_0")
    trainer.fit()
    seen["solo"] = trainer.actor_weights()
    if spec.get("probe"):
        seen.update(standalone=standalone(trainer, spec["steps"]), refused=refused(trainer.config),
                    snippet=snippet(spec["snippet"]), prepared=prepared(trainer.config),
                    dry_run=dry_run(job.root.parent / "gpu"), entry=entry(job, spec["steps"]))
    torch.save(seen, out)
    ray.shutdown()


def _server_weights(server: Any) -> dict:
    import ray
    return ray.get(server.__ray_call__.remote(lambda s: {k: v.clone() for k, v in s.model.named_parameters()}))


def standalone(trainer: Any, step: int) -> dict:
    """The job's replica and its server made standalone (disaggregated) after the solo run, which ends with
    the server awake: veRL's own sleep skips it; the adapter's sleep and wake force it, keeping the weights."""
    import ray
    from verl.checkpoint_engine.base import CheckpointEngineManager as VeRLManager
    from verl.workers.rollout.replica import RolloutMode

    from rollmux.adapters.verl.phases import VeRLPhases

    manager = trainer.checkpoint_manager
    replica = manager.replicas[0]
    server = replica.servers[0]
    replica.rollout_mode = RolloutMode.STANDALONE
    ray.get(server.__ray_call__.remote(lambda s: setattr(s, "rollout_mode", "standalone")))
    before = _server_weights(server)
    VeRLManager.sleep_replicas(manager)  # veRL's own
    manager.rollmux = VeRLPhases()
    manager.sleep()
    manager.rollmux.awake = False
    asleep = manager.host_bytes()
    manager.loaded_step = step
    manager.wake(step)
    return {"log": [(e, b) for e, _, b in ray.get(server.events.remote())][-3:], "host_bytes": asleep,
            "kept": all(torch_equal(before[k], v) for k, v in _server_weights(server).items()),
            "mode": ray.get(server.__ray_call__.remote(lambda s: s.rollout_mode))}


def torch_equal(a: Any, b: Any) -> bool:
    """Bit-identical tensors."""
    import torch
    return torch.equal(a, b)


def refused(config: Any) -> str:
    """What the adapter says to a config whose checkpoint manager is veRL's own, not a subclass of its."""
    from omegaconf import OmegaConf

    from rollmux.adapters.verl.trainer import use_rollmux_managers

    config = OmegaConf.create(OmegaConf.to_container(config))
    config.actor_rollout_ref.rollout.checkpoint_manager_class = "verl.checkpoint_engine.base.CheckpointEngineManager"
    try:
        use_rollmux_managers(config)
    except ValueError as exc:
        return str(exc)
    return ""


def snippet(text: str) -> dict:
    """docs/adapters.md's import line, run verbatim: which class it names."""
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer as VeRLTrainer

    from rollmux.adapters.verl.trainer import RayPPOTrainer

    names: dict = {}
    exec(text, names)  # noqa: S102 -- the documentation's own snippet
    return {"is_the_adapters": names["RayPPOTrainer"] is RayPPOTrainer,
            "subclasses_verls": issubclass(names["RayPPOTrainer"], VeRLTrainer)}


def prepared(config: Any) -> dict:
    """What main_ppo's `prepare` makes of a config under `rollmux run` (its environment set here)."""
    import os

    from omegaconf import OmegaConf

    from rollmux.adapters.verl.main_ppo import prepare

    config = OmegaConf.create(OmegaConf.to_container(config))
    os.environ.update(ROLLMUX_URL="http://127.0.0.1:1", ROLLMUX_JOB_ID="j", ROLLMUX_TOKEN_FILE="/nonexistent")
    try:
        config = prepare(config)
    finally:
        for name in ("ROLLMUX_URL", "ROLLMUX_JOB_ID", "ROLLMUX_TOKEN_FILE"):
            del os.environ[name]
    return {"use_v1": config.trainer.use_v1, "env": dict(config.ray_kwargs.ray_init.runtime_env.env_vars)}


def _printed(fn: Any, *args: Any) -> tuple[Any, str]:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        result = fn(*args)
    return result, out.getvalue()


def dry_run(workdir: Path) -> tuple[int, str]:
    """The GPU script's `--dry-run` (its model written, veRL's config for vLLM composed and checked)."""
    return _printed(gpu_script().main, ["--dry-run", "--hidden", "32", "--layers", "2", "--workdir", str(workdir)])


def entry(job: Any, steps: int) -> str:
    """What `python -m rollmux.adapters.verl.main_ppo --cfg job <the tiny job's overrides>` prints (Hydra's
    composed config; `--cfg` stops before the run)."""
    import sys

    from rollmux.adapters.verl import main_ppo, tiny

    argv, sys.argv = sys.argv, ["main_ppo", "--cfg", "job", *tiny.overrides(job, steps=steps)]
    try:
        return _printed(main_ppo.main)[1]
    finally:
        sys.argv = argv
