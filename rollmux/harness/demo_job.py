"""One of the demo's GRPO jobs as `rollmux run` launches it: `python -m rollmux.harness.demo_job`.

The job finds its credentials with `rollmux.init()` (the environment `rollmux run` sets) and
joins the Ray cluster of RAY_ADDRESS. Its workers (`demo_jobs.Worker`: one rollout worker per
slot, one trainer) are started on the node the permit of their phase names, with the shim's
`node_strategies()` (`NodeAffinitySchedulingStrategy`, not soft), and each reports the node it
runs on from inside (`ray.get_runtime_context().get_node_id()`); the phase log keeps both, so
the demo counts phases that ran anywhere else.

A move reaches the job as a permit naming other nodes (the shim calls `on_move` when the
placement epoch changes; the phase's onload checks too): the workers of that phase's side are
restarted there. A moved trainer carries its full state (weights, optimizer) from the old
node; restarted rollout workers start from the trainer's current weights, and the job's
weight-sync group is formed again before its next sync. So a move never changes what the job
computes.

A lost node: a Ray call of the job fails, the shim hands its permit back, and the job waits
for the service to place it again (its epoch in `GET /v1/jobs/{id}` moves on), then redoes the
iteration from the step that failed: the rollout (its responses died with the node), or only
the sync (the training step had completed). Rollout workers hold nothing the trainer cannot
give back. A lost training node would lose the trainer's state: a job resumes from its own
checkpoint then, which this demo job does not write (the demo kills a rollout node).

Output (`--out DIR`): `DIR/JOB.json` (curves, times, moves, restarts, the phase log) and
`DIR/JOB.pt` (the final weights, for the demo's comparison with its solo run).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import ray

from rollmux.harness.demo_jobs import CONTROL, JobActors, PhaseLog, Worker, _Rollout, progress_line

WAIT_MOVE_S = 180.0  # how long a job whose node died waits to be placed again
# A weight sync whose peer died with its node fails within this (rather than the 300 s default), so the
# trainer, whose calls run in order, is free again for the restart.
SYNC_TIMEOUT_S = 30.0


class LaunchedJob:
    """A demo GRPO job's workers, placed where its permits say, and the shim's hooks."""

    def __init__(self, job_id: str, preset: str, seed: int, slots: int, n_prompts: int) -> None:
        self.job_id, self.preset, self.seed, self.slots, self.n_prompts = job_id, preset, seed, slots, n_prompts
        self.actors = JobActors([], None)
        self.node = {"rollout": None, "train": None}  # node the permit named, where the side's workers run
        self.ran = {"rollout": None, "train": None}   # node the side's workers reported from inside
        self.sync_stale = True
        self.onloaded: set[int] = set()
        self.log = PhaseLog()
        self.rollout: _Rollout | None = None
        self.shim: Any = None
        self.moves = 0
        self.started = False  # workers started later are restarts: no warm-up, on the clock
        self.startup: dict = {}
        self.groups: set[int] = set()  # the groups whose permits the job held
        self.restarts: list[dict] = []
        self.warm: list[float] = []   # onload seconds (a warm switch)
        self.cold: list[float] = []   # trainer restores (a cold start)
        self.recoveries: list[dict] = []

    # -- the shim's hooks ------------------------------------------------------------------------
    def on_move(self, grant) -> None:
        """Placed again: the running phase's workers go to the nodes its permit names."""
        self.moves += 1
        self._place(grant)

    def onload(self, pool: str) -> None:
        """Place the pool's side where its permit says (a no-op when it is there), then onload it."""
        grant = self.shim.grant
        self.groups.add(grant.group_id)
        self._place(grant)
        if pool == "rollout":
            slots = self._slots(grant)
            self.warm.extend(ray.get([self.actors.rollout[s].onload.remote() for s in slots]))
            self.onloaded.update(slots)
        else:
            self.warm.append(ray.get(self.actors.trainer.onload.remote()))

    def offload(self, pool: str) -> None:
        """Offload what the phase onloaded (the init phase onloaded nothing: the workers start offloaded)."""
        if self.shim.grant.phase == "init":
            return
        if pool == "rollout":
            ray.get([self.actors.rollout[s].offload.remote() for s in self.onloaded])
            self.onloaded.clear()
        else:
            ray.get(self.actors.trainer.offload.remote())

    def on_tail(self, grant) -> None:
        """The long tail migrates: the running rollout gives up the slots the permit takes."""
        self.rollout.give_up(grant)

    def _slots(self, grant) -> tuple[int, ...]:
        """The worker slots the rollout permit covers; a co-located permit (the node is the job's alone)
        covers them all."""
        return grant.slots(0) or tuple(range(self.slots))

    # -- placement -------------------------------------------------------------------------------
    def _place(self, grant) -> None:
        """Start the phase's side on the first node its permit names, unless it runs there."""
        if grant.phase in ("rollout", "train"):
            (strategy, *_) = self.shim.node_strategies()
            self._start("rollout" if grant.phase == "rollout" else "train", grant.node_ids[0], strategy)

    def start_placed(self) -> None:
        """Before init: start both sides where the job's placement says (`GET /v1/jobs/{id}`; a
        co-located job's rollout workers on its training node), warmed up, holding no permit (a
        process's start-up is not a phase: its lease would run out on a busy host)."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        t0 = time.perf_counter()
        ids = self.shim.client.job(self.job_id).get("node_ids")
        if not ids or not ids.get("train"):  # queued: the workers start where the first permits say
            self.started = True
            return
        for side, node in (("train", ids["train"][0]), ("rollout", (ids["rollout"] or ids["train"])[0])):
            self._start(side, node, NodeAffinitySchedulingStrategy(node_id=node, soft=False))
        self.restarts.clear()  # a start, not a restart
        self.started = True
        self.startup = {"start": t0, "end": time.perf_counter()}

    def _start(self, side: str, node: str, strategy) -> None:
        """The side's workers on `node` (restarted there if they run elsewhere)."""
        if self.node[side] == node and (self.actors.rollout if side == "rollout" else self.actors.trainer):
            return
        t0 = time.perf_counter()
        if side == "rollout":
            self._restart_rollout(strategy)
        else:
            self._restart_trainer(strategy)
        self.restarts.append({"side": side, "from": self.node[side], "to": node, "start": t0,
                              "end": time.perf_counter()})
        self.node[side] = node
        self.sync_stale = True

    def _spawn(self, strategy, side: str, slot: int = 0):
        actor = ray.remote(concurrency_groups=CONTROL)(Worker)
        return actor.options(num_cpus=0, scheduling_strategy=strategy).remote(
            self.preset, self.seed, side, slot, warm_up=not self.started, sync_timeout_s=SYNC_TIMEOUT_S)

    def _restart_rollout(self, strategy) -> None:
        """New rollout workers on the strategy's node, holding the trainer's current policy."""
        _kill(self.actors.rollout)
        self.actors.rollout = [self._spawn(strategy, "rollout", s) for s in range(self.slots)]
        self.ran["rollout"] = _one(ray.get([w.node_id.remote() for w in self.actors.rollout]))
        self.onloaded.clear()
        if self.actors.trainer is not None:
            weights = self.actors.trainer.weights.remote()
            ray.get([w.load_weights.remote(weights) for w in self.actors.rollout])

    def _restart_trainer(self, strategy) -> None:
        """A trainer on the strategy's node with the old trainer's full state (a fresh one at first)."""
        old = self.actors.trainer
        state = ray.get(old.export_state.remote()) if old is not None else None
        new = self._spawn(strategy, "trainer")
        if state is None:  # a first start: time a cold start (its own state, serialized and restored)
            state = ray.get(new.export_state.remote())
        self.cold.append(ray.get(new.import_state.remote(state)))
        self.ran["train"] = ray.get(new.node_id.remote())
        _kill([old] if old is not None else [])
        self.actors.trainer = new

    def _sync_group(self) -> None:
        """(Re)form the job's weight-sync group: the trainer hosts its store, every worker joins."""
        for a in self.actors.all():
            try:
                ray.get(a.leave_sync.remote(), timeout=30)
            except ray.exceptions.RayError:
                pass  # a worker that died with its node has nothing to leave
        port = ray.get(self.actors.trainer.host_store.remote(self.slots))
        ray.get([self.actors.trainer.join_sync.remote(port, self.slots)]
                + [w.join_sync.remote(port, self.slots) for w in self.actors.rollout])
        self.sync_stale = False

    # -- the loop --------------------------------------------------------------------------------
    def run(self, shim, iterations: int) -> dict:
        """init, then rollout -> train -> sync `iterations` times, riding out moves and a lost node."""
        self.shim, self.iterations = shim, iterations
        self.phase_s = {"rollout": 0.0, "train": 0.0}  # the last iteration's phases, for its progress line
        out: dict = {"rewards": [], "losses": [], "sync_s": [], "aborted": 0}
        self.start_placed()
        with shim.phase("init"):
            pass  # the workers are fresh: nothing to initialise under the permit
        t0, it, trained = time.perf_counter(), 0, -1
        began = t0
        out["iters"] = []  # (start, end) per iteration
        while it < iterations:
            if began is None:
                began = time.perf_counter()
            try:
                if trained < it:
                    s = time.perf_counter()
                    parts = self._rollout(shim, it, out)
                    self.phase_s["rollout"] = time.perf_counter() - s
                    with shim.phase("train") as grant:
                        s = time.perf_counter()
                        metrics = ray.get(self.actors.trainer.train.remote(it, *parts))
                        self.log.add(self.job_id, "train", "train", grant.node_ids[0], (0,), it, s,
                                     time.perf_counter(), self.ran["train"])
                    self.phase_s["train"] = time.perf_counter() - s
                    out["rewards"].append(metrics["mean_reward"])
                    out["losses"].append(metrics["loss"])
                    trained = it
                with shim.phase("sync"):
                    if self.sync_stale:
                        self._sync_group()
                    s = time.perf_counter()
                    ray.get([self.actors.trainer.send_weights.remote()]
                            + [w.receive_weights.remote() for w in self.actors.rollout])
                    out["sync_s"].append(time.perf_counter() - s)
                it, began = self._done(out, it, began), None
            except ray.exceptions.RayError as exc:
                self._recover(exc, it)
                if trained == it:  # only its sync failed: restarted workers start from the trained weights
                    it, began = self._done(out, it, began), None
        out["iter_s"] = (time.perf_counter() - t0) / iterations
        out["weights"] = ray.get(self.actors.trainer.weights.remote())
        return out

    def _done(self, out: dict, it: int, began: float) -> int:
        """Iteration `it` is done: its interval; the next iteration."""
        out["iters"].append((began, time.perf_counter()))
        print(progress_line(it + 1, self.iterations, self.phase_s["rollout"], self.phase_s["train"]), flush=True)
        return it + 1

    def _rollout(self, shim, it: int, out: dict) -> list:
        """One rollout phase: the batch's responses as object refs."""
        with shim.phase("rollout") as grant:
            ro = _Rollout(self.job_id, it, self.actors, self._slots(grant), grant.node_ids[0], self.log,
                          self.onloaded, self.n_prompts)
            ro.ran = self.ran["rollout"]
            self.rollout = ro
            parts = ro.run(shim)
            out["aborted"] += ro.aborted
        return parts

    def _recover(self, exc: BaseException, it: int) -> None:
        """A Ray call failed: if the job's rollout workers died with their node, wait until the
        service has placed the job away from it (the next permit names the new nodes); else re-raise."""
        lost = self._lost_sides()
        if not lost:
            raise exc
        if "train" in lost:
            raise RuntimeError(f"{self.job_id}: its training node {self.node['train']} died with the trainer's "
                               "state (this demo job writes no checkpoint to resume from)") from exc
        t0 = time.perf_counter()
        dead = self.node["rollout"]
        _kill(self.actors.rollout)
        self.actors.rollout, self.node["rollout"], self.sync_stale = [], None, True
        deadline = time.monotonic() + WAIT_MOVE_S
        while dead in _node_ids(self.shim.client.job(self.job_id)):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.job_id}: not placed again {WAIT_MOVE_S:.0f}s after losing a node") from exc
            time.sleep(0.2)
        self.recoveries.append({"iteration": it, "lost": lost, "error": type(exc).__name__, "start": t0,
                                "end": time.perf_counter()})

    def _lost_sides(self) -> list[str]:
        """The sides whose workers are gone: their node is dead, or they do not answer (asked on their
        control thread, which a call still stuck on a dead peer does not block)."""
        alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
        lost = []
        for side, actors in (("rollout", self.actors.rollout), ("train", [self.actors.trainer])):
            if not actors or actors[0] is None:
                continue
            try:
                ray.get([a.node_id.remote() for a in actors], timeout=60)
            except ray.exceptions.RayError:
                lost.append(side)
                continue
            if self.node[side] not in alive:
                lost.append(side)
        return lost


def _node_ids(view: dict) -> set[str]:
    """Every Ray node id a job view names."""
    return {n for ids in (view.get("node_ids") or {}).values() for n in ids if n}


def _kill(actors: list) -> None:
    for a in actors:
        ray.kill(a, no_restart=True)


def _one(nodes: list[str]) -> str:
    if len(set(nodes)) != 1:
        raise RuntimeError(f"a side's workers run on several nodes: {sorted(set(nodes))}")
    return nodes[0]


def main(argv: list[str] | None = None) -> int:
    """Run one launched demo job; write its results to --out."""
    import torch

    import rollmux
    ap = argparse.ArgumentParser(prog="python -m rollmux.harness.demo_job", description=__doc__.splitlines()[0])
    ap.add_argument("--preset", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--iterations", type=int, required=True)
    ap.add_argument("--slots", type=int, default=2)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--tail-threshold", type=float, default=0.8)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--solo", metavar="JOB_ID", help="Run solo (no scheduler): fresh workers, state resident.")
    args = ap.parse_args(argv)
    ray.init(address=os.environ.get("RAY_ADDRESS", "auto"), namespace=os.environ.get("RAY_NAMESPACE"),
             log_to_driver=False)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.solo:
        return _solo(args)
    job_id = os.environ["ROLLMUX_JOB_ID"]
    job = LaunchedJob(job_id, args.preset, args.seed, args.slots, args.prompts)
    shim = rollmux.init(onload=job.onload, offload=job.offload, on_move=job.on_move, on_tail=job.on_tail,
                        tail_threshold=args.tail_threshold)
    res = job.run(shim, args.iterations)
    shim.client.finish(job_id)
    torch.save(res.pop("weights"), args.out / f"{job_id}.pt")
    (args.out / f"{job_id}.json").write_text(json.dumps({
        **res, "job_id": job_id, "migrations": shim.migrations, "moves": job.moves, "restarts": job.restarts,
        "warm": job.warm, "cold": job.cold, "groups": sorted(job.groups), "startup": job.startup,
        "recoveries": job.recoveries, "rows": job.log.rows}))
    return 0


def _solo(args) -> int:
    """The job solo, as Solo-D runs it: its own workers, no permits, state resident; its results as
    `solo-JOB.json` and `solo-JOB.pt`."""
    import torch

    from rollmux.harness.demo_jobs import drive, spawn
    jid = args.solo
    actors = spawn(args.preset, args.seed, args.slots)
    ray.get([w.onload.remote() for w in actors.all()])
    log = PhaseLog()
    run = drive(jid, actors, args.iterations, log, (f"rollout-solo-{jid}", f"train-solo-{jid}"), args.prompts)
    torch.save(run.weights, args.out / f"solo-{jid}.pt")
    (args.out / f"solo-{jid}.json").write_text(json.dumps({"rewards": run.rewards, "losses": run.losses,
                                                           "iter_s": run.iter_s, "rows": log.rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
