"""A blueGreen upgrade, step by step (pure): one function per ``status.upgrade.step``, each
from what the handler saw (``GreenSeen``) to a ``JobIntent`` whose status records the next
step before its I/O (a new leader repeats the recorded step; every step's I/O is safe to
repeat). The rules of the hand-over are the contract's (``spark_app.contract.blue_green``);
the design is ``docs/design/blue-green.md``.

GreenStarting -> CatchingUp -> Comparing -> StoppingBlue -> Draining -> Switching -> Promoting,
then the job's ordinary path runs green's spec on green's checkpoint. A green that fails to
start, cannot catch up within ``catchUp`` or differs beyond ``minMatchRatio`` goes to
Discarding -> GreenRemoved: its application and branches are removed, blue goes on (or, once
stopped, starts again from its checkpoint), and ``rolledBackGeneration`` keeps the job on
blue's spec until the next edit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from kappa_operator.models.common import as_timedelta, instant, rfc3339
from kappa_operator.models.streaming_job import StreamingJob, StreamingJobSpec
from kappa_operator.models.streaming_job_status import BEFORE_THE_SWITCH, SWITCH_UNDER_WAY, UpgradeStatus
from kappa_operator.reconcile.blue_green import green_branch, green_checkpoint, refused
from kappa_operator.reconcile.events import Event
from kappa_operator.reconcile.job_intent import ENDED_LIVE, JobIntent, StatusOf
from kappa_operator.reconcile.phases import STATES, app_message, app_state
from kappa_operator.render.blue_green import STEP, green_objects, step_objects
from kappa_operator.render.jobconfig import PAUSED_ANNOTATION, job_hash, live_checkpoint, streaming_job_config
from kappa_operator.render.spark_application import Owner
from spark_app.contract.blue_green import caught_up, compare_window
from spark_app.contract.reports.blue_green import SeamReport, StepReport
from spark_app.contract.reports.progress import ProgressReport

STEP_ATTEMPTS = 3
"""A step application that failed this many times in a row: compare and discard give up (the
upgrade is discarded, or left for a person with the reason); a switch, forward only, goes on."""
COMMAND = {"Comparing": "compare", "Switching": "switch", "Discarding": "discard"}
STEP_BACKOFF = timedelta(seconds=30)
"""The wait before a failed step application runs again, doubled each time (at most 5 min)."""


def step_backoff(attempts: int) -> timedelta:
    """How long after its ``attempts``-th failure a step application runs again."""
    return min(STEP_BACKOFF * 2 ** max(attempts - 1, 0), timedelta(minutes=5))


@dataclass(frozen=True)
class GreenSeen:
    """What the handler read for the step in flight (each read only where its step needs it)."""

    green_app: dict[str, Any] | None = None
    step_app: dict[str, Any] | None = None
    step_report: StepReport | None = None
    """The current step's report (``COMMAND``), once its application ended."""
    green_reports: Mapping[str, ProgressReport] = field(default_factory=dict)
    blue_reports: Mapping[str, ProgressReport] = field(default_factory=dict)
    seam: SeamReport | None = None
    blue_driver_left: bool = False
    """A driver pod of blue's application still exists."""
    green_driver_left: bool = False


@dataclass(frozen=True)
class Step:
    """One decision's inputs: the job (its edited spec), the recorded upgrade, what was seen."""

    job: StreamingJob
    up: UpgradeStatus
    owner: Owner
    blue_app: dict[str, Any] | None
    seen: GreenSeen
    now: str
    digest: str
    status: StatusOf

    def record(self, step: str | None = None, **fields: Any) -> dict[str, Any]:
        """The upgrade's record with ``fields`` set and, for a new ``step``, the step and its time."""
        out = self.up.model_dump(by_alias=True, exclude_none=True) | fields
        if step is not None and step != self.up.step:
            out["step"] = step
            out["steps"] = [*out.get("steps", []), {"step": step, "at": self.now}][-12:]
            out["stepAttempts"] = 0
        return out

    def intent(self, step: str | None, message: str, events: tuple[Event, ...] = (), **kw: Any) -> JobIntent:
        state = app_state(self.blue_app)
        # an ended upgrade says blue's own phase in the same write: a reader of the status never
        # sees it ended while the job is still "Upgrading"
        phase = STATES.get(state or "", STATES["UNKNOWN"])[0] if step in ENDED_STEPS else "Upgrading"
        fields = self.status(phase, state == "RUNNING", "BlueGreen", message, None)
        extra = kw.pop("status_extra", {})
        record = self.record(step, **kw.pop("fields", {}))
        return JobIntent(status={**fields, "upgrade": record, **extra}, events=events, **kw)

    def since(self, step: str) -> datetime:
        """When ``step`` was entered (the upgrade's start when not recorded)."""
        for entry in reversed(self.up.steps):
            if entry.step == step:
                return instant(entry.at)
        return instant(self.up.started_at)


ENDED_STEPS = ("GreenRemoved",)
"""Steps after which blue goes on as the job, the upgrade over."""


def event_now(job: StreamingJob, now: str) -> datetime:
    """Where blue is in event time: the lowest watermark its queries last reported
    (``status.progress``); the wall clock when none has one yet. Green's history is counted
    back from it, so a job replaying old data upgrades as one reading today's does."""
    marks = [instant(p.watermark) for p in (job.status.progress if job.status else []) if p.watermark]
    return min(marks) if marks else instant(now)


def start(
    job: StreamingJob, blue: StreamingJobSpec | None, blue_app: dict[str, Any] | None, running_hash: str | None,
    digest: str, now: str, status: StatusOf, blue_checkpoint: str, owner: Owner,
) -> JobIntent:  # fmt: skip
    """A new config of a blueGreen job: refuse by name, or record GreenStarting and create green."""
    state = app_state(blue_app)
    why = None
    if blue is None:
        why = "upgrade.mode blueGreen needs the spec that runs (status.lastStableSpec); none ran to RUNNING yet"
    elif state != "RUNNING":
        why = (
            f"upgrade.mode blueGreen needs the running application (blue); it is {state or 'not running'}: fix it, "
            "or use upgrade.mode last-state"
        )
    else:
        why = refused(blue, job.spec)
    base = {"mode": "blueGreen", "fromHash": running_hash, "toHash": digest, "startedAt": now}
    if why is not None:
        record = fresh_record({**base, "step": "Refused", "reason": why, "steps": [{"step": "Refused", "at": now}]})
        fields = status("Running", state == "RUNNING", "UpgradeRefused", why, state)
        return JobIntent(
            status={**fields, "upgrade": record, "rolledBackGeneration": job.metadata.generation},
            events=(Event("Warning", "UpgradeRefused", why),),
        )
    overlap = as_timedelta(job.spec.upgrade.overlap)
    history_from = (event_now(job, now) - 3 * overlap).replace(second=0, microsecond=0)
    up = UpgradeStatus.model_validate(
        {
            **base,
            "step": "GreenStarting",
            "generation": job.metadata.generation,
            "branch": green_branch(job),
            "greenCheckpoint": green_checkpoint(job),
            "blueCheckpoint": blue_checkpoint,
            "historyFrom": rfc3339(history_from),
            "greenSpec": job.spec.model_dump_json(by_alias=True, exclude_none=True),
            "steps": [{"step": "GreenStarting", "at": now}],
        }
    )
    msg = (
        f"spec changed: starting {owner.green_app_name} (config {digest}) beside {owner.app_name}, from the "
        f"history since {up.history_from} into branch {up.branch}; blue keeps running"
    )
    fields = status("Upgrading", True, "BlueGreen", msg, state)
    return JobIntent(
        status={**fields, "upgrade": fresh_record(up)},
        green=green_objects(job, owner, up, digest),
        events=(Event("Normal", "GreenStarted", msg),),
    )


def fresh_record(up: UpgradeStatus | dict[str, Any]) -> dict[str, Any]:
    """A new upgrade's record with every field, the unset ones null: the status is written as a
    merge patch, where an absent key keeps the previous upgrade's value (its reason, boundary,
    held stop) and a null removes it."""
    model = up if isinstance(up, UpgradeStatus) else UpgradeStatus.model_validate(up)
    return model.model_dump(by_alias=True)


def discard(s: Step, reason: str) -> JobIntent:
    """Green removed (its application now, its branches by the discard step); blue goes on."""
    msg = f"blueGreen upgrade g{s.up.generation} abandoned: {reason}; removing green, blue goes on"
    return s.intent(
        "Discarding",
        msg,
        (Event("Warning", "GreenRemoved", msg),),
        delete_green=True,
        delete_step=True,
        fields={"reason": reason},
        status_extra={"rolledBackGeneration": s.up.generation},
    )


def _green_absent_or_ended(s: Step, again: str = " again") -> JobIntent | None:
    """Green's application created (again) when it is not there; the upgrade discarded when it
    ended for good (past the Spark operator's reruns); None while it is there and alive."""
    if s.seen.green_app is None:
        made = green_objects(s.job, s.owner, s.up, s.digest)
        return s.intent(None, f"creating {s.owner.green_app_name}{again}", green=made)
    state = app_state(s.seen.green_app)
    if state in ENDED_LIVE:
        return discard(
            s, f"green's application {s.owner.green_app_name} ended {state}: {app_message(s.seen.green_app) or state}"
        )
    return None


def green_starting(s: Step) -> JobIntent | None:
    acted = _green_absent_or_ended(s, again="")
    if acted is not None:
        return acted
    state = app_state(s.seen.green_app)
    if state == "RUNNING":
        msg = f"{s.owner.green_app_name} runs: reading history since {s.up.history_from}, then trailing blue"
        return s.intent("CatchingUp", msg, (Event("Normal", "GreenRunning", msg),))
    ready = as_timedelta(s.job.spec.upgrade.ready_timeout)
    if instant(s.now) - instant(s.up.started_at) > ready:
        return discard(
            s,
            f"green's application did not reach RUNNING within upgrade.readyTimeout {s.job.spec.upgrade.ready_timeout}",
        )
    return JobIntent()


def _lowest(reports: Mapping[str, ProgressReport], sinks: list[str]) -> datetime | None:
    marks = [reports[k].watermark for k in sinks if k in reports]
    if len(marks) < len(sinks) or any(m is None for m in marks):
        return None
    return min(m for m in marks if m is not None)


def lateness_added(green: ProgressReport, blue: ProgressReport) -> timedelta:
    """How much more green's watermark trails its input than blue's (a v2 that waits longer for
    late rows): zero when either driver did not say."""
    if green.lateness_s is None or blue.lateness_s is None:
        return timedelta(0)
    return timedelta(seconds=max(green.lateness_s - blue.lateness_s, 0.0))


def catching_up(s: Step) -> JobIntent | None:
    acted = _green_absent_or_ended(s)
    if acted is not None:
        return acted
    sinks = sorted(s.job.spec.sinks)
    green, blue = _lowest(s.seen.green_reports, sinks), _lowest(s.seen.blue_reports, sinks)
    over = instant(s.now) - instant(s.up.started_at) > as_timedelta(s.job.spec.upgrade.catch_up)
    if green is None or blue is None or not _caught_up(s, sinks):
        if over:
            said = (
                f"green's watermark {rfc3339(green) if green else 'none'}, blue's {rfc3339(blue) if blue else 'none'}"
            )
            return discard(
                s, f"green did not catch up with blue within upgrade.catchUp {s.job.spec.upgrade.catch_up} ({said})"
            )
        return JobIntent()
    lookahead = max(
        (
            timedelta(seconds=r.lookahead_s or 0)
            for r in (*s.seen.green_reports.values(), *s.seen.blue_reports.values())
        ),
        default=timedelta(0),
    )
    overlap = as_timedelta(s.job.spec.upgrade.overlap)
    assert s.up.history_from is not None
    complete_from = instant(s.up.history_from) + overlap
    watermarks = {k: (s.seen.blue_reports[k].watermark, s.seen.green_reports[k].watermark) for k in sinks}
    window = compare_window(watermarks, lookahead, overlap, complete_from)  # type: ignore[arg-type]
    if window is None:
        return _no_window_yet(s, complete_from, min(min(pair) for pair in watermarks.values()) - lookahead, over)  # type: ignore[type-var]
    start, end = rfc3339(window[0]), rfc3339(window[1])
    msg = f"green caught up (watermark {rfc3339(green)}, blue's {rfc3339(blue)}): comparing [{start}, {end})"
    fields = {
        "greenWatermark": rfc3339(green),
        "blueWatermark": rfc3339(blue),
        "compareStart": start,
        "compareEnd": end,
    }
    nxt = s.up.model_copy(update={"compare_start": start, "compare_end": end})
    return s.intent(
        "Comparing",
        msg,
        (Event("Normal", "CaughtUp", msg),),
        fields=fields,
        step_app=step_objects(s.job, s.owner, nxt, "compare", s.digest),
    )


def _caught_up(s: Step, sinks: list[str]) -> bool:
    trigger = as_timedelta(s.job.spec.trigger_interval)
    return all(
        caught_up(
            s.seen.green_reports[k].watermark,  # type: ignore[arg-type]
            s.seen.blue_reports[k].watermark,  # type: ignore[arg-type]
            trigger,
            lateness_added(s.seen.green_reports[k], s.seen.blue_reports[k]),
        )
        for k in sinks
    )


def _no_window_yet(s: Step, complete_from: datetime, final_until: datetime, over: bool) -> JobIntent:
    """Green caught up, but none of its complete output (from ``complete_from``: its history's
    start plus the overlap of warm-up) is final in both versions yet (they are final up to
    ``final_until``): a new version that waits much longer for late rows than the old one. Said
    in the status once (the watermark it waits for moves; the message does not); past
    ``catchUp`` green is removed, with what to change."""
    if over:
        final = rfc3339(final_until.replace(second=0, microsecond=0))
        return discard(
            s,
            f"green caught up, but no window of its output was final in both versions within upgrade.catchUp "
            f"{s.job.spec.upgrade.catch_up} (green's complete output starts at {rfc3339(complete_from)}, both "
            f"versions' output was final up to {final}): the new version waits longer for late rows; give "
            "upgrade.overlap at least half of the added lateness, or a longer upgrade.catchUp",
        )
    msg = (
        f"green caught up; waiting for both versions' output to be final past {rfc3339(complete_from)}, where "
        "green's complete output starts, to compare a window of it"
    )
    if s.job.status is not None and s.job.status.message == msg:
        return JobIntent()
    return s.intent(None, msg)


def _step_ended(s: Step, command: str) -> tuple[JobIntent | None, StepReport | None]:
    """The step application's course: (an intent to act on now, None) while it must be
    created, replaced or waited for; (None, its report) once it ended with one."""
    app = s.seen.step_app
    if app is not None and ((app.get("metadata") or {}).get("labels") or {}).get(STEP) != command:
        return s.intent(None, f"removing the previous step's application before {command}", delete_step=True), None
    if app is None:
        if s.up.retry_at is not None and instant(s.now) < instant(s.up.retry_at):
            return JobIntent(), None  # the backoff after a failed run
        return s.intent(
            None,
            f"running {command} ({s.owner.step_app_name})",
            step_app=step_objects(s.job, s.owner, s.up, command, s.digest),
        ), None
    state = app_state(app)
    if state not in ENDED_LIVE:
        return JobIntent(), None
    report = s.seen.step_report
    if report is None or report.state == "Failed":
        attempts = s.up.step_attempts + 1
        why = report.error if report is not None and report.error else app_message(app) or f"application {state}"
        retry_at = rfc3339(instant(s.now) + step_backoff(attempts))
        return s.intent(
            None,
            f"{command} failed ({attempts} of {STEP_ATTEMPTS}): {why}; run again at {retry_at}",
            delete_step=True,
            fields={"stepAttempts": attempts, "retryAt": retry_at},
        ), None
    return None, report


def _tables(report: StepReport) -> list[dict[str, Any]]:
    out = []
    for t in report.tables:
        out.append(
            {
                "table": t.table,
                "matchRatio": round(t.match_ratio, 6),
                "mainRows": t.main_rows,
                "branchRows": t.branch_rows,
                "matched": t.matched,
                "differingKeys": list(t.differing_keys),
                **({"newColumns": list(t.new_columns)} if t.new_columns else {}),
            }
        )
    for w in report.switched:
        out.append(
            {
                "table": w.table,
                "rowsRemoved": w.rows_removed,
                "rowsAdded": w.rows_added,
                **({"snapshotId": w.snapshot_id} if w.snapshot_id is not None else {}),
            }
        )
    return out


def comparing(s: Step) -> JobIntent | None:
    if s.up.step_attempts >= STEP_ATTEMPTS:
        return discard(s, f"the comparison failed {s.up.step_attempts} times")
    acted, report = _step_ended(s, "compare")
    if report is None:
        return acted
    tables = _tables(report)
    if report.state == "Refused":
        return discard(s, report.error or "green's output differs from blue's beyond upgrade.minMatchRatio")
    said = "; ".join(f"{t['table']} {t['matchRatio']}" for t in tables)
    msg = f"compared over [{s.up.compare_start}, {s.up.compare_end}): {said}; stopping {s.owner.app_name} (blue)"
    return s.intent(
        "StoppingBlue",
        msg,
        (Event("Normal", "Compared", msg),),
        delete_app=True,
        delete_step=True,
        fields={"tables": tables},
    )


def stopping_blue(s: Step) -> JobIntent | None:
    if s.blue_app is not None:
        return s.intent(None, f"stopping {s.owner.app_name} (blue)", delete_app=True)
    if s.seen.blue_driver_left:
        return JobIntent()  # only blue's driver commits: the switch waits until it is gone
    msg = f"{s.owner.app_name} (blue) stopped; {s.owner.green_app_name} reads up to where blue ended"
    return s.intent("Draining", msg, (Event("Normal", "BlueStopped", msg),))


def draining(s: Step) -> JobIntent | None:
    acted = _green_absent_or_ended(s)
    if acted is not None:
        return acted
    if instant(s.now) - s.since("Draining") > as_timedelta(s.job.spec.upgrade.catch_up):
        return discard(
            s, f"green did not reach where blue stopped within upgrade.catchUp {s.job.spec.upgrade.catch_up}"
        )
    seam = s.seen.seam
    if seam is None or seam.at <= s.since("Draining") or not seam.all_at_seam():
        return JobIntent()
    msg = f"green stands where blue stopped; stopping {s.owner.green_app_name} to switch"
    return s.intent("Switching", msg, delete_green=True)


def switching(s: Step) -> JobIntent | None:
    if s.seen.green_app is not None:
        return s.intent(None, f"stopping {s.owner.green_app_name} to switch", delete_green=True)
    if s.seen.green_driver_left:
        return JobIntent()
    acted, report = _step_ended(s, "switch")
    if report is None:
        return acted
    if report.state == "NotAtSeam":
        msg = f"not switched: {report.error}; green runs on to blue's end"
        return s.intent(
            "Draining",
            msg,
            (Event("Normal", "NotAtSeam", msg),),
            delete_step=True,
            green=green_objects(s.job, s.owner, s.up, s.digest),
        )
    if report.state == "Refused":
        return discard(s, report.error or "the switch was refused")
    tables = _tables(report)
    b = rfc3339(report.boundary) if report.boundary else None
    said = "; ".join(
        f"{t['table']} -{t['rowsRemoved']} +{t['rowsAdded']} (snapshot {t.get('snapshotId', 'earlier')})"
        for t in tables
    )
    msg = f"switched at {b}: {said}; starting {s.owner.app_name} on green's checkpoint"
    kept = [t for t in s.up.model_dump(by_alias=True, exclude_none=True).get("tables", []) if "matchRatio" in t]
    return s.intent(
        "Promoting",
        msg,
        (Event("Normal", "Switched", msg),),
        delete_step=True,
        move_checkpoint=s.up.green_checkpoint,
        fields={"boundary": b, "tables": _merge(kept, tables)},
    )


def _merge(compared: list[dict[str, Any]], switched: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_table = {t["table"]: dict(t) for t in compared}
    for t in switched:
        by_table.setdefault(t["table"], {"table": t["table"]}).update(t)
    return list(by_table.values())


def discarding(s: Step) -> JobIntent | None:
    if s.seen.green_app is not None:
        return s.intent(None, f"removing {s.owner.green_app_name}", delete_green=True)
    if s.up.step_attempts >= STEP_ATTEMPTS:
        tables = ", ".join(sorted(sink.table for sink in s.job.spec.sinks.values()))
        msg = (
            f"green removed; its branch {s.up.branch} could not be removed from {tables} "
            f"({s.up.step_attempts} attempts failed): remove it with the catalog's tools; {s.up.reason}"
        )
        return s.intent(
            "GreenRemoved", msg, (Event("Warning", "UpgradeAbandoned", msg),), delete_step=True,
            delete_maps=finished(s.owner),
        )  # fmt: skip
    acted, report = _step_ended(s, "discard")
    if report is None:
        return acted
    msg = f"green removed (branches {', '.join(report.removed) or 'none left'}); {s.up.reason}"
    return s.intent(
        "GreenRemoved",
        msg,
        (Event("Warning", "UpgradeAbandoned", msg),),
        delete_step=True,
        delete_maps=finished(s.owner),
    )


STEPS = {
    "GreenStarting": green_starting,
    "CatchingUp": catching_up,
    "Comparing": comparing,
    "StoppingBlue": stopping_blue,
    "Draining": draining,
    "Switching": switching,
    "Discarding": discarding,
}
"""Promoting is decided by the job's own path once the promoted application exists."""


def halted_by(job: StreamingJob) -> str | None:
    """What asks the job to stop: ``spec.suspend`` or a Rewind's pause annotation."""
    paused = job.metadata.annotations.get(PAUSED_ANNOTATION)
    if paused:
        return f"{paused} (annotation {PAUSED_ANNOTATION})"
    return "spec.suspend" if job.spec.suspend else None


def decide_step(s: Step) -> JobIntent | None:
    """The recorded step's decision. None for Promoting: green's checkpoint is the job's since
    the switch was recorded, and the job's ordinary path creates its application there and,
    once it runs, ends the upgrade (``finished``).

    A suspend or a Rewind before the switch gives the upgrade up (green removed, then blue
    stops as asked, on blue's spec: green's state is not what blue's checkpoint holds). Once
    blue is stopping the switch goes forward, and the stop waits for it, said once."""
    if s.up.step == "Promoting":
        return promoting(s)
    halt = halted_by(s.job)
    if halt is not None and s.up.step in BEFORE_THE_SWITCH:
        return discard(s, f"{halt} asks the job to stop; apply the new spec again to upgrade once it runs")
    if s.up.to_hash != s.digest and s.up.step in BEFORE_THE_SWITCH:
        return discard(
            s,
            f"the spec was edited again, or a Secret it names rotated (config {s.digest}); the job upgrades to it once "
            "green is removed",
        )
    blue_state = app_state(s.blue_app)
    if blue_state in ENDED_LIVE and s.up.step in BEFORE_THE_SWITCH:
        why = app_message(s.blue_app) or blue_state
        return discard(s, f"blue's application {s.owner.app_name} ended {blue_state} ({why}); it starts again first")
    decided = STEPS[s.up.step](s)
    if halt is None or s.up.held == halt or s.up.step not in SWITCH_UNDER_WAY:
        return decided
    msg = f"{halt} waits for the switch under way (step {s.up.step}): it applies once green runs as the job"
    said = s.intent(None, msg, (Event("Normal", "StopWaits", msg),), fields={"held": halt})
    if decided is None:
        return said
    if not decided.status:  # the step's I/O as decided, the stop said beside it
        return replace(decided, status=said.status, events=(*decided.events, *said.events))
    upgrade = {**decided.status.get("upgrade", {}), "held": halt}
    return replace(decided, status={**decided.status, "upgrade": upgrade}, events=(*decided.events, *said.events))


def promoting(s: Step) -> JobIntent | None:
    """Green's checkpoint is the job's once the switch is recorded; the annotation that says so
    is written just after, so a leader that died between the two writes it again before the
    job's path creates anything (on blue's checkpoint, green's code would run on blue's state).
    None then: the job's path creates the application on green's spec (``effective``) and, once
    it runs, ends the upgrade. A job stopped meanwhile (a suspend, a Rewind) ends it at once,
    green's spec recorded as the one that last ran: it resumes on it, on green's checkpoint."""
    want = s.up.green_checkpoint
    if want and live_checkpoint(s.job) != want:
        return JobIntent(move_checkpoint=want, delete_step=True)
    halt = halted_by(s.job)
    if halt is None or not s.up.green_spec:
        return None
    said = f"config {s.up.from_hash} -> {s.up.to_hash} switched at {s.up.boundary}; {halt} stops it"
    said += " on green's checkpoint, where it starts again on green's spec"
    return JobIntent(
        status={"upgrade": None, "lastStableSpec": s.up.green_spec, "lastStableHash": s.up.to_hash},
        events=(Event("Normal", "Upgraded", f"{said} (blueGreen)"),),
        delete_step=True,
        delete_maps=finished(s.owner),
    )


def blue_to_resume(job: StreamingJob, digest: str, versions: Mapping[str, str]) -> tuple[StreamingJob, str] | None:
    """A blueGreen job starting again (after a suspend, a Rewind, a discarded upgrade) whose
    spec changed since it last ran: the spec that ran, and its hash, to resume on. Its
    checkpoint holds that spec's state, which the new code does not restore (the reason for the
    mode): the edit then upgrades blue/green once blue runs. None when it is the spec that ran,
    or a switch made green's the job's (Promoting)."""
    status = job.status
    if job.spec.upgrade.mode != "blueGreen" or status is None or not status.last_stable_spec:
        return None
    if status.upgrade is not None and status.upgrade.step == "Promoting":
        return None
    stable = StreamingJobSpec.model_validate_json(status.last_stable_spec)
    blue = job.model_copy(update={"spec": stable.model_copy(update={"suspend": job.spec.suspend})})
    blue_digest = job_hash(blue, streaming_job_config(blue), versions)
    return None if blue_digest == digest else (blue, blue_digest)


def blue_starting(job: StreamingJob, app: dict[str, Any], running_hash: str | None, now: str) -> bool:
    """Blue resumed on the spec that last ran (``blue_to_resume``) and not running yet: the
    upgrade waits for it (within ``upgrade.readyTimeout`` of its creation), since green starts
    beside a running blue only."""
    status = job.status
    if status is None or running_hash is None or running_hash != status.last_stable_hash:
        return False
    if app_state(app) in ("RUNNING", *ENDED_LIVE):
        return False
    created = (app.get("metadata") or {}).get("creationTimestamp")
    return not created or instant(now) - instant(created) <= as_timedelta(job.spec.upgrade.ready_timeout)


def finished(owner: Owner) -> tuple[str, ...]:
    """What a promoted upgrade leaves to remove once the job runs on green's checkpoint."""
    return (f"{owner.green_app_name}-jobconfig", f"{owner.step_app_name}-jobconfig")
