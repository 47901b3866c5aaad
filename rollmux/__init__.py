"""RollMux: phase-level multiplexing of RL post-training jobs across disaggregated GPU pools."""

__version__ = "0.1.0"
