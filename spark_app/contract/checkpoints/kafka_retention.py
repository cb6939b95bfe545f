"""Whether a checkpoint can still resume from Kafka: the offsets it stores against what the
topics still retain (pure; the edges read the offset log and ask the broker).

A query restored at batch N resumes reading each partition at the offset ``offsets/N`` stores
(the end of batch N). When retention has deleted the segment holding it, Spark's Kafka source
either fails the query (``failOnDataLoss``, the default) or skips to the earliest retained
record, silently losing the records between: a Rewind must find this out before it stops
anything, and say which partitions lost which offsets and what to do instead (a Backfill,
which reads the window from the topic's Iceberg archive).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from spark_app.contract.checkpoints.layout import OffsetLogEntry

Offsets = dict[str, dict[int, int]]
"""topic -> partition -> offset."""


@dataclass(frozen=True)
class Loss:
    """Records of ``topic``/``partition`` the checkpoint would read first and the topic no
    longer has: ``[resume_at, earliest)``."""

    topic: str
    partition: int
    resume_at: int
    earliest: int | None
    """None: the cluster no longer has the partition (its topic was deleted)."""

    @property
    def records(self) -> int | None:
        return None if self.earliest is None else self.earliest - self.resume_at

    def describe(self) -> str:
        if self.earliest is None:
            return f"{self.topic}[{self.partition}] from offset {self.resume_at} (the partition no longer exists)"
        return f"{self.topic}[{self.partition}] offsets {self.resume_at}..{self.earliest - 1}"


def kafka_offsets(entry: OffsetLogEntry, topics: Iterable[str] = (), patterns: Iterable[str] = ()) -> Offsets:
    """The Kafka sources' offsets in an offset log entry: each line of the form Spark's Kafka
    source writes (``{"topic": {"0": 42, ...}}``) whose topics the job reads (by name or by
    one of its patterns). Other sources' lines are left alone."""
    names, regexes = set(topics), [re.compile(p) for p in patterns]
    out: Offsets = {}
    for _, raw in entry.sources:
        parsed = _kafka_shape(raw)
        if parsed is None:
            continue
        for topic, partitions in parsed.items():
            if topic in names or any(r.fullmatch(topic) for r in regexes):
                out.setdefault(topic, {}).update(partitions)
    return out


def _kafka_shape(raw: str | None) -> Offsets | None:
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(value, dict) or not value:
        return None
    out: Offsets = {}
    for topic, partitions in value.items():
        if not isinstance(partitions, dict) or not partitions:
            return None
        if not all(p.lstrip("-").isdigit() and isinstance(o, int) for p, o in partitions.items()):
            return None
        out[topic] = {int(p): int(o) for p, o in partitions.items()}
    return out


def losses(stored: Offsets, earliest: Mapping[tuple[str, int], int]) -> list[Loss]:
    """Every partition whose stored offset is below the earliest the topic retains. Negative
    stored offsets are Kafka's "earliest"/"latest" markers (a partition the query had not read
    yet): nothing can be lost there. A partition the broker no longer knows is all lost."""
    out = []
    for topic, partitions in sorted(stored.items()):
        for partition, offset in sorted(partitions.items()):
            if offset < 0:
                continue
            first = earliest.get((topic, partition))
            if first is None or offset < first:
                out.append(Loss(topic, partition, offset, first))
    return out


def refusal(lost: list[Loss], batch_id: int, archives: Mapping[str, str]) -> str:
    """What a Rewind says when it refuses: the partitions and offsets gone, and the fix."""
    gone = "; ".join(loss.describe() for loss in lost[:10]) + (f"; and {len(lost) - 10} more" if len(lost) > 10 else "")
    counted = [loss.records for loss in lost if loss.records is not None]
    total = f"{sum(counted)} records" + (
        ", and every record of the partitions gone" if len(counted) < len(lost) else ""
    )
    where = ", ".join(f"{topic} -> {table}" for topic, table in sorted(archives.items())) or "its history tables"
    return (
        f"restoring batch {batch_id} would resume Kafka at offsets retention has deleted ({total}): {gone}. "
        f"Nothing was stopped. Backfill the window from the archive instead ({where}): a Backfill of this job "
        "reads each source's history table"
    )


def read_none_of(stored: Offsets, starts: Mapping[tuple[str, int], int]) -> bool:
    """Whether a checkpoint that stores ``stored`` had read none of the records at or after
    ``starts`` (per partition): its next offset is at most the start. A partition it had not
    read yet (absent, or a negative marker) read none."""
    for (topic, partition), start in starts.items():
        offset = stored.get(topic, {}).get(partition)
        if offset is not None and offset > start:
            return False
    return True
