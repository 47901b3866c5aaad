"""The `rollmux` command line's app, its consoles and the one way a command fails.

Bad input of any kind exits with status 2 and one line naming the place.
"""

from __future__ import annotations

import json
import logging
import sys
from contextlib import contextmanager, redirect_stdout
from enum import Enum
from pathlib import Path
from typing import Any, Iterator, Optional

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperGroup

from rollmux.errors import InputError

# Help names a value the way click does (PATH, INTEGER, NUMBER, TEXT; a flag: nothing; a choice:
# its values), not as a type placeholder ("<bool>", "<float range>"); a range is still shown ([x>=1]).
_WORDS = {"int": "INTEGER", "float": "NUMBER", "str": "TEXT", "path": "PATH", "bool": "", "file": "PATH",
          "directory": "PATH"}


def _plain_word(param: Any, ctx: Any) -> Optional[str]:
    """How help names `param`'s value: nothing for a flag, a choice's values, else a plain word."""
    if getattr(param, "is_flag", False) or getattr(param, "count", False):
        return None
    shown = type(param).display_type_rich(param, ctx)
    if not shown or not shown.startswith("<"):
        return shown  # a metavar the command chose
    label, more = shown[1:].split(">", 1)
    if "|" in label:
        return label.removeprefix("list[").removesuffix("]") + more
    label = label.removeprefix("list[").removesuffix("]").removesuffix(" range")
    words = [_WORDS.get(part, part.upper()) for part in label.split(",")]
    return " ".join(words) + (more if len(words) == 1 else "") or None


def plain_help(command: Any) -> None:
    """Show plain value words in the help of `command` and every command under it."""
    if getattr(command, "_plain_help", False):
        return
    command._plain_help = True
    for param in command.params:
        param.display_type_rich = lambda ctx, p=param: _plain_word(p, ctx)
    help_option = command.get_help_option

    def plain_help_option(ctx: Any) -> Any:
        option = help_option(ctx)
        if option is not None:
            option.display_type_rich = lambda ctx: None
        return option
    command.get_help_option = plain_help_option
    for sub in getattr(command, "commands", {}).values():
        plain_help(sub)


class PlainHelpGroup(TyperGroup):
    """The root command group: plain value words in every command's help (`plain_help`)."""

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        """The subcommand, its help made plain."""
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            plain_help(command)
        return command

    def format_help(self, ctx: Any, formatter: Any) -> None:
        """The group's help, made plain."""
        plain_help(self)
        super().format_help(ctx, formatter)


CONTEXT = {"help_option_names": ["-h", "--help"]}
app = typer.Typer(cls=PlainHelpGroup, no_args_is_help=True, context_settings=CONTEXT,
                  help="RollMux: multiplex RL post-training jobs across rollout and training pools.")
workload_app = typer.Typer(add_completion=False, no_args_is_help=True, help="Build job traces.",
                           context_settings=CONTEXT)
app.add_typer(workload_app, name="workload")
bench_app = typer.Typer(add_completion=False, no_args_is_help=True, help="Measure the scheduler itself.")
app.add_typer(bench_app, name="bench")
journal_app = typer.Typer(help="Check or repair a journal store.", no_args_is_help=True)
app.add_typer(journal_app, name="journal")
# Piped output gets a fixed width wide enough for the comparison table.
out = Console(width=None if sys.stdout.isatty() else 140)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 140)


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


class LogLevel(str, Enum):
    """The levels `--log-level` takes."""

    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"


def _version(show: bool) -> None:
    if show:
        from importlib.metadata import PackageNotFoundError, version
        try:
            number = version("rollmux")
        except PackageNotFoundError:  # run from a source tree that was never installed
            number = "(not installed)"
        out.print(f"rollmux {number}", highlight=False)
        raise typer.Exit()


@app.callback()
def _root(
    _version_flag: Optional[bool] = typer.Option(None, "--version", callback=_version, is_eager=True,
                                                 help="Print the version and exit."),
    log_level: LogLevel = typer.Option(LogLevel.warning, "--log-level", case_sensitive=False,
                                       help="Log lines on stderr from this level up; info adds the service's "
                                            "submit, placement, move and failure events (key=value)."),
) -> None:
    """RollMux: multiplex RL post-training jobs across rollout and training pools."""
    set_log_level(log_level.value)


def set_log_level(level: str) -> None:
    """Log rollmux's lines from `level` up on stderr (other libraries' from warning up)."""
    logging.basicConfig(level=logging.WARNING, format=LOG_FORMAT)  # (no-op where logging is set up already)
    logging.getLogger("rollmux").setLevel(level.upper())


def to_stdout(json_out: Optional[Path]) -> bool:
    """Whether `--json -` asks for the JSON on stdout (the table then goes to stderr)."""
    return json_out is not None and str(json_out) == "-"


@contextmanager
def tables_to_stderr(json_out: Optional[Path]) -> Iterator[None]:
    """With `--json -`, what the command prints on stdout (its table) goes to stderr instead."""
    if to_stdout(json_out):
        with redirect_stdout(sys.stderr):
            yield
    else:
        yield


def fail(exc: Exception) -> None:
    """Print one line naming the place and exit 2."""
    err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)  # "[demo]" is text
    raise typer.Exit(2)


def write_json(path: Path, doc: dict) -> None:
    """Write `doc` as indented JSON (`-`: on stdout); InputError naming the path if it cannot be written."""
    if to_stdout(path):
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        sys.stdout.flush()
        return
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
