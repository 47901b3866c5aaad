"""A live job's status moves through one written transition table (DESIGN §8).

Every status change goes through `set_status`, which refuses a move the table does not list,
naming both ends. The service checks a move before it journals the record that makes it
(`may_move`), so the journal never carries an illegal one, and a replay that meets one
stops there rather than rebuild a state the service never had.
"""

from __future__ import annotations

from typing import Protocol

from rollmux.core.vocabulary import JobStatus

QUEUED, RUNNING, MOVING = JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.MOVING
DONE, FAILED, CANCELLED = JobStatus.DONE, JobStatus.FAILED, JobStatus.CANCELLED

# status -> the statuses it may move to. A submission creates a job as QUEUED (a resubmission
# of a job that ended is a new job, not a move); the terminal statuses move nowhere.
TRANSITIONS: dict[JobStatus, frozenset[JobStatus]] = {
    QUEUED: frozenset({
        RUNNING,    # a `place` record: the policy's plan put it in a group (or co-located)
        DONE,       # a `leave`: the job said it finished before it was placed
        FAILED,     # a `leave`: its heartbeats stopped while it waited
        CANCELLED,  # a `leave`: the admin or the job cancelled it while it waited
    }),
    RUNNING: frozenset({
        MOVING,     # a `move_out`: it leaves its group at an iteration boundary (a regrouping's
                    # move, or a re-admission after it lost its workers or Ray nodes)
        DONE,       # a `leave`: its work is done
        FAILED,     # a `leave`: missed heartbeats, or a phase outlived its lease (hung)
        CANCELLED,  # a `leave`: cancelled by the admin or by the job
    }),
    MOVING: frozenset({
        RUNNING,    # the same `move_out` (its slot was reserved when the move was decided), or
                    # a later `place` (placed again like a new arrival, first in line)
        DONE,       # a `leave` while it waited to be placed again
        FAILED,     # a `leave`: heartbeats stopped while it waited
        CANCELLED,  # a `leave`: cancelled while it waited
    }),
    DONE: frozenset(),
    FAILED: frozenset(),
    CANCELLED: frozenset(),
}


class IllegalTransition(ValueError):
    """A status move the table does not list."""

    def __init__(self, job_id: str, old: JobStatus, new: JobStatus) -> None:
        allowed = ", ".join(sorted(TRANSITIONS[old])) or "none"
        super().__init__(f"job {job_id!r}: status {old} cannot move to {new} (from {old}: {allowed})")
        self.job_id, self.old, self.new = job_id, old, new


class HasStatus(Protocol):
    """What `set_status` changes: a job with an id and a status."""

    status: JobStatus

    @property
    def job_id(self) -> str: ...


def may_move(old: JobStatus, new: JobStatus) -> bool:
    """The table lists the move from `old` to `new`."""
    return new in TRANSITIONS[old]


def set_status(job: HasStatus, new: JobStatus) -> None:
    """Move `job` to `new`, or IllegalTransition (naming both ends) if the table does not list it."""
    if new not in TRANSITIONS[job.status]:
        raise IllegalTransition(job.job_id, job.status, new)
    job.status = new
