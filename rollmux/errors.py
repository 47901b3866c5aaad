"""Errors raised for bad user input; the CLI turns them into one-line messages."""

from __future__ import annotations


class InputError(ValueError):
    """Bad input: carries the place (file, line, field) and the reason."""

    def __init__(self, place: str, reason: str) -> None:
        super().__init__(f"{place}: {reason}")
        self.place = place
        self.reason = reason

    def __reduce__(self):
        # Picklable with its two arguments: a sweep task's error crosses process boundaries (Ray).
        return (type(self), (self.place, self.reason))


def pydantic_reason(exc: Exception) -> tuple[str, str]:
    """Return (field path, message) of the first error of a pydantic ValidationError."""
    errors = getattr(exc, "errors", None)
    if errors is None:
        return "", str(exc)
    first = errors()[0]
    field = ".".join(str(p) for p in first.get("loc", ()))
    msg = first.get("msg", "invalid value")
    value = first.get("input")
    if first.get("type") != "missing" and not isinstance(value, dict):
        msg = f"{msg} (got {value!r})"
    return field, msg
