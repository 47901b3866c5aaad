"""veRL GRPO under the RollMux adapter on one GPU: the warm switch and the rollout engine's sleep and wake.

It runs veRL 0.9.1's own `RayPPOTrainer.fit` (FSDP2 actor, vLLM or SGLang in veRL's hybrid engine) on a
model built here (a random Llama saved to a folder and a tokenizer trained with `tokenizers`, loaded by
path; nothing comes from a hub) through `rollmux.adapters.verl`, with its permits from an in-process
`GroupController` (one job, `rollmux.shim.LocalPermitClient`). It prints, per iteration:

- train onload: the trainer's state (parameters, AdamW moments) host -> device with veRL's load twins,
  as veRL's workers timed it after a device synchronize, and its GB/s over those bytes (the warm switch);
- train offload: device -> host (veRL's `offload_fsdp_model_to_cpu` / `offload_fsdp_optimizer`);
- rollout wake: the engine back on its device with the trainer's weights (veRL's hybrid wake is its
  weight update: resume weights, load them, resume the KV cache), and rollout sleep (veRL's sleep);

and the model's parameter bytes, as JSON (and a table on stderr). Modes:

    python benchmarks/gpu/verl_grpo.py                 # the GPU run (vLLM), 4 iterations
    python benchmarks/gpu/verl_grpo.py --dry-run       # write the model, compose and check veRL's config
    python benchmarks/gpu/verl_grpo.py --device cpu    # the same loop on CPU, the adapter's stand-in server
    python benchmarks/gpu/verl_grpo.py --copy-only     # torch alone: the state's host -> device copy

benchmarks/gpu/README.md says what to install on the GPU machine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from rollmux.adapters.verl import tiny

JOB_ID = "verl-gpu"
JOB_RECORD = {"job_id": JOB_ID, "arrival_s": 0, "duration_s": 3600, "slo": 2.0, "rollout_gpus": 1, "train_gpus": 1,
              "cannot": ["tail_migration", "move"]}


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=4, help="GRPO iterations (default 4)")
    p.add_argument("--hidden", type=int, default=1024, help="model width (default 1024)")
    p.add_argument("--layers", type=int, default=8, help="model layers (default 8: about 80M parameters)")
    p.add_argument("--rollout", choices=("vllm", "sglang"), default="vllm", help="veRL's rollout engine")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help="cpu: the adapter's CPU platform and stand-in server instead of the engine")
    p.add_argument("--dry-run", action="store_true", help="write the model and check the config; no Ray")
    p.add_argument("--copy-only", action="store_true", help="torch alone: time the state's host -> device copy")
    p.add_argument("--workdir", type=Path, default=None, help="where the model and data go (default: a temp dir)")
    p.add_argument("--json", type=Path, default=None, help="also write the measurements here")
    args = p.parse_args(argv)
    if args.steps < 1 or args.hidden < 8 or args.layers < 1:
        p.error("--steps, --layers must be >= 1 and --hidden >= 8")
    return args


def overrides(args: argparse.Namespace) -> list[str]:
    """What the GPU run changes in the tiny job's overrides (rollmux.adapters.verl.tiny)."""
    if args.device == "cpu":
        return []
    return ["actor_rollout_ref.rollout.full_determinism=False",  # (vLLM's batch-invariant kernels: not measured)
            "actor_rollout_ref.rollout.gpu_memory_utilization=0.3", "actor_rollout_ref.rollout.enforce_eager=True",
            "actor_rollout_ref.rollout.free_cache_engine=True", "actor_rollout_ref.actor.fsdp_config.dtype=bfloat16",
            "actor_rollout_ref.rollout.max_model_len=64"]


def compose(job: tiny.TinyJob, args: argparse.Namespace) -> Any:
    """veRL's config for the run, checked by veRL's own `validate_config`."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    import verl.trainer.config as cfg_pkg

    rollout = "rollmux_cpu" if args.device == "cpu" else args.rollout
    merged = dict(o.split("=", 1) for o in tiny.overrides(job, steps=args.steps, rollout=rollout, device=args.device))
    merged.update(o.split("=", 1) for o in overrides(args))  # (Hydra refuses a key given twice)
    with initialize_config_dir(config_dir=str(Path(cfg_pkg.__file__).parent), version_base=None):
        config = hydra_compose(config_name="ppo_trainer", overrides=[f"{k}={v}" for k, v in merged.items()])
    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    return config


def permits() -> tuple[Any, Any]:
    """A GroupController with this one job on one rollout and one training node; (client, its environment)."""
    from rollmux.core.config import SchedulerConfig
    from rollmux.core.env import WallClockEnvironment
    from rollmux.core.group import Group, Member
    from rollmux.core.group_controller import GroupController
    from rollmux.core.spec import JobSpec, default_cluster
    from rollmux.shim import LocalPermitClient

    env = WallClockEnvironment()
    group = Group(0, 1, 1, (Member(JobSpec.model_validate(JOB_RECORD), (0,), (0,)),))
    ctl = GroupController(env, group, SchedulerConfig().intra_for(default_cluster()))
    threading.Thread(target=env.serve, daemon=True).start()
    return LocalPermitClient(env, {JOB_ID: ctl}), env


def report(history: list, moves: list) -> dict:
    """Per iteration: train onload/offload (veRL's workers' own times and bytes) and rollout wake/sleep; the
    parameter bytes are what init's offload moved (no optimizer state exists before the first step)."""
    param_bytes = moves[0][2]
    rows, loads = [], iter(m for m in moves if m[0] == "device")
    offloads = iter(m for m in moves[1:] if m[0] == "cpu")  # (the first offload ends init)
    rollouts = [t for t in history if t.phase == "rollout"]
    trains = [t for t in history if t.phase == "train"]
    for i, (r, t) in enumerate(zip(rollouts, trains, strict=True)):
        (_, on_s, on_b), (_, off_s, off_b) = next(loads), next(offloads)
        rows.append({"iteration": i + 1, "train_onload_s": on_s, "train_onload_bytes": on_b,
                     "train_onload_gb_s": on_b / on_s / 1e9 if on_s > 0 else None, "train_offload_s": off_s,
                     "rollout_wake_s": r.onload_s, "rollout_sleep_s": r.offload_s, "rollout_s": r.run_s,
                     "train_s": t.run_s, "permit_train_onload_s": t.onload_s})
    return {"parameter_bytes": param_bytes, "iterations": rows}


def table(result: dict) -> str:
    """The measurements as a table."""
    lines = [f"model parameters: {result['parameter_bytes'] / 1e6:.1f} MB (float32)",
             "iter  train onload s (GB/s, MB)   train offload s   rollout wake s   rollout sleep s"]
    for r in result["iterations"]:
        rate = f"{r['train_onload_gb_s']:.2f}" if r["train_onload_gb_s"] is not None else "-"
        lines.append(f"{r['iteration']:>4}  {r['train_onload_s']:>8.4f} ({rate}, {r['train_onload_bytes'] / 1e6:.1f})"
                     f"   {r['train_offload_s']:>15.4f}   {r['rollout_wake_s']:>14.4f}   {r['rollout_sleep_s']:>15.4f}")
    return "\n".join(lines)


def run(job: tiny.TinyJob, args: argparse.Namespace) -> dict:
    """The loop under the adapter; its measurements."""
    import ray

    if args.device == "cpu":
        from rollmux.adapters.verl import cpu
        cpu.activate()
    else:  # the adapter's veRL plugin in every process (its TRL compatibility), before veRL is imported
        os.environ.setdefault("VERL_USE_EXTERNAL_MODULES", "rollmux.adapters.verl.plugin")
    config = compose(job, args)
    from rollmux.adapters.verl.main_ppo import build

    client, env = permits()
    ray.init(address="local", num_cpus=8, num_gpus=1, include_dashboard=False)
    try:
        trainer = build(config, job_id=JOB_ID, client=client)
        trainer.init_workers()
        trainer.fit()
        return report(trainer.rollmux.shim.history, trainer.rollmux.train.moves)
    finally:
        env.stop()
        ray.shutdown()


def copy_only(job: tiny.TinyJob) -> dict:
    """torch alone: the model's state (and two AdamW moments) host -> device and back, pinned and pageable."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(job.model, dtype=torch.float32)
    state = [t for p in model.parameters() for t in (p.data, torch.zeros_like(p), torch.zeros_like(p))]
    nbytes = sum(t.nbytes for t in state)
    out = {"state_bytes": nbytes}
    for kind, host in (("pageable", state), ("pinned", [t.pin_memory() for t in state])):
        for _ in range(2):  # the second is the one reported (the first warms the allocator)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            dev = [t.to("cuda", non_blocking=True) for t in host]
            torch.cuda.synchronize()
            t1 = time.perf_counter()
            for h, d in zip(host, dev):
                h.copy_(d, non_blocking=True)
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            del dev
        out[kind] = {"h2d_s": t1 - t0, "h2d_gb_s": nbytes / (t1 - t0) / 1e9, "d2h_s": t2 - t1,
                     "d2h_gb_s": nbytes / (t2 - t1) / 1e9}
    return out


def main(argv: list[str] | None = None) -> int:
    """Write the model, then dry-run, copy or run; print what was measured."""
    args = parse(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="verl-grpo-"))
    job = tiny.write(tiny.TinyJob(workdir, hidden=args.hidden, layers=args.layers))
    if args.dry_run:
        config = compose(job, args)
        rollout = config.actor_rollout_ref.rollout
        print(f"dry run: model {job.model}, {args.steps} GRPO iterations of {config.data.train_batch_size} prompts x "
              f"{rollout.n} responses, rollout {rollout.name} on {config.trainer.device}; veRL's config checks passed")
        return 0
    result = copy_only(job) if args.copy_only else run(job, args)
    if not args.copy_only:
        print(table(result), file=sys.stderr)
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
