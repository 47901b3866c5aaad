"""The scheduler's one vocabulary: phases, pools, placement cases, job statuses and execution modes.

Every name the scheduler, its journal, its status API and its metrics share is a member of
one of these `StrEnum`s. A member *is* its string (`Phase.ROLLOUT == "rollout"`, same hash),
so it keys the same dicts, and JSON, f-strings and metric labels see its value: the outputs
stay what they were when these were string constants.

Hot loops (a group controller's permit checks, the simulator's phase events) bind the members'
values to module names once (`ROLLOUT = Phase.ROLLOUT.value`, a plain `str` equal to the
member): attribute access on an enum class costs more than a global lookup, and CPython's fast
paths for comparing strings and for dicts keyed by strings skip `str` subclasses.
"""

from __future__ import annotations

from enum import StrEnum


class Phase(StrEnum):
    """An RL iteration's phases (DESIGN §1) and the job's start (`init`, DESIGN §8)."""

    INIT = "init"        # the job's state is built on its nodes, then offloaded (once per placement)
    ROLLOUT = "rollout"  # the policy generates responses (rollout pool)
    TRAIN = "train"      # rewards and the policy update (training pool)
    SYNC = "sync"        # new weights to the rollout side's host cache (the inter-pool link)


class Pool(StrEnum):
    """The two GPU pools of a disaggregated cluster (DESIGN §2)."""

    ROLLOUT = "rollout"
    TRAIN = "train"


class Case(StrEnum):
    """Which case of Algorithm 1 (DESIGN §5), or which extension, placed a job."""

    DIRECT = "direct_packing"
    SCALING = "rollout_scaling"
    ISOLATED = "isolated"
    TRAIN_SCALING = "train_scaling"  # joined by adding training nodes (core/placement/options/train_scaling.py)
    COLOCATED = "colocated"  # the job alone on training nodes, veRL mode (core/placement/options/colocated.py)
    PAIRED = "paired"  # a new group founded with a co-located job that moves in (core/placement/options/paired.py)


class JobStatus(StrEnum):
    """Where a live job is in its life (DESIGN §8); its moves are `core/lifecycle.py`'s table."""

    QUEUED = "queued"        # submitted, waiting for a placement
    RUNNING = "running"      # pinned in a group (or co-located), taking permits
    MOVING = "moving"        # left its group (regrouping, re-admission), waiting to be placed again
    DONE = "done"            # finished its work
    FAILED = "failed"        # missed heartbeats, or hung past a phase lease
    CANCELLED = "cancelled"  # cancelled by the admin or by the job itself


class Mode(StrEnum):
    """An execution mode the scheduler may use for a job, which a job may declare it cannot
    take (`JobSpec.cannot`): its adapter or framework cannot carry it out. A job without
    `cannot` may be run in every mode the configuration enables."""

    COLOCATE = "colocate"  # every phase on its own training nodes (veRL style): never placed or folded there
    ELASTIC_ROLLOUT = "elastic_rollout"  # its rollout keeps the rollout nodes it declares (no other count)
    TAIL_MIGRATION = "tail_migration"  # its rollout's long tail is never moved to a few of its workers
    MOVE = "move"  # once placed its state is not moved by a repair (regroup, pairing, fold, re-pin, eviction)


# Statuses a job leaves no more (a `leave` record's).
TERMINAL = frozenset({JobStatus.DONE, JobStatus.FAILED, JobStatus.CANCELLED})
