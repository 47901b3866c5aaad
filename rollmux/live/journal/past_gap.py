"""What the records past a journal's gap still tell (a page-level repair, `salvage`).

A record after a lost one cannot be replayed: it was decided on the state the lost ones made
(a grant on a turn order, a move from a group). Two facts in such records hold whatever came
before them, and the repair writes them again as ordinary records after the replayable run:

* a job exists: its `submit` (profile and token hash) when it survived; otherwise its profile
  as a later placement or move of its group holds it, queued again under a new token (the
  old token's hash was in the lost record: the operator hands the new one to the tenant);
* a job left (done, failed or cancelled): its `leave`.

So the service starts knowing every job a surviving record names: placed anew if it was still
running, as it left if it did. Nothing else past the gap is applied (the repaired journal keeps
every such record unreplayed, beside the replayable ones); a job named only by records that do
not hold its profile cannot be placed again and is named as lost.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field

from pydantic import ValidationError

from rollmux.core.records import Submit
from rollmux.core.spec import JobSpec
from rollmux.live.access import hash_token


@dataclass(frozen=True)
class PastGap:
    """The records a repair writes after the replayable run, and the jobs they bring back."""

    appended: list[tuple[str, str, float]] = field(default_factory=list)  # (kind, payload text, written_at)
    requeued: list[str] = field(default_factory=list)  # submitted past the gap: their submit again
    reissued: dict[str, str] = field(default_factory=dict)  # job -> new token (its submit was lost)
    left: list[str] = field(default_factory=list)  # left past the gap: their leave again
    unplaced: list[str] = field(default_factory=list)  # named past the gap, no record holds their profile


def past_gap(records: dict[int, tuple[str, str, float]], after: int, known: dict[str, bool]) -> PastGap:
    """The facts of the records after seq `after` for a journal whose replay knows the jobs `known`
    (job -> whether it has left); the records are valid ones (kind, payload text, written_at)."""
    out, state = PastGap(), dict(known)
    for seq in sorted(q for q in records if q > after):
        kind, text, at = records[seq]
        payload = json.loads(text)
        for job in dict.fromkeys(named_jobs(payload)):
            if job not in state and job not in out.unplaced:
                _bring_back(out, state, job, kind, payload, text, at)
        job = payload.get("job_id")
        if kind == "leave" and state.get(job) is False:
            out.appended.append((kind, text, at))
            out.left.append(job)
            state[job] = True
    return out


def _bring_back(out: PastGap, state: dict[str, bool], job: str, kind: str, payload: dict, text: str,
                at: float) -> None:
    """Write the submit of a job the replay does not know, from its own record or a profile found."""
    if kind == "submit" and payload["job"]["job_id"] == job:
        out.appended.append((kind, text, at))
        out.requeued.append(job)
    else:
        spec = _spec(payload, job)
        if spec is None:
            out.unplaced.append(job)
            return
        token = secrets.token_urlsafe(24)
        submit = Submit(job=spec, token_hash=hash_token(token), at=at).payload()
        out.appended.append(("submit", json.dumps(submit, separators=(",", ":")), at))
        out.reissued[job] = token
    state[job] = False


def named_jobs(value: object) -> Iterator[str]:
    """Every job id a payload names (its own, a submit's job, a group's members, a move's)."""
    if isinstance(value, dict):
        for key, v in value.items():
            if key == "job_id" and isinstance(v, str):
                yield v
            else:
                yield from named_jobs(v)
    elif isinstance(value, list):
        for v in value:
            yield from named_jobs(v)


def _spec(value: object, job: str) -> JobSpec | None:
    """The profile of `job` that a payload holds (a group member's `job`), if any is valid."""
    if isinstance(value, dict):
        inner = value.get("job")
        if isinstance(inner, dict) and inner.get("job_id") == job:
            try:
                return JobSpec.model_validate(inner)
            except ValidationError:
                pass
        values = value.values()
    elif isinstance(value, list):
        values = value
    else:
        return None
    return next((s for s in (_spec(v, job) for v in values) if s is not None), None)
