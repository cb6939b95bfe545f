"""How many progress updates a query keeps in the driver: all of a run that ends (its report
reads them), a bounded number for a live query that runs for weeks."""

from __future__ import annotations

from spark_app.apps.run import _SESSION_DEFAULTS, PROGRESS_RETENTION, progress_retention


def test_a_backfill_and_a_bootstraps_archive_leg_keep_every_batch() -> None:
    assert progress_retention("backfill", archive_leg=False) == 100_000
    assert progress_retention("live", archive_leg=True) == 100_000


def test_a_live_query_keeps_a_bounded_number_and_the_session_starts_with_it() -> None:
    assert progress_retention("live", archive_leg=False) == 10_000
    assert _SESSION_DEFAULTS[PROGRESS_RETENTION] == "10000"
