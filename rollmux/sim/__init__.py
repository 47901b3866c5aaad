"""The trace-driven simulator and what it prices: draws, accounting results, baselines (DESIGN §6-7)."""
