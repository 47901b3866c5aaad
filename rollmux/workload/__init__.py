"""Workload synthesis: real Philly arrivals and lifetimes mapped to RL post-training jobs.

See docs/workload.md for the mapping, the job catalog and the performance model.
"""

from rollmux.workload.paper import paper_jobs
from rollmux.workload.philly import available_vcs, find_traces_dir
from rollmux.workload.synth import synthesize_philly

__all__ = ["available_vcs", "find_traces_dir", "paper_jobs", "synthesize_philly"]
