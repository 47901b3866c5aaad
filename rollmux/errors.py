"""Errors raised for bad user input; the CLI turns them into one-line messages."""

from __future__ import annotations

from typing import NoReturn


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


# The optional extras (pyproject.toml) and the modules each brings; `pip install rollmux` has none.
EXTRA_MODULES: dict[str, tuple[str, ...]] = {"demo": ("torch",), "trl": ("torch", "trl", "transformers"),
                                             "verl": ("torch", "verl", "transformers")}


class MissingExtra(InputError):
    """A command needs an optional extra that is not installed: one line naming the extra to install."""

    def __init__(self, command: str, extra: str) -> None:
        super().__init__(f"rollmux {command}", f"needs the {extra} extra: pip install 'rollmux[{extra}]'")
        self.command = command
        self.extra = extra

    def __str__(self) -> str:
        return f"rollmux {self.command} needs the {self.extra} extra: pip install 'rollmux[{self.extra}]'"

    def __reduce__(self):
        return (type(self), (self.command, self.extra))


def has_extra(extra: str) -> bool:
    """True when every module of `extra` is importable (found, not imported: stays cheap)."""
    import importlib.util
    return all(importlib.util.find_spec(m) is not None for m in EXTRA_MODULES[extra])


def require_extra(command: str, extra: str) -> None:
    """Raise MissingExtra unless every module of `extra` is importable."""
    if not has_extra(extra):
        raise MissingExtra(command, extra)


def extra_for(exc: ModuleNotFoundError) -> str | None:
    """The extra that brings the module an import failed on, or None if no extra does."""
    root = (exc.name or "").split(".")[0]
    return next((extra for extra, mods in EXTRA_MODULES.items() if root in mods), None)


def raise_missing_extra(exc: ModuleNotFoundError, module: str, extra: str) -> NoReturn:
    """Re-raise `module`'s failed import: one line naming `pip install 'rollmux[extra]'` when an extra
    brings the missing module, else the error as it was."""
    if extra_for(exc) is None:
        raise exc
    package = (exc.name or "").split(".")[0]
    raise ImportError(f"{module} needs the {extra} extra ({package} is missing): pip install 'rollmux[{extra}]'",
                      name=exc.name) from None
