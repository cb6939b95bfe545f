"""The StreamingJob decision (pure): what to create, delete and report for each observation."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.reconcile.failures import changes_nothing
from kappa_operator.reconcile.job_intent import ENDED_LIVE
from kappa_operator.reconcile.phases import STATES
from kappa_operator.reconcile.streaming_job import decide_streaming_job
from tests.secured_kafka import COMPANY, secured

ROOT = Path(__file__).resolve().parents[4]
NOW, LATER = "2026-11-21T10:00:00Z", "2026-11-21T11:00:00Z"


def job(**spec: Any) -> StreamingJob:
    data = yaml.safe_load((ROOT / "examples" / "rmi-streamingjob.yaml").read_text())
    data["metadata"].update(uid="u1", generation=3)
    data["spec"].update(spec)
    return StreamingJob.model_validate(data)


def with_status(j: StreamingJob, status: dict[str, Any]) -> StreamingJob:
    return StreamingJob.model_validate({**j.model_dump(by_alias=True, exclude_none=True), "status": status})


def running_app(j: StreamingJob, state: str = "RUNNING") -> dict[str, Any]:
    plan = decide_streaming_job(j, None, NOW)
    assert plan.create_app is not None
    return {**plan.create_app, "status": {"applicationState": {"state": state}}}


def test_no_application_yet_creates_it_with_its_config_map() -> None:
    plan = decide_streaming_job(job(), None, NOW)
    assert plan.create_app is not None and plan.config_map is not None and not plan.delete_app
    assert plan.status["phase"] == "Submitted" and plan.status["observedGeneration"] == 3
    assert [e.reason for e in plan.events] == ["Submitted"]


def test_the_running_application_is_mirrored_and_nothing_is_created() -> None:
    j = job()
    plan = decide_streaming_job(j, running_app(j), NOW)
    assert plan.create_app is None and plan.config_map is None and not plan.delete_app
    assert plan.status["phase"] == "Running" and plan.status["applicationState"] == "RUNNING"
    ready = plan.status["conditions"][0]
    assert (ready["type"], ready["status"], ready["lastTransitionTime"]) == ("Ready", "True", NOW)
    again = decide_streaming_job(with_status(j, plan.status), running_app(j), LATER)
    assert again.status["conditions"][0]["lastTransitionTime"] == NOW, "no transition, no new time"
    assert again.events == (), "no event without a change"


def test_the_first_event_of_a_just_created_application_changes_nothing() -> None:
    """The Spark operator has not taken it yet (no state): no second Submitted Event, and a
    status patch that would rewrite the same phase is not sent (issue 27: 200 objects at once)."""
    j = job()
    created = decide_streaming_job(j, None, NOW)
    assert created.create_app is not None
    seen = decide_streaming_job(with_status(j, created.status), {**created.create_app, "status": {}}, LATER)
    assert seen.events == () and seen.status == {} and seen.create_app is None and not seen.delete_app
    assert changes_nothing(created.status, seen.status)
    taken = decide_streaming_job(with_status(j, created.status), running_app(j, "SUBMITTED"), LATER)
    assert taken.status["applicationState"] == "SUBMITTED" and [e.reason for e in taken.events] == ["Submitted"]


def test_a_status_patch_that_changes_nothing_is_told_apart() -> None:
    current = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}], "eta": "5m"}
    assert changes_nothing(current, {"phase": "Running"})
    assert changes_nothing(current, {"message": None}), "removing an absent field changes nothing"
    assert changes_nothing(current, {"conditions": [{"type": "Ready", "status": "True", "reason": None}]})
    assert not changes_nothing(current, {"eta": None})
    assert not changes_nothing(current, {"phase": "Failed"})
    assert not changes_nothing(current, {"conditions": [{"type": "Ready", "status": "False"}]})
    assert not changes_nothing(None, {"phase": "Running"})


def test_a_spec_change_restarts_from_the_checkpoint() -> None:
    old = job()
    new = job(pipelineArgs={"lateness": "45 minutes"})
    plan = decide_streaming_job(new, running_app(old), NOW)
    assert plan.delete_app and plan.create_app is None
    assert plan.status["phase"] == "Restarting" and [e.reason for e in plan.events] == ["SpecChanged"]
    recreated = decide_streaming_job(new, None, NOW).create_app
    assert recreated is not None and recreated["metadata"]["annotations"] != running_app(old)["metadata"]["annotations"]


def test_suspend_deletes_and_resume_recreates() -> None:
    j = job(suspend=True)
    plan = decide_streaming_job(j, running_app(job()), NOW)
    assert plan.delete_app and plan.status["phase"] == "Suspended"
    assert decide_streaming_job(j, None, NOW).status["phase"] == "Suspended"
    assert decide_streaming_job(job(suspend=False), None, NOW).create_app is not None


@pytest.mark.parametrize("state", sorted(STATES))
def test_every_spark_operator_state_has_a_phase(state: str) -> None:
    """A live application that ended backs off for a restart (the operator restarts it); every
    other state is mirrored."""
    j = job()
    plan = decide_streaming_job(j, running_app(j, state), NOW)
    ended = state in ENDED_LIVE
    assert plan.status["phase"] == ("BackingOff" if ended else STATES[state][0])
    warning = ended or STATES[state][0] == "Failed"
    assert all((e.type == "Warning") == warning for e in plan.events)


def test_a_driver_that_refused_its_configuration_is_not_restarted_until_the_spec_changes() -> None:
    """Exit code 2 (spark_app's EXIT_REFUSED: a missing pipeline module, a warm-up shorter
    than the look-back): the same spec fails the same way, so no restart loop with growing
    delays; exit code 1 (the job failed) backs off for a restart as before."""
    j = job()
    refused = running_app(j, "FAILED")
    said = "driver container failed with ExitCode: 2, Reason: Error: pipeline 'pipelines.x:p': cannot import"
    refused["status"]["applicationState"]["errorMessage"] = said
    plan = decide_streaming_job(j, refused, NOW)
    assert plan.status["phase"] == "Failed" and reason_of(plan.status) == "ConfigRefused", plan.status
    assert not plan.delete_app and "fix the StreamingJob's spec" in plan.status["message"]
    assert "cannot import" in plan.status["message"]
    crashed = running_app(j, "FAILED")
    crashed["status"]["applicationState"]["errorMessage"] = said.replace("ExitCode: 2", "ExitCode: 1")
    assert decide_streaming_job(j, crashed, NOW).status["phase"] == "BackingOff"


def reason_of(status: dict[str, Any]) -> str:
    return next(c["reason"] for c in status["conditions"] if c["type"] == "Ready")


def secured_job() -> StreamingJob:
    data = yaml.safe_load((ROOT / "examples" / "kafka-rmi-streamingjob.yaml").read_text())
    data["metadata"].update(uid="u1", generation=3)
    mtls = {**COMPANY, "tls": {**COMPANY["tls"], "client": {"secretRef": {"name": "kafka-user"}}}}
    unused = {"protocol": "SSL", "tls": {"ca": {"secretRef": {"name": "other-ca"}}}}
    return StreamingJob.model_validate(secured(data, "impressions", "playbacks", company=mtls, unused=unused))


def test_the_secrets_in_use_are_those_its_sources_and_sinks_name_each_once() -> None:
    assert secured_job().spec.secrets_in_use == ("kafka-user", "kafka-ca")
    assert job().spec.secrets_in_use == ()


def test_a_missing_secret_is_said_on_the_job_which_starts_once_it_exists() -> None:
    j = secured_job()
    waiting = decide_streaming_job(j, None, NOW, secrets={"kafka-user": "7", "kafka-ca": None})
    assert waiting.create_app is None and waiting.config_map is None
    assert (waiting.status["phase"], waiting.status["missingSecrets"]) == ("Pending", ["kafka-ca"])
    assert "waiting for Secret kafka-ca in default, named by spec.kafkaSecurity: create it" in waiting.status["message"]
    assert [(e.type, e.reason) for e in waiting.events] == [("Warning", "SecretNotFound")]
    again = decide_streaming_job(
        with_status(j, waiting.status), None, LATER, secrets={"kafka-user": "7", "kafka-ca": None}
    )
    assert again.events == () and again.create_app is None, "said once"

    created = decide_streaming_job(with_status(j, waiting.status), None, LATER, secrets=VERSIONS)
    assert created.create_app is not None and created.status["phase"] == "Submitted"
    assert created.status["missingSecrets"] is None, "unset once the Secret exists"


def test_a_job_without_kafka_security_writes_no_missing_secrets() -> None:
    plan = decide_streaming_job(job(), None, NOW)
    assert "missingSecrets" not in plan.status


VERSIONS = {"kafka-user": "7", "kafka-ca": "9"}


def secured_running(versions: dict[str, str | None]) -> tuple[StreamingJob, dict[str, Any]]:
    """A secured job as it runs: created with ``versions``, its status written."""
    j = secured_job()
    created = decide_streaming_job(j, None, NOW, secrets=versions)
    assert created.create_app is not None
    app = {**created.create_app, "status": {"applicationState": {"state": "RUNNING"}}}
    settled = decide_streaming_job(with_status(j, created.status), app, NOW, secrets=versions)
    return with_status(j, {**created.status, **settled.status}), app


def test_the_application_records_the_secrets_versions_it_mounts() -> None:
    j, app = secured_running(VERSIONS)
    assert app["metadata"]["annotations"]["kappa.dev/secret-versions"] == '{"kafka-ca": "9", "kafka-user": "7"}'
    assert j.status is not None and j.status.secret_versions == VERSIONS
    again = decide_streaming_job(j, app, LATER, secrets=VERSIONS)
    assert not again.delete_app and again.events == (), "the same Secrets: nothing to do"


def test_a_rotated_secret_restarts_the_job_from_its_checkpoint_in_every_upgrade_mode() -> None:
    for mode in ("last-state", "stateless", "snapshot"):
        j, app = secured_running(VERSIONS)
        j = j.model_copy(
            update={"spec": j.spec.model_copy(update={"upgrade": j.spec.upgrade.model_copy(update={"mode": mode})})}
        )
        rotated = {**VERSIONS, "kafka-user": "8"}
        plan = decide_streaming_job(j, app, LATER, secrets=rotated)
        assert plan.delete_app and plan.move_checkpoint is None and plan.create_rewind is None, mode
        assert plan.status["phase"] == "Restarting" and "upgrade" not in plan.status, mode
        assert [(e.reason, e.message) for e in plan.events] == [
            (
                "SecretChanged",
                "Secret kafka-user (resourceVersion 7 -> 8) changed: restarting from the checkpoint with the "
                "new values",
            )
        ]
        again = decide_streaming_job(with_status(j, plan.status), None, LATER, secrets=rotated)
        assert again.create_app is not None, "created again, mounting the new values"
        assert again.create_app["metadata"]["annotations"]["kappa.dev/secret-versions"] == (
            '{"kafka-ca": "9", "kafka-user": "8"}'
        )


def test_a_secret_deleted_under_a_running_job_does_not_restart_it() -> None:
    j, app = secured_running(VERSIONS)
    plan = decide_streaming_job(j, app, LATER, secrets={"kafka-user": None, "kafka-ca": "9"})
    assert not plan.delete_app, "its pods keep the files they mounted; a restart could not mount them"
    assert plan.status["missingSecrets"] == ["kafka-user"]


def test_a_spec_edit_with_a_rotated_secret_is_an_upgrade_and_takes_the_new_versions() -> None:
    j, app = secured_running(VERSIONS)
    edited = j.model_copy(update={"spec": j.spec.model_copy(update={"trigger_interval": "17s"})})
    plan = decide_streaming_job(edited, app, LATER, secrets={**VERSIONS, "kafka-ca": "10"})
    assert plan.delete_app and plan.status["upgrade"]["step"] == "Starting"
    assert [e.reason for e in plan.events] == ["SpecChanged"]


def test_a_job_without_secrets_is_hashed_by_its_config_and_image() -> None:
    from kappa_operator.render.jobconfig import config_hash, streaming_job_config

    plan = decide_streaming_job(job(), None, NOW)
    assert plan.create_app is not None
    annotations = plan.create_app["metadata"]["annotations"]
    cfg = streaming_job_config(job())
    assert annotations == {"kappa.dev/config-hash": config_hash(cfg, None, job().spec.image)}
    assert "secretVersions" not in plan.status


def test_a_new_image_is_an_upgrade_and_an_application_hashed_before_images_is_not_restarted() -> None:
    from kappa_operator.render.jobconfig import config_hash, streaming_job_config

    plan = decide_streaming_job(job(), None, NOW)
    assert plan.create_app is not None
    legacy = copy.deepcopy(plan.create_app)  # as an operator before image hashing made it
    legacy["metadata"]["annotations"]["kappa.dev/config-hash"] = config_hash(streaming_job_config(job()))
    legacy["status"] = {"applicationState": {"state": "RUNNING"}}
    ran = job().spec.model_dump_json(by_alias=True, exclude_none=True)
    status = {**plan.status, "phase": "Running", "applicationState": "RUNNING", "lastStableSpec": ran}
    same = decide_streaming_job(with_status(job(), status), legacy, NOW)
    assert not same.delete_app and "upgrade" not in same.status, "the same spec: not restarted"
    upgraded = decide_streaming_job(with_status(job(image="kappa-spark:0.2.0"), status), legacy, NOW)
    assert upgraded.delete_app and upgraded.status["upgrade"]["step"] == "Starting", "a new image is an upgrade"
