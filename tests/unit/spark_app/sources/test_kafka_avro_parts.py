"""The Avro decode's pure parts: which fields tell a record that did not decode, the reader's
defaults, and the one line read back from a query's failure."""

from __future__ import annotations

import json

from spark_app.sources.kafka_avro import field_defaults, new_schema_id, required_fields, undecodable

SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "R",
        "fields": [
            {"name": "id", "type": "string"},
            {"name": "note", "type": ["null", "string"], "default": None},
            {"name": "country", "type": "string", "default": "unknown"},
        ],
    }
)


def test_required_fields_are_those_that_cannot_be_null() -> None:
    assert required_fields(SCHEMA) == ["id", "country"]


def test_defaults_are_the_fields_that_declare_one_null_included() -> None:
    assert field_defaults(SCHEMA) == {"note": None, "country": "unknown"}


def test_the_markers_are_read_back_from_sparks_failure_text() -> None:
    spark_said = (
        "org.apache.spark.SparkRuntimeException: [USER_RAISED_EXCEPTION] KAPPA_NEW_SCHEMA_ID 7 sources.s: the "
        "record at t[1] offset 42 || SQLSTATE: P0001\n\tat org.apache.spark..."
    )
    assert new_schema_id(spark_said) == (7, "sources.s: the record at t[1] offset 42")
    bad = "[USER_RAISED_EXCEPTION] KAPPA_UNDECODABLE sources.s: the record at t[0] offset 3 does not decode ||"
    assert undecodable(bad) == "sources.s: the record at t[0] offset 3 does not decode"
    assert new_schema_id("something else") is None and undecodable("something else") is None
