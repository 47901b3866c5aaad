"""The `rollmux` command line (typer + rich): one module per side of the project.

Bad input of any kind exits with status 2 and one line naming the place.
"""

# Each module registers its commands on import; the import order is their order in `--help`.
# isort: off
from rollmux.cli import simulate, study, service, launch, harness  # noqa: F401
# isort: on
from rollmux.cli.app import app, main

__all__ = ["app", "main"]
