"""A job measured as it runs, simulated: the trace's phase times are the truth the scheduler does not
plan with until it measured them (core/state/profiling.py); then it shares like any job."""

from __future__ import annotations

import json

import pytest
from factories import GROUPS, config, job_record, make_cluster, make_job, make_policy

from rollmux.core.trace_io import parse_jobs
from rollmux.errors import InputError
from rollmux.sim.simulator import Simulation

CLUSTER = make_cluster()


def _pair(measure: bool):
    a = make_job("a", rollout=100, train=20, slo=1.5, duration=125.0 * 200)
    b = make_job("b", rollout=20, train=100, slo=1.5, duration=125.0 * 200, arrival=10.0, measure=measure)
    return [a, b]


def _run(jobs):
    sim = Simulation(jobs, CLUSTER, config(GROUPS), make_policy())
    return sim, sim.run()


def test_a_measured_job_runs_alone_until_measured_then_moves_in_with_its_complement():
    _, declared = _run(_pair(measure=False))
    assert declared.placements == {"isolated": 1, "direct_packing": 1}  # declared: b shares at once
    sim, measured = _run(_pair(measure=True))
    assert measured.placements == {"isolated": 2}  # measured: b starts alone ...
    assert sim.migrations == 1 and measured.slo_attainment == 1.0  # ... and moves in once measured (priced)
    assert declared.cost_usd < measured.cost_usd < 2 * declared.cost_usd  # its nodes of its own, for a while


def test_a_trace_line_without_phase_times_is_refused_naming_the_line():
    rec = {k: v for k, v in job_record("x").items() if k not in ("rollout_s", "train_s", "sync_s")}
    with pytest.raises(InputError, match=r"t\.jsonl:1: field 'rollout_s'.*simulated truth"):
        parse_jobs([json.dumps(rec)], "t.jsonl")
