"""kopf handlers: thin. Observe (the resource, its SparkApplication, its alignment group),
decide (``kappa_operator.reconcile``, pure), act (``Cluster``, ``Groups``, publish), record
status and events.

Run with ``kappa operator``. Importing this package registers every handler with kopf, and every
periodic look (``followers``) but the progress look, whose interval is the operator's setting
(``progress.follow_progress_every``)."""

from kappa_operator.handlers import (
    applications,
    backfill,
    checkpoints,
    followers,
    nodes,
    progress,
    rewind,
    streaming_job,
)
from kappa_operator.handlers.context import configure

__all__ = [
    "applications",
    "backfill",
    "checkpoints",
    "configure",
    "followers",
    "nodes",
    "progress",
    "rewind",
    "streaming_job",
]
