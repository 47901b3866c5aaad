"""A permit of a group controller (core/group_controller.py), and the worker slots it names.

Workers: a rollout node's workers are `units` equal slots (the denominator of
`tail_worker_frac`, e.g. 4 for 0.25). A rollout permit covers the slots no migrated tail
keeps (`Grant.workers`); a tail keeps the lowest `tail_worker_frac * units` of the slots its
permit covered (`Grant.keep`), so two jobs never run on one worker (DESIGN §4).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from rollmux.core.config import IntraConfig

LINK = "link"  # a sync permit's pool: the inter-pool link, no node (DESIGN §8)


@dataclass(frozen=True, slots=True)  # (slots: one is made per simulated phase)
class Grant:
    """A permit: job `job_id` may run `phase` on `nodes` of `pool` after a `switch_s` load."""

    group_id: int
    job_id: str
    phase: str
    pool: str
    nodes: tuple[int, ...]
    switch_s: float
    granted_at: float
    tail_share: float  # tail fraction the job should migrate (0 = no migration)
    epoch: int = 0     # the job's placement count (live plane): a change means it was moved
    units: int = 0     # rollout: worker slots per node (0 on other pools)
    workers: tuple[tuple[int, ...], ...] = ()  # rollout: per node, the slots covered (() = all)
    keep: tuple[tuple[int, ...], ...] = ()     # rollout: per node, the slots a migrated tail keeps
    train_held: tuple[int, ...] = ()           # init: the training nodes it holds too
    # With the service's node inventory (live/nodemap.py): the machines of `nodes` and `train_held`.
    node_ids: tuple[str | None, ...] = ()
    train_held_ids: tuple[str | None, ...] = ()

    def slots(self, i: int) -> tuple[int, ...]:
        """The worker slots this permit covers on its `i`-th node."""
        return self.workers[i] if self.workers else tuple(range(self.units))

    def kept(self, i: int) -> tuple[int, ...]:
        """The worker slots a migrated tail keeps on the permit's `i`-th node."""
        return self.keep[i] if self.keep else ()


def worker_slots(cfg: IntraConfig) -> tuple[int, int]:
    """(worker slots per rollout node, slots a migrated tail keeps): `tail_worker_frac` as a fraction."""
    share = Fraction(cfg.tail_worker_frac).limit_denominator(64)
    return share.denominator, share.numerator
