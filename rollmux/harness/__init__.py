"""What exercises the live plane end to end (DESIGN §8), kept out of the service itself: the
chaos harness (`chaos/`, `rollmux chaos`), the demo (`demo`, `demo_jobs`, `rollmux demo`) and the
profiler (`profile`, `rollmux profile`). It sits on core, workload, the shim, live, jobs,
weightsync and adapters (never sim, study or the CLI); only the CLI imports it.
"""
