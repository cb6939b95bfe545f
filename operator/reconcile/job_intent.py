"""What a decision on a StreamingJob asks for (``JobIntent``): the objects to create, apply or
delete, the status and Events; the handler carries it out, intent recorded first. Shared by the
decision (``streaming_job``) and its steps (``upgrades``, ``initial_snapshot``, ``node_drain``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kappa_operator.reconcile.events import Event


@dataclass(frozen=True)
class JobIntent:
    config_map: dict[str, Any] | None = None
    """Apply (create or replace) this ConfigMap."""
    create_app: dict[str, Any] | None = None
    """Create this SparkApplication."""
    delete_app: bool = False
    """Delete the current SparkApplication (suspend, or a restart after a spec change)."""
    status: dict[str, Any] = field(default_factory=dict)
    events: tuple[Event, ...] = ()
    control_map: dict[str, Any] | None = None
    """Apply the job's control ConfigMap (its open snapshot requests)."""
    move_checkpoint: str | None = None
    """Point the job at this checkpoint location (its annotation): a stateless upgrade."""
    create_rewind: dict[str, Any] | None = None
    """Create this Rewind (a rollback to the upgrade's snapshot)."""
    restore: tuple[dict[str, Any], dict[str, Any]] | None = None
    """Apply this ConfigMap and create this restore application (``spec.initialSnapshot``)."""
    delete_restore: bool = False
    """Delete the restore application (it restored the initial snapshot)."""
    disruption_budget: dict[str, Any] | None = None
    """Create this PodDisruptionBudget of the driver, if absent (``reconcile.node_drain``)."""
    green: tuple[dict[str, Any], dict[str, Any]] | None = None
    """Apply this ConfigMap and create this application: a blueGreen upgrade's green."""
    delete_green: bool = False
    """Delete the blueGreen upgrade's green application."""
    step_app: tuple[dict[str, Any], dict[str, Any]] | None = None
    """Apply this ConfigMap and create this application: a blueGreen upgrade's step."""
    delete_step: bool = False
    """Delete the blueGreen upgrade's step application."""
    delete_maps: tuple[str, ...] = ()
    """Delete these ConfigMaps of the job (a finished blueGreen upgrade's)."""


ENDED_LIVE = ("FAILED", "SUBMISSION_FAILED", "COMPLETED")
"""States after which a live application runs no more (rendered with restartPolicy Never: the
operator restarts it, with backoff)."""


StatusOf = Callable[[str, bool, str, str, "str | None"], dict[str, Any]]
