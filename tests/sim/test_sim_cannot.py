"""The simulator with jobs that cannot take a mode (`JobSpec.cannot`): each scenario uses the mode
for the job without it, never for the job with it, and both meet their SLOs."""

from __future__ import annotations

import pytest

from rollmux.core.elastic import rollout_factor
from rollmux.sim.simulator import Simulation
from factories import BALANCED_COLO, SHIPPED, TRAIN_HEAVY_COLO, config, make_cluster, make_job, make_policy

CLUSTER = make_cluster()


class Tails(Simulation):
    """A simulation that counts the long tails it migrates, per job."""

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self.tails: dict[str, int] = {}

    def _tail_started(self, ctl, jid: str) -> None:
        self.tails[jid] = self.tails.get(jid, 0) + 1
        super()._tail_started(ctl, jid)


@pytest.mark.parametrize("cannot", [[], ["colocate"]])
def test_a_job_that_cannot_run_colocated_runs_in_a_group(cannot):
    job = make_job("x", rollout=100.0, train=300.0, slo=2.0, colo=TRAIN_HEAVY_COLO, duration=20_000.0, cannot=cannot)
    res = Simulation([job], CLUSTER, SHIPPED).run()
    assert res.placements.get("colocated", 0) == (0 if cannot else 1)
    assert res.slo_attainment == 1.0


@pytest.mark.parametrize("cannot", [[], ["tail_migration"]])
def test_a_job_that_cannot_migrate_its_tail_never_does(cannot):
    jobs = [make_job(j, rollout=100.0, train=100.0, slo=2.0, tail_frac=0.3, duration=20_000.0,
                     cannot=cannot if j == "a" else []) for j in "ab"]
    sim = Tails(jobs, CLUSTER, config(SHIPPED, colocate=False))
    res = sim.run()
    assert res.placements == {"isolated": 1, "direct_packing": 1}  # one rollout node shared
    assert sim.tails["b"] > 0 and (sim.tails.get("a", 0) == 0) == bool(cannot)
    assert res.slo_attainment == 1.0


@pytest.mark.parametrize("cannot", [[], ["elastic_rollout"]])
def test_a_job_that_cannot_take_elastic_rollout_rolls_out_on_its_declared_nodes(cannot):
    job = make_job("b", rollout=100.0, train=100.0, sync=5.0, rollout_gpus=16, slo=2.0, duration=2050.0,
                   cannot=cannot)
    cfg = config(SHIPPED, elastic_rollout=True)
    sim = Simulation([job], CLUSTER, cfg, make_policy(cfg.intra_for(CLUSTER), elastic_rollout=True))
    res = sim.run()
    (out,) = sim.outcomes
    per_iter = 100.0 * (1.0 if cannot else rollout_factor(job, 2, 1)) + 105.0  # nominal: two nodes, factor 1
    assert (out.finish_s - out.start_s) / out.iterations == pytest.approx(per_iter)
    assert res.peak_gpus["rollout"] == (16 if cannot else 8) and res.slo_attainment == 1.0


@pytest.mark.parametrize("cannot", [[], ["move"]])
def test_a_colocated_job_that_cannot_be_moved_is_never_paired(cannot):
    jobs = [make_job(j, rollout=150.0, train=150.0, arrival=1000.0 * (j == "b"), duration=100_000.0, slo=1.5,
                     colo=BALANCED_COLO, cannot=cannot if j == "a" else []) for j in "ab"]
    sim = Simulation(jobs, CLUSTER, SHIPPED)
    res = sim.run()
    if cannot:
        assert res.placements == {"colocated": 2} and res.migrations["count"] == 0
    else:  # b founds a group and a moves in (the pairing); whoever outlives the other folds back
        assert res.placements == {"colocated": 1, "paired": 1} and res.migrations["count"] == 2
    assert res.slo_attainment == 1.0
