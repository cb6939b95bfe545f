"""Issue 30 item 1 on the real API server: a StreamingJob whose pipeline is not in the image
(``spec.deps``, ``spec.pipelineFrom``) is stored as written (our CRD keeps every field), and
the SparkApplication the operator creates from it is stored by the server with the
spark-operator's ``spec.deps`` and the ConfigMap's volume and mount intact (its CRD prunes
what its schema does not know), and so is a Backfill's application of that job."""

from __future__ import annotations

import json

import pytest

from kappa_operator.local_cluster.control_plane import ControlPlane, eventually
from kappa_operator.local_cluster.rest import path_of
from tests.cluster.test_operator_on_server import get, load

pytestmark = pytest.mark.usefixtures("never_forbidden")

DEPS = {
    "pyFiles": ["s3a://player-insights-artifacts/pipelines/watch_time-0.1.0.zip"],
    "jars": ["local:///opt/spark/extra/udfs-1.0.jar"],
    "packages": ["org.apache.spark:spark-avro_2.13:4.0.0"],
    "repositories": ["https://repo.example.com/maven2"],
    "excludePackages": ["com.google.guava:guava"],
    "files": ["s3a://player-insights-artifacts/conf/tiers.json"],
    "archives": ["s3a://player-insights-artifacts/envs/geo.tar.gz#geo"],
}
SUBMITTED = {k: v for k, v in DEPS.items() if k != "pyFiles"}
"""What the SparkApplication lists: all but the pyFile on S3, which the driver fetches."""
MOUNT = {"name": "kappa-pipeline", "mountPath": "/opt/kappa/pipelines/watch-time-v1", "readOnly": True}


def test_deps_and_a_config_map_pipeline_reach_the_stored_spark_applications(
    control_plane: ControlPlane, watched: str
) -> None:
    ns, admin = watched, control_plane.admin
    job = load("rmi-streamingjob.yaml", ns, deps=DEPS, pipelineFrom={"configMap": {"name": "watch-time-v1"}})
    job["metadata"]["name"] = "own-code"
    stored = admin.ok(admin.create(path_of("StreamingJob", ns), job), "create")
    assert stored["spec"]["deps"] == DEPS and stored["spec"]["pipelineFrom"] == job["spec"]["pipelineFrom"]

    app = eventually(lambda: get(control_plane, "SparkApplication", ns, "own-code"), "the SparkApplication")
    spec = app["spec"]
    assert spec["deps"] == SUBMITTED, "the spark-operator's CRD kept every field spark-submit applies"
    assert {"name": "kappa-pipeline", "configMap": {"name": "watch-time-v1"}} in spec["volumes"]
    assert MOUNT in spec["driver"]["volumeMounts"]
    cm = get(control_plane, "ConfigMap", ns, "own-code-jobconfig")
    assert cm is not None
    config = json.loads(cm["data"]["job.json"])
    # the zip on S3 is the driver's to fetch (spark-submit has no S3A in the spark-operator's pod)
    fetched = [f for f in DEPS["pyFiles"] if f.startswith("s3a://")]
    assert fetched and config["pythonPath"] == [*fetched, "/opt/kappa/pipelines/watch-time-v1"]
    assert config["deps"]["pyFiles"] == DEPS["pyFiles"]

    body = load("rmi-backfill.yaml", ns, jobRef={"name": "own-code"})
    body["metadata"]["name"] = "own-code-bf"
    admin.ok(admin.create(path_of("Backfill", ns), body), "backfill")
    bf_app = eventually(lambda: get(control_plane, "SparkApplication", ns, "own-code-bf-backfill"), "the backfill's")
    assert bf_app["spec"]["deps"] == SUBMITTED, "a Backfill inherits its job's deps"
    assert MOUNT in bf_app["spec"]["driver"]["volumeMounts"], "and its ConfigMap"
