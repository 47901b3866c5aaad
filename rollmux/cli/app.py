"""The `rollmux` command line's app, its consoles and the one way a command fails.

Bad input of any kind exits with status 2 and one line naming the place.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from rollmux.errors import InputError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="RollMux: multiplex RL post-training jobs across rollout and training pools.")
workload_app = typer.Typer(add_completion=False, no_args_is_help=True, help="Build job traces.")
app.add_typer(workload_app, name="workload")
bench_app = typer.Typer(add_completion=False, no_args_is_help=True, help="Measure the scheduler itself.")
app.add_typer(bench_app, name="bench")
journal_app = typer.Typer(help="Check or repair a journal store.", no_args_is_help=True)
app.add_typer(journal_app, name="journal")
# Piped output gets a fixed width wide enough for the comparison table.
out = Console(width=None if sys.stdout.isatty() else 140)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 140)


def fail(exc: Exception) -> None:
    """Print one line naming the place and exit 2."""
    err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)  # "[demo]" is text
    raise typer.Exit(2)


def write_json(path: Path, doc: dict) -> None:
    """Write `doc` as indented JSON; InputError naming the path if it cannot be written."""
    try:
        path.write_text(json.dumps(doc, indent=2) + "\n")
    except OSError as exc:
        raise InputError(str(path), f"cannot write ({exc.strerror})") from None


def report_and_exit(doc: dict, json_out: Path | None, ok: bool) -> None:
    """Write `doc` to `json_out` when given (one line and exit 2 if it cannot be written), then
    exit 1 unless `ok`: the exit status of a command that checks something."""
    try:
        if json_out is not None:
            write_json(json_out, doc)
    except InputError as exc:
        fail(exc)
    if not ok:
        raise typer.Exit(1)


def main() -> None:
    """Entry point of the `rollmux` script."""
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
