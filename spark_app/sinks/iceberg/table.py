"""The sink's table: loaded, or created from the output's schema with the configured
partitioning. Spark timestamps become Iceberg ``timestamptz`` (instants, UTC)."""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Callable

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    Transform,
    TruncateTransform,
    YearTransform,
)

from spark_app.catalogs import missing_table_message, sql_catalog_names
from spark_app.contract.errors import ConfigError

log = logging.getLogger(__name__)

_CALL = re.compile(r"^(?P<fn>\w+)\((?:(?P<n>\d+),)?(?P<col>\w+)\)$")
_UNARY: dict[str, Transform] = {
    "hour": HourTransform(),
    "day": DayTransform(),
    "month": MonthTransform(),
    "year": YearTransform(),
}


def parse_transform(text: str) -> tuple[str, Transform, str]:
    """``hour(ts)`` -> ("ts", HourTransform, "ts_hour"); a bare column is identity."""
    item = text.replace(" ", "")
    if re.fullmatch(r"\w+", item):
        return item, IdentityTransform(), item
    m = _CALL.match(item)
    if m is None:
        raise ConfigError(f"partitionBy {text!r}: use col, hour(col), day(col), bucket(N, col) or truncate(N, col)")
    fn, n, col = m["fn"], m["n"], m["col"]
    if fn in _UNARY and n is None:
        return col, _UNARY[fn], f"{col}_{fn}"
    if fn == "bucket" and n is not None:
        return col, BucketTransform(int(n)), f"{col}_bucket"
    if fn == "truncate" and n is not None:
        return col, TruncateTransform(int(n)), f"{col}_trunc"
    raise ConfigError(f"partitionBy {text!r}: unknown transform {fn!r}")


def partition_spec(schema: Schema, partition_by: list[str]) -> PartitionSpec:
    fields = []
    for i, text in enumerate(partition_by):
        col, transform, name = parse_transform(text)
        try:
            source = schema.find_field(col)
        except ValueError:
            raise ConfigError(f"partitionBy {text!r}: {col!r} is not an output column") from None
        fields.append(PartitionField(source_id=source.field_id, field_id=1000 + i, transform=transform, name=name))
    return PartitionSpec(*fields)


def utc_schema(schema: pa.Schema) -> pa.Schema:
    """Timestamps with any zone are instants: store them as UTC (Iceberg ``timestamptz``)."""
    fields = []
    for f in schema:
        if pa.types.is_timestamp(f.type) and f.type.tz is not None:
            f = f.with_type(pa.timestamp("us", "UTC"))
        fields.append(f)
    return pa.schema(fields)


CREATE_PROPERTIES = {
    # A live sink commits every few seconds. Its manifests merge once ~100 accumulate (else
    # the manifest list every commit rewrites grows by one per batch), and old metadata files
    # go once 100 newer ones exist (Iceberg's default keeps every one for ever). A table the
    # sink did not create keeps its own settings (docs/concepts.md: "The Iceberg sink").
    "commit.manifest-merge.enabled": "true",
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "100",
}


def load_or_create(catalog: Catalog, identifier: str, arrow_schema: pa.Schema, partition_by: list[str]) -> Table:
    """Load the sink's table; create it (and its namespace) from the output schema if missing.

    Refuses to create it when the same SQL database holds it under another catalog name: that
    is a renamed catalog, and creating would split the output into a second, empty table."""
    try:
        return catalog.load_table(identifier)
    except NoSuchTableError:
        pass
    found = sql_catalog_names(catalog, identifier)
    if found is not None and catalog.name in found[1]:
        return catalog.load_table(identifier)  # created under this name since the load: another writer's
    if found is not None and found[1]:
        raise ConfigError(
            f"sink: {missing_table_message(catalog, identifier)}. Not creating it: that would start a second, "
            f"empty {identifier} beside the existing one (to mean a separate table, create it first)"
        )
    namespace = identifier.rsplit(".", 1)[0]
    with contextlib.suppress(NamespaceAlreadyExistsError):
        catalog.create_namespace(namespace)
    try:
        table = catalog.create_table(identifier, schema=utc_schema(arrow_schema), properties=CREATE_PROPERTIES)
    except TableAlreadyExistsError:  # another writer created it first
        return catalog.load_table(identifier)
    if partition_by:
        spec = partition_spec(table.schema(), partition_by)
        with table.update_spec() as update:
            for f in spec.fields:
                update.add_field(table.schema().find_field(f.source_id).name, f.transform, f.name)
    return table


def ensure_main_snapshot(table: Table) -> Table:
    """Iceberg catalogs refuse a branch on a table without snapshots: give main an empty one
    (a backfill may be the first writer of a new table)."""
    if table.metadata.current_snapshot_id is not None or table.snapshots():
        return table
    tx = table.transaction()
    with tx.update_snapshot(snapshot_properties={"kappa.init": "empty main, so branches can exist"}).fast_append():
        pass
    return tx.commit_transaction()


ADDED_COLUMNS = "kappa.added-columns."
"""Table property ``kappa.added-columns.<branch>``: the columns a blue/green upgrade's green
added to the table (JSON list), which its comparison with blue's rows leaves out."""
ADD_RETRIES = 5


def added_columns(table: Table, branch: str) -> list[str]:
    return list(json.loads(table.properties.get(ADDED_COLUMNS + branch, "[]")))


def add_new_columns(table: Table, arrow_schema: pa.Schema, branch: str, reload: Callable[[], Table]) -> Table:
    """The output's columns the table lacks, added as optional columns (a blue/green upgrade's
    new version may add a column: its rows carry it, the old version's read it as null) and
    recorded for ``branch``. Only additions: a changed type is refused by Iceberg, as it should."""
    for attempt in range(ADD_RETRIES):
        have = set(table.schema().column_names)
        missing = [f for f in arrow_schema if f.name not in have]
        if not missing:
            return table
        names = sorted({*added_columns(table, branch), *(f.name for f in missing)})
        try:
            with table.transaction() as tx:
                with tx.update_schema() as update:
                    update.union_by_name(utc_schema(pa.schema(missing)))
                tx.set_properties({ADDED_COLUMNS + branch: json.dumps(names)})
        except CommitFailedException:  # another writer committed meanwhile: look again
            if attempt == ADD_RETRIES - 1:
                raise
            table = reload()
            continue
        added = ", ".join(f.name for f in missing)
        log.info("%s: added column(s) %s for branch %s", ".".join(table.name()), added, branch)
        return reload()
    return table
