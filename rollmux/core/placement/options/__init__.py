"""The options of a placement (DESIGN §5, Algorithm 1 and its extensions), one module per case.

Joined options put the job into a candidate group (placement/candidates.py):

* direct packing (`direct`): on existing rollout nodes and the group's training nodes, Δ = 0;
* rollout scaling (`rollout_scaling`): with fresh rollout nodes, Δ = their price;
* elastic rollout (`elastic`): on another count of rollout nodes than its nominal one, its
  rollout time scaled by core/elastic.py (docs/decisions/elastic-rollout.md);
* training scaling (`train_scaling`): into a group with fewer training nodes than the job
  needs, by adding them (docs/decisions/train-scaling.md).

A group of the job's own (`isolated`: nominal, the always-valid fallback, or on fewer rollout
nodes), the co-located mode (`colocated`, docs/decisions/colocation.md) and a new group
founded with a co-located job that moves in (`paired`, docs/decisions/colocation-pair.md)
complete them.

A searched option is a plain tuple, ordered as the search tries options under Δ pricing:

    (Δ $/h, added training nodes, elastic (k != nominal), -k, fresh rollout nodes,
     candidate position (ISOLATED for a group of the job's own), k rollout nodes)

so at equal Δ the nominal shape comes before elastic ones, more rollout nodes before fewer,
and a group of the job's own after every joined option. Every option of a search is distinct.
"""

from __future__ import annotations

# An option's candidate position for a group of the job's own: after every joined one at equal Δ.
ISOLATED = 1 << 30
