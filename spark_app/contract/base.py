"""The base of every contract model (frozen, camelCase on the wire, strict) and the field
types the contract shares with the custom resources: durations and timestamps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, PlainSerializer
from pydantic.alias_generators import to_camel

from spark_app.contract.durations import format_duration, parse_duration


def parse_timestamp(value: Any) -> datetime:
    """ISO 8601; a timestamp without a zone is UTC, like Iceberg's `timestamp` type."""
    if isinstance(value, datetime):
        dt = value
    elif isinstance(value, str):
        try:
            dt = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"expected an ISO 8601 timestamp such as '2026-11-01T10:00:00Z', got {value!r}") from None
    else:
        raise ValueError(f"expected an ISO 8601 timestamp such as '2026-11-01T10:00:00Z', got {value!r}")
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)


def parse_non_negative_duration(value: Any) -> timedelta:
    """The grammar has no sign; a timedelta built in Python might."""
    d = parse_duration(value)
    if d < timedelta(0):
        raise ValueError(f"must not be negative, got {format_duration(d)!r}")
    return d


Duration = Annotated[
    timedelta,
    BeforeValidator(parse_non_negative_duration),
    PlainSerializer(format_duration, return_type=str),
]


"""A duration in the grammar of spark_app.contract.durations, shared with the custom resources."""


Timestamp = Annotated[
    datetime,
    BeforeValidator(parse_timestamp),
    PlainSerializer(lambda d: d.isoformat().replace("+00:00", "Z"), return_type=str),
]


class KappaModel(BaseModel):
    """Frozen, camelCase on the wire, and strict about unknown fields (typos must not pass)."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        use_attribute_docstrings=True,
    )
