"""Where a blue/green upgrade hands over (pure): the contract both halves decide it by.

Blue is the running version, green the new one, built from history by the new code and
trailing blue's input (``docs/design/blue-green.md``). The hand-over rests on two rules:

* **One input seam.** At the switch both versions have read exactly the same input: per sink
  query and per source, the offsets of blue's final durable batch. Green never reads past
  blue's durable position (``spark_app.bluegreen.trail``), and the switch checks both ended there
  (``off_seam``).
* **One event-time boundary.** ``B`` = the smallest (watermark - lookahead) over the sinks and
  both versions' final batches, floored to the second (``boundary``). Every result with a time
  before ``B`` was emitted by both versions from that input and none will be again (later
  input below the watermark is dropped by stateful operators), so main keeps blue's rows
  before ``B`` and takes green's from ``B`` on: each result once, none missing.

The operator decides from these when green has caught up (``caught_up``) and which window of
output it compares (``compare_window``); the switch application computes ``B`` from the
checkpoints. Blue's durable position is its newest batch that Spark logged as done, or that
its sink recorded for commit (``durable_batch``): a batch with offsets and neither may run
again with other input after a restart, so it is not a position.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import Field, model_validator

from spark_app.contract.base import KappaModel
from spark_app.contract.checkpoints.layout import OffsetLogEntry
from spark_app.contract.publish_defaults import DEFAULT_MIN_MATCH_RATIO
from spark_app.contract.storage import REPORT_DIR

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Position:
    """A sink query's input at one batch: the offsets Spark logged for it, per source."""

    batch_id: int
    watermark_ms: int | None
    """``batchWatermarkMs`` the batch ran with: every result below it is final."""
    offsets: Mapping[str, Any]
    """Source (as the offset log names it) -> its end offset, parsed (None: the source had none)."""


@dataclass(frozen=True)
class FinalBatch:
    """One version's last batch of one sink query at the switch, with its pipeline's
    lookahead (how far after the watermark a result may still be emitted)."""

    version: str
    """``blue`` or ``green``: for the messages."""
    sink: str
    position: Position
    lookahead: timedelta = timedelta(0)


class CompareWindow(KappaModel):
    """The event-time window the comparison step reads, decided by the operator
    (``compare_window``) and recorded in the upgrade's status before the step starts."""

    start: datetime
    end: datetime

    @model_validator(mode="after")
    def _ordered(self) -> CompareWindow:
        if self.start >= self.end:
            raise ValueError(f"green.compareWindow: start {self.start} must be before end {self.end}")
        return self


class GreenConfig(KappaModel):
    """A run that is a blue/green upgrade's green: a bootstrapped job whose topics (and live
    tables) it reads no further than the running version (blue) durably has, sink query by sink
    query. The step
    applications (``python -m spark_app compare|switch|discard``) run on the same config: green's
    checkpoint, its sinks' branch, blue's checkpoint."""

    blue_checkpoint: str = Field(min_length=1)
    """Blue's checkpoint base: its query for sink ``s`` checkpoints at ``<blueCheckpoint>/<s>``."""
    upgrade: str = ""
    """The upgrade, as ``<namespace>/<job> g<generation>``: in the switch snapshots' properties."""
    compare_window: CompareWindow | None = None
    """The ``compare`` step's window (set for that step only)."""
    min_match_ratio: float = Field(default=DEFAULT_MIN_MATCH_RATIO, ge=0, le=1)
    """``upgrade.minMatchRatio``: below it the comparison refuses the switch; 0 reports only."""


def trail_rel(sink: str) -> str:
    """Green's trail of ``sink``'s query, under green's checkpoint base, beside its reports."""
    return f"{REPORT_DIR}/trail-{sink}.json"


STEP_REPORTS = {"compare": "compare-report.json", "switch": "switch-report.json", "discard": "discard-report.json"}
"""Each step application's report, in green's ``_kappa/``: one name per step, so the operator
never reads an earlier step's report as this one's."""


def step_report_rel(step: str) -> str:
    return f"{REPORT_DIR}/{STEP_REPORTS[step]}"


def live_trail_rel(sink: str) -> str:
    """Green's trail of ``sink``'s query on its ``icebergLive`` sources: blue's live offsets (a
    list of ``LiveOffset`` dicts), which green's live readers cap their reads at."""
    return f"{REPORT_DIR}/live-trail-{sink}.json"


def trail_file(green_checkpoint: str, sink: str) -> str:
    """Where green's query for ``sink`` reads its cap."""
    return f"{green_checkpoint.rstrip('/')}/{trail_rel(sink)}"


class NoWatermarkError(ValueError):
    """A version's final batch has no watermark: no event-time boundary can be found for it."""


def durable_batch(with_offsets: Iterable[int], committed: Iterable[int], recorded: Iterable[int] = ()) -> int | None:
    """The newest batch whose output is durable: logged as done by Spark (``commits/N``) or
    recorded for commit by the sink (the pending-commit log), and with its offsets logged."""
    logged = set(with_offsets)
    done = [b for b in (*committed, *recorded) if b in logged]
    return max(done, default=None)


def position(batch_id: int, entry: OffsetLogEntry) -> Position:
    """Batch ``batch_id``'s offset log entry as a position."""
    return Position(
        batch_id,
        entry.watermark_ms,
        {name: None if raw is None else json.loads(raw) for name, raw in entry.sources},
    )


KafkaOffsets = dict[str, dict[str, int]]
"""Spark's Kafka offset JSON: topic -> partition (as a string) -> the next offset to read."""


def kafka_offsets(at: Position, topics: Iterable[str] | None = None) -> KafkaOffsets:
    """The Kafka offsets in a position, by topic, whichever source read them (None: every
    topic). A topic two sources read is taken at the lower offset. Other sources' offsets (an
    archive's) are not Kafka's and are left out: a bootstrapped green has them, blue does not."""
    wanted = None if topics is None else set(topics)
    out: KafkaOffsets = {}
    for offsets in at.offsets.values():
        if not isinstance(offsets, Mapping):
            continue
        for topic, partitions in offsets.items():
            if (wanted is not None and topic not in wanted) or not isinstance(partitions, Mapping):
                continue
            if not all(str(p).isdigit() and isinstance(o, int) for p, o in partitions.items()):
                continue  # not a topic's partitions: some other source's nested offset
            for partition, offset in partitions.items():
                have = out.setdefault(topic, {}).get(str(partition))
                out[topic][str(partition)] = int(offset) if have is None else min(have, int(offset))
    return out


LiveKey = tuple[int, int | None]
"""An Iceberg live position, as both versions must agree on it: (snapshot id, splits of it
read; None once the whole snapshot was read)."""


def live_offsets(at: Position) -> list[dict[str, Any]]:
    """The ``icebergLive`` offsets in a position (``contract.offsets.LiveOffset`` dicts), each
    source's. An archive's offsets (``kind: backfill``) are left out: a bootstrapped green has
    them, blue does not."""
    out = []
    for offsets in at.offsets.values():
        if isinstance(offsets, Mapping) and offsets.get("kind") == "live" and offsets.get("snapshot_id") is not None:
            out.append(dict(offsets))
    return out


def live_key(offset: Mapping[str, Any]) -> LiveKey:
    """A live offset as compared at the seam: a snapshot read whole is the same position however
    the reader wrote its split count (a rewrite snapshot is read whole with none)."""
    return int(offset["snapshot_id"]), None if offset["complete"] else int(offset["position"])


def off_seam(blue: Position, green: Position) -> list[str]:
    """Where the two versions' final batches ended at different inputs (empty: at the seam):
    the Kafka topics whose offsets differ, and the Iceberg snapshots one version read to
    another place than the other. Compared by topic and partition, and by snapshot (ids are
    unique to a table's history), not by the sources' places in the offset log: green reads
    each source behind its archive, so its log has more sources. A topic or snapshot only one
    version read is off the seam (green never reached it, or the inputs differ)."""
    a, b = kafka_offsets(blue), kafka_offsets(green)
    la, lb = Counter(map(live_key, live_offsets(blue))), Counter(map(live_key, live_offsets(green)))
    if not a and not b and not la and not lb:
        raise ValueError(
            "neither version's final batch read Kafka or an Iceberg table's appends: the seam is defined on Kafka "
            "offsets and icebergLive snapshot positions (upgrade.mode blueGreen needs kafka or icebergLive sources)"
        )
    off = sorted(t for t in set(a) | set(b) if a.get(t) != b.get(t))
    if la != lb:
        differ = sorted({sid for sid, _ in set(la) ^ set(lb)})
        off += [f"icebergLive snapshot {sid}" for sid in differ] or ["icebergLive offsets"]
    return off


def _instant(ms: int) -> datetime:
    return _EPOCH + timedelta(milliseconds=ms)


def boundary(finals: Iterable[FinalBatch]) -> datetime:
    """``B``: the smallest (watermark - lookahead) over every sink's final batch of both
    versions, floored to the second. Results before it are final in both, so main keeps blue's
    before it and takes green's from it on."""
    candidates = []
    for f in finals:
        if f.position.watermark_ms is None:
            raise NoWatermarkError(
                f"sink query {f.sink} of {f.version} has no event-time watermark at batch {f.position.batch_id} "
                "(its pipeline has no withWatermark), so no boundary can be found for it; "
                "use upgrade.mode last-state or snapshot for this job"
            )
        candidates.append(_instant(f.position.watermark_ms) - f.lookahead)
    if not candidates:
        raise ValueError("no final batch to take a boundary from: the job has no sink query")
    return min(candidates).replace(microsecond=0)


def caught_up(green: datetime, blue: datetime, trigger: timedelta, lateness_added: timedelta) -> bool:
    """Whether green's watermark is close enough behind blue's to compare and switch: within
    two trigger intervals (green reads what blue read one trigger later), plus however much
    more lateness the new version allows (its watermark trails its input by that much more)."""
    return green >= blue - 2 * trigger - max(lateness_added, timedelta(0))


def compare_window(
    watermarks: Mapping[str, tuple[datetime, datetime]],
    lookahead: timedelta,
    overlap: timedelta,
    complete_from: datetime,
) -> tuple[datetime, datetime] | None:
    """The event-time window both versions' output is compared over: it ends at ``C``, the
    smallest over sinks of the lower of blue's and green's watermark less the larger
    lookahead, floored to the minute (every result in it is final in both), and starts
    ``overlap`` earlier, not before green's output is complete (its warm-up ends at
    ``complete_from``). None: no such window yet (green's complete output starts after ``C``).

    ``watermarks``: sink -> (blue's, green's)."""
    if not watermarks:
        raise ValueError("no sink to compare")
    end = min(min(pair) for pair in watermarks.values()) - lookahead
    end = end.replace(second=0, microsecond=0)
    start = max(end - overlap, complete_from)
    return (start, end) if start < end else None
