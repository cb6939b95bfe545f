"""How a Backfill ends (pure): on the publish report its driver left, or, where it left none of
this run, through a separate publish application; Published, refused (ValidationFailed) or
failed (PublishFailed)."""

from __future__ import annotations

import json
from typing import Any

from kappa_operator.coordinator.messages import GroupSpec
from kappa_operator.models.backfill import Backfill, PublishedTable
from kappa_operator.models.common import instant
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.reconcile.backfill.intent import (
    NONCE,
    PUBLISH,
    SAVED_JOB,
    BackfillIntent,
    StatusAt,
    nonce_of,
    owner_of,
    saved_job,
    submitted_nonce,
)
from kappa_operator.reconcile.events import Event
from kappa_operator.reconcile.phases import ENDED, app_message, app_state
from kappa_operator.render.jobconfig import backfill_branch, config_hash
from kappa_operator.render.spark_application import (
    BACKFILL_RESTART,
    config_map,
    job_launch,
    spark_application,
)
from spark_app.contract.config import JobConfig
from spark_app.contract.reports.publish import PublishReport


def publish_settings(cfg: JobConfig) -> str:
    """A backfill config's publish settings as its application's ``PUBLISH`` annotation."""
    assert cfg.publish is not None
    return json.dumps(cfg.publish.model_dump(by_alias=True, exclude_none=True, mode="json"), sort_keys=True)


def driver_publish(app: dict[str, Any]) -> str | None:
    """The publish settings ``app``'s driver runs with (None: it does not publish)."""
    found = ((app.get("metadata") or {}).get("annotations") or {}).get(PUBLISH)
    return None if found is None else str(found)


def done(bf: Backfill, app: dict[str, Any] | None) -> bool:
    """Nothing left to decide: Succeeded, or Failed for its current restartNonce with its
    application gone or its publish failed (a new restartNonce runs a failed one again)."""
    phase_now = bf.status.phase if bf.status else None
    same_nonce = submitted_nonce(bf) == bf.spec.restart_nonce
    return phase_now == "Succeeded" or (phase_now == "Failed" and same_nonce and (app is None or publish_failed(bf)))


def wants_publish_report(bf: Backfill, app: dict[str, Any] | None, publish_app: dict[str, Any] | None) -> bool:
    """Whether ``decide_backfill`` needs the publish report (the handler reads it, a KB next to
    the checkpoint; never otherwise): not done, and either the separate publish application of
    this restartNonce ended, or, none running, the backfill's own application of this
    restartNonce completed with publish asked (now, or by the settings its driver ran with)."""
    if done(bf, app):
        return False
    nonce = str(bf.spec.restart_nonce)
    if publish_app is not None and nonce_of(publish_app) == nonce:
        return app_state(publish_app) in ENDED
    if app is None or nonce_of(app) != nonce or app_state(app) != "COMPLETED":
        return False
    return bf.spec.publish.enabled or driver_publish(app) is not None


def of_this_run(bf: Backfill, report: PublishReport) -> bool:
    """Whether ``report`` was written after the backfill's current application was submitted
    (``status.startedAt``, recorded at each submission): by its driver or by a publish
    application after it, not by an earlier attempt. A driver that publishes clears the report
    when it starts, but one from an image before that neither clears nor writes it and would
    find an earlier attempt's report (the publish application's, before a restartNonce bump).
    A driver clock far behind the operator's only costs a publish application that finds main
    published already (it commits nothing and reports what was done)."""
    started = bf.status.started_at if bf.status is not None else None
    return started is None or report.started_at >= instant(started)


PUBLISH_FAILURES = ("ValidationFailed", "PublishFailed")


def publish_failed(bf: Backfill) -> bool:
    """Failed in its publish (refused, or the publish application failed): kept until a new
    restartNonce, never published again by an event or an operator restart."""
    conds = bf.status.conditions if bf.status else []
    return any(c.type == "Failed" and c.status == "True" and c.reason in PUBLISH_FAILURES for c in conds)


def publishing(
    bf: Backfill,
    job: StreamingJob,
    cfg: JobConfig,
    status: StatusAt,
    apps: tuple[dict[str, Any], dict[str, Any] | None],
    report: PublishReport | None,
    group: GroupSpec | None,
    extra: dict[str, Any],
) -> BackfillIntent:
    """The query completed (``apps``: its application and the separate publish application,
    if any): end on the publish report its driver left, when the driver ran with the publish
    settings asked now. Otherwise (no report of this run, ``of_this_run``: an image from before
    publish ran in the driver, or a lost report; or spec.publish changed since submission, as it
    may until the run completes) run the separate publish application with the settings asked
    now, follow it, and end on its report. spec.publish disabled since submission cannot stop
    a driver from publishing: what it published is said."""
    app, publish_app = apps
    owner = owner_of(bf)
    nonce = str(bf.spec.restart_nonce)
    branch = backfill_branch(bf)
    asked = None if cfg.publish is None else publish_settings(cfg)
    ran_with = driver_publish(app)
    this_runs = report if report is not None and of_this_run(bf, report) else None
    # the driver's publish is the one asked for, or, publish disabled since, it changed main anyway
    driver_did = this_runs is not None and (ran_with == asked or (asked is None and this_runs.state == "Published"))
    if publish_app is None and this_runs is not None and driver_did:
        cleared = {**extra, "publishApplicationName": None, "publishApplicationState": None}
        return ended_on(bf, this_runs, group, status, cleared, f"SparkApplication {owner.app_name}")
    if publish_app is None and asked is None:  # disabled since submission; its driver published nothing
        return completed(bf, status, group, extra)
    extra = {**extra, "publishApplicationName": owner.publish_app_name}
    if publish_app is not None and nonce_of(publish_app) != nonce:  # an earlier attempt's
        msg = f"restartNonce {nonce_of(publish_app)} -> {nonce}: publishing again"
        return BackfillIntent(delete_publish_app=True, status=status("Publishing", "Publishing", msg, **extra))
    if publish_app is None:
        launch = job_launch(job, BACKFILL_RESTART, bf.spec.image, None, bf.spec.driver, bf.spec.executor)
        created = spark_application(owner, cfg, launch, config_hash(cfg), command="publish")
        created["metadata"]["annotations"][NONCE] = nonce
        why = (
            "its publish settings changed since it was submitted"
            if ran_with is not None and ran_with != asked
            else "it left no publish report of this run (an image from before publish ran in the backfill's driver, "
            "or the report was lost)"
        )
        msg = (
            f"completed, but {why}; validating {branch} against main and publishing the window in a separate "
            f"SparkApplication {owner.publish_app_name}"
        )
        return BackfillIntent(
            config_map=config_map(owner, cfg, {SAVED_JOB: saved_job(job)}),  # it publishes as asked now
            create_publish_app=created,
            status=status("Publishing", "Publishing", msg, publishApplicationState="", **extra),
            events=(Event("Normal", "Publishing", msg),)
            if bf.status is None or bf.status.phase != "Publishing"
            else (),
        )
    state = app_state(publish_app) or ""
    extra["publishApplicationState"] = state
    if state not in ENDED:
        msg = (
            f"validating {branch} against main and publishing the window: SparkApplication "
            f"{owner.publish_app_name} is {state or 'submitted'}"
        )
        return BackfillIntent(status=status("Publishing", "Publishing", msg, **extra))
    if this_runs is None:
        why = app_message(publish_app) or f"it ended {state} without a report"
        return publish_failed_plan(status, f"SparkApplication {owner.publish_app_name}: {why}", extra)
    return ended_on(bf, this_runs, group, status, extra, f"SparkApplication {owner.publish_app_name}")


def completed(bf: Backfill, status: StatusAt, group: GroupSpec | None, extra: dict[str, Any]) -> BackfillIntent:
    msg = f"completed into branch {backfill_branch(bf)} (publish is not enabled)"
    return BackfillIntent(
        leave_group=group,
        status=status("Succeeded", "Completed", msg, **extra),
        events=(Event("Normal", "Completed", msg),),
    )


def ended_on(
    bf: Backfill, report: PublishReport, group: GroupSpec | None, status: StatusAt, extra: dict[str, Any], where: str
) -> BackfillIntent:
    """The end a publish report says: Published or Refused (``published``), or Failed (what
    failed in ``where``, the application that published)."""
    if report.state == "Failed":
        return publish_failed_plan(status, f"{where}: {report.error or 'no reason given'}", extra)
    return published(bf, report, group, status.now, extra)


def publish_failed_plan(status: StatusAt, why: str, extra: dict[str, Any]) -> BackfillIntent:
    msg = (
        f"publish failed: {why}; main is unchanged or fully published (each table's publish is one snapshot): "
        "bump spec.restartNonce to run it again"
    )
    return BackfillIntent(
        status=status("Failed", "PublishFailed", msg, **extra),
        events=(Event("Warning", "PublishFailed", msg),),
    )


def _published_table(t: Any) -> dict[str, Any]:
    return PublishedTable(
        table=t.table,
        match_ratio=t.match_ratio,
        rows_removed=t.rows_removed,
        rows_added=t.rows_added,
        snapshot_id=t.snapshot_id,
        main_rows=t.main_rows,
        branch_rows=t.branch_rows,
        matched=t.matched,
        differing_keys=list(t.differing_keys),
    ).model_dump(by_alias=True)


def published(
    bf: Backfill, report: PublishReport, group: GroupSpec | None, now: str, extra: dict[str, Any] | None = None
) -> BackfillIntent:
    """After publish: Succeeded with what each table got (and the group left), or Failed with
    the reason (main unchanged for the table that refused; branch, checkpoint, group kept)."""
    status = StatusAt(bf, now)
    extra = extra or {}
    done = [_published_table(t) for t in report.tables]
    ratio = min((t.match_ratio for t in report.tables), default=None)
    if report.state != "Published":
        msg = f"publish refused: {report.error}"
        return BackfillIntent(
            status=status("Failed", "ValidationFailed", msg, published=done, matchRatio=ratio, **extra),
            events=(Event("Warning", "ValidationFailed", msg),),
        )
    tables = ", ".join(
        f"{t.table} (match {t.match_ratio:.4f}, "
        + (
            "main already equal to the branch: no commit)"
            if t.snapshot_id is None
            else f"-{t.rows_removed} +{t.rows_added})"
        )
        for t in report.tables
    )
    msg = f"published {backfill_branch(bf)} into main: {tables or 'no Iceberg sink to publish'}"
    events = (Event("Normal", "Published", msg),)
    not_final = tuple(f"{t.table}: {n}" for t in report.tables for n in t.not_final)
    if not_final:
        # Published, but said plainly: some results of the window could not be closed yet.
        msg += "; " + "; ".join(not_final)
        events += (Event("Warning", "NotFinal", "; ".join(not_final)),)
    return BackfillIntent(
        leave_group=group,
        status=status("Succeeded", "Published", msg, published=done, matchRatio=ratio, final=not not_final, **extra),
        events=events,
    )
