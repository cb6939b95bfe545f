"""The dead-letter table: where a live job's Avro sources put the records they cannot decode,
instead of stopping at them (the contract both halves import).

One table per job (the spec's size bound leaves no room for one per source). Each Avro source
gets a second query, its own checkpoint under the job's (``_dead_letters/<source>``), that
reads the same topic, keeps only the records with a ``reason`` and appends them through the
exactly-once Iceberg writer; the source's own frame then keeps only the records without one.
The table is append-only and keyed by topic, partition and offset: a Rewind does not rewind it
(a record dead-lettered twice, before and after a Rewind, is there twice, once per reading)."""

from __future__ import annotations

from pydantic import Field

from spark_app.contract.base import KappaModel
from spark_app.contract.sinks import IcebergSink

DEAD_LETTERS = "_dead_letters"
"""The prefix of a dead-letter query's output name, and its checkpoint's folder."""

COLUMNS = (
    ("source", "string"),
    ("topic", "string"),
    ("partition", "int"),
    ("offset", "bigint"),
    ("timestamp", "timestamp"),
    ("key", "binary"),
    ("value", "binary"),
    ("schema_id", "bigint"),
    ("reason", "string"),
)
"""The table's columns: where the record was, its bytes as the broker holds them, the schema id
its header names (null: not the wire format), and why it did not decode, in one line."""


class DeadLetterConfig(KappaModel):
    """``deadLetterTable``: an Iceberg table of the job's catalogs, created if missing."""

    catalog: str = "default"
    """Name of an entry in ``catalogs``."""
    table: str = Field(pattern=r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)+$")
    """``namespace.table``."""

    def sink(self) -> IcebergSink:
        """The table as the exactly-once Iceberg sink writes it: appended on main, keyed by the
        record's place."""
        return IcebergSink(kind="iceberg", catalog=self.catalog, table=self.table, key=["topic", "partition", "offset"])


def output_name(source: str) -> str:
    """The dead-letter query of ``source``: its output's name, and its checkpoint's path under
    the job's checkpoint location."""
    return f"{DEAD_LETTERS}/{source}"


def source_of(output: str) -> str | None:
    """The source whose dead-letter query ``output`` is (None: a sink of the pipeline)."""
    prefix = f"{DEAD_LETTERS}/"
    return output[len(prefix) :] if output.startswith(prefix) else None
