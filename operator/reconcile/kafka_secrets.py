"""The Secrets a job's Kafka security names, as the job runs them (pure): a Secret that does
not exist keeps a new job waiting; one whose values changed (a new ``resourceVersion``: a
rotated password, a renewed certificate) restarts the running job from its checkpoint.

Why a restart and not an upgrade: the code, the pipeline and the state are the ones already
running, and only the files under ``/etc/kappa/kafka`` changed. The kubelet refreshes mounted
Secret files in place, but Kafka's clients read them once, when they connect; so the driver
and executors are started again from the checkpoint, in every ``spec.upgrade.mode`` (a
stateless upgrade would drop the state for nothing, and nothing could roll a Secret back)."""

from __future__ import annotations

from collections.abc import Mapping

from kappa_operator.reconcile.events import Event
from kappa_operator.reconcile.job_intent import JobIntent, StatusOf

SecretsSeen = Mapping[str, str | None]
"""The Secrets spec.kafkaSecurity names, as the handler read them (metadata only): name ->
``resourceVersion``, None for one that does not exist."""


def missing(seen: SecretsSeen | None) -> tuple[str, ...]:
    return tuple(name for name, version in (seen or {}).items() if version is None)


def versions_to_run(seen: SecretsSeen | None, running: Mapping[str, str], app_exists: bool) -> dict[str, str]:
    """The versions the job's config hash takes. While an application runs and a Secret it
    names is gone, the ones it runs with: its pods keep the files they mounted, and a restart
    would only wait on a volume that cannot mount (the job says the Secret is missing)."""
    if app_exists and missing(seen):
        return dict(running)
    return {name: version for name, version in (seen or {}).items() if version is not None}


def rotated(running: Mapping[str, str], now: Mapping[str, str]) -> tuple[str, ...]:
    """The Secrets whose version moved since the application was created (named once each)."""
    return tuple(sorted(name for name in {*running, *now} if running.get(name) != now.get(name)))


def restart_for(
    names: tuple[str, ...], running: Mapping[str, str], now: Mapping[str, str], status: StatusOf
) -> JobIntent:
    """Restart the application with the Secrets' new values (its next creation mounts them and
    records their versions)."""
    said = ", ".join(f"{n} (resourceVersion {running.get(n, 'none')} -> {now.get(n, 'none')})" for n in names)
    msg = f"Secret {said} changed: restarting from the checkpoint with the new values"
    return JobIntent(
        delete_app=True,
        status=status("Restarting", False, "SecretChanged", msg, None),
        events=(Event("Normal", "SecretChanged", msg),),
    )
