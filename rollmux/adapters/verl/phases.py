"""Where veRL's `RayPPOTrainer.fit` is in RollMux's phases, and what each phase boundary moves.

veRL's loop calls three methods of the two objects the adapter supplies through its config hooks
(`AgentLoopManager`, `CheckpointEngineManager`, rollmux/adapters/verl/managers.py); each call is an
event here, and the trainer adds two (rollmux/adapters/verl/trainer.py):

| veRL calls | event | phases |
|---|---|---|
| `init_workers()` (trainer) | `on_init_workers` | `init` opens, before any worker is built |
| `async_rollout_manager.generate_sequences(...)` | `on_generate` | `rollout` opens (one open already stays open: validation batches) |
| `checkpoint_manager.sleep_replicas()` | `on_sleep` | `rollout` closes, `train` opens (reward, log-probs, values, advantages, updates) |
| `checkpoint_manager.update_weights(step)` | `on_update` | `init` or `train` closes; `sync` marks step `step` |
| the end of `fit()` (trainer) | `finish` | whatever is open closes |

The weight update veRL asks for at `update_weights` needs the rollout engine's device memory (its
hybrid engine resumes the weights on the GPU, loads them from the trainer, then resumes the KV cache;
a standalone engine receives them into its device buffers). A RollMux job holds no device between
phases, so the update is applied where the job next holds its rollout nodes: the rollout phase's
onload wakes the engine with the weights of the step veRL last asked to send (`Rollout.wake(step)`),
and the `sync` phase itself moves nothing. The trainer's weights are unchanged in between, so the
rollout generates from exactly the weights veRL's own order would have sent.

Without a shim (outside RollMux) every event answers "run veRL's own call", so the loop is veRL's.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Mapping, Protocol

log = logging.getLogger("rollmux.adapters.verl")


class Rollout(Protocol):
    """The rollout side's moves (the adapter's checkpoint manager)."""

    def wake(self, step: int) -> None:
        """The rollout engine on its device, holding the weights of step `step`."""

    def sleep(self) -> None:
        """The rollout engine off its device."""

    def host_bytes(self) -> int:
        """Bytes the rollout side holds in host memory now, per node."""


class Train(Protocol):
    """The training side's moves (veRL's FSDP engines through their worker groups)."""

    def load(self) -> None:
        """Model, optimizer and gradients onto the device."""

    def offload(self) -> None:
        """Model, optimizer and gradients to host memory."""

    def host_bytes(self) -> int:
        """Bytes the training state holds in host memory when offloaded, per node."""


class VeRLPhases:
    """One veRL job's position in RollMux's phases; its `onload`/`offload`/`host_memory` are the shim's hooks."""

    def __init__(self, shim: Any | None = None) -> None:
        self.shim = shim  # set once, to a JobShim built with `hooks()` (see `for_job`), or None: solo
        self.rollout: Rollout | None = None
        self.train: Train | None = None
        self.phase: str | None = None   # the phase open now
        self._marker: Any = None
        self.step = 0                   # the weight version veRL last asked to send to the rollout
        self.awake = True               # the rollout engine is on its device (veRL builds it awake)
        self.events: list[tuple[str, str, float]] = []  # (what, phase or pool, time): for tests and reports
        self._warned_tail = False

    @classmethod
    def for_job(cls, job_id: str | None = None, client: Any | None = None, **shim_kwargs: Any) -> "VeRLPhases":
        """The phases of job `job_id` asking `client` for permits; with neither, the job `rollmux run`
        launched (its environment), or solo when there is none."""
        import os

        phases = cls()
        if job_id is not None or client is not None:
            from rollmux.shim import JobShim
            phases.shim = JobShim(job_id, client, **phases.hooks(), **shim_kwargs)
        else:
            from rollmux.job import JOB_ENV, init
            if any(os.environ.get(name) for name in JOB_ENV):  # (one missing: init names it)
                phases.shim = init(**phases.hooks(), **shim_kwargs)
        return phases

    @property
    def active(self) -> bool:
        """Whether a shim runs the job (else every event is veRL's own call)."""
        return self.shim is not None

    def attach(self, rollout: Rollout, train: Train) -> None:
        """The two sides, once veRL has built its workers (its init_workers ends by putting the replicas to sleep)."""
        self.rollout, self.train = rollout, train
        self.awake = False

    def _note(self, what: str, where: str) -> None:
        self.events.append((what, where, time.monotonic()))  # (one clock for every process of a machine)

    def _open(self, name: str) -> None:
        self._note("open", name)  # (the permit's wait and the onload follow)
        marker = self.shim.phase(name)
        grant = marker.__enter__()
        self._marker, self.phase = marker, name
        if name == "rollout" and getattr(grant, "tail_share", 0) > 0 and not self._warned_tail:
            self._warned_tail = True
            log.warning("%s: the permit allows tail migration, which the veRL adapter does not offer; "
                        "the job record should say `cannot: [tail_migration]`", self.shim.job_id)

    def _close(self, exc: BaseException | None = None) -> None:
        marker, name = self._marker, self.phase
        self._marker = self.phase = None
        self._note("close", name)
        marker.__exit__(type(exc) if exc else None, exc, exc.__traceback__ if exc else None)

    # ---------------------------------------------------------------- events from veRL's loop

    def on_init_workers(self) -> None:
        """veRL is about to build its workers: the init permit first."""
        if self.active:
            self._open("init")

    def on_generate(self) -> None:
        """veRL starts a generation: inside a rollout phase (an open one stays open)."""
        if not self.active or self.phase == "rollout":
            return
        if self.phase is not None:
            self._close()
        self._open("rollout")

    def on_sleep(self) -> bool:
        """veRL puts its replicas to sleep; True: run veRL's own sleep now (outside a rollout phase)."""
        if self.active and self.phase == "rollout":
            self._close()      # its offload is the sleep
            self._open("train")
            return False
        if not self.awake:
            return False       # asleep already (offloaded by RollMux)
        self.awake = False
        return True

    def on_update(self, step: int | None) -> bool:
        """veRL asks to send the trainer's weights; True: run veRL's own update now (solo)."""
        self.step = int(step or 0)
        if not self.active:
            self.awake = True  # veRL's update leaves the engine awake
            return True
        if self.phase == "train":
            self._close()
            self._open("sync")  # the update itself runs at the next rollout's onload (module docstring)
            self._close()
        elif self.phase is not None:
            self._close()
        return False

    def finish(self, exc: BaseException | None = None) -> None:
        """The end of `fit`: close whatever phase is open (its offload runs, its permit is released)."""
        if self.phase is not None:
            self._close(exc)

    # ---------------------------------------------------------------- the shim's hooks

    def onload(self, pool: str) -> None:
        """The shim's onload hook: wake the rollout engine with step `step`'s weights, or load the trainer."""
        self._note("onload", pool)
        if pool == "rollout":
            self.rollout.wake(self.step)
            self.awake = True
        else:
            self.train.load()

    def offload(self, pool: str) -> None:
        """The shim's offload hook: put the rollout engine to sleep, or the trainer's state in host memory."""
        self._note("offload", pool)
        if pool == "rollout":
            if self.awake:
                self.rollout.sleep()
                self.awake = False
        elif self.train is not None:  # (an init that failed before the workers existed has none)
            self.train.offload()

    def host_memory(self) -> Mapping[str, int]:
        """The shim's host_memory hook: what each side holds in host memory, per node."""
        return {"rollout": self.rollout.host_bytes() if self.rollout else 0,
                "train": self.train.host_bytes() if self.train else 0}

    def on_move(self, grant: Any) -> None:
        """The shim's on_move hook: veRL's worker groups stay where veRL placed them, so a re-placement
        that names other machines cannot be followed (the job record should say `cannot: [move]`)."""
        moved = [n for n in getattr(grant, "node_ids", ()) or () if n is not None]
        if moved:
            raise RuntimeError(f"{self.shim.job_id}: re-placed onto {moved}, but veRL's workers cannot move; "
                               "declare `cannot: [move]` in the job record")
        self._note("move", grant.phase)

    def hooks(self) -> dict[str, Any]:
        """JobShim's hook arguments."""
        return {"onload": self.onload, "offload": self.offload, "host_memory": self.host_memory,
                "on_move": self.on_move}
