"""The reports the Spark applications leave for the operator and for people, one module each,
all in ``<checkpoint>/_kappa/`` (``storage.REPORT_DIR``) unless a spec names another place:

- ``plan.py``: ``plan-report.json``, what ``kappa plan`` / the plan application found;
- ``progress.py``: ``progress-<sink>.json``, a running query's progress, for status and gauges;
- ``run.py``: ``run-report.json``, a finished backfill's run and its batch costs (the ETAs);
- ``publish.py``: ``publish-report.json``, a publish's validation and what it committed;
- ``restore.py``: ``restore-report.json``, a Rewind's restore and what each sink's reset undid.

The operator reads them (metadata only, never a row); the applications write them. Each is a
frozen pydantic model that imports neither Spark nor pyiceberg."""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel

from spark_app.contract.config import JobConfig
from spark_app.contract.storage import REPORT_DIR, Location, open_location

Report = TypeVar("Report", bound=BaseModel)


def located(cfg: JobConfig, configured: str | None, default_name: str) -> tuple[Location, str]:
    """Where an application's report goes: ``configured``, else next to ``cfg``'s checkpoint."""
    if configured is None:
        return open_location(f"{cfg.checkpoint.location.rstrip('/')}/{REPORT_DIR}"), default_name
    root, _, name = configured.rstrip("/").rpartition("/")
    return open_location(root), name


def read_located(model: type[Report], where: tuple[Location, str]) -> Report | None:
    """The report at ``where`` (``located``) as ``model``; None: its run has not finished yet
    (each report is written once, whole, at its run's end)."""
    loc, name = where
    if loc.stat(name) is None:
        return None
    return model.model_validate_json(loc.read_bytes(name))
