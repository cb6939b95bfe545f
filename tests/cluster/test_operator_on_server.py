"""The operator as installed by the chart (its ServiceAccount, its RBAC, its Deployment's
arguments) against the real kube-apiserver: the StreamingJob lifecycle, a Backfill through to
its application, a Rewind's refusal, garbage collection by ownerReferences, events as
Kubernetes users read them, and bulk deletion (issue 27, Build 2 and Fix 4, 7, 8).

The tests play the Spark operator (no kubelet runs pods): they write a SparkApplication's
state through its status subresource, as the Kubeflow Spark Operator would.
"""

from __future__ import annotations

import copy
import json
import time
from typing import Any

import pytest
import yaml

from harness.operator_process import OperatorProcess
from kappa_operator.local_cluster.control_plane import ROOT, ControlPlane, eventually
from kappa_operator.local_cluster.rest import path_of

pytestmark = pytest.mark.usefixtures("never_forbidden")


def load(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / "examples" / name).read_text())
    doc["metadata"]["namespace"] = namespace
    doc["spec"].update(spec)
    return doc


def get(plane: ControlPlane, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
    answer = plane.admin.get(path_of(kind, namespace, name))
    return answer.body if answer.status == 200 else None


def phase(plane: ControlPlane, kind: str, namespace: str, name: str) -> str | None:
    return ((get(plane, kind, namespace, name) or {}).get("status") or {}).get("phase")


def spark_state(plane: ControlPlane, namespace: str, app: str, state: str, error: str | None = None) -> None:
    state_ = {"state": state, **({"errorMessage": error} if error else {})}
    body = {"status": {"applicationState": state_, "driverInfo": {}}}  # the CRD requires driverInfo
    plane.admin.ok(plane.admin.merge(path_of("SparkApplication", namespace, app) + "/status", body), f"{app} {state}")


def events(plane: ControlPlane, namespace: str, name: str) -> list[dict[str, Any]]:
    items = plane.admin.ok(plane.admin.get(f"/api/v1/namespaces/{namespace}/events"), "events")["items"]
    return [e for e in items if e["involvedObject"]["name"] == name]


def test_streaming_job_lifecycle(control_plane: ControlPlane, watched: str) -> None:
    ns, admin = watched, control_plane.admin
    manifest = load("rmi-streamingjob.yaml", ns, restart={"initialBackoff": "2s"})
    job = admin.ok(admin.create(path_of("StreamingJob", ns), manifest), "create")
    app = eventually(lambda: get(control_plane, "SparkApplication", ns, "rmi"), "the SparkApplication")
    owner = app["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("StreamingJob", job["metadata"]["uid"], True)
    cm = get(control_plane, "ConfigMap", ns, "rmi-jobconfig")
    assert cm is not None and cm["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    first_hash = app["metadata"]["annotations"]["kappa.dev/config-hash"]
    eventually(lambda: phase(control_plane, "StreamingJob", ns, "rmi") == "Submitted", "phase Submitted")

    spark_state(control_plane, ns, "rmi", "RUNNING")
    eventually(lambda: phase(control_plane, "StreamingJob", ns, "rmi") == "Running", "phase Running")
    stored = get(control_plane, "StreamingJob", ns, "rmi")
    assert stored is not None and stored["status"]["observedGeneration"] == stored["metadata"]["generation"]

    app_uid = app["metadata"]["uid"]
    spark_state(control_plane, ns, "rmi", "FAILED", "driver OOM")
    eventually(lambda: phase(control_plane, "StreamingJob", ns, "rmi") == "BackingOff", "phase BackingOff")
    failed = [e for e in events(control_plane, ns, "rmi") if e["type"] == "Warning"]
    assert failed, "a failure is a Warning event (kubectl get events --field-selector type=Warning)"
    assert "driver OOM" in failed[0]["message"] and failed[0]["reason"] == "BackingOff"

    def recreated() -> dict[str, Any] | None:
        a = get(control_plane, "SparkApplication", ns, "rmi")
        return a if a is not None and a["metadata"]["uid"] != app_uid else None

    again = eventually(recreated, "the operator restarted the application after its backoff", timeout=60)
    assert again["spec"]["restartPolicy"] == {"type": "Never"}, "the operator restarts it, not the Spark operator"
    stored = get(control_plane, "StreamingJob", ns, "rmi")
    assert stored is not None and stored["status"]["restarts"] == 1

    admin.ok(
        admin.merge(path_of("StreamingJob", ns, "rmi"), {"spec": {"pipelineArgs": {"lateness": "45 minutes"}}}),
        "spec change",
    )

    def restarted() -> bool:
        a = get(control_plane, "SparkApplication", ns, "rmi")
        return a is not None and a["metadata"]["annotations"]["kappa.dev/config-hash"] != first_hash

    eventually(restarted, "the application restarted with the new config")
    cm = get(control_plane, "ConfigMap", ns, "rmi-jobconfig")
    assert cm is not None and json.loads(cm["data"]["job.json"])["pipelineArgs"] == {"lateness": "45 minutes"}

    admin.ok(admin.merge(path_of("StreamingJob", ns, "rmi"), {"spec": {"suspend": True}}), "suspend")
    eventually(
        lambda: get(control_plane, "SparkApplication", ns, "rmi") is None, "the application gone while suspended"
    )
    eventually(lambda: phase(control_plane, "StreamingJob", ns, "rmi") == "Suspended", "phase Suspended")
    admin.ok(admin.merge(path_of("StreamingJob", ns, "rmi"), {"spec": {"suspend": False}}), "resume")
    eventually(lambda: get(control_plane, "SparkApplication", ns, "rmi"), "the application back after resume")

    admin.ok(admin.delete(path_of("StreamingJob", ns, "rmi")), "delete")
    eventually(lambda: get(control_plane, "StreamingJob", ns, "rmi") is None, "the job gone (finalizer removed)")
    eventually(lambda: get(control_plane, "SparkApplication", ns, "rmi") is None, "the application gone with it")
    eventually(lambda: get(control_plane, "ConfigMap", ns, "rmi-jobconfig") is None, "the ConfigMap gone with it")


def test_garbage_collection_follows_owner_references(control_plane: ControlPlane, watched: str) -> None:
    """What the emulator only imitated: the controller manager deletes what a gone owner owned.
    The operator's finalizer is taken off by hand (as `kubectl patch` would, the operator
    being asked nothing), and the children still go, by their ownerReferences alone."""
    ns, admin = watched, control_plane.admin
    body = load("rmi-streamingjob.yaml", ns)
    body["metadata"]["name"] = "orphaned"
    admin.ok(admin.create(path_of("StreamingJob", ns), body), "create")
    eventually(lambda: get(control_plane, "SparkApplication", ns, "orphaned"), "the SparkApplication")
    eventually(lambda: get(control_plane, "ConfigMap", ns, "orphaned-jobconfig"), "the ConfigMap")
    path = path_of("StreamingJob", ns, "orphaned")
    admin.ok(admin.request("DELETE", path, {"propagationPolicy": "Background"}), "delete")
    admin.merge(path, {"metadata": {"finalizers": None}})
    eventually(lambda: get(control_plane, "StreamingJob", ns, "orphaned") is None, "the job gone")
    eventually(lambda: get(control_plane, "SparkApplication", ns, "orphaned") is None, "the application collected")
    eventually(lambda: get(control_plane, "ConfigMap", ns, "orphaned-jobconfig") is None, "the ConfigMap collected")


def test_repeated_events_are_counted_on_one_event(control_plane: ControlPlane, watched: str) -> None:
    """A Backfill whose job does not exist waits in Pending and says so: one Event per reason,
    counted, reported by the operator, never a new Event every tick (issue 27, Fix 7)."""
    ns, admin = watched, control_plane.admin
    body = load("rmi-backfill.yaml", ns)
    body["metadata"]["name"] = "no-job"
    body["spec"]["jobRef"] = {"name": "nonexistent"}
    admin.ok(admin.create(path_of("Backfill", ns), body), "create")
    eventually(lambda: phase(control_plane, "Backfill", ns, "no-job") == "Pending", "phase Pending")
    time.sleep(12)  # several timer ticks
    mine = events(control_plane, ns, "no-job")
    assert mine, "the operator says why the backfill waits"
    keys = [(e["type"], e["reason"], e["message"]) for e in mine]
    assert len(keys) == len(set(keys)), f"repeated events were posted anew: {keys}"
    for event in mine:
        assert event["type"] in ("Normal", "Warning"), event
        component = event.get("reportingComponent") or (event.get("source") or {}).get("component")
        assert component == "kappa-operator", event
    admin.ok(admin.delete(path_of("Backfill", ns, "no-job")), "delete")
    eventually(lambda: get(control_plane, "Backfill", ns, "no-job") is None, "the backfill gone")


def test_backfill_runs_to_its_application_and_its_deleted_job_is_noticed(
    control_plane: ControlPlane, watched: str
) -> None:
    """A Backfill of a running job: its application, its coordinator Secret (the grant the
    chart README documents), and, when the job is deleted mid-run, `jobDeleted` and a Warning
    at once, without waiting for its application to change (issue 27, Fix 8)."""
    ns, admin = watched, control_plane.admin
    job = load("rmi-streamingjob.yaml", ns)
    job["metadata"]["name"] = "bf-job"
    admin.ok(admin.create(path_of("StreamingJob", ns), job), "job")
    body = load("rmi-backfill.yaml", ns, jobRef={"name": "bf-job"})
    body["metadata"]["name"] = "bf"
    admin.ok(admin.create(path_of("Backfill", ns), body), "backfill")
    name = "bf-backfill"
    app = eventually(lambda: get(control_plane, "SparkApplication", ns, name), "the backfill's SparkApplication")
    assert app["metadata"]["ownerReferences"][0]["kind"] == "Backfill"
    spark_state(control_plane, ns, name, "RUNNING")
    eventually(lambda: phase(control_plane, "Backfill", ns, "bf") == "Running", "phase Running")
    secrets = admin.ok(admin.get(f"/api/v1/namespaces/{ns}/secrets"), "secrets")["items"]
    assert "bf-backfill-coordinator" in {s["metadata"]["name"] for s in secrets}, "the backfill's coordinator Secret"

    admin.ok(admin.delete(path_of("StreamingJob", ns, "bf-job")), "delete the job")
    started = time.monotonic()
    eventually(
        lambda: ((get(control_plane, "Backfill", ns, "bf") or {}).get("status") or {}).get("jobDeleted"),
        "status.jobDeleted",
        timeout=15,
    )
    assert time.monotonic() - started < 15
    assert any(e["reason"] == "JobDeleted" and e["type"] == "Warning" for e in events(control_plane, ns, "bf"))

    admin.ok(admin.delete(path_of("Backfill", ns, "bf")), "delete the backfill")
    eventually(lambda: get(control_plane, "Backfill", ns, "bf") is None, "the backfill gone", timeout=30)
    eventually(lambda: get(control_plane, "SparkApplication", ns, name) is None, "its application gone")


def test_bulk_delete_finishes_in_seconds(control_plane: ControlPlane, watched: str, operator: OperatorProcess) -> None:
    """Deleting many Backfills at once: none waits for kopf's 60 s timer re-check (issue 27,
    Fix 4). 60 here; bench/operator.py --real-apiserver measures 200 and 1,000."""
    ns, admin = watched, control_plane.admin
    job = load("rmi-streamingjob.yaml", ns)
    job["metadata"]["name"] = "bulk-job"
    admin.ok(admin.create(path_of("StreamingJob", ns), job), "job")
    names = [f"bulk-{i:03d}" for i in range(60)]
    for name in names:
        body = load("rmi-backfill.yaml", ns, jobRef={"name": "bulk-job"})
        body["metadata"]["name"] = name
        admin.ok(admin.create(path_of("Backfill", ns), copy.deepcopy(body)), name)

    def apps() -> int:
        items = admin.ok(admin.get(path_of("SparkApplication", ns)), "apps")["items"]
        return sum(1 for a in items if a["metadata"]["ownerReferences"][0]["kind"] == "Backfill")

    eventually(lambda: apps() == len(names), "every backfill's application", timeout=120, every=1)
    for name in names:  # running: their progress timers tick
        spark_state(control_plane, ns, f"{name}-backfill", "RUNNING")
    time.sleep(6)
    started = time.monotonic()
    admin.ok(admin.request("DELETE", path_of("Backfill", ns), params={"propagationPolicy": "Background"}), "delete all")

    def left() -> int:
        return len(admin.ok(admin.get(path_of("Backfill", ns)), "backfills")["items"])

    eventually(lambda: left() == 0, "every backfill gone", timeout=50, every=0.5)
    took = time.monotonic() - started
    assert took < 20, f"deleting {len(names)} backfills took {took:.1f} s"
    admin.ok(admin.delete(path_of("StreamingJob", ns, "bulk-job")), "delete the job")


def refuse_updates(plane: ControlPlane, namespace: str, name: str) -> str:
    """A ValidatingAdmissionPolicy that refuses every update of one Backfill (status and
    finalizers included): a real server refusing the operator's patches, as a stored null once
    made it do (issue 27, Fix 2 and 3). Returns the policy's name, to remove it."""
    policy = f"refuse-{namespace}-{name}"
    plane.apply_manifests(
        [
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicy",
                "metadata": {"name": policy},
                "spec": {
                    "failurePolicy": "Fail",
                    "matchConstraints": {
                        "resourceRules": [
                            {
                                "apiGroups": ["kappa.dev"],
                                "apiVersions": ["*"],
                                "operations": ["UPDATE"],
                                "resources": ["backfills", "backfills/status"],
                            }
                        ]
                    },
                    "validations": [
                        {
                            "expression": f"object.metadata.name != '{name}'",
                            "message": f"updates of {name} are refused by the test",
                        }
                    ],
                },
            },
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicyBinding",
                "metadata": {"name": policy},
                "spec": {
                    "policyName": policy,
                    "validationActions": ["Deny"],
                    "matchResources": {
                        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
                    },
                },
            },
        ]
    )
    return policy


def allow_updates(plane: ControlPlane, policy: str) -> None:
    plane.admin.delete(path_of("ValidatingAdmissionPolicyBinding", name=policy))
    plane.admin.delete(path_of("ValidatingAdmissionPolicy", name=policy))


def test_an_object_the_operator_cannot_patch_is_reported_and_its_deletion_retried(
    control_plane: ControlPlane, watched: str
) -> None:
    """The server refuses every patch of a Backfill: the operator says so on the object (a
    Warning event naming the refusal), never ignores it; deleted while refused, the Backfill
    keeps its finalizer until patches go through again, then goes (issue 27, Fix 2, 3)."""
    ns, admin = watched, control_plane.admin
    body = load("rmi-backfill.yaml", ns, jobRef={"name": "absent-job"})
    body["metadata"]["name"] = "unpatchable"
    policy = refuse_updates(control_plane, ns, "unpatchable")
    try:
        time.sleep(1.5)  # the policy reaches the admission plugin
        admin.ok(admin.create(path_of("Backfill", ns), body), "create")

        def refused_warning() -> bool:
            return any(
                e["type"] == "Warning" and "refused by the test" in e["message"]
                for e in events(control_plane, ns, "unpatchable")
            )

        eventually(refused_warning, "a Warning event saying the server refused the operator's patch", timeout=30)
    finally:
        allow_updates(control_plane, policy)
    eventually(
        lambda: (
            "kappa.dev/finalizer"
            in ((get(control_plane, "Backfill", ns, "unpatchable") or {}).get("metadata", {}).get("finalizers") or [])
        ),
        "the finalizer, once patches go through",
        timeout=60,
    )

    policy = refuse_updates(control_plane, ns, "unpatchable")
    try:
        time.sleep(1.5)
        admin.ok(admin.delete(path_of("Backfill", ns, "unpatchable")), "delete")
        time.sleep(5)
        assert get(control_plane, "Backfill", ns, "unpatchable") is not None, "the finalizer held"
    finally:
        allow_updates(control_plane, policy)
    eventually(
        lambda: get(control_plane, "Backfill", ns, "unpatchable") is None,
        "the backfill gone once its finalizer could be removed",
        timeout=90,
    )


def test_pod_settings_reach_the_spark_applications_the_server_stores(control_plane: ControlPlane, watched: str) -> None:
    """Issue 30 item 2 on the real API server, whose spark-operator CRD prunes what its schema
    does not know and refuses what it does not accept: a StreamingJob's pod settings arrive in
    its SparkApplication field by field, and a Backfill's overrides in the backfill's."""
    from tests.unit.kappa_operator.render.test_render import POD_SETTINGS

    ns, admin = watched, control_plane.admin
    job = load(
        "rmi-streamingjob.yaml",
        ns,
        driver={"cores": 1, "memory": "2g", **POD_SETTINGS},
        executor={"instances": 2, "cores": 1, "memory": "4g", **POD_SETTINGS},
        volumes=[{"name": "scratch", "emptyDir": {"sizeLimit": "10Gi"}}],
        imagePullSecrets=["registry-creds"],
    )
    job["metadata"]["name"] = "pods"
    admin.ok(admin.create(path_of("StreamingJob", ns), job), "create")
    app = eventually(lambda: get(control_plane, "SparkApplication", ns, "pods"), "the SparkApplication")
    spec = app["spec"]
    assert spec["imagePullSecrets"] == ["registry-creds"]
    assert {"name": "scratch", "emptyDir": {"sizeLimit": "10Gi"}} in spec["volumes"]
    for role in ("driver", "executor"):
        pod = spec[role]
        for key in ("memoryOverhead", "nodeSelector", "tolerations", "affinity", "env"):
            assert pod[key] == POD_SETTINGS[key], (role, key)
        # the user's, and how long the pod may stay on a node that stopped answering (issue 59)
        assert pod["annotations"] == {**POD_SETTINGS["annotations"], "kappa.dev/node-lost-after": "30"}, role
        for key in ("securityContext", "podSecurityContext", "priorityClassName", "serviceAccount"):
            assert pod[key] == POD_SETTINGS[key], (role, key)
        theirs = POD_SETTINGS["volumeMounts"]
        assert pod["volumeMounts"][-len(theirs) :] == theirs, "ours first, then theirs"
        assert pod["labels"]["team"] == "growth"

    body = load(
        "rmi-backfill.yaml", ns, jobRef={"name": "pods"}, executor={"instances": 8, "nodeSelector": {"p": "spot"}}
    )
    body["metadata"]["name"] = "pods-bf"
    admin.ok(admin.create(path_of("Backfill", ns), body), "backfill")
    bf_app = eventually(lambda: get(control_plane, "SparkApplication", ns, "pods-bf-backfill"), "the backfill's app")
    executor = bf_app["spec"]["executor"]
    assert (executor["instances"], executor["nodeSelector"], executor["memory"]) == (8, {"p": "spot"}, "4g")
    assert executor["tolerations"] == POD_SETTINGS["tolerations"], "the rest is the job's"
