"""The comparison of a blue/green upgrade, before the switch: blue's rows in main against green's
in its branch, per sink table, over one event-time window in which every result is final in
both versions (``contract.blue_green.compare_window``). By Spark, as a Backfill's validation:
counts and a sample of differing keys leave the job, never the rows.

``min_match_ratio`` decides whether green may switch; 0 says the output is meant to change (the
comparison is then reported, not required)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from pyspark.sql import SparkSession

from spark_app.bluegreen.tables import GreenBranch
from spark_app.contract.reports.publish import TableReport
from spark_app.sinks.iceberg.publish import compare
from spark_app.sinks.iceberg.table import added_columns
from spark_app.sinks.iceberg.window import TimeWindow

SHOWN_KEYS = 10


@dataclass(frozen=True)
class Compared:
    """Each table's comparison, and whether green may switch: every table at least
    ``min_match_ratio``."""

    tables: list[TableReport]
    passed: bool
    min_match_ratio: float

    def reason(self) -> str | None:
        """Why green may not switch, naming each table below the ratio (None: it may)."""
        below = [t for t in self.tables if t.match_ratio < self.min_match_ratio]
        if not below:
            return None
        said = "; ".join(
            f"{t.table}: {t.match_ratio:.4f} ({t.main_rows - t.matched} rows of blue's not in green's, "
            f"{t.branch_rows - t.matched} of green's not in blue's; keys {', '.join(t.differing_keys) or 'none'})"
            for t in below
        )
        return f"green's output differs from blue's beyond upgrade.minMatchRatio {self.min_match_ratio}: {said}"


def compare_versions(
    spark: SparkSession, sinks: list[GreenBranch], start: datetime, end: datetime, min_match_ratio: float
) -> Compared:
    if not 0.0 <= min_match_ratio <= 1.0:
        raise ValueError(f"min_match_ratio must be in [0, 1], got {min_match_ratio}")
    tables = []
    for s in sinks:
        table = s.load()
        added = added_columns(table, s.branch)  # null in blue's rows by design: reported, not compared
        window = TimeWindow(s.time_column, start, end)
        c = compare(spark, table, s.catalog_properties, s.branch, window, s.key, leave_out=added)
        tables.append(
            TableReport(
                table=".".join(table.name()),
                branch=s.branch,
                match_ratio=c.match_ratio,
                main_rows=c.main_rows,
                branch_rows=c.branch_rows,
                matched=c.matched,
                differing_keys=[json.dumps(k, default=str, sort_keys=True) for k in c.differing[:SHOWN_KEYS]],
                new_columns=added,
            )
        )
    return Compared(tables, all(t.match_ratio >= min_match_ratio for t in tables), min_match_ratio)
