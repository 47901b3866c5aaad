"""Turns no member holds hostage (core/turns.py): who blocks its group, skipping it, rejoining it."""

from __future__ import annotations

from copy import deepcopy

from rollmux.core.env import SimEnvironment
from rollmux.core.group_controller import GroupController
from factories import intra, make_group, make_job


class Members:
    """Two members of one group on one rollout and one training node, driven by hand."""

    def __init__(self) -> None:
        self.env = SimEnvironment()
        group = make_group([(make_job("a"), (0,)), (make_job("b"), (0,))], n_rollout=1)
        self.ctl = GroupController(self.env, group, intra())
        self.granted: list[tuple[str, str]] = []

    def ask(self, job_id: str, phase: str) -> None:
        self.ctl.request(job_id, phase, lambda g: self.granted.append((g.job_id, g.phase)))

    def run(self, job_id: str, phase: str) -> None:
        """Ask for `phase`, which must be granted at once, and release it."""
        self.ask(job_id, phase)
        assert self.granted[-1] == (job_id, phase)
        self.ctl.release(job_id, phase)

    def a_goes_idle(self) -> float:
        """One iteration each; then `a` stops asking while `b` asks for its next rollout. When a's turn came."""
        self.run("a", "rollout")
        self.ask("a", "train")
        self.run("b", "rollout")
        self.ctl.release("a", "train")
        self.run("b", "train")
        came = self.env.now()
        self.ask("b", "rollout")
        return came


def _at(env: SimEnvironment, t: float) -> None:
    env.call_at(t, lambda: None)
    env.run()


def test_a_member_that_does_not_ask_for_its_turn_blocks_its_waiting_mate():
    m = Members()
    _at(m.env, 5.0)
    came = m.a_goes_idle()
    assert m.granted[-1] != ("b", "rollout")
    assert m.ctl.blocking() == [("a", "rollout", came)]


def test_nobody_blocks_a_group_in_which_nobody_waits():
    m = Members()
    m.run("a", "rollout")
    assert m.ctl.blocking() == []


def test_a_skipped_member_no_longer_holds_its_mates_turn():
    m = Members()
    m.a_goes_idle()
    m.ctl.skip("a", "rollout")
    assert m.granted[-1] == ("b", "rollout")
    assert m.ctl.absent() == {"a": "rollout"} and m.ctl.blocking() == []


def test_the_group_goes_on_without_an_absent_member():
    m = Members()
    m.a_goes_idle()
    m.ctl.skip("a", "rollout")
    m.ctl.release("b", "rollout")
    for _ in range(3):
        m.run("b", "train")
        m.run("b", "rollout")
    assert m.granted.count(("b", "train")) == 4


def test_a_member_that_asks_again_rejoins_at_the_meta_iteration_in_progress():
    m = Members()
    m.a_goes_idle()
    m.ctl.skip("a", "rollout")
    m.ctl.release("b", "rollout")
    for _ in range(3):
        m.run("b", "train")
        m.run("b", "rollout")
    before = deepcopy(m.ctl.export_state()["meta"])
    m.ctl.rejoin("a")
    m.ask("a", "rollout")
    m.ask("b", "train")
    meta = m.ctl.export_state()["meta"]
    # Its rollout comes right after b's last (b's 5th), not at its own 2nd (it gains no turn it
    # skipped), and runs beside b's training, as in the plain round robin.
    assert before["rollout"]["a"] == 1 and meta["rollout"]["a"] == before["rollout"]["b"] + 1
    assert m.granted[-2:] == [("a", "rollout"), ("b", "train")]
    assert m.ctl.absent() == {}


def test_rejoining_never_moves_a_members_counts_back():
    m = Members()
    m.a_goes_idle()
    m.ctl.skip("a", "rollout")
    before = deepcopy(m.ctl.export_state()["meta"])
    m.ctl.rejoin("a")
    after = m.ctl.export_state()["meta"]
    assert all(after[p]["a"] >= before[p]["a"] for p in ("rollout", "train"))


def test_an_absent_member_is_part_of_the_exported_state():
    m = Members()
    m.a_goes_idle()
    m.ctl.skip("a", "rollout")
    m.ctl.release("b", "rollout")
    copy = GroupController(SimEnvironment(), m.ctl.group, intra())
    copy.import_state(m.ctl.export_state())
    copy.request("b", "train", lambda g: None)
    copy.release("b", "train")
    got: list = []
    copy.request("b", "rollout", got.append)  # a is still out of the turn order
    assert copy.absent() == {"a": "rollout"} and len(got) == 1
