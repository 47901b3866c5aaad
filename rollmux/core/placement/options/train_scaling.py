"""Training scaling (beyond Algorithm 1): the job joins a group by adding the training nodes it lacks.

Algorithm 1 lets a job join only a group with at least its training nodes (DESIGN §3). With
`shapes.train_scaling` a job that needs more joins by adding the missing ones: the group's
training nodes 0..n_train-1 are shared as before, the added ones hold only the newcomer (so
residency there always holds), and the group keeps them (`Case.TRAIN_SCALING`). Priced like
rollout scaling: Δ is the price of every added node. Evidence: docs/decisions/train-scaling.md.
"""

from __future__ import annotations

from rollmux.core.group import Group
from rollmux.core.placement.newcomer import Newcomer
from rollmux.core.placement.options import direct, elastic, rollout_scaling


def options(g: Group, pos: int, nc: Newcomer) -> list[tuple]:
    """Every rollout shape of the job in candidate `g` (direct, rollout-scaled, elastic) with
    the training nodes it lacks added; none when those exceed the training pool's cap."""
    new_t = nc.kt - g.n_train
    if nc.free_t is not None and new_t > nc.free_t:
        return []
    return direct.options(g, pos, nc, new_t) + rollout_scaling.options(g, pos, nc, new_t) \
        + elastic.options(g, pos, nc, new_t)
