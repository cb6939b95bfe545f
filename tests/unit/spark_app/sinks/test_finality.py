"""A backfill branch's finality travels with the table (a property per branch)."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from spark_app.sinks.iceberg import finality


def test_notices_are_recorded_per_branch_and_replaced(tmp_path: Path) -> None:
    catalog = SqlCatalog("default", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/w")
    catalog.create_namespace("out")
    table = catalog.create_table("out.t", Schema(NestedField(1, "x", LongType(), required=False)))
    table.append(pa.table({"x": [1]}))
    load = partial(catalog.load_table, "out.t")
    assert finality.notices(load(), "backfill-a") == []
    finality.mark(load, "backfill-a", ["not yet final: 3 windows or sessions ..."])
    finality.mark(load, "backfill-b", [])
    assert finality.notices(load(), "backfill-a") == ["not yet final: 3 windows or sessions ..."]
    assert finality.notices(load(), "backfill-b") == []
    finality.mark(load, "backfill-a", [])  # a later run reached further: final now
    assert finality.notices(load(), "backfill-a") == []
    assert load().scan().to_arrow().num_rows == 1, "only metadata changed"
