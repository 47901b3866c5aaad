"""`python -m rollmux.adapters.verl.main_ppo <Hydra overrides>`: veRL's `main_ppo` with RollMux's trainer.

The same Hydra config (veRL's `ppo_trainer`) and overrides as `python -m verl.trainer.main_ppo`; the
trainer is veRL's `RayPPOTrainer` loop (`trainer.use_v1=False`, veRL 0.9.1's `main_ppo_v0` path) as
`rollmux.adapters.verl.RayPPOTrainer`. Under `rollmux run` the job's id, service and token come from
the environment (Ray's workers inherit it); without them it trains exactly as veRL does.
`build(config)` is the task runner's body, for a script that builds the trainer itself.
"""

from __future__ import annotations

import os
from typing import Any

from rollmux.adapters.verl.trainer import RayPPOTrainer  # (first: it says which extra is missing)
from rollmux.errors import raise_missing_extra
from rollmux.job import JOB_ENV

try:
    import hydra
    import ray
    from omegaconf import OmegaConf, open_dict
    from verl.trainer.main_ppo import run_ppo
    from verl.trainer.main_ppo_v0 import BaseTaskRunner
    from verl.trainer.ppo.utils import create_rl_dataset, create_rl_sampler, need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config
    from verl.utils.device import auto_set_device, get_device_name
except ModuleNotFoundError as _missing:
    raise_missing_extra(_missing, "rollmux.adapters.verl.main_ppo", "verl")

ROLLMUX_ENV = (*JOB_ENV, "ROLLMUX_CA")  # what `rollmux run` sets, and a CA bundle to trust


def _roles(config: Any) -> BaseTaskRunner:
    """veRL's role-to-worker mapping (its v0 task runner's), with the CPU platform's workers on the CPU."""
    runner = BaseTaskRunner()
    runner.add_actor_rollout_worker(config)
    runner.add_critic_worker(config)
    runner.add_reward_model_resource_pool(config)
    runner.add_teacher_model_resource_pool(config)
    if get_device_name() == "cpu":
        from verl.trainer.ppo.ray_trainer import Role

        from rollmux.adapters.verl.cpu import worker_classes
        actor, critic = worker_classes()
        for role in runner.role_worker_mapping:
            runner.role_worker_mapping[role] = ray.remote(critic if role == Role.Critic else actor)
    return runner


def build(config: Any, trainer_cls: type = RayPPOTrainer, **trainer_kwargs: Any) -> Any:
    """veRL's v0 task-runner body: roles, tokenizer, datasets and resource pools, then `trainer_cls(...)`
    (`trainer_kwargs`: e.g. `job_id=` and `client=`); call `init_workers()` then `fit()` on it."""
    from verl.utils.dataset.rl_dataset import collate_fn
    from verl.workers.config import HFModelConfig

    OmegaConf.resolve(config)
    runner = _roles(config)
    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    model: HFModelConfig = omega_conf_to_dataclass(config.actor_rollout_ref.model)
    data = {name: create_rl_dataset(files, config.data, model.tokenizer, model.processor, is_train=name == "train",
                                    max_samples=config.data.get(f"{name}_max_samples", -1))
            for name, files in (("train", config.data.train_files), ("val", config.data.val_files))}
    return trainer_cls(config=config, tokenizer=model.tokenizer, processor=model.processor,
                       role_worker_mapping=runner.role_worker_mapping,
                       resource_pool_manager=runner.init_resource_pool_mgr(config),
                       train_dataset=data["train"], val_dataset=data["val"], collate_fn=collate_fn,
                       train_sampler=create_rl_sampler(config.data, data["train"]), **trainer_kwargs)


@ray.remote
class TaskRunner:
    """veRL's task runner (a Ray actor) with RollMux's trainer."""

    def run(self, config: Any) -> None:
        """Build the trainer, its workers, and train."""
        trainer = build(config)
        trainer.init_workers()
        trainer.fit()


def prepare(config: Any) -> Any:
    """veRL's main's checks, on veRL's RayPPOTrainer path, with RollMux's environment passed to Ray's workers."""
    with open_dict(config):
        config.trainer.use_v1 = False  # veRL 0.9.1's default V1 trainer is not RayPPOTrainer
        ray_init = config.ray_kwargs.ray_init
        if ray_init.get("runtime_env") is None:
            ray_init.runtime_env = {}
        if ray_init.runtime_env.get("env_vars") is None:
            ray_init.runtime_env.env_vars = {}  # (a DictConfig copies what it is given: set, then read back)
        ray_init.runtime_env.env_vars.update({k: os.environ[k] for k in ROLLMUX_ENV if k in os.environ})
    auto_set_device(config)
    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    return config


@hydra.main(config_path="pkg://verl.trainer.config", config_name="ppo_trainer", version_base=None)
def main(config: Any) -> None:
    """The entry point: veRL's main_ppo, RollMux's trainer."""
    run_ppo(prepare(config), task_runner_class=TaskRunner)


if __name__ == "__main__":
    main()
