"""Solution 2: the dimension's changes as a stream, joined with the facts in event time.

The dimension is a source like the facts: an append-only change log (one row per new version
of a key, with the time it takes effect), read live from its appends and, in a backfill, from
its Iceberg history in event-time order, aligned with the facts by the same coordinator. Both
streams meet in one stateful operator keyed by the lookup key
(``applyInPandasWithState``). Per key the state holds the versions that can still matter and
the facts waiting for their version to be known:

- a fact at time ``t`` waits until the watermark passes ``t``: from then on no change at or
  before ``t`` can arrive (it would be late and dropped), so the version valid at ``t`` is
  final; it is emitted with it.
- versions older than the last one at or before the watermark are dropped: no fact that can
  still arrive is older than the watermark.

The watermark is one, on both streams together (their union): a dimension that does not change
for days does not hold the facts back. The price: a change that arrives later than the
watermark delay is dropped, and the facts it should have changed keep the version before it
(docs/lookups.md). Payloads cross into Python as JSON (microsecond timestamps), so any column
types survive, 64-bit ids included.
"""

from __future__ import annotations

import bisect
import pickle
from collections.abc import Iterator, Sequence
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as st
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

from spark_app.contract.errors import ConfigError
from spark_app.lookups.as_of import added_columns

_T = "_kappa_t"
_KIND = "_kappa_kind"
_PAYLOAD = "_kappa_payload"
_FACT = "_kappa_fact"
_DIM = "_kappa_dim"
CHANGE, FACT = 0, 1
JSON_OPTIONS = {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"}
"""Microseconds: Spark's default JSON timestamp keeps milliseconds only."""


class KeyState:
    """One key's versions (time µs, payload; sorted, later arrival last among equal times) and
    waiting facts (time µs, payload). Pure: the operator below only moves it in and out of
    Spark's state."""

    def __init__(self, versions: list[tuple[int, str]] | None = None, facts: list[tuple[int, str]] | None = None):
        self.versions = versions or []
        self.facts = facts or []

    def add_change(self, t: int, payload: str) -> None:
        """A new version from ``t``; among versions of one time the last to arrive wins."""
        times = [v[0] for v in self.versions]
        self.versions.insert(bisect.bisect_right(times, t), (t, payload))

    def add_fact(self, t: int, payload: str) -> None:
        self.facts.append((t, payload))

    def version_at(self, t: int) -> str | None:
        """The payload of the version valid at ``t`` (the last one from at or before ``t``)."""
        i = bisect.bisect_right([v[0] for v in self.versions], t)
        return self.versions[i - 1][1] if i else None

    def release(self, watermark: int) -> list[tuple[str, str | None]]:
        """The facts at or before ``watermark`` with their versions, removed from the state, and
        the versions no later fact can use dropped (all but the last one at or before it)."""
        ready = sorted((f for f in self.facts if f[0] <= watermark), key=lambda f: f[0])
        self.facts = [f for f in self.facts if f[0] > watermark]
        out = [(payload, self.version_at(t)) for t, payload in ready]
        i = bisect.bisect_right([v[0] for v in self.versions], watermark)
        if i > 1:
            self.versions = self.versions[i - 1 :]
        return out

    def next_timeout_ms(self) -> int | None:
        """When to be called again with no new rows: once the watermark passes the oldest
        waiting fact (Spark times out when the watermark exceeds this, in ms)."""
        return min(f[0] for f in self.facts) // 1000 if self.facts else None

    def dump(self) -> bytes:
        return pickle.dumps((self.versions, self.facts))

    @classmethod
    def load(cls, blob: bytes) -> KeyState:
        versions, facts = pickle.loads(blob)
        return cls(versions, facts)


def _micros(ts: Any) -> int:
    return int(pd.Timestamp(ts).value // 1000)


def _step(key: tuple[Any, ...], batches: Iterator[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
    ks = KeyState.load(state.get[0]) if state.exists else KeyState()
    if not state.hasTimedOut:
        for pdf in batches:
            for t, kind, payload in zip(pdf[_T], pdf[_KIND], pdf[_PAYLOAD], strict=True):
                if int(kind) == CHANGE:
                    ks.add_change(_micros(t), payload)
                else:
                    ks.add_fact(_micros(t), payload)
    watermark = state.getCurrentWatermarkMs()
    out = ks.release(watermark * 1000) if watermark > 0 else []
    state.update((ks.dump(),))
    timeout = ks.next_timeout_ms()
    if timeout is not None:
        state.setTimeoutTimestamp(max(timeout, watermark, 1))
    if out:
        yield pd.DataFrame({_FACT: [f for f, _ in out], _DIM: [d for _, d in out]})


def join_changes(
    facts: DataFrame,
    changes: DataFrame,
    *,
    key: str | Sequence[str],
    event_time: str,
    change_time: str,
    lateness: str,
    columns: Sequence[str] | None = None,
) -> DataFrame:
    """``facts`` with the ``columns`` of the version of ``changes`` valid at each fact's
    ``event_time``: the last change of the same key whose ``change_time`` is at or before it
    (nulls when there is none). Both inputs streaming, without a watermark of their own: this
    sets one, ``lateness``, on the two together. A fact is emitted once the watermark passes
    its time, so live output lags by ``lateness``."""
    keys = [key] if isinstance(key, str) else list(key)
    missing = [c for c in keys if c not in facts.columns or c not in changes.columns]
    if missing:
        raise ConfigError(f"join_changes: key column(s) {missing} must be in both the facts and the changes")
    added = added_columns(facts.columns, changes.columns, [*keys, change_time], columns)
    fact_schema = facts.schema
    dim_schema = st.StructType([changes.schema[c] for c in added])

    def tagged(df: DataFrame, t: str, kind: int, payload: list[str]) -> DataFrame:
        body = F.to_json(F.struct(*[F.col(c) for c in payload]), JSON_OPTIONS)
        return df.select(*keys, F.col(t).alias(_T), F.lit(kind).alias(_KIND), body.alias(_PAYLOAD))

    both = tagged(changes, change_time, CHANGE, added).unionByName(tagged(facts, event_time, FACT, facts.columns))
    out_schema = st.StructType([st.StructField(_FACT, st.StringType()), st.StructField(_DIM, st.StringType())])
    joined = (
        both.withWatermark(_T, lateness)
        .groupBy(*keys)
        .applyInPandasWithState(
            _step,
            out_schema,
            st.StructType([st.StructField("state", st.BinaryType())]),
            "append",
            GroupStateTimeout.EventTimeTimeout,
        )
    )
    parsed = joined.select(
        F.from_json(_FACT, fact_schema, JSON_OPTIONS).alias(_FACT),
        F.from_json(_DIM, dim_schema, JSON_OPTIONS).alias(_DIM),
    )
    return parsed.select(
        *[F.col(f"{_FACT}.{c}").alias(c) for c in facts.columns], *[F.col(f"{_DIM}.{c}").alias(c) for c in added]
    )
