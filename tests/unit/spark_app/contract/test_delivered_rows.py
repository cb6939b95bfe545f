"""Rows a batch's sources delivered: observed for the kappa-iceberg source, Spark's count for others."""

from __future__ import annotations

from spark_app.contract.row_counts import delivered_rows, reused_rows, scanned_rows


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


def _batch(run: str, scanned: int, reused: int, kafka: int) -> dict:
    return {
        "runId": run,
        "numInputRows": 0,
        "sources": [
            {
                "description": "kappa-iceberg[k]",
                "numInputRows": 0,
                "metrics": {"scannedRows": str(scanned), "reusedRows": str(reused)},
            },
            {"description": "KafkaV2[Subscribe[clicks]]", "numInputRows": kafka},
        ],
    }


def test_scanned_rows_take_the_kappa_sources_running_count_per_query_run() -> None:
    """The kappa-iceberg source reports rows decoded since its query run started: the last
    value of each run counts (a restart starts again at 0); other sources count per batch."""
    progress = [_batch("r1", 100, 10, 3), _batch("r1", 250, 40, 4), _batch("r2", 70, 0, 5)]
    assert scanned_rows(progress) == 250 + 70 + 3 + 4 + 5
    assert reused_rows(progress) == 40 + 0
    assert scanned_rows([{"numInputRows": 9}]) == 9  # a bounded run's summary: read is delivered
    assert reused_rows([{"numInputRows": 9}]) == 0
