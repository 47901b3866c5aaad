"""The JSON bodies of the job routes (live/app.py) as frozen models that refuse what they do not name.

Each route's body is read into its model before the core sees it: a field the model does not
name, a value of the wrong type, a number that is not finite or outside its range is refused
(400) naming the field by its path (`timings.run_s`, `nodes.3`). A body nested deeper than
`MAX_DEPTH` is refused before it is parsed (`check_depth`). The ranges are the job record's
(core/spec.py): a phase time is within [0, MAX_PHASE_S] seconds; 0 is a valid measurement ("too
short to measure"), which drift repair ignores (core/state/drift.py).
"""

from __future__ import annotations

import re
from typing import Annotated, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rollmux.core.spec import MAX_HOST_GB, MAX_PHASE_S
from rollmux.live.exits import EXIT_LINE_CHARS

MAX_DEPTH = 32                 # the deepest nesting of arrays and objects a body may have
MAX_WAIT_S = 30.0              # the longest long poll
DEFAULT_WAIT_S = 20.0
MAX_HOST_BYTES = int(MAX_HOST_GB * 1e9)
NODE_ID_CHARS = 128            # a Ray node id is 56 hex characters
W = TypeVar("W", bound=BaseModel)

Seconds = Annotated[float, Field(ge=0, le=MAX_PHASE_S)]
Count = Annotated[int, Field(ge=0)]


class WireError(ValueError):
    """A body that does not fit its model: the field's path and why."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"field {field}: {why}")
        self.field, self.why = field, why


class _Wire(BaseModel):
    # strict: "8" is not a number and true is not 1; an int is a valid float.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class AcquireBody(_Wire):
    """POST /v1/jobs/{id}/acquire."""

    phase: str | None = Field(default=None, max_length=32)  # (the core names the phases it knows)
    last_grant: Count | None = None
    wait_s: Annotated[float, Field(ge=0, le=MAX_WAIT_S)] = DEFAULT_WAIT_S


class Timings(_Wire):
    """What a phase cost, measured by the job's shim (shim.py `PhaseTimings`)."""

    wait_s: Seconds
    onload_s: Seconds
    run_s: Seconds
    offload_s: Seconds
    epoch: Count = 0
    host_bytes: dict[Literal["rollout", "train"], Annotated[int, Field(ge=0, le=MAX_HOST_BYTES)]] | None = None


class ReleaseBody(_Wire):
    """POST /v1/jobs/{id}/release."""

    grant_no: Count | None = None
    phase: str | None = Field(default=None, max_length=32)
    timings: Timings


class HeartbeatBody(_Wire):
    """POST /v1/jobs/{id}/heartbeat."""

    nodes: list[Annotated[str, Field(max_length=NODE_ID_CHARS)]] | None = None
    readmit: str | None = None


class ProgressBody(_Wire):
    """POST /v1/jobs/{id}/progress."""

    done: Count
    total: Count


class ExitBody(_Wire):
    """POST /v1/jobs/{id}/exit: how the job's entrypoint ended (`rollmux run` reports it)."""

    code: Annotated[int, Field(ge=-255, le=255)]  # its exit status; negative: killed by that signal
    reason: str = Field(default="", max_length=EXIT_LINE_CHARS)  # the last line it wrote to stderr


class EmptyBody(_Wire):
    """POST /v1/jobs/{id}/finish: nothing to say."""


TIMING_FIELDS = ("wait_s", "onload_s", "run_s", "offload_s")


def timings_problem(timings: object) -> tuple[str, str] | None:
    """(field, why) for release timings an in-process caller gave that the wire would refuse
    (each of TIMING_FIELDS a finite number within [0, MAX_PHASE_S]), or None."""
    if not isinstance(timings, dict):
        return "timings", f"timings must be a mapping of {', '.join(TIMING_FIELDS)}"
    for k in TIMING_FIELDS:
        v = timings.get(k)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= MAX_PHASE_S:  # (NaN fails)
            return f"timings.{k}", f"timings.{k} must be a number of seconds in 0..{MAX_PHASE_S:g}, not {v!r:.40}"
    return None


def read(model: type[W], body: dict) -> W:
    """`body` as `model`; WireError naming the first field that does not fit."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise first_problem(exc) from None


def first_problem(exc: ValidationError) -> WireError:
    """The first error of a validation as a WireError (an unknown field says so)."""
    first = exc.errors(include_url=False)[0]
    where = ".".join(str(p) for p in first["loc"]) or "(body)"
    if first["type"] == "extra_forbidden":
        return WireError(where, "unknown field")
    if first["type"] == "missing":
        return WireError(where, "required")
    return WireError(where, first["msg"])


_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)


def check_depth(raw: bytes) -> None:
    """Refuse (ValueError) a JSON text whose arrays and objects nest deeper than MAX_DEPTH (strings
    skipped); a text with fewer brackets than that is not scanned."""
    if raw.count(b"[") + raw.count(b"{") <= MAX_DEPTH:
        return
    depth = 0
    for m in _TOKENS.finditer(raw):
        c = m.group()
        if c in (b"[", b"{"):
            depth += 1
            if depth > MAX_DEPTH:
                raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
        elif c in (b"]", b"}"):
            depth -= 1
