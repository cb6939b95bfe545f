"""What the runtime hands one Iceberg source (one JSON option, ``spec``).

Spark builds the source in several processes (schema in a worker, the reader in the
source runner, partitions pickled to executors), so everything it needs travels in this
one frozen model instead of process state.
"""

from __future__ import annotations

from datetime import datetime
from itertools import pairwise

from pydantic import Field

from spark_app.contract.base import KappaModel
from spark_app.contract.config import AlignmentConfig, CoordinatorConfig, Window
from spark_app.contract.sources import IcebergBackfillSource, IcebergLiveSource


def micros(dt: datetime) -> int:
    return int(dt.timestamp() * 1_000_000)


class SourceSpec(KappaModel):
    name: str
    member: str
    """Member id in the alignment group (`<job>/<source>`)."""
    source: IcebergLiveSource | IcebergBackfillSource = Field(discriminator="kind")
    catalog: dict[str, str]
    ordering_column: str
    window: Window | None = None
    alignment: AlignmentConfig = AlignmentConfig()
    group: str = ""
    members: tuple[str, ...] = ()
    watermark_file: str | None = None
    """The alignment group's watermarks when no coordinator holds them (``alignment.local``);
    the read ledger and the round records are kept beside it. Not Spark's state files."""
    rounds_file: str | None = None
    """The admission-round record of this source's query (``spark_app.alignment.round_record``)."""
    batch_row_budget: int = 0
    """``alignment.batchRowBudget``, or 0 (one round per batch) when reads are rate-capped."""
    coordinator: CoordinatorConfig | None = None
    """The HTTP coordinator of the group; None: the local state file (one driver)."""
    extended_to: tuple[int, ...] = ()
    """Drain extensions (µs): reading went on past ``window.read_end`` to each of these in turn,
    because results starting in the window were still open (``apps.window_end.next_read``)."""
    trace_path: str | None = None
    parallelism: int = 2
    batch_rows: int = 1 << 17

    def read_segments(self) -> list[tuple[int, int]]:
        """[lo, hi) in µs: the window read (warm-up to end + drain), then each extension."""
        assert self.window is not None, "a backfill source needs the window"
        ends = [micros(self.window.read_end), *self.extended_to]
        return [(micros(self.window.read_start), ends[0]), *pairwise(ends)]

    @property
    def read_until(self) -> int | None:
        """Where the last segment ends (µs), None without a window."""
        return None if self.window is None else self.read_segments()[-1][1]

    @property
    def catalog_name(self) -> str:
        return self.source.catalog
