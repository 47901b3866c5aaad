"""Permits of a co-located job (core/placement/options/colocated.py): every phase on its own training nodes.

A co-located job shares its nodes with nobody and runs its phases one after another, so
its permits are granted at once: `init`, `rollout` and `train` on all its training nodes
(pool `train`: the rollout runs on training GPUs, the veRL way), `sync` on the link with no
node (its weights are resharded in place: it is on the critical path of nothing). Each
rollout and training permit carries a warm switch, the offload/onload the veRL model
charges twice per iteration (core/colo_model.py); there is no long-tail migration (the
rollout has every GPU to itself), so a reported tail frees nothing.

A job that folds here from a group (core/repair/fold.py) is a migrant: its placement is
reserved (`hold`) and its first rollout permit carries its migration (`activate`).

It answers the calls the live plane makes on a `GroupController` (request, release,
tail_started, withdraw, update_group, hold, activate, whose_turn, export_state / import_state), so the
service and its journal replay treat both alike. The simulator plays a co-located job
without permits (sim/colocated.py): the same phases, one event per iteration.
"""

from __future__ import annotations

from typing import Callable

from rollmux.core.config import IntraConfig
from rollmux.core.env import Environment
from rollmux.core.grant import LINK, Grant
from rollmux.core.group import Group
from rollmux.core.group_controller import CONTROLLED, INIT, ROLLOUT, SYNC, TRAIN
from rollmux.core.vocabulary import Pool

COLOCATED_POOL = Pool.TRAIN.value  # where a co-located job's rollout permit sends it


class ColocatedController:
    """The permit controller of one co-located job: grants at once, on its training nodes."""

    def __init__(self, env: Environment, group: Group, cfg: IntraConfig) -> None:
        self.env, self.cfg = env, cfg
        self.group = group
        self.holder: str | None = None  # the phase it runs now (rollout or train), for status
        self.last: str | None = None    # the phase whose state is loaded
        self.cold_s = 0.0               # a migrant's move, carried by its first rollout permit

    @property
    def job_id(self) -> str:
        """The co-located job."""
        return self.group.members[0].job_id

    def update_group(self, group: Group, rollout_map: dict[int, int] | None = None) -> None:
        """Adopt the group's new form (its member's profile may have been re-counted)."""
        self.group = group

    def request(self, job_id: str, phase: str, on_grant: Callable[[Grant], None]) -> None:
        """Grant `phase` at once (the job's phases never overlap: nothing to wait for)."""
        if job_id != self.job_id:
            raise KeyError(job_id)
        if phase not in CONTROLLED:
            raise ValueError(f"unknown phase {phase!r}; use one of {CONTROLLED}")
        gid, now, nodes = self.group.group_id, self.env.now(), self.group.members[0].train_nodes
        if phase == SYNC:
            on_grant(Grant(gid, job_id, SYNC, LINK, (), 0.0, now, 0.0))
            return
        if phase == INIT:
            on_grant(Grant(gid, job_id, INIT, COLOCATED_POOL, nodes, 0.0, now, 0.0))
            return
        # The other phase's state is offloaded and this one's onloaded: a warm switch, unless
        # this phase's state is the one loaded (a retried permit).
        switch = self.cfg.warm_switch_s if self.last not in (None, phase) else 0.0
        if phase == ROLLOUT and self.cold_s > 0:  # it just moved here (core/repair/fold.py)
            switch, self.cold_s = self.cold_s, 0.0
        self.holder = self.last = phase
        on_grant(Grant(gid, job_id, phase, COLOCATED_POOL, nodes, switch, now, 0.0))

    def hold(self, job_id: str) -> None:
        """A migrant's reserved placement: nothing to keep it out of (it has the nodes alone)."""

    def activate(self, job_id: str, switch_s: float) -> None:
        """The migrant arrives: its first rollout permit carries `switch_s` (its migration:
        state moved, cold start)."""
        self.cold_s = max(switch_s, 0.0)

    def take_cold(self) -> float:
        """The migration its next rollout would carry, now taken (the simulator plays it)."""
        s, self.cold_s = self.cold_s, 0.0
        return s

    def release(self, job_id: str, phase: str) -> None:
        """The phase is done: its nodes are free (for the job's own next phase)."""
        if phase in (ROLLOUT, TRAIN) and self.holder == phase:
            self.holder = None

    def tail_started(self, job_id: str) -> None:
        """No long-tail migration when co-located: the rollout keeps every GPU."""

    def withdraw(self, job_id: str) -> None:
        """The job crashed or left: it holds nothing any more."""
        self.holder = None

    def whose_turn(self) -> dict[str, list[str | None]]:
        """Its training nodes are always its own."""
        return {ROLLOUT: [], TRAIN: [self.job_id] * self.group.n_train}

    def export_state(self) -> dict:
        """What a snapshot keeps: the phase running and the state loaded."""
        return {"colocated": True, "holder": self.holder, "last": self.last, "cold_s": self.cold_s}

    def import_state(self, d: dict) -> None:
        """Adopt an exported state."""
        self.holder, self.last, self.cold_s = d.get("holder"), d.get("last"), float(d.get("cold_s", 0.0))
