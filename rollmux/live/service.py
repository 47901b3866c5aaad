"""The scheduler service of the live plane: one detached, named Ray actor (DESIGN §8).

It holds the same `ClusterState` the simulator uses (placement policy, plan
validation, one `GroupController` per group) on a `WallClockEnvironment`
whose thread is the only one that touches that state; Ray calls (threaded
actor) hand their work to it and wait for the answer. Jobs talk to it through
`RayPermitClient`, the shim's permit client.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from dataclasses import asdict
from typing import Any, Callable

from rollmux.cluster_state import ClusterState, SchedulerConfig
from rollmux.env import WallClockEnvironment
from rollmux.group_controller import Grant
from rollmux.inter_group import RollMuxPlacement
from rollmux.shim import PhaseTimings
from rollmux.spec import ClusterSpec, JobSpec

NAMESPACE = "rollmux"
ACTOR_NAME = "scheduler"


class SchedulerCore:
    """The service's logic, free of Ray (so it is testable in-process)."""

    def __init__(self, cluster: dict, cfg: SchedulerConfig | None = None) -> None:
        self.env = WallClockEnvironment()
        self.cluster = ClusterSpec.model_validate(cluster)
        self.state = ClusterState(self.env, self.cluster, RollMuxPlacement((cfg or SchedulerConfig()).intra),
                                  cfg or SchedulerConfig())
        self.jobs: dict[str, JobSpec] = {}
        self.group_of: dict[str, int] = {}
        self.started: dict[str, float] = {}
        self.iterations: dict[str, int] = {}
        self._thread = threading.Thread(target=self.env.serve, name="rollmux-scheduler", daemon=True)
        self._thread.start()

    def _on_loop(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run fn on the scheduler thread and return its result (or raise its error)."""
        fut: Future = Future()

        def call() -> None:
            try:
                fut.set_result(fn(*args))
            except Exception as exc:  # handed back to the caller's thread
                fut.set_exception(exc)
        self.env.call_at(self.env.now(), call)
        return fut.result()

    def submit(self, record: dict) -> dict:
        """Validate and place a job; returns where it went."""
        job = JobSpec.model_validate(record)
        reason = self.cluster.job_unplaceable_reason(job)
        if reason is not None:
            raise ValueError(f"job {job.job_id}: can never be placed: {reason}")
        if job.job_id in self.jobs:
            raise ValueError(f"job {job.job_id}: already submitted")
        return self._on_loop(self._place, job)

    def _place(self, job: JobSpec) -> dict:
        plan = self.state.place(job, self._progress())
        if plan is None:
            raise RuntimeError(f"job {job.job_id}: no nodes free under the caps")
        self.jobs[job.job_id] = job
        self.group_of[job.job_id] = plan.group.group_id
        member = plan.group.member(job.job_id)
        return {"job_id": job.job_id, "group_id": plan.group.group_id, "case": plan.case.value,
                "rollout_nodes": list(member.rollout_nodes), "train_nodes": list(member.train_nodes)}

    def _progress(self) -> dict[str, tuple[int, float]]:
        now = self.env.now()
        return {j: (self.iterations.get(j, 0), now - t) for j, t in self.started.items()}

    def acquire(self, job_id: str, phase: str) -> dict:
        """Block until the job may run `phase`; returns the permit as a dict."""
        got: Future = Future()

        def request() -> None:
            ctl = self.state.controllers[self.group_of[job_id]]
            self.started.setdefault(job_id, self.env.now())
            ctl.request(job_id, phase, got.set_result)
        self._on_loop(request)
        return asdict(got.result())

    def tail_started(self, job_id: str) -> None:
        """Forward a tail-bound rollout to its group's controller."""
        self._on_loop(lambda: self.state.controllers[self.group_of[job_id]].tail_started(job_id))

    def release(self, timings: dict) -> None:
        """The job ended a phase; a finished train phase completes an iteration."""
        t = PhaseTimings(**timings)

        def release() -> None:
            self.state.controllers[self.group_of[t.job_id]].release(t.job_id, t.phase)
            if t.phase == "train":
                self.iterations[t.job_id] = self.iterations.get(t.job_id, 0) + 1
        self._on_loop(release)

    def finish(self, job_id: str) -> None:
        """The job is done: it leaves its group (an empty group releases its nodes)."""
        def leave() -> None:
            self.state.leave(job_id, self.group_of.pop(job_id))
        self._on_loop(leave)

    def status(self) -> dict:
        """Groups, members, whose turn it is on each node, and each job's iteration time vs SLO."""
        def snapshot() -> dict:
            now = self.env.now()
            groups = [{"group_id": g.group_id, "members": list(g.job_ids()),
                       "rollout_nodes": g.n_rollout, "train_nodes": g.n_train,
                       "turn": self.state.controllers[g.group_id].whose_turn()}
                      for g in self.state.groups.values()]
            jobs = {}
            for jid, job in self.jobs.items():
                done = self.iterations.get(jid, 0)
                mean = (now - self.started[jid]) / done if done else None
                jobs[jid] = {"iterations": done, "mean_iter_s": mean, "slo_iter_s": job.slo * job.solo_iter_s}
            return {"groups": groups, "jobs": jobs, "cost_per_hour": self.state.ledger.rate_per_hour()}
        return self._on_loop(snapshot)

    def shutdown(self) -> None:
        """Stop the scheduler thread."""
        self.env.stop()


class RayPermitClient:
    """The shim's permit client for a job talking to the scheduler actor."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self._releases: list = []  # releases sent but not yet confirmed
        self._lock = threading.Lock()

    def acquire(self, job_id: str, phase: str) -> Grant:
        """Block on the actor until the permit is granted."""
        import ray
        d = ray.get(self.handle.acquire.remote(job_id, phase))
        return Grant(**{**d, "nodes": tuple(d["nodes"])})

    def tail_started(self, job_id: str) -> None:
        """Report a tail-bound rollout."""
        import ray
        ray.get(self.handle.tail_started.remote(job_id))

    def release(self, timings: PhaseTimings) -> None:
        """Release the permit with the measured timings, without waiting for the round trip:
        no later request of this job depends on it (call `drain` before `finish`)."""
        ref = self.handle.release.remote(asdict(timings))
        with self._lock:
            self._releases.append(ref)

    def drain(self) -> None:
        """Wait until every release sent so far has been applied (raises its error, if any)."""
        import ray
        with self._lock:
            refs, self._releases = self._releases, []
        ray.get(refs)


def start_service(cluster: dict, cfg: SchedulerConfig | None = None) -> Any:
    """Start (or connect to) the detached, named scheduler actor; Ray must be initialized."""
    import ray
    actor = ray.remote(SchedulerCore).options(
        name=ACTOR_NAME, namespace=NAMESPACE, lifetime="detached", get_if_exists=True,
        max_concurrency=256, num_cpus=0)
    return actor.remote(cluster, cfg)
