"""What one search knows of the job it places (DESIGN §5): its shapes, their planned times and prices.

Built once per search from the view and the search's rules; the option generators
(placement/options/) read it to enumerate and price the job's option shapes.
"""

from __future__ import annotations

from rollmux.core.config import IntraConfig, ShapesConfig
from rollmux.core.elastic import node_counts, rollout_factor
from rollmux.core.intra_group import PhaseTimes, job_planning_times
from rollmux.core.placement.admission import period_budget
from rollmux.core.placement.model import ClusterView
from rollmux.core.spec import JobSpec
from rollmux.core.vocabulary import Mode


class Newcomer:
    """The job to place, in the terms the search's options need.

    `k0`, `kt`: its nominal rollout and training nodes; `counts`: the rollout-node counts it may
    use (its nominal one alone, or the elastic range unless the job cannot take elastic rollout),
    `factor[k]` its rollout factor on k nodes and `own_cycle[k]` its planned rollout + train +
    sync there; `least`: its planning times at its fastest shape; `shortest`: that shape's
    cycle; `slack_new`: its own period budget; `iso_delta`: the Δ of its nominal isolated group
    when joined options must cost less (None: every joined option counts, Algorithm 1)."""

    __slots__ = ("job", "k0", "kt", "pr", "pt", "free_r", "free_t", "slack_new", "own", "counts", "factor",
                 "own_cycle", "least", "shortest", "iso_delta")

    def __init__(self, job: JobSpec, view: ClusterView, cfg: IntraConfig, shapes: ShapesConfig,
                 cut_at_isolated: bool) -> None:
        pools = view.cluster.pools
        self.job = job
        self.pr, self.pt = pools.rollout.node_price_per_hour, pools.train.node_price_per_hour
        self.k0, self.kt = pools.rollout.nodes_for(job.rollout_gpus), pools.train.nodes_for(job.train_gpus)
        self.free_r, self.free_t = view.free_rollout_nodes, view.free_train_nodes
        self.slack_new = period_budget(job, view.progress)  # a migrating job brings its past
        own = self.own = job_planning_times(job, cfg)  # (either plan: a factor scales each draw too)
        elastic = shapes.elastic_rollout and job.can(Mode.ELASTIC_ROLLOUT)  # (else its declared width only)
        self.counts = node_counts(self.k0, elastic, shapes.min_share, shapes.max_scale)
        if elastic:
            self.factor = {k: rollout_factor(job, self.k0, k) for k in self.counts}
            self.own_cycle = {k: own.rollout * f + own.train + own.sync for k, f in self.factor.items()}
            fastest = min(self.factor.values())
        else:  # its nominal count alone, at factor 1 (as `rollout_factor` gives it)
            fastest = 1.0
            self.factor = {self.k0: fastest}
            self.own_cycle = {self.k0: own.rollout * fastest + own.train + own.sync}
        self.least = own if fastest == 1.0 else PhaseTimes(own.rollout * fastest, own.train, own.sync)
        self.shortest = own.train + own.sync + own.rollout * fastest
        self.iso_delta = self.k0 * self.pr + self.kt * self.pt if cut_at_isolated else None

    def shaped(self, k: int, fresh: range, new_t: int) -> list[tuple]:
        """The joined shapes (placement/options/) on `k` rollout nodes with each count in `fresh`
        (ascending) of them new and `new_t` training nodes added, within the rollout pool's cap
        and, with `iso_delta`, cheaper than the job's own nominal group."""
        out = []
        free_r, iso, elastic = self.free_r, self.iso_delta, k != self.k0
        for new_r in fresh:
            if free_r is not None and new_r > free_r:
                break
            delta = new_r * self.pr + new_t * self.pt
            if iso is None or delta < iso:
                out.append((delta, new_t, elastic, -k, new_r))
        return out
