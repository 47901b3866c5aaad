"""Training scaling (beyond Algorithm 1, DESIGN §3, §5): the job joins a group by adding the training nodes it lacks.

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


def added_nodes(g: Group, nc: Newcomer) -> int:
    """The training nodes the job must add to join `g` (0: it has enough)."""
    return max(0, nc.kt - g.n_train)


def shapes(nc: Newcomer, new_t: int) -> list[tuple]:
    """Every rollout shape of the job (direct, rollout-scaled, elastic) with `new_t` > 0 training
    nodes added; none when those exceed the training pool's cap."""
    if nc.free_t is not None and new_t > nc.free_t:
        return []
    return direct.shapes(nc, new_t) + rollout_scaling.shapes(nc, new_t) + elastic.shapes(nc, new_t)
