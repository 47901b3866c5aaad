"""How a simulated job's stay is accounted (DESIGN §7): when it leaves, and what is reported.

One seam for every policy: the group simulator (rollmux, solo-d, random, greedy), veRL's closed
form and Gavel+ each ask their `Accounting` when a job must leave whatever its progress, whether
its work is done, which rollout draws it runs on and when the books close; `job_outcome` records
how it fared the same way for all of them.

- `work` (the default, ours): every job runs all its iterations, round(duration_s /
  solo_iter_s); a slowdown lengthens its stay and so its cost: the gain is the cost of the
  same work.
- `paper` (the authors' cost code, rollmux/data/paper/README.md): every job is present from
  its arrival for exactly its trace duration_s, whatever its slowdown. It iterates until
  arrival + duration_s and leaves then, giving its nodes back as any departure does. An
  iteration in flight at that instant (one ending at that very instant too) is abandoned: it counts neither in the job's iterations
  nor in its solo time or mean iteration time. (The busy time of its phases already begun stays
  booked, as each policy booked it: a pool's idle share is low by at most one iteration per
  job.) A job still queued at its departure leaves without running. Cost is the nodes held over
  time, as under `work`; what a policy buys with it is reported as its throughput: iterations
  done, in total and over Σ duration_s / solo_iter_s, the iterations Solo-D's nominal profile
  does in the same time (a ratio of sums, so each job weighs as its iterations do; Solo-D's own
  figure is a little under 1: its draws and its abandoned last iterations). SLO attainment is
  as usual, on the completed iterations.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rollmux.core.spec import JobSpec
from rollmux.errors import InputError
from rollmux.sim.draws import Rollouts, RolloutStream, rollout_draws, solo_seconds
from rollmux.sim.metrics import JobOutcome, PolicyResult


class Accounting:
    """The `work` accounting; `PaperAccounting` changes what differs."""

    name = "work"
    columns: tuple[str, ...] = ()  # the table's extra columns (work: none, every policy does the same iterations)

    def departure_s(self, job: JobSpec) -> float | None:
        """When the job leaves whatever its progress; None: when its work is done."""
        return None

    def finished(self, job: JobSpec, done: int) -> bool:
        """Whether `done` completed iterations are the job's whole work."""
        return done >= job.iterations

    def draws(self, job: JobSpec, seed: int) -> Rollouts:
        """The job's rollout times, one per iteration it can run."""
        return rollout_draws(job, seed)

    def close_s(self, last_event_s: float, last_departure_s: float) -> float:
        """When the ledger closes: at the simulation's last event."""
        return last_event_s

    def header_json(self) -> dict:
        """Top-level keys of the JSON (none: a document without `accounting` is `work`)."""
        return {}

    def policy_json(self, result: PolicyResult, nominal_iterations: float) -> dict:
        """Keys this accounting adds to each policy's JSON."""
        return {}

    def cells(self, result: PolicyResult, nominal_iterations: float) -> tuple[str, ...]:
        """The policy's cells of the extra `columns`."""
        return ()

    def caption(self, nominal_iterations: float) -> str:
        """What the table's caption says of the accounting before its usual text (work: nothing)."""
        return ""


class PaperAccounting(Accounting):
    """The paper's accounting: every job stays exactly its trace duration_s (module docstring)."""

    name = "paper"
    columns = ("tput",)  # (short: the 140-column table has no room to spare)

    def departure_s(self, job: JobSpec) -> float | None:
        """Its arrival plus its trace duration."""
        return job.arrival_s + job.duration_s

    def finished(self, job: JobSpec, done: int) -> bool:
        """Never: the job iterates until it leaves."""
        return False

    def draws(self, job: JobSpec, seed: int) -> Rollouts:
        """As many as it reads (a job faster than solo does more than its nominal iterations)."""
        return RolloutStream(job, seed)

    def close_s(self, last_event_s: float, last_departure_s: float) -> float:
        """At the last departure: later events are those of abandoned iterations."""
        return last_departure_s

    def header_json(self) -> dict:
        """`"accounting": "paper"`."""
        return {"accounting": self.name}

    def policy_json(self, result: PolicyResult, nominal_iterations: float) -> dict:
        """`iterations_done` (total) and `throughput` (over the nominal Solo-D iterations)."""
        return {"iterations_done": iterations_done(result),
                "throughput": throughput(result, nominal_iterations)}

    def cells(self, result: PolicyResult, nominal_iterations: float) -> tuple[str, ...]:
        """Throughput over the nominal Solo-D iterations (the iterations done are in the JSON)."""
        return (f"{throughput(result, nominal_iterations):.3f}",)

    def caption(self, nominal_iterations: float) -> str:
        """The accounting's terms and the throughput's definition."""
        return ("paper accounting (the authors' cost code): every job stays exactly its trace duration_s "
                "whatever its slowdown, an iteration in flight when it leaves abandoned; gain compares the "
                "cost of the same stays, not of the same work; tput = throughput, iterations done / "
                f"{nominal_iterations:,.0f}, the iterations Solo-D's profile does nominally in those stays "
                "(Σ duration_s / solo_iter_s); SLO met and slowdown on completed iterations; ")


WORK, PAPER = Accounting(), PaperAccounting()
ACCOUNTINGS = {a.name: a for a in (WORK, PAPER)}


def accounting_named(name: str) -> Accounting:
    """The accounting called `name`; InputError naming --accounting otherwise."""
    try:
        return ACCOUNTINGS[name]
    except KeyError:
        raise InputError("--accounting", f"unknown accounting {name!r}; choose from "
                                         f"{', '.join(ACCOUNTINGS)}") from None


def nominal_iterations(jobs: Sequence[JobSpec]) -> float:
    """Σ duration_s / solo_iter_s: what Solo-D's nominal profile does in the jobs' trace time."""
    return sum(j.duration_s / j.solo_iter_s for j in jobs)


def iterations_done(result: PolicyResult) -> int:
    """Iterations the policy's jobs completed, all together."""
    return sum(o.iterations for o in result.outcomes)


def throughput(result: PolicyResult, nominal: float) -> float:
    """Iterations done over `nominal` (nominal_iterations of the same jobs); NaN without any."""
    return iterations_done(result) / nominal if nominal > 0 else float("nan")


def job_outcome(job: JobSpec, rollouts: Rollouts, done: int, start_s: float, last_s: float,
                left_s: float, solo_s: float | None = None) -> JobOutcome:
    """How the job fared: `done` iterations from `start_s`, the last ending at `last_s`, and it
    left at `left_s`; `solo_s`, the same iterations solo where the caller tracked it (drift),
    else computed on their draws."""
    solo = solo_seconds(job, np.asarray(rollouts[:done])) if solo_s is None else solo_s
    return JobOutcome(job.job_id, done, start_s, last_s, solo, job.slo, job.solo_iter_s, job.arrival_s,
                      None if left_s == last_s else left_s)
