"""Reading and writing the job trace (JSON Lines) and the cluster file (YAML).

Every error names the file, the line and the field; an unknown field is an
error too (a misspelt field would otherwise be silently ignored).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import yaml
from pydantic import BaseModel, ValidationError

from rollmux.core.spec import PHASE_TIME_FIELDS, ClusterSpec, JobSpec, default_cluster
from rollmux.errors import InputError, pydantic_reason

DEFAULT_TRACE = "default_trace.jsonl"
DEFAULT_CLUSTER = "default_cluster.yaml"


@dataclass
class Trace:
    """Validated jobs of a trace, sorted by arrival, plus load-time warnings (none at present: every
    problem is an error)."""

    jobs: list[JobSpec]
    source: str
    warnings: list[str] = field(default_factory=list)


def unknown_fields(model: BaseModel, prefix: str = "") -> list[str]:
    """Dotted names of fields the model did not recognise, nested models included."""
    found = [prefix + name for name in (model.model_extra or {})]
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            found += unknown_fields(value, f"{prefix}{name}.")
    return found


def parse_jobs(lines: list[str], source: str) -> Trace:
    """Validate JSONL lines into a Trace; raise InputError naming source:line and field."""
    jobs: list[JobSpec] = []
    warnings: list[str] = []
    seen: dict[str, int] = {}
    for lineno, raw in enumerate(lines, start=1):
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        place = f"{source}:{lineno}"
        try:
            record = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise InputError(place, f"not valid JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(record, dict):
            raise InputError(place, "a job must be a JSON object")
        if not any(k in record for k in PHASE_TIME_FIELDS):  # (a live record may leave them to be measured)
            raise InputError(f"{place}: field 'rollout_s'", "a trace gives every job's phase times, the simulated "
                             "truth (with measure: true the scheduler measures them as the job runs)")
        try:
            job = JobSpec.model_validate(record)
        except ValidationError as exc:
            fld, msg = pydantic_reason(exc)
            raise InputError(f"{place}: field '{fld}'", msg) from None
        if job.job_id in seen:
            raise InputError(f"{place}: field 'job_id'",
                             f"duplicate job_id {job.job_id!r} (first on line {seen[job.job_id]})")
        seen[job.job_id] = lineno
        unknown = unknown_fields(job)
        if unknown:
            raise InputError(f"{place}: field '{unknown[0]}'", "unknown field")
        jobs.append(job)
    if not jobs:
        raise InputError(source, "the trace holds no jobs")
    jobs.sort(key=lambda j: j.arrival_s)  # stable: file order breaks ties
    return Trace(jobs=jobs, source=source, warnings=warnings)


def load_jobs(path: str | Path | None = None) -> Trace:
    """Load a JSONL trace from `path`, or the embedded default trace when None."""
    if path is None:
        text = resources.files("rollmux.data").joinpath(DEFAULT_TRACE).read_text()
        return parse_jobs(text.splitlines(), f"<embedded {DEFAULT_TRACE}>")
    p = Path(path)
    text = _read_text(p, "trace")
    return parse_jobs(text.splitlines(), str(p))


def _read_text(p: Path, what: str) -> str:
    """The file's text, or an InputError saying why it cannot be read."""
    try:
        return p.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(str(p), f"cannot read the {what} ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise InputError(str(p), f"the {what} is not UTF-8 text (byte {exc.start})") from None


def dump_jobs(jobs: list[JobSpec], path: str | Path) -> None:
    """Write jobs as JSON Lines in the trace format."""
    with open(path, "w") as fh:
        for job in jobs:
            fh.write(json.dumps(job.model_dump(exclude_none=True)) + "\n")


def _yaml_line(root: yaml.Node | None, loc: tuple) -> int | None:
    """Line (1-based) of the YAML node at path `loc`, or of its deepest existing parent."""
    node, line = root, (root.start_mark.line + 1 if root is not None else None)
    for key in loc:
        if not isinstance(node, yaml.MappingNode):
            break
        match = [v for k, v in node.value if getattr(k, "value", None) == str(key)]
        if not match:
            break
        node = match[0]
        line = node.start_mark.line + 1
    return line


def _yaml_document(text: str, source: str, what: str) -> tuple[yaml.Node | None, dict]:
    """The YAML document's node tree (for line numbers) and its data, which must be a mapping."""
    try:
        root = yaml.compose(text)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise InputError(f"{source}{line}", f"not valid YAML ({getattr(exc, 'problem', exc)})") from None
    if not isinstance(data, dict):
        raise InputError(source, f"{what} must be a YAML mapping")
    return root, data


def _validated_yaml(model: type[BaseModel], text: str, source: str, what: str) -> tuple[BaseModel, dict]:
    """`model` validated from YAML text, and the data; InputError naming source:line and field for an
    invalid or unknown field (its own line in the file)."""
    root, data = _yaml_document(text, source, what)
    try:
        value = model.model_validate(data)
    except ValidationError as exc:
        loc = exc.errors()[0].get("loc", ())
        fld, msg = pydantic_reason(exc)
        raise InputError(f"{source}:{_yaml_line(root, loc)}: field '{fld}'", msg) from None
    unknown = unknown_fields(value)
    if unknown:
        name = unknown[0]
        raise InputError(f"{source}:{_yaml_line(root, tuple(name.split('.')))}: field '{name}'", "unknown field")
    return value, data


def parse_cluster(text: str, source: str) -> tuple[ClusterSpec, list[str]]:
    """Validate cluster YAML text; raise InputError naming source:line and field (no warnings are left:
    an unknown field is an error)."""
    cluster, _ = _validated_yaml(ClusterSpec, text, source, "the cluster file (with 'pools')")
    return cluster, []


def parse_job_file(text: str, source: str) -> dict:
    """One job record from a YAML or JSON file's text (a trace line's fields), validated as a job;
    InputError naming source:line and field, the field's own line."""
    _, data = _validated_yaml(JobSpec, text, source, "a job file")
    return data


def load_cluster(path: str | Path | None = None) -> tuple[ClusterSpec, list[str]]:
    """Load a cluster YAML file, or the paper's default cluster when None."""
    if path is None:
        return default_cluster(), []
    p = Path(path)
    text = _read_text(p, "cluster file")
    return parse_cluster(text, str(p))
