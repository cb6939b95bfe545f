"""Errors of checkpoint management: each message says what was found and what to do."""

from __future__ import annotations

from spark_app.contract.errors import CheckpointError

__all__ = ["CheckpointError"]


class IncompleteCheckpointError(CheckpointError):
    """The live checkpoint lacks a file that batch N needs (purged by Spark, or never written)."""


class TimelineConflictError(CheckpointError):
    """A snapshot of this batch exists but was taken from another timeline (before a rewind)."""


class DestinationNotEmptyError(CheckpointError):
    """A restore destination holds files that are not this snapshot's: restore never overwrites."""


class SnapshotDamagedError(CheckpointError):
    """A manifest references pool files that are missing or have another size."""


class NoRestorablePointError(CheckpointError):
    """No externalized snapshot satisfies the requested rewind target."""
