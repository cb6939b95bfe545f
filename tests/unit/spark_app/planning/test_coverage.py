"""The history's coverage of a Backfill's window (spark_app.planning.coverage.assess, pure):
refused when no source reaches the window, a notice per source lacking part of it, and no
notice for the seconds between a history's last row and the window's end."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from spark_app.contract.config import Window
from spark_app.planning.coverage import Extent, assess, tolerance

T = datetime(2026, 11, 1, tzinfo=UTC)
H = timedelta(hours=1)
WINDOW = Window(start=T + 1.5 * H, end=T + 2.5 * H)


def ext(name: str, first: float | None, last: float | None) -> Extent:
    return Extent(
        name, f"arch.{name}", None if first is None else T + first * H, None if last is None else T + last * H
    )


def test_no_source_in_the_window_is_a_refusal_naming_each_history_and_the_fix() -> None:
    got = assess(WINDOW, [ext("clicks", 0, 1), ext("views", None, None)])  # views: an empty table
    assert got.refusal == (
        "spec.window [2026-11-01T01:30:00Z, 2026-11-01T02:30:00Z) holds no history: source clicks (arch.clicks) "
        "holds 2026-11-01T00:00:00Z to 2026-11-01T01:00:00Z; source views (arch.views) holds no rows. "
        "Nothing would be read or written; set the window within the history, or run it once the "
        "history holds it"
    )
    assert got.notices == ()


def test_a_history_ending_inside_the_window_is_a_notice_with_the_missing_part() -> None:
    got = assess(WINDOW, [ext("clicks", 0, 2), ext("views", 0, 3)])
    assert got.refusal is None
    (notice,) = got.notices
    assert notice.startswith("not yet final: source clicks (arch.clicks) holds 2026-11-01T00:00:00Z to ")
    assert "[2026-11-01T02:00:00Z, 2026-11-01T02:30:00Z) of spec.window" in notice


def test_a_history_starting_inside_the_window_is_a_notice_too() -> None:
    (notice,) = assess(WINDOW, [ext("clicks", 2, 5)]).notices
    assert "[2026-11-01T01:30:00Z, 2026-11-01T02:00:00Z) of spec.window" in notice


def test_a_source_outside_the_window_beside_one_inside_is_a_notice_not_a_refusal() -> None:
    got = assess(WINDOW, [ext("clicks", 0, 1), ext("views", 0, 3)])
    assert got.refusal is None
    (notice,) = got.notices
    assert "source clicks" in notice and "none of spec.window" in notice


def test_the_seconds_between_the_last_row_and_the_end_are_no_gap() -> None:
    last = (WINDOW.end - timedelta(seconds=2) - T) / H
    assert assess(WINDOW, [ext("clicks", 0, last)]).notices == ()
    assert tolerance(WINDOW) == timedelta(minutes=1)
    assert tolerance(Window(start=T, end=T + 10 * 24 * H)) == timedelta(hours=2, minutes=24)


def test_no_backfill_source_no_verdict() -> None:
    assert assess(WINDOW, []).refusal is None


def test_files_without_statistics_leave_the_history_unknown_and_refuse_nothing() -> None:
    unknown = Extent("clicks", "arch.clicks", None, None, files=3)
    assert unknown.unknown
    assert assess(WINDOW, [unknown]) == assess(WINDOW, [])
