"""Where a topic's archive ends and the topic takes over (pure).

The archive job writes every record of the topic once, with its partition and offset
(``__metadata__``), so the first record the archive does not have is, per partition, the
newest archived offset plus one. A partition the archive never saw (created after the archive
snapshot, or empty until then) starts at its earliest retained record: nothing of it was read
from the archive, so nothing of it may be skipped.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from spark_app.contract.reports.bootstrap import EARLIEST, Offsets

__all__ = ["EARLIEST", "Offsets", "describe", "starting_offsets", "switch_offsets"]


def switch_offsets(archived: Mapping[tuple[str, int], int], partitions: Iterable[tuple[str, int]]) -> Offsets:
    """The first offset of each partition the job reads from Kafka: after the newest archived
    one (``archived``: (topic, partition) -> newest offset), else the earliest retained.

    ``partitions`` are those the cluster has; an archived partition it no longer has (its topic
    deleted and created again) is refused: its offsets started over and no seam can be found."""
    present = set(partitions)
    gone = sorted(set(archived) - present)
    if gone:
        listed = ", ".join(f"{t}[{p}]" for t, p in gone)
        raise ValueError(
            f"the archive holds records of {listed}, which the Kafka cluster no longer has: the topic was deleted "
            "(or lost partitions), so where the archive ends cannot be found in it; bootstrap without those topics"
        )
    out: Offsets = {}
    for topic, partition in sorted(present):
        newest = archived.get((topic, partition))
        out.setdefault(topic, {})[partition] = EARLIEST if newest is None else newest + 1
    return out


def starting_offsets(offsets: Offsets) -> str:
    """The offsets as Spark's Kafka source's ``startingOffsets`` JSON (every partition named:
    Spark refuses specific offsets that leave one out)."""
    return json.dumps({t: {str(p): o for p, o in sorted(parts.items())} for t, parts in sorted(offsets.items())})


def describe(offsets: Offsets) -> str:
    """``topic[0]@42, topic[1]@earliest``: for logs and Events."""
    flat = [(t, p, o) for t, parts in sorted(offsets.items()) for p, o in sorted(parts.items())]
    return ", ".join(f"{t}[{p}]@{'earliest' if o == EARLIEST else o}" for t, p, o in flat)
