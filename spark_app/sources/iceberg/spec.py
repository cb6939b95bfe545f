"""What the runtime hands one Iceberg source (one JSON option, ``spec``).

Spark builds the source in several processes (schema in a worker, the reader in the
source runner, partitions pickled to executors), so everything it needs travels in this
one frozen model instead of process state.
"""

from __future__ import annotations

from pydantic import Field

from spark_app.config import (
    AlignmentConfig,
    CoordinatorConfig,
    IcebergBackfillSource,
    IcebergLiveSource,
    KappaModel,
    Window,
)


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
    state_file: str | None = None
    rounds_file: str | None = None
    """The admission-round record of this source's query (``spark_app.alignment.rounds``)."""
    batch_row_budget: int = 0
    """``alignment.batchRowBudget``, or 0 (one round per batch) when reads are rate-capped."""
    coordinator: CoordinatorConfig | None = None
    """The HTTP coordinator of the group; None: the local state file (one driver)."""
    trace_path: str | None = None
    parallelism: int = 2
    batch_rows: int = 1 << 17

    @property
    def catalog_name(self) -> str:
        return self.source.catalog
