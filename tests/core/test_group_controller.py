"""Runtime round-robin controller of one group (DESIGN §4, §8), driven in virtual time."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rollmux.core.config import IntraConfig
from rollmux.core.env import SimEnvironment
from rollmux.core.group import Group, Member
from rollmux.core.group_controller import Grant, GroupController
from rollmux.core.intra_group import head_finish, schedule
from factories import any_configs, fixed_times, groups, intra, make_group, make_job

EPS = 1e-6


@dataclass
class Phase:
    job_id: str
    pool: str
    nodes: tuple[int, ...]
    start: float
    head_end: float = 0.0
    end: float = 0.0


@dataclass
class Driver:
    """Plays members with fixed phase durations through a controller, as the simulator does.

    A job that finishes its iterations leaves the group (`update_group` without it) when
    `leave` is set.
    """

    group: Group
    cfg: IntraConfig
    iterations: dict[str, int]
    env: SimEnvironment = field(default_factory=SimEnvironment)
    sync_ends: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    phases: list[Phase] = field(default_factory=list)
    grants: list[Grant] = field(default_factory=list)
    tail_end: dict[str, float] = field(default_factory=dict)
    leave: bool = True

    def __post_init__(self) -> None:
        self.ctl = GroupController(self.env, self.group, self.cfg)

    def start(self, job_id: str) -> None:
        self.ctl.request(job_id, "rollout", self.on_rollout)

    def join(self, group: Group, job_id: str, iterations: int) -> None:
        """Adopt `group` (which includes the newcomer) and start the newcomer."""
        self.group = group
        self.iterations[job_id] = iterations
        self.ctl.update_group(group)
        self.start(job_id)

    def on_rollout(self, g: Grant) -> None:
        self.grants.append(g)
        job, now = self.group.member(g.job_id).job, self.env.now()
        r = job.rollout_s.median
        tails = [[(self.tail_end[x], f) for x, f in self.ctl.tails_on(n).items()] for n in g.nodes]
        head = head_finish(tails, now + g.switch_s, (1.0 - g.tail_share) * r)
        end = head
        if g.tail_share > 0:
            end = head + g.tail_share * r + self.cfg.migration_overhead_s
            self.tail_end[g.job_id] = end
            self.env.call_at(head, self.ctl.tail_started, g.job_id)
        self.phases.append(Phase(g.job_id, "rollout", g.nodes, now, head, end))
        self.env.call_at(end, self.rollout_done, g.job_id)

    def rollout_done(self, jid: str) -> None:
        self.ctl.release(jid, "rollout")
        self.ctl.request(jid, "train", self.on_train)

    def on_train(self, g: Grant) -> None:
        self.grants.append(g)
        job, now = self.group.member(g.job_id).job, self.env.now()
        end = now + g.switch_s + job.train_s
        self.phases.append(Phase(g.job_id, "train", g.nodes, now, end, end))
        self.env.call_at(end, self.train_done, g.job_id)

    def train_done(self, jid: str) -> None:
        self.ctl.release(jid, "train")
        self.env.call_later(self.group.member(jid).job.sync_s, self.sync_done, jid)

    def sync_done(self, jid: str) -> None:
        self.sync_ends[jid].append(self.env.now())
        if len(self.sync_ends[jid]) < self.iterations[jid]:
            self.ctl.request(jid, "rollout", self.on_rollout)
        elif self.leave:
            self.group = Group(self.group.group_id, self.group.n_rollout, self.group.n_train,
                               tuple(m for m in self.group.members if m.job_id != jid))
            self.ctl.update_group(self.group)

    def grant_order(self, pool: str, node: int) -> list[str]:
        return [g.job_id for g in self.grants if g.pool == pool and node in g.nodes]

    def heads_overlap(self) -> bool:
        for pool in ("rollout", "train"):
            per_node = defaultdict(list)
            for p in self.phases:
                if p.pool == pool:
                    for n in p.nodes:
                        per_node[n].append(p)
            for recs in per_node.values():
                recs.sort(key=lambda p: p.start)
                if any(b.start < a.head_end - EPS for a, b in zip(recs, recs[1:])):
                    return True
        return False


def shared_node_group(n: int = 3, **job_kwargs) -> Group:
    return make_group([(make_job(f"j{i}", **job_kwargs), (0,)) for i in range(n)], 1)


# -- equivalence with the planning recurrence ------------------------------------------------

@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(group=groups(), cfg=any_configs())
def test_controller_matches_planning_recurrence(group, cfg):
    """`schedule` and the event-driven controller give identical sync-end times."""
    meta = 6
    ends, _ = schedule(group.members, group.n_rollout, group.n_train, [fixed_times(group)] * meta, cfg)
    d = Driver(group, cfg, {m.job_id: meta for m in group.members}, leave=False)
    for m in group.members:
        d.start(m.job_id)
    d.env.run()
    for j, m in enumerate(group.members):
        assert d.sync_ends[m.job_id] == pytest.approx([e[j] for e in ends], rel=1e-9, abs=1e-9)


# -- round-robin turns -----------------------------------------------------------------------

def test_grants_follow_the_cyclic_order_on_a_shared_node():
    g = shared_node_group(3, rollout=50, train=10)
    d = Driver(g, intra(migration=False), {f"j{i}": 4 for i in range(3)})
    for jid in ("j2", "j0", "j1"):  # request order does not matter
        d.start(jid)
    d.env.run()
    assert d.grant_order("rollout", 0) == ["j0", "j1", "j2"] * 4


def test_train_grants_alternate_on_the_shared_training_node():
    g = make_group([(make_job("a", rollout=10, train=50), (0,)), (make_job("b", rollout=10, train=50), (1,))], 2)
    d = Driver(g, intra(migration=False), {"a": 3, "b": 3})
    d.start("b")
    d.start("a")
    d.env.run()
    assert d.grant_order("train", 0) == ["a", "b"] * 3


def test_job_not_at_its_turn_is_not_granted():
    g = shared_node_group(2)
    ctl = GroupController(SimEnvironment(), g, intra())
    granted = []
    ctl.request("j1", "rollout", granted.append)
    assert granted == []  # the node is free, but it is j0's turn
    ctl.request("j0", "rollout", granted.append)
    assert [x.job_id for x in granted] == ["j0"]


def test_waiting_job_is_granted_when_the_holder_releases():
    g = shared_node_group(2)
    ctl = GroupController(SimEnvironment(), g, intra(migration=False))
    granted = []
    ctl.request("j0", "rollout", granted.append)
    ctl.request("j1", "rollout", granted.append)
    assert [x.job_id for x in granted] == ["j0"]
    ctl.release("j0", "rollout")
    assert [x.job_id for x in granted] == ["j0", "j1"]


def test_whose_turn_reports_each_nodes_next_job():
    g = make_group([(make_job("a"), (0,)), (make_job("b"), (0,)), (make_job("c"), (1,))], 3)
    ctl = GroupController(SimEnvironment(), g, intra())
    assert ctl.whose_turn() == {"rollout": ["a", "c", None], "train": ["a"]}
    ctl.request("a", "rollout", lambda _: None)
    assert ctl.whose_turn()["rollout"] == ["b", "c", None]


def test_request_for_unknown_job_raises_key_error():
    ctl = GroupController(SimEnvironment(), shared_node_group(2), intra())
    with pytest.raises(KeyError):
        ctl.request("nobody", "rollout", lambda _: None)


def test_release_for_unknown_job_raises_key_error():
    ctl = GroupController(SimEnvironment(), shared_node_group(2), intra())
    with pytest.raises(KeyError):
        ctl.release("nobody", "rollout")


# -- grants' contents ------------------------------------------------------------------------

def test_first_grant_has_no_switch_and_next_job_pays_warm_switch():
    g = shared_node_group(2)
    ctl = GroupController(SimEnvironment(), g, intra(warm_switch_s=3.0, migration=False))
    granted = []
    ctl.request("j0", "rollout", granted.append)
    ctl.release("j0", "rollout")
    ctl.request("j1", "rollout", granted.append)
    assert [x.switch_s for x in granted] == [0.0, 3.0]


def test_same_job_again_pays_no_switch():
    g = make_group([(make_job("a"), (0,)), (make_job("b"), (1,))], 2)
    ctl = GroupController(SimEnvironment(), g, intra(warm_switch_s=3.0))
    granted = []
    for _ in range(2):
        ctl.request("a", "rollout", granted.append)
        ctl.release("a", "rollout")
    assert [x.switch_s for x in granted] == [0.0, 0.0]


def test_grant_carries_tail_share_only_on_a_shared_node():
    g = make_group([(make_job("a", tail_frac=0.3), (0,)), (make_job("b", tail_frac=0.3), (0,)),
                    (make_job("c", tail_frac=0.3), (1,))], 2)
    ctl = GroupController(SimEnvironment(), g, intra(migration=True))
    granted = []
    ctl.request("a", "rollout", granted.append)
    ctl.request("c", "rollout", granted.append)
    assert {x.job_id: x.tail_share for x in granted} == {"a": 0.3, "c": 0.0}


def test_grant_carries_no_tail_share_for_a_job_that_cannot_migrate_its_tail():
    g = make_group([(make_job("a", tail_frac=0.3, cannot=["tail_migration"]), (0,)),
                    (make_job("b", tail_frac=0.3), (0,))], 1)
    ctl = GroupController(SimEnvironment(), g, intra(migration=True))
    granted = []
    ctl.request("a", "rollout", granted.append)
    ctl.release("a", "rollout")
    ctl.request("b", "rollout", granted.append)
    assert {x.job_id: x.tail_share for x in granted} == {"a": 0.0, "b": 0.3}


def test_grant_records_the_environment_time():
    env = SimEnvironment(start=42.0)
    ctl = GroupController(env, shared_node_group(1), intra())
    granted = []
    ctl.request("j0", "rollout", granted.append)
    assert granted[0].granted_at == 42.0
    assert granted[0].nodes == (0,) and granted[0].pool == "rollout"


# -- long-tail migration ---------------------------------------------------------------------

def test_tail_started_lets_the_next_rollout_start():
    g = shared_node_group(2, tail_frac=0.3)
    ctl = GroupController(SimEnvironment(), g, intra(migration=True, start_ratio=0.5))
    granted = []
    ctl.request("j0", "rollout", granted.append)
    ctl.request("j1", "rollout", granted.append)
    assert [x.job_id for x in granted] == ["j0"]
    ctl.tail_started("j0")
    assert [x.job_id for x in granted] == ["j0", "j1"]
    assert ctl.tails_on(0) == {"j0": 0.25}


def test_tail_load_above_start_ratio_blocks_the_next_rollout():
    g = shared_node_group(2, tail_frac=0.3)
    ctl = GroupController(SimEnvironment(), g, intra(migration=True, start_ratio=0.9,
                                                           tail_worker_frac=0.25))
    granted = []
    ctl.request("j0", "rollout", granted.append)
    ctl.request("j1", "rollout", granted.append)
    ctl.tail_started("j0")
    assert [x.job_id for x in granted] == ["j0"]  # 25% of workers held > 10% allowed
    ctl.release("j0", "rollout")
    assert [x.job_id for x in granted] == ["j0", "j1"]
    assert ctl.tails_on(0) == {}


# -- membership changes ----------------------------------------------------------------------

@pytest.mark.parametrize("position", ["last", "first"])
def test_newcomer_joins_a_running_group_without_deadlock(position):
    a, b = make_job("a", rollout=60, train=40), make_job("b", rollout=50, train=30)
    c = make_job("c", rollout=40, train=20)
    g = make_group([(a, (0,)), (b, (0,))], 1)
    d = Driver(g, intra(migration=True), {"a": 8, "b": 8})
    d.start("a")
    d.start("b")
    newcomer = Member(c, (0,), (0,))
    members = g.members + (newcomer,) if position == "last" else (newcomer,) + g.members
    d.env.call_at(333.0, d.join, Group(0, 1, 1, members), "c", 5)
    d.env.run()
    assert {j: len(v) for j, v in d.sync_ends.items()} == {"a": 8, "b": 8, "c": 5}
    assert not d.heads_overlap()


def test_newcomer_on_added_rollout_node_runs():
    a = make_job("a", rollout=60, train=40)
    g = make_group([(a, (0,))], 1)
    d = Driver(g, intra(), {"a": 5})
    d.start("a")
    grown = Group(0, 2, 1, g.members + (Member(make_job("c", rollout=30, train=20), (1,), (0,)),))
    d.env.call_at(150.0, d.join, grown, "c", 4)
    d.env.run()
    assert len(d.sync_ends["c"]) == 4
    assert d.grant_order("rollout", 1) == ["c"] * 4


def test_departure_keeps_the_rest_of_the_group_progressing():
    g = shared_node_group(3, rollout=40, train=30)
    d = Driver(g, intra(migration=False), {"j0": 2, "j1": 6, "j2": 9})
    for m in g.members:
        d.start(m.job_id)
    d.env.run()
    assert {j: len(v) for j, v in d.sync_ends.items()} == {"j0": 2, "j1": 6, "j2": 9}
    assert d.group.size == 0


def test_departure_of_the_job_whose_turn_it_is_unblocks_the_next():
    g = shared_node_group(2, rollout=40, train=30)
    ctl = GroupController(SimEnvironment(), g, intra(migration=False))
    granted = []
    ctl.request("j1", "rollout", granted.append)
    assert granted == []
    ctl.update_group(Group(0, 1, 1, g.members[1:]))  # j0 leaves before asking again
    assert [x.job_id for x in granted] == ["j1"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(group=groups(max_members=4), cfg=any_configs(), data=st.data())
def test_membership_changes_never_deadlock(group, cfg, data):
    """A newcomer joins at a random time and position; members leave as they finish."""
    iters = {m.job_id: data.draw(st.integers(1, 6), label=f"iters {m.job_id}") for m in group.members}
    newcomer = Member(make_job("new", rollout=data.draw(st.floats(10, 200)), train=data.draw(st.floats(10, 200)),
                               tail_frac=0.3), (data.draw(st.integers(0, group.n_rollout - 1)),), (0,))
    at = data.draw(st.floats(0, 1500))
    pos = data.draw(st.integers(0, group.size))
    d = Driver(group, cfg, iters)

    def join() -> None:
        members = list(d.group.members)
        members.insert(min(pos, len(members)), newcomer)
        d.join(Group(0, group.n_rollout, group.n_train, tuple(members)), "new", 3)

    for m in group.members:
        d.start(m.job_id)
    d.env.call_at(at, join)
    d.env.run()
    assert {j: len(v) for j, v in d.sync_ends.items()} == {**iters, "new": 3}
    assert not d.heads_overlap()


def test_newcomer_trains_in_the_current_meta_iteration():
    """A job joining while the incumbent is mid-iteration takes its turn in that meta-iteration.

    a's first iteration: rollout 0–100, train 100–200, sync to 205, next train 305–405. b joins
    at t=50 on a fresh rollout node and asks for training at t=70. Round-robin (a, b) and FIFO
    per node both put b's train right after a's current one, at t=200 — not after a's *next*
    train (t=405), which would leave the training node idle from 200 to 305 while b waits.
    """
    a = make_job("a", rollout=100, train=100, sync=5)
    b = make_job("b", rollout=20, train=20, sync=5)
    g = make_group([(a, (0,))], 1)
    d = Driver(g, intra(migration=False, warm_switch_s=0.0), {"a": 4})
    d.start("a")
    d.env.call_at(50.0, d.join, Group(0, 2, 1, g.members + (Member(b, (1,), (0,)),)), "b", 3)
    d.env.run()
    b_trains = [x.granted_at for x in d.grants if x.job_id == "b" and x.phase == "train"]
    assert b_trains[0] == pytest.approx(200.0)


def test_a_held_member_is_out_of_the_turn_order_until_it_arrives_with_its_migration():
    env = SimEnvironment()
    a, m = make_job("a"), make_job("m")
    ctl = GroupController(env, Group(0, 1, 1, (Member(a, (0,), (0,)),)), intra())
    ctl.hold("m")
    ctl.update_group(Group(0, 1, 1, (Member(a, (0,), (0,)), Member(m, (0,), (0,)))))
    got: list[Grant] = []
    ctl.request("a", "rollout", got.append)
    assert [g.job_id for g in got] == ["a"]  # m's reserved slot does not block a
    ctl.release("a", "rollout")
    ctl.activate("m", 300.0)
    ctl.request("m", "rollout", got.append)
    assert got[-1].job_id == "m" and got[-1].switch_s == 300.0  # its migration holds the node
    ctl.request("a", "rollout", got.append)
    assert len(got) == 2  # a waits until m's migration and rollout release the node
    ctl.release("m", "rollout")
    assert got[-1].job_id == "a" and got[-1].switch_s == intra().warm_switch_s
