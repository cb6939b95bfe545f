"""Complete by default: reading goes on past end + drain while results are open and history remains."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from spark_app.window.horizon import next_drain_step

END = datetime(2026, 11, 1, 3, tzinfo=UTC)
DRAIN = timedelta(minutes=40)
MIN = timedelta(minutes=1)


def test_nothing_open_stops() -> None:
    assert next_drain_step(0, END, END + DRAIN, END + 3 * 60 * MIN, DRAIN, None).read_until is None


def test_open_results_and_history_double_the_drain_up_to_the_history() -> None:
    step = next_drain_step(5, END, END + DRAIN, END + 180 * MIN, DRAIN, None)
    assert step.read_until == END + 2 * DRAIN and step.notice is None
    near_end = next_drain_step(5, END, END + 160 * MIN, END + 180 * MIN, DRAIN, None)
    assert near_end.read_until == END + 180 * MIN + timedelta(microseconds=1)  # never past the history


def test_max_drain_bounds_the_steps_and_then_says_so() -> None:
    assert next_drain_step(5, END, END + DRAIN, END + 600 * MIN, DRAIN, 60 * MIN).read_until == END + 60 * MIN
    stop = next_drain_step(5, END, END + 60 * MIN, END + 600 * MIN, DRAIN, 60 * MIN)
    assert stop.read_until is None
    assert "window.maxDrain (1h)" in (stop.notice or "")


def test_history_ending_first_names_its_end_not_the_drain() -> None:
    history = END + 180 * MIN
    stop = next_drain_step(7, END, history + timedelta(microseconds=1), history, DRAIN, None)
    assert stop.read_until is None
    notice = stop.notice or ""
    assert f"history ends at {history.isoformat()}" in notice
    assert f"until it reaches {(history + DRAIN).isoformat()}" in notice
    assert "7 windows or sessions" in notice and "raise window.drain" not in notice
    none = next_drain_step(7, END, END + DRAIN, None, DRAIN, None)
    assert none.read_until is None and "holds nothing past the window's end" in (none.notice or "")
