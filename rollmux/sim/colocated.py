"""The simulator's side of the co-located execution mode (core/placement/options/colocated.py).

A co-located job needs no permits: it time-shares its own training nodes with nobody, so
each iteration is one event. Its phase times are the veRL model's (core/colo_model.py) on
the job's own seeded draws, with its drift applied first, exactly as the veRL baseline
draws them (sim/baselines.py); busy time is booked the same way: the rollout and both
switches on all G GPUs, training on its training GPUs. A job that folded here from a group
(core/repair/fold.py) first sits out its migration, held and not working, as a group's migrant does.
"""

from __future__ import annotations

from typing import Callable, Protocol

from rollmux.core.accounting import Ledger
from rollmux.core.colo_model import colocated_phases, group_gpus
from rollmux.core.config import SchedulerConfig
from rollmux.core.env import SimEnvironment
from rollmux.core.repair.moves import slice_rate
from rollmux.core.spec import ClusterSpec
from rollmux.core.state import ClusterState
from rollmux.sim.draws import drift_scales
from rollmux.sim.runs import JobRun


class MigrationCount(Protocol):
    """The simulation's migration tally (sim/simulator.py `MigrationStats`)."""

    stall_s: float
    cost_usd: float


class Host(Protocol):
    """What a co-located iteration needs of the simulation that plays it."""

    env: SimEnvironment
    cluster: ClusterSpec
    cfg: SchedulerConfig
    state: ClusterState
    ledger: Ledger
    moves: MigrationCount
    _sync_done: Callable[[str], None]


def colocated_iteration(sim: Host, run: JobRun) -> None:
    """Play the co-located job's next iteration; it ends in the simulator's `_sync_done`."""
    job, now = run.job, sim.env.now()
    a, b = drift_scales(job, now - run.start_s)
    base = float(run.rollouts[run.done])
    run.rollout_s, run.train_s = a * base, b * job.train_time(base)
    run.iter_solo_s = run.rollout_s + run.train_s + job.sync_s  # the same iteration run solo, disaggregated
    g = group_gpus(sim.state.colocated[run.group_id], sim.cluster)  # G, or a narrowed G'
    if run.colo is None:  # the model's scales (and the switches) for this job, once
        run.colo = colocated_phases(job, sim.cluster, 1.0, 1.0, sim.cfg.colocation.speed, g)
    r_scale, t_scale, switches = run.colo
    roll, train = run.rollout_s * r_scale, run.train_s * t_scale
    if run.moving_since is not None:  # it just moved here: its first iteration carries the move, held
        moved = sim.state.controllers[run.group_id].take_cold()
        sim.moves.stall_s += now + moved - run.moving_since
        sim.moves.cost_usd += moved * slice_rate(job, sim.cluster) / 3600
        run.moving_since, now = None, now + moved
    sim.ledger.busy("train", g, roll + switches)
    sim.ledger.busy("train", job.train_gpus, train)
    run.sync_from = now + roll + train + switches  # no sync across pools: its weights stay on its nodes
    sim.env.call_at(run.sync_from, sim._sync_done, job.job_id)
