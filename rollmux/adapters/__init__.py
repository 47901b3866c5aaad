"""Adapters: real RL libraries' training loops under the RollMux shim (docs/adapters.md).

An adapter maps a library's loop onto the shim's phases (rollout, train, sync, init), its state onto
the shim's onload/offload and host_memory hooks, and its generation onto `progress` and `on_tail`.
Adapters sit beside the jobs: they use the job-side shim, `rollmux.weightsync` and `rollmux.init()`'s
plumbing (`rollmux.job`), and nothing in core, sim, study or live imports them except the demo's job list.

- `rollmux.adapters.trl`: `GRPOTrainer`, a drop-in `trl.GRPOTrainer` (install `rollmux[trl]`).
- `rollmux.adapters.verl`: veRL's `RayPPOTrainer` (install `rollmux[verl]`).
"""
