"""Synthetic impressions and playbacks written to Iceberg the way a streaming ingestion job would.

Why this shape: kappa-operator backfills streaming pipelines from Iceberg in *event-time* order, and
the hard part is that Iceberg files are cut by *ingestion* time. A real ingestion job commits every
few minutes whatever arrived in that window, so one commit holds events from many minutes of event
time (late arrivals), and consecutive commits write files whose event-time ranges overlap. The
generator reproduces exactly that, deterministically for a seed, so tests and the demo can check
ordering, watermark loss and attribution joins against known data:

* one pyiceberg ``append`` per table per ``commit_interval`` of ingestion time (one snapshot each);
* files partitioned by ``hour(event_ts)``, so one commit writes one file per touched hour;
* a ``late_fraction`` of events arrives 1 min .. ``max_lateness`` after its event time;
* ``skew`` impressions per playback, ~80 % of playbacks attributable to an earlier impression of the
  same profile and title within ``attribution_window`` (the join the demo pipeline computes).

All timestamps are Iceberg ``timestamp`` (naive, UTC, microseconds): pyiceberg rejects tz-aware
Arrow timestamps and nanosecond precision for such fields, so the Arrow tables here are built in
exactly that form. The public API takes and returns tz-aware UTC ``datetime`` objects.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.catalog import Catalog
from pyiceberg.conversions import from_bytes
from pyiceberg.table import Table
from pyiceberg.types import (
    TimestampType,
)

from spark_app.examples.event_tables import (
    ARROW_TIMESTAMP,
    IMPRESSIONS_ARROW_SCHEMA,
    IMPRESSIONS_SCHEMA,
    METADATA_ARROW,
    PLAYBACKS_ARROW_SCHEMA,
    PLAYBACKS_SCHEMA,
    hour_spec,
)

__all__ = [
    "ATTRIBUTED_FRACTION",
    "IMPRESSIONS_ARROW_SCHEMA",
    "IMPRESSIONS_SCHEMA",
    "LATE_THRESHOLD",
    "PLAYBACKS_ARROW_SCHEMA",
    "PLAYBACKS_SCHEMA",
    "SNAPSHOT_COMMIT_INDEX",
    "Commit",
    "GeneratedStats",
    "GeneratorConfig",
    "create_tables",
    "generate",
    "iter_commits",
    "write_commit",
]


ATTRIBUTED_FRACTION = 0.8


LATE_THRESHOLD = timedelta(seconds=60)


NORMAL_DELAY_MEAN = timedelta(seconds=5)


SNAPSHOT_COMMIT_INDEX = "kappa.generator.commit-index"


SNAPSHOT_INGESTION_END = "kappa.generator.ingestion-end"


_US = timedelta(microseconds=1)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


_DURATION_MIN_S = 30


_DURATION_MAX_S = 7200


_MAX_REJECTION_ROUNDS = 1000


@dataclass(frozen=True)
class GeneratorConfig:
    """What to generate. Defaults give one hour of data in 12 commits with overlapping files.

    Validated on construction so a bad config fails here rather than as a confusing pyiceberg or
    numpy error halfway through writing tables.
    """

    start: datetime  # tz-aware UTC start of event time
    hours: float = 1.0
    impressions_per_hour: int = 4000
    skew: float = 4.0  # impressions per playback
    profiles: int = 200
    titles: int = 300
    commit_interval: timedelta = timedelta(minutes=5)
    late_fraction: float = 0.02
    max_lateness: timedelta = timedelta(minutes=10)  # late events arrive min_lateness .. max_lateness late
    min_lateness: timedelta = LATE_THRESHOLD
    attribution_window: timedelta = timedelta(minutes=30)
    namespace: str = "demo"
    seed: int = 7

    def __post_init__(self) -> None:
        if self.start.tzinfo is None or self.start.utcoffset() is None:
            raise ValueError("start must be timezone-aware (UTC): Iceberg timestamps are stored as UTC")
        if not self.hours > 0:
            raise ValueError(f"hours must be > 0, got {self.hours}")
        if self.n_impressions < 1:
            raise ValueError("impressions_per_hour * hours must yield at least one impression")
        if not self.skew > 0:
            raise ValueError(f"skew must be > 0, got {self.skew}")
        if self.profiles < 1 or self.titles < 1:
            raise ValueError("profiles and titles must be >= 1")
        if self.commit_interval < _US:
            raise ValueError("commit_interval must be at least 1 microsecond")
        if not 0.0 <= self.late_fraction <= 1.0:
            raise ValueError(f"late_fraction must be in [0, 1], got {self.late_fraction}")
        if self.max_lateness < LATE_THRESHOLD:
            raise ValueError(f"max_lateness must be >= {LATE_THRESHOLD} (the late/on-time threshold)")
        if not LATE_THRESHOLD <= self.min_lateness <= self.max_lateness:
            raise ValueError(f"min_lateness must be in [{LATE_THRESHOLD}, max_lateness], got {self.min_lateness}")
        if self.attribution_window < _US:
            raise ValueError("attribution_window must be at least 1 microsecond")
        if not self.namespace:
            raise ValueError("namespace must not be empty")

    @property
    def n_impressions(self) -> int:
        """Total impressions generated: ``round(impressions_per_hour * hours)``."""
        return round(self.impressions_per_hour * self.hours)

    @property
    def n_playbacks(self) -> int:
        """Total playbacks: ``round(n_impressions / skew)`` (exact, so the skew is exact)."""
        return round(self.n_impressions / self.skew)

    @property
    def end(self) -> datetime:
        """Exclusive end of event time (UTC)."""
        return self.start + timedelta(hours=self.hours)

    @property
    def impressions_table(self) -> str:
        return f"{self.namespace}.impressions"

    @property
    def playbacks_table(self) -> str:
        return f"{self.namespace}.playbacks"


@dataclass(frozen=True)
class Commit:
    """Everything ingested in one ``commit_interval``: what one streaming micro-batch commit writes.

    The Arrow tables match the Iceberg schemas exactly (naive microsecond timestamps, non-nullable
    fields) and are sorted by ingestion time, as an ingestion job would have received them.
    """

    index: int  # == __metadata__.commit_id of every row
    ingestion_end: datetime  # tz-aware UTC exclusive end of this commit's ingestion window
    impressions: pa.Table
    playbacks: pa.Table


@dataclass(frozen=True)
class GeneratedStats:
    """Summary of one ``generate`` run, for the demo's output and for tests to check against a scan."""

    impressions: int
    playbacks: int
    commits: int
    first_event: datetime  # tz-aware UTC, min event_ts over both tables
    last_event: datetime  # tz-aware UTC, max event_ts over both tables
    late_events: int  # rows with ingestion_ts - event_ts >= LATE_THRESHOLD, both tables
    # Widest event-time range of a single data file (from Iceberg column stats): how far an
    # event-time-ordered reader must look ahead, i.e. what bounds watermark drift.
    max_file_span_s: float


def _to_us(dt: datetime) -> int:
    return (dt - _EPOCH) // _US


def _from_us(us: int) -> datetime:
    return _EPOCH + timedelta(microseconds=int(us))


def _td_us(td: timedelta) -> int:
    return td // _US


def _ingestion_delays(rng: np.random.Generator, n: int, cfg: GeneratorConfig) -> np.ndarray:
    """Delay (µs) between event and ingestion: mostly seconds, a ``late_fraction`` minutes late."""
    late = rng.random(n) < cfg.late_fraction
    on_time = np.minimum(np.floor(rng.exponential(_td_us(NORMAL_DELAY_MEAN), n)), _td_us(LATE_THRESHOLD) - 1).astype(
        np.int64
    )
    late_delay = rng.integers(_td_us(cfg.min_lateness), _td_us(cfg.max_lateness) + 1, n, dtype=np.int64)
    return np.where(late, late_delay, on_time)


def _attributed_playbacks(
    rng: np.random.Generator,
    n: int,
    imp_ts: np.ndarray,
    total_us: int,
    window_us: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the impressions ``n`` playbacks are attributed to, and their event offsets (µs).

    A playback follows its impression by uniform(0, window); those landing at/after the end of the
    event-time range are dropped and redrawn, vectorised per round, so the playback count (and thus
    the skew) stays exact even when the window is as long as the whole range.
    """
    got_idx: list[np.ndarray] = []
    got_ts: list[np.ndarray] = []
    need = n
    for _ in range(_MAX_REJECTION_ROUNDS):
        if need <= 0:
            break
        k = max(2 * need, 64)
        idx = rng.integers(0, len(imp_ts), k)
        ts = imp_ts[idx] + rng.integers(0, window_us, k, dtype=np.int64)
        keep = ts < total_us
        got_idx.append(idx[keep][:need])
        got_ts.append(ts[keep][:need])
        need -= len(got_idx[-1])
    if need > 0:  # pragma: no cover - needs an absurd window/range ratio
        raise ValueError("could not place attributed playbacks inside the event-time range")
    if not got_idx:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return np.concatenate(got_idx), np.concatenate(got_ts)


@dataclass(frozen=True)
class _Plan:
    """All rows of a run, sorted by (commit, ingestion), plus per-commit row boundaries."""

    impressions: pa.Table
    playbacks: pa.Table
    commit_indexes: np.ndarray  # sorted unique commit indexes with any data
    imp_bounds: np.ndarray  # impressions rows [imp_bounds[i], imp_bounds[i+1]) belong to commit i
    play_bounds: np.ndarray
    late_events: int
    first_event_us: int  # absolute µs since the epoch, over both tables
    last_event_us: int


def _ids(prefix: str, n: int) -> pa.Array:
    numbers = pc.cast(pa.array(np.arange(n, dtype=np.int64)), pa.string())
    return pc.binary_join_element_wise(prefix, numbers, "")


def _metadata_array(ingestion_abs_us: np.ndarray, commit: np.ndarray) -> pa.StructArray:
    return pa.StructArray.from_arrays(
        [pa.array(ingestion_abs_us.view("datetime64[us]"), type=ARROW_TIMESTAMP), pa.array(commit, type=pa.int64())],
        fields=list(METADATA_ARROW),
    )


def _sorted_table(
    schema: pa.Schema,
    columns: dict[str, Any],
    event_us: np.ndarray,
    delay_us: np.ndarray,
    cfg: GeneratorConfig,
) -> tuple[pa.Table, np.ndarray]:
    """Build the Arrow table for one entity, sorted by (commit, ingestion_ts); returns it + commits."""
    start_us = _to_us(cfg.start)
    ingestion = event_us + delay_us  # offsets from start
    commit = ingestion // _td_us(cfg.commit_interval)
    order = np.lexsort((ingestion, commit))
    arrays = {name: pc.take(arr, pa.array(order)) for name, arr in columns.items()}
    arrays["event_ts"] = pa.array((event_us[order] + start_us).view("datetime64[us]"), type=ARROW_TIMESTAMP)
    arrays["__metadata__"] = _metadata_array(ingestion[order] + start_us, commit[order])
    table = pa.Table.from_arrays([arrays[f.name] for f in schema], schema=schema)
    return table, commit[order]


def _plan(cfg: GeneratorConfig) -> _Plan:
    rng = np.random.default_rng(cfg.seed)
    total_us = _td_us(cfg.end - cfg.start)
    n_imp, n_play = cfg.n_impressions, cfg.n_playbacks

    imp_event = rng.integers(0, total_us, n_imp, dtype=np.int64)
    imp_profile = rng.integers(1, cfg.profiles + 1, n_imp, dtype=np.int64)
    imp_title = rng.integers(1, cfg.titles + 1, n_imp, dtype=np.int64)
    imp_delay = _ingestion_delays(rng, n_imp, cfg)

    n_attr = round(n_play * ATTRIBUTED_FRACTION)
    n_org = n_play - n_attr
    window_us = _td_us(cfg.attribution_window)
    attr_idx, attr_ts = _attributed_playbacks(rng, n_attr, imp_event, total_us, window_us)
    # Attributed playbacks come first, so play-0 .. play-(n_attr-1) are the attributed ones.
    play_event = np.concatenate([attr_ts, rng.integers(0, total_us, n_org, dtype=np.int64)])
    play_profile = np.concatenate([imp_profile[attr_idx], rng.integers(1, cfg.profiles + 1, n_org)])
    play_title = np.concatenate([imp_title[attr_idx], rng.integers(1, cfg.titles + 1, n_org)])
    play_duration = rng.integers(_DURATION_MIN_S, _DURATION_MAX_S + 1, n_play, dtype=np.int32)
    play_delay = _ingestion_delays(rng, n_play, cfg)

    impressions, imp_commit = _sorted_table(
        IMPRESSIONS_ARROW_SCHEMA,
        {
            "impression_id": _ids("imp-", n_imp),
            "profile_id": pa.array(imp_profile, pa.int64()),
            "title_id": pa.array(imp_title, pa.int64()),
        },
        imp_event,
        imp_delay,
        cfg,
    )
    playbacks, play_commit = _sorted_table(
        PLAYBACKS_ARROW_SCHEMA,
        {
            "playback_id": _ids("play-", n_play),
            "profile_id": pa.array(play_profile.astype(np.int64), pa.int64()),
            "title_id": pa.array(play_title.astype(np.int64), pa.int64()),
            "duration_s": pa.array(play_duration, pa.int32()),
        },
        play_event,
        play_delay,
        cfg,
    )
    indexes = np.union1d(imp_commit, play_commit)
    edges = np.append(indexes, indexes[-1] + 1) if len(indexes) else indexes
    late = int((imp_delay >= _td_us(LATE_THRESHOLD)).sum() + (play_delay >= _td_us(LATE_THRESHOLD)).sum())
    return _Plan(
        impressions=impressions,
        playbacks=playbacks,
        commit_indexes=indexes,
        imp_bounds=np.searchsorted(imp_commit, edges, side="left"),
        play_bounds=np.searchsorted(play_commit, edges, side="left"),
        late_events=late,
        first_event_us=int(min(imp_event.min(), play_event.min(initial=total_us))) + _to_us(cfg.start),
        last_event_us=int(max(imp_event.max(), play_event.max(initial=0))) + _to_us(cfg.start),
    )


def _commits(cfg: GeneratorConfig, plan: _Plan) -> Iterator[Commit]:
    for i, index in enumerate(plan.commit_indexes):
        ia, ib = int(plan.imp_bounds[i]), int(plan.imp_bounds[i + 1])
        pa_, pb = int(plan.play_bounds[i]), int(plan.play_bounds[i + 1])
        yield Commit(
            index=int(index),
            ingestion_end=cfg.start + cfg.commit_interval * (int(index) + 1),
            impressions=plan.impressions.slice(ia, ib - ia),
            playbacks=plan.playbacks.slice(pa_, pb - pa_),
        )


def iter_commits(cfg: GeneratorConfig) -> Iterator[Commit]:
    """Yield the run's commits in ingestion order, each with the rows ingested in its interval.

    Pure and deterministic for ``cfg.seed`` (numpy ``default_rng``), with no Python loop over rows:
    the whole run is drawn as numpy arrays up front, so the same seed always gives the same tables
    regardless of how many commits a consumer reads. Commits with no rows in either table are
    skipped; the tail after ``cfg.end`` (late arrivals) is included.
    """
    return _commits(cfg, _plan(cfg))


def create_tables(catalog: Catalog, cfg: GeneratorConfig) -> tuple[Table, Table]:
    """Create the namespace and both tables if missing, load them otherwise; returns (imp, play).

    Idempotent so the demo can be re-run against the same catalog (it then appends more commits).
    """
    catalog.create_namespace_if_not_exists(cfg.namespace)
    tables = []
    for identifier, schema in (
        (cfg.impressions_table, IMPRESSIONS_SCHEMA),
        (cfg.playbacks_table, PLAYBACKS_SCHEMA),
    ):
        tables.append(catalog.create_table_if_not_exists(identifier, schema=schema, partition_spec=hour_spec(schema)))
    return tables[0], tables[1]


def write_commit(impressions: Table, playbacks: Table, commit: Commit) -> None:
    """Append one commit: exactly one snapshot per table whose batch is non-empty.

    The two appends are independent Iceberg commits, as with two streaming writers; each snapshot's
    summary records the generator commit index and ingestion window end.
    """
    props = {
        SNAPSHOT_COMMIT_INDEX: str(commit.index),
        SNAPSHOT_INGESTION_END: commit.ingestion_end.isoformat(),
    }
    for table, batch in ((impressions, commit.impressions), (playbacks, commit.playbacks)):
        if batch.num_rows:
            table.append(batch, snapshot_properties=props)


def _max_file_span_s(tables: tuple[Table, ...]) -> float:
    """Widest event_ts range of any current data file, from Iceberg column stats (no data read)."""
    span_us = 0
    for table in tables:
        field_id = table.schema().find_field("event_ts").field_id
        for task in table.scan().plan_files():
            lower = task.file.lower_bounds.get(field_id)
            upper = task.file.upper_bounds.get(field_id)
            if lower is None or upper is None:
                continue
            span_us = max(span_us, from_bytes(TimestampType(), upper) - from_bytes(TimestampType(), lower))
    return span_us / 1e6


def generate(
    catalog: Catalog,
    cfg: GeneratorConfig,
    progress: Callable[[int, int], None] | None = None,
) -> GeneratedStats:
    """Create the tables and write every commit of ``cfg``; ``progress(done, total)`` after each.

    ``max_file_span_s`` covers all data files currently in the tables (including earlier runs);
    the other figures describe the rows written by this run.
    """
    impressions, playbacks = create_tables(catalog, cfg)
    plan = _plan(cfg)
    total = len(plan.commit_indexes)
    n_commits = 0
    for commit in _commits(cfg, plan):
        write_commit(impressions, playbacks, commit)
        n_commits += 1
        if progress is not None:
            progress(n_commits, total)

    return GeneratedStats(
        impressions=plan.impressions.num_rows,
        playbacks=plan.playbacks.num_rows,
        commits=n_commits,
        first_event=_from_us(plan.first_event_us),
        last_event=_from_us(plan.last_event_us),
        late_events=plan.late_events,
        max_file_span_s=_max_file_span_s((impressions, playbacks)),
    )
