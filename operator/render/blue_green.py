"""A blueGreen upgrade's applications (``reconcile.blue_green``): green, the new version beside
the running one, and the step application (``python -m spark_app compare|switch|discard``), both
owned by the StreamingJob, each with its own ConfigMap.

Green's JobConfig is the edited spec's, with: its own checkpoint; each sink writing green's
branch; a bootstrap from the sources' history (``archives_of``) from the recorded
``historyFrom``; and ``green`` naming blue's checkpoint, which its driver trails. The step
application runs on the same config (plus the compared window for ``compare``)."""

from __future__ import annotations

from typing import Any

from kappa_operator.models.streaming_job import BootstrapSpec, StreamingJob
from kappa_operator.models.streaming_job_status import UpgradeStatus
from kappa_operator.render.jobconfig import archives_of, streaming_job_config
from kappa_operator.render.spark_application import Owner, config_map, job_launch, spark_application
from spark_app.contract.config import JobConfig, parse_config

DEFAULT_BOOTSTRAP = BootstrapSpec.model_validate({"from": "1970-01-01T00:00:00Z"})
"""A job without spec.bootstrap: green aligns its history under the bootstrap's default drift."""
GREEN_RESTART = {
    "type": "OnFailure",
    "onFailureRetries": 3,
    "onFailureRetryInterval": 10,
    "onSubmissionFailureRetries": 0,
}
"""Green's driver, killed or failed, is run again by the Spark operator from its checkpoint (a
few times, 10 s apart): green's catch-up goes on, the branch exactly once by batch ids. Past
that, or a submission that fails, ends it: the upgrade removes green and blue goes on."""
STEP_RESTART = {"type": "Never"}
"""A failed step application is run again by the operator (``UpgradeStatus.stepAttempts``)."""
ROLE = "kappa.dev/role"
STEP = "kappa.dev/step"


def upgrade_label(job: StreamingJob, up: UpgradeStatus) -> str:
    return f"{job.metadata.namespace}/{job.metadata.name} g{up.generation}"


def green_config(job: StreamingJob, up: UpgradeStatus, compare: tuple[str, str] | None = None) -> JobConfig:
    """Green's JobConfig (``compare``: the step's window, for the ``compare`` step)."""
    assert up.green_checkpoint and up.blue_checkpoint and up.branch and up.history_from
    raw = streaming_job_config(job).model_dump(by_alias=True, exclude_none=True, mode="json")
    raw["checkpoint"] = {"location": up.green_checkpoint}  # no snapshots of a version that may never serve
    for sink in raw["sinks"].values():
        sink["branch"] = up.branch
    drift = (job.spec.bootstrap or DEFAULT_BOOTSTRAP).max_drift
    raw["alignment"] = {**raw.get("alignment", {}), "maxDrift": drift}
    raw["bootstrap"] = {"from": up.history_from, "archives": archives_of(job.spec)}
    green: dict[str, Any] = {
        "blueCheckpoint": up.blue_checkpoint,
        "upgrade": upgrade_label(job, up),
        "minMatchRatio": job.spec.upgrade.min_match_ratio,
    }
    if compare is not None:
        green["compareWindow"] = {"start": compare[0], "end": compare[1]}
    raw["green"] = green
    return parse_config(raw, origin=f"(StreamingJob {job.metadata.namespace}/{job.metadata.name}, green)")


def _objects(
    job: StreamingJob, owner: Owner, cfg: JobConfig, name: str, restart: dict[str, Any], digest: str,
    command: str, labels: dict[str, str],
) -> tuple[dict[str, Any], dict[str, Any]]:  # fmt: skip
    """An application of the upgrade under ``name``, with its own ConfigMap ``<name>-jobconfig``."""
    cm = config_map(owner, cfg, name=f"{name}-jobconfig")
    app = spark_application(
        owner, cfg, job_launch(job, restart), digest, command=command, name=name, labels=labels,
        config_map_name=f"{name}-jobconfig",
    )  # fmt: skip
    return cm, app


def green_objects(
    job: StreamingJob, owner: Owner, up: UpgradeStatus, digest: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Green's ConfigMap and SparkApplication."""
    cfg = green_config(job, up)
    return _objects(job, owner, cfg, owner.green_app_name, GREEN_RESTART, digest, "run", {ROLE: "green"})


def step_objects(
    job: StreamingJob, owner: Owner, up: UpgradeStatus, step: str, digest: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The step application (``compare``, ``switch`` or ``discard``) and its ConfigMap."""
    window = (up.compare_start, up.compare_end) if step == "compare" else None
    assert window is None or (window[0] and window[1])
    cfg = green_config(job, up, window)  # type: ignore[arg-type]
    labels = {ROLE: "step", STEP: step}
    return _objects(job, owner, cfg, owner.step_app_name, STEP_RESTART, digest, step, labels)
