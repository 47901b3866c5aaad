"""The clock/executor seam: virtual time and (compressed) wall-clock time."""

from __future__ import annotations

import threading

import pytest

from rollmux.core.env import SimEnvironment, WallClockEnvironment

# -- SimEnvironment --------------------------------------------------------------------------

def test_sim_runs_events_in_time_order():
    env, log = SimEnvironment(), []
    for t in (30.0, 10.0, 20.0, 5.0):
        env.call_at(t, lambda t=t: log.append((t, env.now())))
    env.run()
    assert log == [(5.0, 5.0), (10.0, 10.0), (20.0, 20.0), (30.0, 30.0)]


def test_sim_ties_run_in_scheduling_order():
    env, log = SimEnvironment(), []
    for name in "abcde":
        env.call_at(7.0, log.append, name)
    env.run()
    assert log == list("abcde")


def test_sim_events_scheduled_during_run_are_processed():
    env, log = SimEnvironment(), []

    def first() -> None:
        log.append(("first", env.now()))
        env.call_later(5.0, lambda: log.append(("second", env.now())))

    env.call_at(10.0, first)
    env.run()
    assert log == [("first", 10.0), ("second", 15.0)]


def test_sim_same_time_event_scheduled_from_callback_runs_after_queued_ties():
    env, log = SimEnvironment(), []
    env.call_at(1.0, lambda: (log.append("a"), env.call_at(1.0, log.append, "c")))
    env.call_at(1.0, log.append, "b")
    env.run()
    assert log == ["a", "b", "c"]


def test_sim_until_stops_before_later_events_and_sets_the_clock():
    env, log = SimEnvironment(), []
    for t in (1.0, 5.0, 9.0):
        env.call_at(t, log.append, t)
    env.run(until=6.0)
    assert log == [1.0, 5.0]
    assert env.now() == 6.0
    assert env.pending == 1


def test_sim_run_resumes_after_until():
    env, log = SimEnvironment(), []
    for t in (1.0, 9.0):
        env.call_at(t, log.append, t)
    env.run(until=5.0)
    env.run()
    assert log == [1.0, 9.0]
    assert env.now() == 9.0


def test_sim_until_includes_events_exactly_at_until():
    env, log = SimEnvironment(), []
    env.call_at(6.0, log.append, "at")
    env.run(until=6.0)
    assert log == ["at"]


def test_sim_past_events_run_now_not_in_the_past():
    env, seen = SimEnvironment(start=100.0), []
    env.call_at(50.0, lambda: seen.append(env.now()))
    env.run()
    assert seen == [100.0]


def test_sim_call_later_is_relative_and_never_negative():
    env, seen = SimEnvironment(start=10.0), []
    env.call_later(2.5, lambda: seen.append(env.now()))
    env.call_later(-4.0, lambda: seen.append(env.now()))
    env.run()
    assert seen == [10.0, 12.5]


def test_sim_passes_arguments_and_counts_events():
    env, log = SimEnvironment(), []
    env.call_at(1.0, lambda a, b: log.append(a + b), 2, 3)
    env.call_at(2.0, log.append, "x")
    env.run()
    assert log == [5, "x"]
    assert env.events_processed == 2


# -- WallClockEnvironment --------------------------------------------------------------------

SCALE = 1e-3  # one virtual second per wall millisecond


def test_wall_clock_runs_callbacks_in_time_order_and_returns_when_idle():
    env, log = WallClockEnvironment(time_scale=SCALE), []
    for t in (15.0, 5.0, 10.0):
        env.call_at(t, log.append, t)
    env.run()
    assert log == [5.0, 10.0, 15.0]


def test_wall_clock_callbacks_run_no_earlier_than_their_time():
    env, seen = WallClockEnvironment(time_scale=SCALE), []
    env.call_at(20.0, lambda: seen.append(env.now()))
    env.run()
    assert seen[0] >= 20.0


def test_wall_clock_ties_run_in_scheduling_order():
    env, log = WallClockEnvironment(time_scale=SCALE), []
    for name in "xyz":
        env.call_at(3.0, log.append, name)
    env.run()
    assert log == ["x", "y", "z"]


def test_wall_clock_chained_callbacks_run():
    env, log = WallClockEnvironment(time_scale=SCALE), []
    env.call_later(2.0, lambda: (log.append("a"), env.call_later(2.0, log.append, "b")))
    env.run()
    assert log == ["a", "b"]


def test_wall_clock_until_leaves_later_callbacks_unrun():
    env, log = WallClockEnvironment(time_scale=SCALE), []
    env.call_at(1.0, log.append, "early")
    env.call_at(10_000.0, log.append, "late")
    env.run(until=5.0)
    assert log == ["early"]


def test_wall_clock_stop_makes_run_return():
    env, log = WallClockEnvironment(time_scale=SCALE), []
    env.call_at(1.0, lambda: (log.append("a"), env.stop()))
    env.call_at(2.0, log.append, "b")
    env.run()
    assert log == ["a"]


def test_wall_clock_accepts_callbacks_from_another_thread():
    env, log = WallClockEnvironment(time_scale=SCALE), []
    started = threading.Event()

    def producer() -> None:
        started.wait()
        env.call_later(1.0, lambda: (log.append("from thread"), env.stop()))

    thread = threading.Thread(target=producer)
    thread.start()
    env.call_at(0.0, started.set)
    env.run(until=60_000.0)  # would return at `until` (a minute of wall time) only if the thread failed
    thread.join()
    assert log == ["from thread"]


def _boom() -> None:
    raise RuntimeError("a callback's bug")


def test_wall_clock_serve_hands_a_raising_callback_to_on_error_and_goes_on():
    env, caught, after = WallClockEnvironment(), [], threading.Event()
    thread = threading.Thread(target=env.serve, args=(caught.append,), daemon=True)
    thread.start()
    env.call_at(env.now(), _boom)
    env.call_at(env.now(), after.set)
    assert after.wait(30) and [str(e) for e in caught] == ["a callback's bug"]
    env.stop()
    thread.join(30)


def test_wall_clock_run_without_on_error_raises_a_callback_error():
    env = WallClockEnvironment()
    env.call_at(0.0, _boom)
    with pytest.raises(RuntimeError, match="a callback's bug"):
        env.run()
