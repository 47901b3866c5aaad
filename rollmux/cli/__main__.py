"""`python -m rollmux.cli`: the `rollmux` script."""

from rollmux.cli.app import main

main()
