"""Solution 1: each fact joined with the dimension's version valid at the fact's event time.

The same call live and in a backfill. Live, a row's event time is recent, so it falls in the
newest (open) version: the table as it is. In a backfill, a row from last Tuesday falls in
last Tuesday's version, not today's, which is what the live job used when it processed the
row. The versions (``history.Versions``) are a static, persisted frame; the join is a
stream-static broadcast join with a range condition, so it holds no state and emits at once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from spark_app.contract.errors import ConfigError
from spark_app.lookups.history import VALID_FROM, VALID_TO, Versions

_DIM = "_kappa_dim_"


def key_pairs(key: str | Sequence[str] | Mapping[str, str], dimension_key: Sequence[str]) -> list[tuple[str, str]]:
    """(fact column, dimension column) pairs. A name or list names columns the two sides share;
    a mapping is ``{fact column: dimension column}``. Pure."""
    if isinstance(key, str):
        pairs = [(key, key)]
    elif isinstance(key, Mapping):
        pairs = list(key.items())
    else:
        pairs = [(k, k) for k in key]
    if sorted(d for _, d in pairs) != sorted(dimension_key):
        raise ConfigError(
            f"lookup key {[d for _, d in pairs]} is not the dimension's key {list(dimension_key)}: a fact must match "
            "one version at a time, so join on the whole key"
        )
    return pairs


def added_columns(
    fact_columns: Sequence[str], dimension_columns: Sequence[str], keys: Sequence[str], wanted: Sequence[str] | None
) -> list[str]:
    """The dimension columns a lookup adds: ``wanted`` (default: all but the key); refused when one
    is already a fact column, since the result would have two columns of one name. Pure."""
    chosen = [c for c in dimension_columns if c not in keys] if wanted is None else list(wanted)
    unknown = [c for c in chosen if c not in dimension_columns]
    if unknown:
        raise ConfigError(f"the dimension has no column(s) {unknown}; it has {list(dimension_columns)}")
    clash = [c for c in chosen if c in fact_columns]
    if clash:
        raise ConfigError(f"column(s) {clash} are in the facts too: rename them, or pick others with columns=")
    return chosen


def as_of(
    facts: DataFrame,
    versions: Versions,
    *,
    key: str | Sequence[str] | Mapping[str, str],
    event_time: str,
    columns: Sequence[str] | None = None,
    how: str = "left",
) -> DataFrame:
    """``facts`` with the ``columns`` of the dimension version valid at each row's ``event_time``
    (``valid_from <= event_time < valid_to``, an open ``valid_to`` being "until now").

    ``how="left"`` keeps facts without a version (before the history, or an unknown key) with
    nulls; ``"inner"`` drops them. Works on a streaming ``facts`` (stream-static join: no state,
    no watermark needed) and on a static one."""
    if how not in ("left", "inner"):
        raise ConfigError(f"how={how!r}: a lookup is 'left' (keep every fact) or 'inner'")
    pairs = key_pairs(key, versions.key)
    added = added_columns(facts.columns, versions.columns, [d for _, d in pairs], columns)
    needed = [*dict.fromkeys([d for _, d in pairs] + added)]
    dim = versions.frame.select(
        *[F.col(c).alias(_DIM + c) for c in needed],
        F.col(VALID_FROM).alias(_DIM + VALID_FROM),
        F.col(VALID_TO).alias(_DIM + VALID_TO),
    )
    condition = _valid_at(F.col(event_time))
    for fact_col, dim_col in pairs:
        condition = condition & (facts[fact_col] == F.col(_DIM + dim_col))
    joined = facts.join(F.broadcast(dim), condition, how)
    return joined.select(*[facts[c] for c in facts.columns], *[F.col(_DIM + c).alias(c) for c in added])


def _valid_at(t: Column) -> Column:
    start, end = F.col(_DIM + VALID_FROM), F.col(_DIM + VALID_TO)
    return (start <= t) & (end.isNull() | (t < end))


def overlaps(versions: Versions) -> DataFrame:
    """Versions of a key that overlap the next one (a fact in the overlap would match both and be
    duplicated): empty for a well-formed history. A Spark job runs when it is counted."""
    by_key = Window.partitionBy(*versions.key).orderBy(VALID_FROM)
    prev_to = F.lag(F.coalesce(F.col(VALID_TO), F.lit("9999-12-31").cast("timestamp"))).over(by_key)
    return versions.frame.withColumn("_prev_to", prev_to).where(F.col("_prev_to") > F.col(VALID_FROM))


def checked(versions: Versions) -> Versions:
    """``versions``, refused when two versions of a key overlap. Counting reads the history once,
    which also fills the persisted frame before the first micro-batch."""
    bad = overlaps(versions)
    n = bad.count()
    if n:
        sample = [tuple(r) for r in bad.select(*versions.key, VALID_FROM).limit(3).collect()]
        raise ConfigError(
            f"{n} version(s) of the dimension overlap the previous version of their key, e.g. (key, valid_from) "
            f"{sample}: a fact in an overlap would be joined twice; fix the validity intervals (or the duplicate "
            "keys of the table)"
        )
    return versions
