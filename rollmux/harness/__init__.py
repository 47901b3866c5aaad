"""What exercises the live plane end to end (DESIGN §8), kept out of the service itself: the
chaos harness (`chaos/`, `rollmux chaos`), the demo (`demo`, `demo_jobs`, `rollmux demo`) and the
profiler (`profile`, `rollmux profile`). It may import every layer but the CLI; nothing below the
CLI imports it.
"""
