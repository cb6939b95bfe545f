"""The Spark operator as the tests play it on the real kube-apiserver, and what they read back.

No kubelet runs pods here, so no Kubeflow Spark Operator runs either: a test writes a
SparkApplication's state through its status subresource, as that operator would
(:func:`spark_state`; the real SparkApplication CRD requires ``status.driverInfo``). An
application that runs once (``publish``, ``plan``, ``restore``) is run for real, as its pod
would run it: ``python -m spark_app <command> ... --config`` on its ConfigMap's JobConfig, as a
process of its own (:func:`run_application`; :class:`SparkPlayer` runs each one that appears).
A Backfill's driver that validates and publishes once its query ended is played from that
point (:func:`driver_publishes`).

Reads go through the administrator's :class:`~kappa_operator.local_cluster.control_plane.Rest` client; Events
are read as ``kubectl get events`` shows them (a repeat is counted on one Event).
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from kappa_operator.local_cluster.control_plane import ROOT, ControlPlane
from kappa_operator.local_cluster.rest import path_of

APP = "SparkApplication"
KAPPA_KINDS = ("StreamingJob", "Backfill", "Rewind")


NO_RESTART = {"restart": {"maxAttempts": 0}}
"""A Backfill that stays Failed at its application's first failure (spec.restart), for the tests
of what a failed one does."""


def example(name: str, namespace: str, object_name: str | None = None, **spec: Any) -> dict[str, Any]:
    """An example manifest (examples/``name``) as a user sends it, in ``namespace``, renamed to
    ``object_name`` if given, with ``spec`` keys replaced."""
    doc: dict[str, Any] = yaml.safe_load((ROOT / "examples" / name).read_text())
    doc["metadata"]["namespace"] = namespace
    if object_name is not None:
        doc["metadata"]["name"] = object_name
    doc["spec"].update(copy.deepcopy(spec))
    return doc


def create(plane: ControlPlane, body: dict[str, Any]) -> dict[str, Any]:
    meta = body["metadata"]
    path = path_of(body["kind"], meta["namespace"], api_version=body.get("apiVersion"))
    return dict(plane.admin.ok(plane.admin.create(path, body), f"create {body['kind']} {meta['name']}"))


def get(plane: ControlPlane, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
    answer = plane.admin.get(path_of(kind, namespace, name))
    if answer.status == 404:
        return None
    return dict(plane.admin.ok(answer, f"get {kind} {name}"))


def absent(plane: ControlPlane, kind: str, namespace: str, name: str) -> bool:
    return get(plane, kind, namespace, name) is None


def status(plane: ControlPlane, kind: str, namespace: str, name: str) -> dict[str, Any]:
    return dict((get(plane, kind, namespace, name) or {}).get("status") or {})


def in_phase(plane: ControlPlane, kind: str, namespace: str, name: str, phase: str) -> dict[str, Any] | None:
    """The status, once its phase is ``phase`` (for ``eventually``)."""
    s = status(plane, kind, namespace, name)
    return s if s.get("phase") == phase else None


def items(plane: ControlPlane, kind: str, namespace: str) -> list[dict[str, Any]]:
    return list(plane.admin.ok(plane.admin.get(path_of(kind, namespace)), f"list {kind}")["items"])


def conditions(s: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in s.get("conditions") or []}


def spark_state(plane: ControlPlane, namespace: str, app: str, state: str, error: str | None = None) -> None:
    """Play the Spark operator: an application's state, written through its status subresource."""
    app_state = {"state": state, **({"errorMessage": error} if error else {})}
    body = {"status": {"applicationState": app_state, "driverInfo": {}}}  # the CRD requires driverInfo
    plane.admin.ok(plane.admin.merge(path_of(APP, namespace, app) + "/status", body), f"{app} {state}")


def events(plane: ControlPlane, namespace: str, name: str | None = None) -> list[dict[str, Any]]:
    """The namespace's Events (about ``name`` only, if given), oldest first."""
    found = plane.admin.ok(plane.admin.get(f"/api/v1/namespaces/{namespace}/events"), "events")["items"]
    mine = [e for e in found if name is None or e["involvedObject"]["name"] == name]
    return sorted(mine, key=lambda e: (e.get("firstTimestamp") or "", e["metadata"].get("creationTimestamp") or ""))


def reasons(plane: ControlPlane, namespace: str, name: str) -> list[str]:
    """The reasons of the Events about ``name``, one per occurrence (an Event's ``count``)."""
    return [e["reason"] for e in events(plane, namespace, name) for _ in range(int(e.get("count") or 1))]


def run_application(
    plane: ControlPlane,
    namespace: str,
    name: str,
    workdir: Path,
    command: str | None = None,
    completes: tuple[int, ...] = (0,),
) -> int:
    """Play the Spark operator for an application that runs once (publish, plan, restore): run
    what its pod would (``python -m spark_app <command> ... --config`` on its ConfigMap's
    JobConfig) as a process of its own, between the states the Spark operator would write.
    ``command``: run this command instead of the application's own; ``completes``: the exit
    codes after which it is COMPLETED (else FAILED). Returns the driver's exit code."""
    app = get(plane, APP, namespace, name)
    assert app is not None, f"no SparkApplication {name}"
    args = app["spec"]["arguments"]
    if command is not None:
        args = [command, *args[args.index("--config") :]]
    cm_name = app["spec"]["volumes"][0]["configMap"]["name"]
    cm = get(plane, "ConfigMap", namespace, cm_name)
    assert cm is not None, f"no ConfigMap {cm_name}"
    config = workdir / f"{namespace}-{name}.json"
    config.write_text(cm["data"]["job.json"])
    spark_state(plane, namespace, name, "RUNNING")
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    with (workdir / f"{namespace}-{name}.log").open("ab") as log:
        code = subprocess.run(
            [sys.executable, "-m", "spark_app", *args[:-1], str(config)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            check=False,
            timeout=600,
        ).returncode
    if code in completes:
        spark_state(plane, namespace, name, "COMPLETED")
    else:
        spark_state(plane, namespace, name, "FAILED", f"exit code {code}")
    return code


def driver_publishes(plane: ControlPlane, namespace: str, name: str, workdir: Path) -> int:
    """Play a Backfill's driver whose JobConfig has ``publish`` from where its query ended (no
    history is read here): it validates and publishes in its own process, with the code its
    ``run`` command calls then (``python -m spark_app publish`` on its JobConfig), and its
    application completes whether the publish was Published or Refused (exit 3 here: ``run``
    exits 0 on a refusal) and fails if the publish failed. Returns the exit code."""
    return run_application(plane, namespace, name, workdir, command="publish", completes=(0, 3))


class SparkPlayer:
    """Plays the Spark operator in the background for every ``command`` application that
    appears in ``namespace``: each runs once (:func:`run_application`); ``ran`` gets
    (name, exit code) as they end. A context manager: stopped on exit."""

    def __init__(self, plane: ControlPlane, namespace: str, command: str, workdir: Path) -> None:
        self.plane, self.namespace, self.command, self.workdir = plane, namespace, command, workdir
        self.ran: list[tuple[str, int]] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._play, name=f"spark-{command}", daemon=True)

    def __enter__(self) -> SparkPlayer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=120)
        if self.error is not None and exc[0] is None:
            raise self.error

    def _play(self) -> None:
        done: set[str] = set()
        try:
            while not self._stop.is_set():
                for app in items(self.plane, APP, self.namespace):
                    name = app["metadata"]["name"]
                    if name not in done and (app["spec"].get("arguments") or [None])[0] == self.command:
                        done.add(name)
                        self.ran.append((name, run_application(self.plane, self.namespace, name, self.workdir)))
                time.sleep(0.2)
        except BaseException as exc:  # reported by __exit__
            self.error = exc
