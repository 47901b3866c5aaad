"""RollMux: phase-level multiplexing of RL post-training jobs across disaggregated GPU pools.

The job-side API, `rollmux.init(job_id, client, ...)` (or `rollmux.init()` in a job `rollmux run`
launched), `@rollmux.phase("rollout")` and
`rollmux.progress(done, total)`, lives in `rollmux.shim`; it is imported on first use,
so `import rollmux` stays light.
"""

__version__ = "0.1.0"

_SHIM_API = ("init", "phase", "progress", "current")


def __getattr__(name: str):
    """The shim's job-side API, imported lazily (`init` also reads `rollmux run`'s environment)."""
    if name == "init":
        from rollmux.job import init
        return init
    if name in _SHIM_API:
        from rollmux import shim
        return getattr(shim, name)
    raise AttributeError(f"module 'rollmux' has no attribute {name!r}")
