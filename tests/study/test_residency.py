"""Study section residency: the probe's refusal census and the unlimited-DRAM counterfactual."""

from __future__ import annotations

import pytest

from rollmux.core.config import SchedulerConfig
from rollmux.core.group import isolated_group
from rollmux.core.intra_group import plan_group
from rollmux.core.placement import ClusterView, Colocating, Explaining, JoinBounds, Regrouping, Shaped
from rollmux.core.spec import default_cluster
from rollmux.sim.simulator import simulate
from rollmux.study import residency
from rollmux.study.config import StudyConfig
from rollmux.study.sweep import serial_map
from rollmux.workload import find_traces_dir, synthesize_philly
from factories import make_cluster, make_job

CLUSTER = make_cluster(host_gb=2048.0)
SMALL = StudyConfig(philly_jobs=12, philly_days=1.0, is_quick=True)
PAPER = SchedulerConfig.profile("paper")  # Algorithm 1 at the worst case: the verdicts' own rules


def _view(*jobs):
    """A view holding one planned group per job, each alone on its nodes."""
    groups = tuple(plan_group(isolated_group(i, j, CLUSTER), PAPER.intra_for(CLUSTER)) for i, j in enumerate(jobs))
    return ClusterView(CLUSTER, groups, None, None, 5, len(groups), {})


def _verdict(resident, newcomer):
    view = _view(resident)
    unl = ClusterView(residency.with_host_gb(CLUSTER, residency.UNLIMITED_GB), view.groups, None, None, 5, 1, {})
    return ResidencyProbe().verdict(view.groups[0], newcomer, view, unl)


def ResidencyProbe():  # noqa: N802 (reads like the class)
    return residency.ResidencyProbe.built(PAPER, CLUSTER)


def test_verdict_separates_residency_from_slo_refusals():
    big = make_job("a", host_train=1500.0)
    assert _verdict(big, make_job("b", host_train=100.0)) == "accepted"
    assert _verdict(big, make_job("b", host_train=1000.0)) == "residency"
    # Two train-heavy jobs overload the shared training node: the SLO refuses, whatever the DRAM.
    heavy = make_job("a", rollout=50.0, train=200.0, slo=2.0)
    assert _verdict(heavy, make_job("d", rollout=50.0, train=200.0, slo=1.3, host_train=100.0)) == "other"
    assert _verdict(heavy.model_copy(update={"host_gb": big.host_gb}),
                    make_job("d", rollout=50.0, train=200.0, slo=1.3, host_train=1000.0)) == "other"
    # A full group is refused before memory matters.
    assert _verdict(big, make_job("e", slo=1.0)) == "ineligible"


def test_probe_counts_arrivals_and_changed_decisions():
    probe = ResidencyProbe()
    view = _view(make_job("a", host_train=1500.0))
    plan = probe.place(make_job("b", host_train=1000.0), view)
    assert plan.case.value == "isolated"  # residency forbids packing b with a
    assert probe.counts["arrivals"] == 1 and probe.counts["residency"] == 1
    assert probe.counts["arrivals_changed"] == 1 and probe.extra_per_hour > 0
    probe.place(make_job("b", host_train=1000.0), view)  # a re-placement is no new arrival
    assert probe.counts["arrivals"] == 1


def test_the_probe_has_the_capabilities_of_the_policy_it_wraps():
    probe = residency.ResidencyProbe.built(residency.CONFIG, CLUSTER)
    for capability in (Regrouping, JoinBounds, Explaining, Colocating, Shaped):
        assert isinstance(probe, capability) and isinstance(probe.policy, capability)
    assert probe.cfg is probe.policy.cfg and probe.shapes == residency.CONFIG.shapes
    assert probe.name == "rollmux" and not probe.colocate


def test_probe_places_exactly_like_rollmux():
    jobs = synthesize_philly(find_traces_dir(), "0e4a51", 16, 1.0, "paper", 0)
    cluster = residency.with_host_gb(default_cluster(), 1024.0)
    cfg = residency.CONFIG
    probe = residency.ResidencyProbe.built(cfg, cluster)
    a = simulate(jobs, cluster, cfg, probe, seed=0)
    b = simulate(jobs, cluster, cfg, seed=0)
    assert a.cost_usd == b.cost_usd and a.placements == b.placements
    assert [(o.job_id, o.finish_s) for o in a.outcomes] == [(o.job_id, o.finish_s) for o in b.outcomes]
    assert probe.counts["arrivals"] == len(jobs)
    # Paper-profile large jobs keep 800 GB per training node: on 1 TiB nodes residency refuses some.
    assert probe.counts["residency"] > 0


def test_run_and_render_on_a_small_config():
    data = residency.run(SMALL, default_cluster(), find_traces_dir(), serial_map)
    runs = {(r["mode"], r["node_gb"]): r for r in data["runs"]}
    assert set(runs) == {(m, gb) for m in residency.MODES for gb in (*residency.NODE_GB, None)}
    # Catalog jobs keep at most 357 GB per node: 5 (the max group size) always fit 2 TiB.
    assert runs[("catalog", 2048.0)]["counts"]["residency"] == 0
    assert runs[("catalog", 2048.0)]["cost_usd"] == pytest.approx(runs[("catalog", None)]["cost_usd"])
    for (mode, gb), r in runs.items():
        assert r["slo_attainment"] == 1.0
        if gb is not None:
            c = r["counts"]
            assert c["arrivals"] == SMALL.philly_jobs
            assert c["arrivals_changed"] <= c["arrivals_with_residency_refusal"] <= c["residency"]
    md = residency.render(data)
    assert md.startswith("## Residency")
    assert md.count("\n| paper |") == 3 and md.count("\n| catalog |") == 3
    assert "rollmux study --quick" in md
