"""Rows a batch's sources delivered: observed for the kappa-iceberg source, Spark's count for others."""

from __future__ import annotations

from spark_app.telemetry import delivered_rows


def test_the_kappa_source_counts_what_its_filters_kept() -> None:
    progress = {
        "numInputRows": 130,
        "sources": [
            {"description": "kappa-iceberg[job/out/impressions#abc]", "numInputRows": 100},
            {"description": "KafkaV2[Subscribe[clicks]]", "numInputRows": 30},
        ],
        "observedMetrics": {"kappa_rows:job/out/impressions#abc": {"rows": 64}},
    }
    assert delivered_rows(progress) == 64 + 30


def test_without_the_observed_metric_or_per_source_detail_spark_counts() -> None:
    bare = {"numInputRows": 7, "sources": [{"description": "kappa-iceberg[k]", "numInputRows": 7}]}
    assert delivered_rows(bare) == 7
    assert delivered_rows({"numInputRows": 5}) == 5
