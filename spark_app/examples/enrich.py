"""Enrich: each impression priced with the promotion its title had *when it was shown*.

Marketing changes a title's campaign and CPM in place (``dims.promotions``, an ordinary
Iceberg table). A plain join with that table would price last week's impressions, in a
backfill, at today's CPM. Two ways to get the price of the time, both running unchanged live
and in a backfill (docs/lookups.md):

- ``pipeline``: solution 1, a lookup in the table's history. ``history="snapshots"`` (default)
  reads the versions from the table's snapshots: a version is valid from its commit (or from
  ``effective_column`` when given) to the next change; ``history="validity"`` reads a
  validity-interval table (SCD type 2) with ``valid_from``/``valid_to`` columns. No state.
- ``changes_pipeline``: solution 2, the change log ``dims.promotion_changes`` as a second
  source (one row per change, with ``changed_ts``), joined in event time with state; output
  waits for the watermark (``lateness``).
"""

from __future__ import annotations

from pyspark.sql import DataFrame

from spark_app.lookups import as_of, join_changes, snapshot_versions, validity_versions

OUTPUT = "priced_impressions"
TIME_COLUMN = "event_ts"
PRICE_COLUMNS = ["campaign", "cpm"]


def pipeline(
    sources: dict[str, DataFrame],
    dimension: str = "dims.promotions",
    catalog: str = "default",
    history: str = "snapshots",
    effective_column: str = "",
) -> dict[str, DataFrame]:
    impressions = sources["impressions"]
    spark = impressions.sparkSession
    if history == "validity":
        versions = validity_versions(spark, dimension, "title_id", catalog=catalog, columns=PRICE_COLUMNS)
    else:
        versions = snapshot_versions(
            spark,
            dimension,
            "title_id",
            catalog=catalog,
            columns=PRICE_COLUMNS,
            effective_column=effective_column or None,
        )
    return {OUTPUT: as_of(impressions, versions, key="title_id", event_time=TIME_COLUMN, columns=PRICE_COLUMNS)}


def changes_pipeline(sources: dict[str, DataFrame], lateness: str = "10 minutes") -> dict[str, DataFrame]:
    priced = join_changes(
        sources["impressions"],
        sources["promotion_changes"],
        key="title_id",
        event_time=TIME_COLUMN,
        change_time="changed_ts",
        lateness=lateness,
        columns=PRICE_COLUMNS,
    )
    return {OUTPUT: priced}
