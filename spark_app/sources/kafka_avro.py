"""Avro values in the schema registry's wire format, decoded into the value schema's columns
with Spark's own ``from_avro``: one branch per writer schema the registry holds when the query
starts, each record decoded with the schema its id names.

The wire format (Confluent's, which Apicurio's and Karapace's serializers write too): a zero
byte, the writer schema's id as four big-endian bytes, then the Avro binary record. ``from_avro``
needs the writer's schema, so the decoding is a ``CASE`` on the id, fixed per query: no Python
per record, and the JVM decodes at Spark's own speed.

Each writer's record is resolved into the value schema as Avro resolves a writer against a
reader: a column is the writer's field of that name, cast to the column's type; a field the
writer lacks (a v1 record read after v2 added it) takes the default the newest registered
version gives it, else null. A compatible new version is so read without anyone restarting
anything: a record that names an id the query did not know stops the query with
``NEW_SCHEMA``, and the driver (``apps.run``) asks the registry for that id, builds the query
again with it and starts it from its checkpoint, where the batch that met the record was not
committed.

A record that cannot be decoded (no magic byte, a truncated or corrupt record) and an id the
registry does not know stop the query at that record, with its topic, partition and offset
(``UNDECODABLE``, ``UNKNOWN_ID``): nothing past it is written."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import reduce
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro
from pyspark.sql.types import StructField, StructType

from spark_app.contract.errors import KappaError
from spark_app.contract.schema_registry import RegisteredSchema, schema_by_id, subject_schemas
from spark_app.contract.sources import KafkaSource

NEW_SCHEMA = "KAPPA_NEW_SCHEMA_ID"
"""Marks the failure of a record whose schema id the query did not know (``learned``)."""
UNDECODABLE = "KAPPA_UNDECODABLE"
"""Marks the failure of a record that does not decode; the rest of the message says which."""
_NEW = re.compile(NEW_SCHEMA + r" (?P<id>\d+) (?P<where>[^\n]*?)(?: \|\||$)", re.MULTILINE)
_BAD = re.compile(UNDECODABLE + r" (?P<said>[^\n]*?)(?: \|\||$)", re.MULTILINE)
_RAW = "__kappa_avro_{}__"
Decoder = Callable[[DataFrame, StructType], "Decoded"]
"""How a value becomes the value schema's struct (``sources.kafka.deserialize``)."""
MAGIC = bytes([0])


class UnknownSchemaIdError(KappaError):
    """A record names a schema id the registry does not have: no run can decode it."""


class UndecodableRecordError(KappaError):
    """A record that is not the wire format, or whose bytes its writer schema cannot decode."""


@dataclass
class Learned:
    """Schema ids met while the run runs that no subject listed when its query started (a
    version registered since, or one registered under another subject): asked for by id from
    then on. One per process, cleared when a run starts (``apps.run``); the restarts of the
    run's queries keep it."""

    ids: set[int] = field(default_factory=set)


LEARNED = Learned()


@dataclass(frozen=True)
class Writers:
    """The writer schemas one query decodes with (id -> Avro schema, JSON), and the defaults of
    the newest version's fields (what a record written before a field existed reads)."""

    schemas: Mapping[int, str]
    defaults: Mapping[str, Any]
    unknown: frozenset[int] = frozenset()
    """Ids met and asked for that the registry does not have."""


def known_writers(src: KafkaSource, where: str, learned: Iterable[int] = (), keys: bool = False) -> Writers:
    """Asks the registry once for every version of the source's subjects (its keys' with
    ``keys``), and by id for the ``learned`` ones."""
    assert src.registry is not None
    registry = src.registry
    subjects = registry.key_subjects if keys else registry.subjects
    versions: list[RegisteredSchema] = [v for s in subjects for v in subject_schemas(registry, s, where)]
    schemas = {v.id: v.schema for v in versions}
    for schema_id in sorted(set(learned) - set(schemas)):
        found = schema_by_id(registry, schema_id, where)
        if found is not None:
            schemas[schema_id] = found
    # the reader's defaults: the newest version's (ids grow with registration in every registry)
    newest = max(versions, key=lambda v: v.version).schema if versions else schemas.get(max(schemas, default=-1))
    return Writers(schemas, field_defaults(newest) if newest else {}, frozenset(set(learned) - set(schemas)))


def field_defaults(schema: str) -> dict[str, Any]:
    """The top-level record's fields that declare a default: name -> default."""
    parsed = json.loads(schema)
    return {f["name"]: f["default"] for f in parsed.get("fields", []) if isinstance(f, dict) and "default" in f}


def field_names(schema: str) -> list[str]:
    """The top-level record's field names, in the writer's order (the order ``from_avro`` gives)."""
    return [f["name"] for f in json.loads(schema).get("fields", []) if isinstance(f, dict)]


def required_fields(schema: str) -> list[str]:
    """The top-level fields that cannot be null (no union with null): what tells a record that
    did not decode, which ``from_avro`` in PERMISSIVE mode gives as a struct of nulls."""
    out = []
    for f in json.loads(schema).get("fields", []):
        kind = f.get("type") if isinstance(f, dict) else None
        if not (isinstance(kind, list) and "null" in kind) and kind != "null":
            out.append(f["name"])
    return out


def failed_decode(record: Column, schema: str) -> Column:
    """Whether ``record`` (``from_avro``'s, PERMISSIVE) is a record that did not decode: every
    field that cannot be null is null. A writer whose fields may all be null cannot tell, and
    its all-null records are taken as they read."""
    required = required_fields(schema)
    if not required:
        return record.isNull()
    return record.isNull() | reduce(lambda a, b: a & b, [record.getField(n).isNull() for n in required])


def avro_decoder(src: KafkaSource, where: str, dead_letters: bool = False) -> Decoder | None:
    """The ``deserialize`` decoder of an Avro source (None for JSON): its writers asked of the
    registry now, as the query is built. ``dead_letters``: a record that does not decode is
    given a reason instead of stopping the query (``Decoded.reason``)."""
    if src.value_format != "avro":
        return None
    writers = known_writers(src, where, LEARNED.ids)
    key_writers = known_writers(src, where, LEARNED.ids, keys=True) if src.key_format == "avro" else None

    def decode(raw: DataFrame, target: StructType) -> Decoded:
        value = decoded(raw, target, writers, where, dead_letters)
        if key_writers is None:
            return value
        key = decoded(value.staged, target, key_writers, where, dead_letters, column="key")
        return Decoded(
            key.staged,
            with_key(value.value, key.value, target),
            None if value.reason is None else F.coalesce(value.reason, key.reason),
            None if value.new_id is None else F.coalesce(value.new_id, key.new_id),
        )

    return decode


@dataclass(frozen=True)
class Decoded:
    """The records with what the decoding staged (``staged``), the value schema's struct of each
    (``value``) and, when undecodable records are dead-lettered, why a record did not decode
    (``reason``: null for one that did; the struct is then null)."""

    staged: DataFrame
    value: Column
    reason: Column | None = None
    new_id: Column | None = None
    """With ``reason``: stops the query at a record whose id it did not know (else null). The
    dead-letter query evaluates it too, so it never reads past a record the driver is about to
    learn is a dead letter (an id the registry turns out not to have)."""


def decoded(
    raw: DataFrame,
    target: StructType,
    writers: Writers,
    where: str,
    dead_letters: bool = False,
    column: str = "value",
) -> Decoded:
    """Stage one decodes each record once, into the column of its writer's id (the others stay
    null: a ``CASE`` evaluates only the branch it takes); stage two resolves that column into
    ``target``'s struct, or stops at a record that did not decode (``dead_letters``: gives its
    reason instead). Two projections, so Spark does not repeat ``from_avro`` for each field it
    reads (it keeps a projection whose costly expression the next one reads more than once).
    An id the query did not know stops the query either way: the driver learns it and starts
    the query again (``apps.run``); an id learned that the registry does not have is a dead
    letter, or the driver's ``UnknownSchemaIdError``. ``column``: ``value``, or ``key`` (the
    same, for a record's key; a null key is no key)."""
    value = F.col(column)
    header = F.substring(value, 1, 5)  # the zero byte and the id: compared as bytes, no conversion per record
    payload = F.expr(f"substring({column}, 6)")

    def staged_name(k: int | str) -> str:
        return _RAW.format(f"{column}_{k}")

    staged = raw.select(
        "*",
        header.alias(staged_name("header")),
        *(
            F.when(header == F.lit(wire_header(k)), from_avro(payload, w, {"mode": "PERMISSIVE"})).alias(staged_name(k))
            for k, w in writers.schemas.items()
        ),
    )
    staged_header = F.col(staged_name("header"))
    wire = (F.length(staged_header) == 5) & (F.substring(staged_header, 1, 1) == F.lit(bytearray(MAGIC)))
    at = F.concat(
        F.lit(f"{where}: the {'record' if column == 'value' else 'key of the record'} at "),
        F.col("topic"),
        F.lit("["),
        F.col("partition").cast("string"),
        F.lit("] offset "),
        F.col("offset").cast("string"),
    )
    found_id = F.conv(F.hex(F.substring(staged_header, 2, 4)), 16, 10)  # read only in the messages
    not_wire = F.concat(at, F.lit(" is not in the schema registry's wire format (a zero byte, then a schema id)"))
    bad_record = F.concat(at, F.lit(" does not decode with schema id "), found_id, F.lit(", which it names"))
    unknown = F.concat(at, F.lit(" names schema id "), found_id, F.lit(", which the schema registry does not have"))
    new_id = F.raise_error(F.concat(F.lit(NEW_SCHEMA + " "), found_id, F.lit(" "), at, F.lit(" ||")))

    def refused(said: Column) -> Column:
        return F.raise_error(F.concat(F.lit(UNDECODABLE + " "), said, F.lit(" ||")))

    out = F.when(value.isNull(), F.lit(None))
    reason = F.when(value.isNull(), F.lit(None))
    for k, w in writers.schemas.items():
        raw_k = F.col(staged_name(k))
        mine = staged_header == F.lit(wire_header(k))
        fits = resolved(raw_k, field_names(w), target, writers.defaults)
        if dead_letters:
            out = out.when(mine, F.when(failed_decode(raw_k, w), F.lit(None)).otherwise(fits))
            reason = reason.when(mine, F.when(failed_decode(raw_k, w), bad_record))
        else:
            out = out.when(mine, F.when(failed_decode(raw_k, w), refused(bad_record)).otherwise(fits))
    if not dead_letters:
        return Decoded(staged, out.when(~wire, refused(not_wire)).otherwise(new_id))
    gone = [F.lit(wire_header(k)) for k in sorted(writers.unknown)]
    registry_lacks = staged_header.isin(*gone) if gone else F.lit(False)
    out = out.when(~wire | registry_lacks, F.lit(None)).otherwise(new_id)
    reason = reason.when(~wire, not_wire).when(registry_lacks, unknown)
    known = staged_header.isin(*(F.lit(wire_header(k)) for k in writers.schemas)) if writers.schemas else F.lit(False)
    return Decoded(staged, out, reason, F.when(wire & ~known & ~registry_lacks, new_id))


def with_key(value: Column, key: Column, target: StructType) -> Column:
    """The value's struct with each column the value left null taken from the key's (a field
    only the key carries, as producers that key by an id they leave out of the value write).
    The key is looked at first, for every record: a key that does not decode stops the query
    (or is a dead letter) even when the value has every column."""
    merged = F.struct(*(F.coalesce(value.getField(f.name), key.getField(f.name)).alias(f.name) for f in target.fields))
    return F.when(key.isNull(), value).when(value.isNull(), F.lit(None)).otherwise(merged)


def wire_header(schema_id: int) -> bytearray:
    """The five bytes a record written with ``schema_id`` starts with."""
    return bytearray(MAGIC + schema_id.to_bytes(4, "big"))


def resolved(record: Column, has: list[str], target: StructType, defaults: Mapping[str, Any]) -> Column:
    """The writer's record as ``target``'s struct: its field of each column's name, else the
    newest version's default, else null; each cast to the column's type. A writer whose fields
    are the columns, in their order (the common case: one version, the pipeline's schema), is
    one struct cast, which Spark drops where the types already agree: no struct is rebuilt per
    record. Its columns are nullable, as the struct built field by field makes them (a cast
    to a column that may not be null is refused by Spark's analyzer)."""
    if has == target.fieldNames():
        return record.cast(StructType([StructField(f.name, f.dataType, True, f.metadata) for f in target.fields]))
    columns = []
    for f in target.fields:
        if f.name in has:
            source = record.getField(f.name)
        elif defaults.get(f.name) is not None:
            source = F.lit(defaults[f.name])
        else:
            source = F.lit(None)
        columns.append(source.cast(f.dataType).alias(f.name))
    return F.struct(*columns)


def new_schema_id(failure: BaseException | str) -> tuple[int, str] | None:
    """The schema id (and the record's place) a query stopped at for not knowing it, if that is
    why it stopped."""
    found = _NEW.search(str(failure))
    return (int(found["id"]), found["where"]) if found else None


def undecodable(failure: BaseException | str) -> str | None:
    """The one line a query that stopped at an undecodable record says (no Java trace)."""
    found = _BAD.search(str(failure))
    return found["said"] if found else None
