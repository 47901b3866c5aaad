"""The live plane does not run the co-located mode (core/colocate.py): it says so, it never ignores it."""

from __future__ import annotations

import pytest

from rollmux.core.cluster_state import SchedulerConfig
from rollmux.core.env import SimEnvironment
from rollmux.errors import InputError
from rollmux.live.live_state import LiveState
from tests.factories import make_cluster


def test_a_colocating_config_is_refused_with_one_line():
    with pytest.raises(InputError, match="colocate: the co-located mode .* is simulator-only"):
        LiveState(SimEnvironment(), make_cluster(), SchedulerConfig(colocate=True))


def test_the_default_config_places_without_it():
    state = LiveState(SimEnvironment(), make_cluster(), SchedulerConfig())
    assert not state.cluster.policy.colocate and "colocated" not in state.cluster.cases
