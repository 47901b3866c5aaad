"""Rollout scaling (DESIGN §5, Algorithm 1 case 2): the job on fresh rollout nodes added to its group."""

from __future__ import annotations

from rollmux.core.placement.newcomer import Newcomer


def shapes(nc: Newcomer, new_t: int = 0) -> list[tuple]:
    """The job on `nc.k0` rollout nodes, 1 to k0 of them added (the rest existing ones), plus
    `new_t` added training nodes: Δ = the price of every added node."""
    return nc.shaped(nc.k0, range(1, nc.k0 + 1), new_t)
