"""How the study's independent simulations are mapped over workers.

A `Pmap` takes a picklable module-level function and a list of argument tuples
and returns the results in order. Every study section receives one, so the
same section code runs serially here or as tasks on a distributed engine.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

Pmap = Callable[[Callable[..., Any], Sequence[tuple]], list]


def serial_map(fn: Callable[..., Any], args: Sequence[tuple]) -> list:
    """Run `fn(*a)` for each argument tuple, in this process, in order."""
    return [fn(*a) for a in args]
