"""MkDocs hook: the Reference pages generated from the code at build time.

`reference/cli.md` from the typer app (`rollmux.cli.app`), `reference/http-api.md` from the
HTTP app's routes (`rollmux.live.app.create_app`) and its route table, `reference/configuration.md`
from `rollmux/core/config.py` (every section and setting with its default, and the named profiles),
`reference/metrics.md` from the telemetry registry (`rollmux.live.telemetry.Telemetry`). Pages
other pages own (`tutorial.md`, `cli.md`, `job-protocol.md`) join the nav when they exist.
"""

from __future__ import annotations

import inspect
import io
import re
import tokenize
import types
from typing import Any, Literal

from mkdocs.structure.files import File, Files

GENERATED = {
    "reference/cli.md": "cli_page",
    "reference/http-api.md": "http_page",
    "reference/configuration.md": "config_page",
    "reference/metrics.md": "metrics_page",
}
NOTE = "<!-- Generated at build time by docs/hooks/reference.py; do not edit. -->\n\n"
TUTORIAL_PLACEHOLDER = """# Tutorial

The tutorial (simulate a trace, then serve the scheduler and run a job against it) is being
written. Until it lands, see [Concepts](concepts.md), the [CLI reference](reference/cli.md) and
`examples/` in the repository.
"""


def cell(text: Any) -> str:
    """`text` fit for one Markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


# -- CLI ---------------------------------------------------------------------------------------

def _commands(group: Any, ctx: Any, path: list[str]) -> list[tuple[list[str], Any, Any]]:
    """Every command under `group`, depth first, with its context and its path of names."""
    out = []
    for name, sub in group.commands.items():
        sub_ctx = type(ctx)(sub, info_name=name, parent=ctx)
        out.append((path + [name], sub, sub_ctx))
        if getattr(sub, "commands", None):
            out.extend(_commands(sub, sub_ctx, path + [name]))
    return out


def _help_text(command: Any) -> str:
    """A command's help as Markdown paragraphs (click's `\\b` markers dropped)."""
    text = inspect.cleandoc(command.help or "").replace("\b\n", "").replace("\b", "")
    return text.strip()


def _options_table(command: Any, ctx: Any) -> list[str]:
    """One row per option or argument: how it is written and its help."""
    rows = []
    for param in command.params:
        record = param.get_help_record(ctx)
        if record is None:
            record = (param.name.upper(), getattr(param, "help", "") or "")
        rows.append(f"| `{cell(record[0])}` | {cell(record[1])} |")
    return ["| option | meaning |", "|---|---|", *rows] if rows else []


def cli_page() -> str:
    """Every command's help, rendered from the typer app."""
    import typer

    from rollmux.cli import app as _register  # noqa: F401  (registers every command on the app)
    from rollmux.cli.app import app, plain_help

    root = typer.main.get_command(app)
    plain_help(root)
    ctx_type = type(root.make_context("rollmux", ["--help"], resilient_parsing=True))
    root_ctx = ctx_type(root, info_name="rollmux")
    lines = ["# CLI reference", "", NOTE + "Every command of `rollmux`, as `rollmux COMMAND --help` prints it.",
             "", _help_text(root), "", "```text", root.get_usage(root_ctx), "```", "",
             *_options_table(root, root_ctx), ""]
    for path, command, ctx in _commands(root, root_ctx, ["rollmux"]):
        lines += [f"{'#' * min(len(path), 3)} {' '.join(path)}", "", _help_text(command), "",
                  "```text", command.get_usage(ctx), "```", "", *_options_table(command, ctx), ""]
    return "\n".join(lines)


# -- HTTP API ----------------------------------------------------------------------------------

ROUTE_LINE = re.compile(r"^  (GET|POST|DELETE|PUT|PATCH)\s+(\S+)\s+")


def _route_table(doc: str) -> tuple[dict[tuple[str, str], list[str]], str]:
    """The route table of rollmux.live.app's docstring: (method, path) -> [who, what]; and the prose after it."""
    table: dict[tuple[str, str], list[str]] = {}
    key, who_col, what_col, after = None, 0, 0, []
    for line in doc.splitlines():
        match = ROUTE_LINE.match(line)
        if match:
            key = (match.group(1), match.group(2).replace("{id}", "{job_id}"))
            who_col = match.end()
            what_col = who_col + re.search(r"\S\s{2,}\S", line[who_col:]).end() - 1
            table[key] = [line[who_col:what_col].strip(), line[what_col:].strip()]
        elif key and line.startswith(" " * 20) and line.strip():
            table[key][0] = (table[key][0] + " " + line[who_col:what_col].strip()).strip()
            table[key][1] += " " + line[what_col:].strip()
        elif key:
            after.append(line)
    return table, "\n".join(after).strip()


def http_page() -> str:
    """Every route the app serves, with who may call it and what it does."""
    import rollmux.live.app as live_app

    app = live_app.create_app(types.SimpleNamespace())
    table, after = _route_table(live_app.__doc__ or "")
    rows = []
    for route in app.routes:
        for method in sorted(set(route.methods) - {"HEAD"}):
            who, what = table.get((method, route.path), ["", ""])
            if not what:
                what = inspect.getdoc(route.endpoint) or ""
            handler = f"{route.endpoint.__module__.removeprefix('rollmux.')}.{route.endpoint.__qualname__}"
            rows.append(f"| `{method}` | `{route.path}` | {cell(who) or '-'} | {cell(what)} | `{handler}` |")
    return "\n".join([
        "# HTTP API reference", "", NOTE + "Every route `rollmux serve` answers, read from the app itself "
        "(`rollmux.live.app.create_app`). Bodies, limits and the rules for each field: "
        "[HTTP API: bodies and rules](http-bodies.md).", "",
        "| method | path | who may call | what it does | handler |", "|---|---|---|---|---|", *rows, "",
        "## Errors and authorization", "", " ".join(after.split()), ""])


# -- configuration -----------------------------------------------------------------------------

def _comments(cls: type) -> dict[str, str]:
    """Each field's comment in `cls`'s source: on its line, or the comment lines just above it."""
    source = inspect.getsource(cls)
    out: dict[str, str] = {}
    pending: list[str] = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            line = source.splitlines()[tok.start[0] - 1]
            field = re.match(r"\s+(\w+)\s*:", line)
            if field and not line.lstrip().startswith("#"):
                out[field.group(1)] = " ".join(pending + [tok.string.lstrip("# ")]).strip()
                pending = []
            else:
                pending.append(tok.string.lstrip("# "))
        elif tok.type == tokenize.NAME and tok.start[1] == 4 and pending:
            out.setdefault(tok.string, " ".join(pending))
            pending = []
    return out


def _bounds(info: Any) -> str:
    """A field's numeric bounds as `> 0, <= 1`."""
    signs = {"gt": ">", "ge": ">=", "lt": "<", "le": "<="}
    parts = [f"{signs[k]} {getattr(m, k)}" for m in info.metadata for k in signs if getattr(m, k, None) is not None]
    return ", ".join(parts)


def _type_name(annotation: Any) -> str:
    """A field's type: its name, or a Literal's choices (`'worst' | 'mean'`)."""
    if getattr(annotation, "__origin__", None) is Literal:
        return " | ".join(repr(choice) for choice in annotation.__args__)
    return annotation.__name__ if isinstance(annotation, type) else str(annotation).replace("typing.", "")


def _meaning(section: str, key: str, comments: dict[str, str]) -> str:
    """A setting's comment, or a pointer to the setting whose comment explains it."""
    if comments.get(key):
        return comments[key]
    for other, text in comments.items():
        if f"`{key}`" in text:
            return f"See `{section}.{other}`."
    return "Turns the section's mechanism on or off." if key == "enabled" else ""


def config_page() -> str:
    """The named profiles, then every section with each setting's type, default, bounds and meaning."""
    from rollmux.core import config

    lines = ["# Configuration reference", "", NOTE + inspect.getdoc(config).split("\n\nThe group planner")[0], "",
             "## Profiles", "", "| profile | overrides of the defaults |", "|---|---|"]
    for name, overrides in config.PROFILES.items():
        shown = ", ".join(f"`{k}={v}`" for k, v in overrides.items()) or "none: the defaults below"
        lines.append(f"| `{name}` | {shown} |")
    lines += ["", "Pick one with `--profile NAME`; override any setting with `--set SECTION.SETTING=VALUE` "
              "(repeatable), e.g. `rollmux simulate --profile paper --set placement.max_group_size=3`.", ""]
    for section in config.SECTIONS:
        cls = config.SchedulerConfig.model_fields[section].annotation
        comments = _comments(cls)
        lines += [f"## `{section}`", "", inspect.getdoc(cls) or "", "",
                  "| setting | type | default | bounds | meaning |", "|---|---|---|---|---|"]
        for key, info in cls.model_fields.items():
            lines.append(f"| `{section}.{key}` | `{cell(_type_name(info.annotation))}` | `{info.default!r}` | "
                         f"{cell(_bounds(info)) or '-'} | {cell(_meaning(section, key, comments))} |")
        lines.append("")
    return "\n".join(lines)


# -- metrics -----------------------------------------------------------------------------------

def metrics_page() -> str:
    """Every metric family `GET /metrics` serves, its type, labels and help."""
    from rollmux.live.telemetry import PER_JOB, Telemetry

    telemetry = Telemetry(lambda: {})
    suffix = {"counter": "_total", "info": "_info"}
    rows = []
    for family in telemetry.registry.collect():
        labels: dict[str, set[str]] = {name: set() for name in getattr(family, "_labelnames", ())}
        for sample in family.samples:
            for key, value in sample.labels.items():
                if key != "le":
                    labels.setdefault(key, set()).add(value)
        shown = "; ".join(f"{k} ({', '.join(sorted(v))})" if v else k for k, v in labels.items()) or "-"
        note = " Served only to a scrape with the metrics or admin token." if family.name in PER_JOB else ""
        kind = "gauge" if family.type == "info" else family.type
        rows.append(f"| `{family.name}{suffix.get(family.type, '')}` | {kind} | {cell(shown)} | "
                    f"{cell(family.documentation)}{note} |")
    return "\n".join([
        "# Metrics reference", "", NOTE + "Every family `GET /metrics` serves, read from the service's own "
        "registry (`rollmux.live.telemetry.Telemetry`); a histogram adds `_bucket`, `_sum` and `_count`. "
        "How to scrape and read them: [Metrics and dashboard](../operator/metrics.md).", "",
        "| metric | type | labels (values) | meaning |", "|---|---|---|---|", *rows, ""])


# -- mkdocs events -----------------------------------------------------------------------------

def on_files(files: Files, config: Any) -> Files:
    """Add the generated reference pages, and a placeholder tutorial while docs/tutorial.md is missing."""
    for uri, builder in GENERATED.items():
        files.append(File.generated(config, uri, content=globals()[builder]()))
    if files.get_file_from_path("tutorial.md") is None:
        files.append(File.generated(config, "tutorial.md", content=TUTORIAL_PLACEHOLDER))
    return files


# Pages other helpers own: linked in the nav (section, title, position) once they exist.
OPTIONAL = {"cli.md": ("Reference", "CLI conventions", 1), "job-protocol.md": ("Guides", "The job protocol", 1)}


def on_config(config: Any) -> Any:
    """Link the optional pages (`OPTIONAL`) in the nav where they exist in docs/."""
    from pathlib import Path

    for page, (section, title, at) in OPTIONAL.items():
        if not (Path(config["docs_dir"]) / page).exists():
            continue
        for entry in config["nav"]:
            if isinstance(entry, dict) and section in entry:
                entry[section].insert(at, {title: page})
    return config
