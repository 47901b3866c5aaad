"""The scheduler's records: one typed, versioned wire model per journal record kind (DESIGN §8).

Kueue keeps its wire types in apis/; these are ours. Every state change of the live plane is
one of these records: the service journals it, then applies it (`LiveState.apply_record`),
and a restart replays the journal through the same apply. The scheduling decisions among them
(`Place`, `Movers`, `Compact`, `MoveOut`, `Leave`) are what `ClusterState.decide` and its
repairs hand over and what `ClusterState.apply` carries out, in the simulator as in the
service (the simulator's journal is a null one: it applies each record at once).

A record's journal line is its `kind` and its `payload()`: JSON-native, with the groups and
plans inside in their JSON form (core/record_forms.py), which never changes, so a
journal (SQLite or Redis, snapshots included) written by an older service still replays.
`parse` reads one line back: `upgrade` turns the older versions of a record into the
current ones, the one place that knows them, and the discriminated union `Record` validates
the result. A group in a record is rebuilt in its recorded order and re-planned, which needs
the planner's view: `parse` passes the `IntraConfig` as validation context.

Records the scheduler builds (the `of` constructors) hold its own values: plans, moves and
specs pass the record's validation by identity, so nothing is re-planned or re-read; only a
journal line's JSON is parsed and its groups re-planned. The few flat fields are still
checked: pydantic-core does that in less time than `model_construct` assigns them in Python
(a Place 1.5 against 5 µs, a Grant 8 against 9 µs), and a departure whose status is not a
terminal one is refused before it is journaled.
"""

from __future__ import annotations

import functools
from typing import Annotated, Any, Literal, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PlainSerializer,
    PlainValidator,
    Tag,
    TypeAdapter,
    ValidationInfo,
    field_validator,
)

from rollmux.core.config import IntraConfig, SchedulerConfig
from rollmux.core.legacy_config import legacy_config
from rollmux.core.placement import PlacementPlan
from rollmux.core.record_forms import job_to_dict, move_from_dict, move_to_dict, plan_from_dict, plan_to_dict
from rollmux.core.repair.moves import Move, Regroup
from rollmux.core.spec import MAX_HOST_GB, MAX_PHASE_S, ClusterSpec, JobSpec
from rollmux.core.vocabulary import TERMINAL, JobStatus, Phase

# -- fields holding the scheduler's values --------------------------------------------------------


def _planner(info: ValidationInfo) -> IntraConfig:
    intra = (info.context or {}).get("intra")
    if not isinstance(intra, IntraConfig):
        raise ValueError("reading a group needs the planner's view: pass context={'intra': IntraConfig}")
    return intra


def _plan_in(v: Any, info: ValidationInfo) -> PlacementPlan:
    return v if isinstance(v, PlacementPlan) else plan_from_dict(v, _planner(info))


def _move_in(v: Any, info: ValidationInfo) -> Move:
    return v if isinstance(v, Move) else move_from_dict(v, _planner(info))


PlanField = Annotated[PlacementPlan, PlainValidator(_plan_in), PlainSerializer(plan_to_dict)]
MoveField = Annotated[Move, PlainValidator(_move_in), PlainSerializer(move_to_dict)]
JobField = Annotated[JobSpec, PlainSerializer(job_to_dict)]
ClusterField = Annotated[ClusterSpec, PlainSerializer(lambda c: c.model_dump(exclude_none=True))]
ConfigField = Annotated[SchedulerConfig, PlainSerializer(lambda c: c.model_dump())]


# A measured phase time as a record holds it: finite, within [0, MAX_PHASE_S] (what the service accepts).
Seconds = Annotated[float, Field(ge=0, le=MAX_PHASE_S, allow_inf_nan=False)]


class _Record(BaseModel):
    """What every record shares: frozen; a field an older or newer writer added is ignored."""

    # defer_build: a schema is built when its record is first made or read (the simulator never
    # makes most of them, and every run of `rollmux simulate` would pay for all at import).
    model_config = ConfigDict(frozen=True, extra="ignore", arbitrary_types_allowed=True, defer_build=True)

    def payload(self) -> dict:
        """The journal line's payload (its kind is stored beside it): JSON-native once the journal
        encodes it (a phase is its string, a tuple a list)."""
        return self.model_dump()


# -- the records -----------------------------------------------------------------------------------


class Config(_Record):
    """The journal's first record: the cluster and the scheduler's settings it runs with.
    Version 3 holds the sectioned SchedulerConfig (core/config.py); 1 and 2 held flat fields."""

    kind: Literal["config"] = Field("config", exclude=True)
    cluster: ClusterField
    config: ConfigField
    version: Literal[3] = 3


class Submit(_Record):
    """A job is known (not yet placed); its token is kept only as its hash."""

    kind: Literal["submit"] = Field("submit", exclude=True)
    job: JobField
    token_hash: str
    at: float  # wall-clock (epoch) seconds of submission
    version: Literal[1] = 1


class FirstCall(_Record):
    """The job's first call (with its own token) since it was submitted: its start-up deadline is met,
    its heartbeat deadline runs from now (live/supervision.py)."""

    kind: Literal["first_call"] = Field("first_call", exclude=True)
    job_id: str
    at: float  # wall-clock (epoch) seconds
    version: Literal[1] = 1


class Place(_Record):
    """A decision: the job joins a group (the policy's validated plan); `arrival`: a new job (a
    job placed again after it left its group is not one: it was counted when it arrived)."""

    kind: Literal["place"] = Field("place", exclude=True)
    job_id: str
    plan: PlanField
    arrival: bool
    version: Literal[1] = 1

    @classmethod
    def of(cls, plan: PlacementPlan, arrival: bool) -> Place:
        """The record of a plan the scheduler decided."""
        return cls(job_id=plan.job_id, plan=plan, arrival=arrival)


class Grant(_Record):
    """A permit was granted: the controller's grant, where the job runs, and its lease. Its
    fields but `version` are the permit the job receives (`permit`), in this order."""

    kind: Literal["grant"] = Field("grant", exclude=True)
    group_id: int
    job_id: str
    phase: Phase
    pool: str  # a Pool, or "link" (a sync holds no node)
    nodes: list[int]
    switch_s: float = 0.0
    granted_at: float = 0.0
    tail_share: float = 0.0
    epoch: int = 0
    units: int = 0
    workers: list[list[int]] = []
    keep: list[list[int]] = []
    train_held: list[int] = []
    at: float
    grant_no: int = 0
    lease_s: float | None = None
    rollout_nodes: list[int] = []
    train_nodes: list[int] = []
    rollout_factor: float = 1.0
    # With a node inventory (live/nodemap.py): the node ids of `nodes` and of `train_held`.
    node_ids: list[str | None] | None = None
    train_held_ids: list[str | None] | None = None
    version: Literal[1] = 1

    def payload(self) -> dict:
        """As every record's, without the node ids when there are none (a permit without an
        inventory reads back as it was granted)."""
        d = self.model_dump()
        for k in ("node_ids", "train_held_ids"):
            if d[k] is None:
                del d[k]
        return d

    def permit(self) -> dict:
        """The permit as the job receives it (and its job keeps it until released): the fields
        the record was written with, in order (read from an older journal: those it holds)."""
        d, written = self.__dict__, self.model_fields_set
        return {k: d[k] for k in _PERMIT_FIELDS if k in written}


_PERMIT_FIELDS = tuple(f for f in Grant.model_fields if f not in ("kind", "version"))


class Release(_Record):
    """A permit was released with the phase's measured timings; a train release ends an iteration."""

    kind: Literal["release"] = Field("release", exclude=True)
    job_id: str
    phase: Phase
    timings: dict[str, Seconds]
    version: Literal[1] = 1


class Tail(_Record):
    """The job's rollout is tail-bound (long-tail migration, DESIGN §4)."""

    kind: Literal["tail"] = Field("tail", exclude=True)
    job_id: str
    version: Literal[1] = 1


class Observe(_Record):
    """An iteration's measured phase times, its rollout at `rollout_factor` (core/elastic.py;
    None: version 1 did not say, read as its member's factor now). The drift repair re-plans
    the job's group from them; what it decides follows as `movers` and `compact` records."""

    kind: Literal["observe"] = Field("observe", exclude=True)
    job_id: str
    rollout_s: Seconds
    train_s: Seconds
    at: float
    rollout_factor: float | None = None
    # The job's last weight sync (the one before this iteration; None: none yet, or a record
    # written before syncs were observed). A job measured as it runs profiles it.
    sync_s: Seconds | None = None
    version: Literal[2] = 2


class Profiled(_Record):
    """A decision: a job submitted without phase times was measured (core/state/profiling.py);
    `spec` is the profile it is planned with from now on, its group is offered to other jobs again."""

    kind: Literal["profiled"] = Field("profiled", exclude=True)
    job_id: str
    spec: JobField
    version: Literal[1] = 1

    @classmethod
    def of(cls, spec: JobSpec) -> Profiled:
        """The record of a profile the scheduler fitted."""
        return cls(job_id=spec.job_id, spec=spec)


class Compact(_Record):
    """A decision (rollout compaction, elastic rollout only): the group gives back its idle
    rollout node `node`, the members pinned there narrowed onto their other nodes, or with
    `repin` a member pinned there alone re-pinned to another (core/repair/compaction.py)."""

    kind: Literal["compact"] = Field("compact", exclude=True)
    group_id: int
    node: int
    repin: bool = False
    version: Literal[1] = 1

    @classmethod
    def of(cls, group_id: int, node: int, repin: bool = False) -> Compact:
        """The record of a compaction the scheduler decided."""
        return cls(group_id=group_id, node=node, repin=repin)


class Memory(_Record):
    """The most host memory (GB per node, by pool) the job's offloaded state was measured to
    hold; a node's residency counts max(declared, measured)."""

    kind: Literal["memory"] = Field("memory", exclude=True)
    job_id: str
    host_gb: dict[str, Annotated[float, Field(ge=0, le=MAX_HOST_GB, allow_inf_nan=False)]]
    version: Literal[1] = 1


class Node(_Record):
    """The service's node inventory changed (live/nodemap.py): a node of `pool` is alive, or the
    node is gone (`pool` None)."""

    kind: Literal["node"] = Field("node", exclude=True)
    node_id: str = Field(min_length=1, max_length=128)
    pool: Literal["rollout", "train"] | None
    version: Literal[1] = 1


class Bind(_Record):
    """Node index `index` of a group's `pool` nodes is the inventory's node `node_id` (None: freed)."""

    kind: Literal["bind"] = Field("bind", exclude=True)
    group_id: int = Field(ge=0)
    pool: Literal["rollout", "train"]
    index: int = Field(ge=0)
    node_id: str | None = Field(None, min_length=1, max_length=128)
    version: Literal[1] = 1


class Movers(_Record):
    """A decision (a regrouping, DESIGN §5a): each move's slot is reserved at once; with
    `dissolve` the source group is hidden from placement until it empties."""

    kind: Literal["movers"] = Field("movers", exclude=True)
    group_id: int
    dissolve: bool
    moves: tuple[MoveField, ...]
    version: Literal[2] = 2

    @classmethod
    def of(cls, group_id: int, moves: tuple[Move, ...], dissolve: bool) -> Movers:
        """The record of a regrouping the scheduler decided."""
        return cls(group_id=group_id, dissolve=dissolve, moves=moves)

    @classmethod
    def of_regroup(cls, r: Regroup) -> Movers:
        """The record of a regrouping decision (core/repair/regroup.py)."""
        return cls(group_id=r.group_id, dissolve=r.dissolve, moves=r.moves)


class MoversV1(_Record):
    """Version 1 of `movers`, read only: the movers are placed again at their boundary (no
    slot was reserved) and the groups they leave are hidden from placement."""

    kind: Literal["movers"] = Field("movers", exclude=True)
    job_ids: list[str]
    group_ids: list[int]
    version: Literal[1] = 1


class MoveOut(_Record):
    """A decision: the job leaves its group at an iteration boundary (a regrouping's mover, or a
    re-admission); a mover whose slot is reserved takes it."""

    kind: Literal["move_out"] = Field("move_out", exclude=True)
    job_id: str
    why: str | None = None
    version: Literal[1] = 1

    @classmethod
    def of(cls, job_id: str, why: str | None = None) -> MoveOut:
        """The record of a move the scheduler decided."""
        return cls(job_id=job_id, why=why)


class Leave(_Record):
    """A decision: the job is done, failed or cancelled; its permits are reclaimed and it leaves
    its group (and any slot reserved for it)."""

    kind: Literal["leave"] = Field("leave", exclude=True)
    job_id: str
    status: JobStatus
    reason: str | None = None
    version: Literal[1] = 1

    @field_validator("status")
    @classmethod
    def _terminal(cls, v: JobStatus) -> JobStatus:
        if v not in TERMINAL:
            raise ValueError(f"a job leaves as one of {', '.join(sorted(TERMINAL))}, not {v}")
        return v

    @classmethod
    def of(cls, job_id: str, status: JobStatus, reason: str | None = None) -> Leave:
        """The record of a departure the scheduler decided."""
        return cls(job_id=job_id, status=status, reason=reason)


class Turn(_Record):
    """A member of a group lost its turn (`absent`: it did not ask for the `phase` it was due for
    within its grace, and the round robin goes on without it) or, asking again, rejoined the
    rotation (core/turns.py)."""

    kind: Literal["turn"] = Field("turn", exclude=True)
    job_id: str
    absent: bool
    phase: Literal["rollout", "train"] | None = None
    version: Literal[1] = 1


# -- reading a journal line --------------------------------------------------------------------

_CLASSES = (Config, Submit, Place, Grant, Release, Tail, Observe, Compact, Memory, Movers, MoversV1, MoveOut,
            Leave, Node, Bind, Turn, Profiled, FirstCall)
KINDS = tuple(dict.fromkeys(c.model_fields["kind"].default for c in _CLASSES))


def _tag(v: Any) -> str | None:
    """A record's tag in the union: its kind, and for `movers` its version too."""
    kind, version = (v.get("kind"), v.get("version")) if isinstance(v, dict) else (v.kind, v.version)
    return f"{kind}/{version}" if kind == "movers" else kind


Record = Annotated[Union[
    Annotated[Config, Tag("config")], Annotated[Submit, Tag("submit")], Annotated[Place, Tag("place")],
    Annotated[Grant, Tag("grant")], Annotated[Release, Tag("release")], Annotated[Tail, Tag("tail")],
    Annotated[Observe, Tag("observe")], Annotated[Compact, Tag("compact")], Annotated[Memory, Tag("memory")],
    Annotated[Movers, Tag("movers/2")], Annotated[MoversV1, Tag("movers/1")],
    Annotated[MoveOut, Tag("move_out")], Annotated[Leave, Tag("leave")],
    Annotated[Node, Tag("node")], Annotated[Bind, Tag("bind")], Annotated[Turn, Tag("turn")],
    Annotated[Profiled, Tag("profiled")], Annotated[FirstCall, Tag("first_call")],
], Discriminator(_tag)]


@functools.cache
def _record_adapter() -> TypeAdapter:
    """The union's validator, built on the first journal line read (a replay's)."""
    return TypeAdapter(Record)

# The scheduling decisions: what `ClusterState.apply` carries out.
DECISIONS = (Place, Movers, MoversV1, Compact, MoveOut, Leave, Profiled)


def implied_version(kind: str, payload: dict) -> int:
    """The version of a payload written before records said theirs: by its shape."""
    if kind == "movers":
        return 2 if "moves" in payload else 1
    if kind == "observe":
        return 2 if "rollout_factor" in payload else 1
    return 1


def upgrade(kind: str, payload: dict) -> dict:
    """A journal line as the current version of its record (kind included): the one place that
    knows the older versions. Version 1 of `movers` stays itself (`MoversV1`): it reserved no
    slots, and nothing can reserve them now."""
    d = {**payload, "kind": kind}
    version = d.setdefault("version", implied_version(kind, payload))
    if kind == "config" and version < 3:
        return {"kind": kind, "cluster": d["cluster"], "config": legacy_config(d["cfg"], version), "version": 3}
    if kind == "observe" and version == 1:
        d.update(version=2, rollout_factor=None)
    return d


def parse(kind: str, payload: dict, intra: IntraConfig | None = None) -> Record:
    """One journal line as its record, older versions upgraded; a ValidationError names what
    does not fit. `intra`: the planner's view, to rebuild the groups a record holds."""
    return _record_adapter().validate_python(upgrade(kind, payload), context={"intra": intra})


def config_from(payload: dict) -> tuple[ClusterSpec, SchedulerConfig]:
    """The cluster and settings of a journal's `config` record (any version)."""
    record = parse("config", payload)
    return record.cluster, record.config


def config_record(cluster: ClusterSpec, cfg: SchedulerConfig) -> Config:
    """The `config` record of a fresh journal."""
    return Config(cluster=cluster, config=cfg)
