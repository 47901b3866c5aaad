"""The co-located model fitted on the authors' sixteen measured pairs (core/colo_fit.py)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollmux.core.colo_fit import (
    leave_one_out,
    measured_factors,
    modelled_factors,
    neighbours,
    pairs,
    predict,
    size_cap,
)


def test_the_packaged_file_holds_the_sixteen_measured_types():
    assert len(pairs()) == 16
    seven = next(p for p in pairs() if p.kind == "7B_8k")
    assert math.exp(seven.log_kr) == pytest.approx(159.6 / 133.8)
    assert math.exp(seven.log_kt) == pytest.approx(98.2 / 112.8)


@pytest.mark.parametrize("model, named", [("qwen2.5-7b-8k", (7.0, 8.0)), ("qwen3-8b-32k-mt", (8.0, 32.0)),
                                          ("qwen2.5-1.5b-4k", (1.5, 4.0)), ("paper-balanced-small", None),
                                          (None, None)])
def test_a_model_field_names_its_size_and_cap(model, named):
    assert size_cap(model) == named


def test_a_measured_type_gets_its_measured_ratios_whatever_its_balance():
    for rho in (0.5, 1.0, 4.0):
        assert modelled_factors("qwen2.5-7b-8k", rho) == pytest.approx((159.6 / 133.8, 98.2 / 112.8))


def test_a_multi_turn_job_of_a_measured_type_is_not_read_as_measured():
    assert measured_factors("qwen2.5-7b-8k-mt") is None
    # ... but its measured single-turn type is around it: never more optimistic than that.
    k_r, k_t = modelled_factors("qwen2.5-7b-8k-mt", 1.19)
    assert k_r >= 159.6 / 133.8 * (1 - 1e-9) and k_t >= 98.2 / 112.8 * (1 - 1e-9)


def test_neighbours_bracket_size_and_cap():
    kinds = {p.kind for p in neighbours(10.0, 12.0, 1.0, pairs())}
    # 10B lies between 8B and 14B; 12k between 8k and 16k for 8B, and at 8k for 14B (its largest cap).
    assert kinds == {"8B_8k", "8B_16k", "14B_8k"}


def test_without_size_and_cap_the_neighbours_bracket_the_balance():
    rhos = sorted(p.rho for p in pairs())
    x = (rhos[3] + rhos[4]) / 2
    assert {p.rho for p in neighbours(None, None, x, pairs())} == {rhos[3], rhos[4]}


@settings(max_examples=200, deadline=None)
@given(size=st.floats(0.5, 100.0), cap=st.floats(1.0, 64.0), rho=st.floats(0.1, 10.0),
       full=st.booleans())
def test_the_model_is_never_more_optimistic_than_the_measured_pairs_around_it(size, cap, rho, full):
    s, c = (size, cap) if full else (None, None)
    k_r, k_t = predict(s, c, rho)
    near = neighbours(s, c, rho, pairs())
    assert math.log(k_r) >= min(p.log_kr for p in near) - 1e-12
    assert math.log(k_t) >= min(p.log_kt for p in near) - 1e-12


def test_leave_one_out_errors_are_the_documented_ones():
    # docs/decisions/colocation-model.md: mean |error| of k_r 15.1%, of k_t 4.5% (size, cap, balance).
    rows = leave_one_out(True)
    assert len(rows) == 16
    assert sum(abs(r[1]) for r in rows) / 16 == pytest.approx(0.151, abs=0.001)
    assert sum(abs(r[2]) for r in rows) / 16 == pytest.approx(0.045, abs=0.001)
