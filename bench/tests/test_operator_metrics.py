"""What one scrape of the operator's ``/metrics`` holds (``bench.operator.series_summary``)."""

from __future__ import annotations

from bench.operator import series_summary

EXPOSITION = """\
# HELP kappa_streamingjob_phase 1 for the StreamingJob's current phase
# TYPE kappa_streamingjob_phase gauge
kappa_streamingjob_phase{namespace="a",streamingjob="rmi",phase="Running"} 1.0
kappa_streamingjob_phase{namespace="a",streamingjob="sessions",phase="Running"} 1.0
# HELP kappa_backfill_phase 1 for the Backfill's current phase
# TYPE kappa_backfill_phase gauge
kappa_backfill_phase{namespace="a",backfill="rmi-outage",phase="Running"} 1.0
# HELP kappa_operator_streamingjobs StreamingJobs by phase
# TYPE kappa_operator_streamingjobs gauge
kappa_operator_streamingjobs{phase="Running"} 2.0
"""


def test_a_scrape_is_counted_by_family_and_by_the_series_that_name_one_object() -> None:
    summary = series_summary(EXPOSITION)
    assert summary["series"] == 4
    assert summary["naming_an_object"] == 3
    assert summary["by_family"] == {"kappa_streamingjob_phase": 2, "kappa_backfill_phase": 1,
                                    "kappa_operator_streamingjobs": 1}  # fmt: skip
    assert list(summary["by_family"]) == ["kappa_streamingjob_phase", "kappa_backfill_phase",
                                          "kappa_operator_streamingjobs"]  # fmt: skip


def test_an_empty_scrape_has_no_series() -> None:
    assert series_summary("") == {"series": 0, "naming_an_object": 0, "by_family": {}}
