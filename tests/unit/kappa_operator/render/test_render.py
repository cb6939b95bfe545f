"""StreamingJob and Backfill rendered into JobConfig, ConfigMap and SparkApplication (pure)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from kappa_operator.models.backfill import Backfill
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.render.driver_metrics import with_driver_metrics
from kappa_operator.render.jobconfig import backfill_config, config_hash, streaming_job_config
from kappa_operator.render.spark_application import (
    BACKFILL_RESTART,
    EXECUTOR_FAILURES,
    LIVE_RESTART,
    Launch,
    Owner,
    config_map,
    spark_application,
)
from spark_app.contract.config import parse_config
from spark_app.contract.sinks import IcebergSink, KafkaSink
from spark_app.contract.sources import IcebergLiveSource, KafkaSource, ReadLimitConfig

ROOT = Path(__file__).resolve().parents[4]


def manifest(name: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / "examples" / name).read_text())


@pytest.fixture
def job() -> StreamingJob:
    return StreamingJob.model_validate({**manifest("rmi-streamingjob.yaml"), "metadata": {"name": "rmi", "uid": "u-1"}})


@pytest.fixture
def backfill() -> Backfill:
    data = manifest("rmi-backfill.yaml")
    return Backfill.model_validate({**data, "metadata": {**data["metadata"], "uid": "abcdef0123"}})


def test_a_streaming_job_runs_live_with_its_own_checkpoint(job: StreamingJob) -> None:
    cfg = streaming_job_config(job)
    assert cfg.mode == "live" and cfg.name == "rmi" and cfg.pipeline == "spark_app.examples.rmi:pipeline"
    assert {s.kind for s in cfg.sources.values()} == {"icebergLive"}
    assert cfg.checkpoint.location == "s3a://lake/checkpoints/rmi/live"
    assert cfg.effective_trigger.kind == "processingTime" and cfg.effective_trigger.interval.total_seconds() == 30
    assert cfg.sink_branch("attributed_plays") == "main"
    assert parse_config(json.loads(cfg.to_json())) == cfg, "the JSON in the ConfigMap round-trips"


def test_a_backfill_reads_history_into_its_branch_from_a_fresh_checkpoint(
    job: StreamingJob, backfill: Backfill
) -> None:
    cfg = backfill_config(backfill, job, "http://kappa-coordinator.kappa:8471")
    assert cfg.mode == "backfill" and cfg.effective_trigger.kind == "availableNow"
    assert {n: (s.kind, s.table) for n, s in cfg.sources.items()} == {  # type: ignore[union-attr]
        "impressions": ("icebergBackfill", "ingest.impressions"),
        "playbacks": ("icebergBackfill", "ingest.playbacks"),
    }
    assert cfg.window is not None and cfg.window.warmup.total_seconds() == 1800
    assert cfg.checkpoint.location == "s3a://lake/checkpoints/rmi/backfills/rmi-outage-abcdef01"
    sink = cfg.sinks["attributed_plays"]
    assert isinstance(sink, IcebergSink) and cfg.sink_branch("attributed_plays") == "backfill-rmi-outage"
    assert sink.key == ["playback_id", "impression_id"]
    assert cfg.alignment.group == "default.rmi-outage" and cfg.alignment.max_drift.total_seconds() == 600
    assert cfg.alignment.batch_row_budget == 30_000 and cfg.round_budget == 30_000, "merged rounds by default"
    assert cfg.coordinator is not None and cfg.coordinator.token is None, "the token is not put in a ConfigMap"


def kafka_job(job: StreamingJob, **live: Any) -> StreamingJob:
    data = job.model_dump(by_alias=True, exclude_none=True)
    data["spec"]["sources"]["impressions"]["live"] = {"kind": "kafka", "bootstrapServers": "kafka:9092", **live}
    return StreamingJob.model_validate(data)


def test_a_kafka_source_reads_live_from_kafka_and_its_archive_in_a_backfill(
    job: StreamingJob, backfill: Backfill
) -> None:
    """The mapping from a topic to its archive table is declared once (the source's history):
    live the values follow that table's schema; a Backfill reads the table itself."""
    kafka = kafka_job(job, topic="impressions", startingPosition="earliest", maxOffsetsPerTrigger=5000)
    src = streaming_job_config(kafka).sources["impressions"]
    assert isinstance(src, KafkaSource) and src.subscription == ("subscribe", "impressions")
    assert src.schema_from == "default:ingest.impressions" and src.schema_ddl is None
    assert src.options == {"startingOffsets": "earliest", "maxOffsetsPerTrigger": "5000", "failOnDataLoss": "true"}
    history = backfill_config(backfill, kafka, None).sources["impressions"]
    assert (history.kind, history.table) == ("icebergBackfill", "ingest.impressions")  # type: ignore[union-attr]

    archive = kafka_job(
        job, topicPattern="impressions-.*", startingTime="2026-11-01T14:00:00Z", valueSchema="id STRING, ts TIMESTAMP"
    )
    src = streaming_job_config(archive).sources["impressions"]
    assert isinstance(src, KafkaSource) and src.subscription == ("subscribePattern", "impressions-.*")
    assert src.schema_ddl == "id STRING, ts TIMESTAMP" and src.schema_from is None
    assert src.options["startingTimestamp"] == str(int(datetime(2026, 11, 1, 14, tzinfo=UTC).timestamp() * 1000))
    assert "startingOffsets" not in src.options, "a time overrides the position"


def test_an_iceberg_live_sources_per_trigger_caps_are_its_read_limit(
    job: StreamingJob,
) -> None:
    """A job from `earliest` on a big table reads it all in its first batch without a cap."""
    before = streaming_job_config(job)
    assert before.sources["impressions"].read_limit == ReadLimitConfig()  # type: ignore[union-attr]
    data = job.model_dump(by_alias=True, exclude_none=True)
    data["spec"]["sources"]["impressions"]["live"] |= {"maxSnapshotsPerTrigger": 1, "maxFilesPerTrigger": 20}
    capped = streaming_job_config(StreamingJob.model_validate(data))
    src = capped.sources["impressions"]
    assert isinstance(src, IcebergLiveSource)
    assert src.read_limit == ReadLimitConfig(max_snapshots=1, max_files=20)
    assert parse_config(json.loads(capped.to_json())).sources["impressions"].read_limit.max_snapshots == 1  # type: ignore[union-attr]
    assert config_hash(capped) != config_hash(before)
    with pytest.raises(ValidationError, match="are for an icebergLive source"):
        kafka_job(job, topic="t", maxFilesPerTrigger=10)


def test_a_kafka_sink_writes_its_topic_live_and_a_backfill_topic_in_a_backfill(
    job: StreamingJob, backfill: Backfill
) -> None:
    data = job.model_dump(by_alias=True, exclude_none=True)
    data["spec"]["sinks"]["attributed_plays"] = {
        "kind": "kafka", "bootstrapServers": "kafka:9092", "topic": "plays", "key": ["playback_id"],
    }  # fmt: skip
    kafka = StreamingJob.model_validate(data)
    live = streaming_job_config(kafka).sinks["attributed_plays"]
    assert isinstance(live, KafkaSink) and (live.topic, live.key, live.bootstrap_servers) == (
        "plays", ["playback_id"], "kafka:9092",
    )  # fmt: skip
    rewritten = backfill_config(backfill, kafka, None).sinks["attributed_plays"]
    assert isinstance(rewritten, KafkaSink) and rewritten.topic == "plays-backfill-rmi-outage", "never the live topic"
    del data["spec"]["sinks"]["attributed_plays"]["key"]
    with pytest.raises(ValueError, match="a kafka sink needs bootstrapServers, topic and key"):
        StreamingJob.model_validate(data)


def test_backfill_overrides_and_unknown_sources(job: StreamingJob, backfill: Backfill) -> None:
    data = backfill.model_dump(by_alias=True, exclude_none=True)
    data["spec"]["readLimit"] = {"maxBytesPerSecond": 10**6}
    capped = backfill_config(Backfill.model_validate(data), job, None)
    assert capped.alignment.batch_row_budget == 30_000 and capped.round_budget == 0, "no merged rounds under a cap"
    del data["spec"]["readLimit"]
    data["spec"]["alignment"]["batchRowBudget"] = 0
    assert backfill_config(Backfill.model_validate(data), job, None).round_budget == 0
    data["spec"]["sources"] = {"playbacks": {"table": "archive.playbacks", "filter": "duration_s > 0"}}
    data["spec"]["output"] = {"branch": "audit"}
    cfg = backfill_config(Backfill.model_validate(data), job, None)
    assert cfg.sources["playbacks"].table == "archive.playbacks"  # type: ignore[union-attr]
    assert cfg.sources["playbacks"].filter == "(duration_s > 0)"  # type: ignore[union-attr]
    assert cfg.sink_branch("attributed_plays") == "audit" and cfg.coordinator is None
    data["spec"]["sources"] = {"clicks": {"table": "x.clicks"}}
    with pytest.raises(ValueError, match=r"\['clicks'\] are not sources of StreamingJob rmi"):
        backfill_config(Backfill.model_validate(data), job, None)


def test_spark_application_and_config_map(job: StreamingJob) -> None:
    cfg = streaming_job_config(job)
    owner = Owner("StreamingJob", "rmi", "default", "u-1")
    launch = Launch(job.spec.image, job.spec.driver, job.spec.executor, "spark", LIVE_RESTART)
    h = config_hash(cfg)
    cm = config_map(owner, cfg)
    app = spark_application(owner, cfg, launch, h)
    # the JobConfig as the pods run it: the job's, with Spark's metrics served by the driver
    assert json.loads(cm["data"]["job.json"]) == json.loads(with_driver_metrics(cfg).to_json())
    assert app["spec"]["sparkConf"] == {**EXECUTOR_FAILURES, **json.loads(cm["data"]["job.json"])["sparkConf"]}
    ref = app["metadata"]["ownerReferences"][0]
    assert (ref["kind"], ref["name"], ref["uid"], ref["controller"]) == ("StreamingJob", "rmi", "u-1", True)
    assert cm["metadata"]["ownerReferences"] == [ref]
    spec = app["spec"]
    # the operator restarts a failed live application itself, with backoff (reconcile.restarts)
    assert (spec["type"], spec["mode"], spec["restartPolicy"]["type"]) == ("Python", "cluster", "Never")
    assert spec["arguments"] == ["--config", "/etc/kappa/job.json"]
    assert spec["volumes"][0]["configMap"]["name"] == cm["metadata"]["name"]
    for role in ("driver", "executor"):
        assert spec[role]["volumeMounts"] == [{"name": "jobconfig", "mountPath": "/etc/kappa"}]
        assert spec[role]["labels"]["kappa.dev/config-hash"] == h
    assert spec["executor"]["instances"] == 2 and spec["executor"]["memory"] == "4g"
    assert app["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "kappa-operator"
    live = spark_application(owner, cfg, launch, h, control=True)
    control = {"name": "kappa-control", "configMap": {"name": "rmi-control", "optional": True}}
    assert control in live["spec"]["volumes"], "a live job's driver mounts its control ConfigMap"
    mount = {"name": "kappa-control", "mountPath": "/etc/kappa/control", "readOnly": True}
    assert mount in live["spec"]["driver"]["volumeMounts"] and mount not in live["spec"]["executor"]["volumeMounts"]


def test_rendered_spark_applications_validate_against_the_spark_operator_crd(
    job: StreamingJob, backfill: Backfill
) -> None:
    from tests.crd_validation import load_crd, validate

    crd = load_crd(ROOT / "tests" / "fixtures" / "sparkoperator.k8s.io_sparkapplications.yaml")
    live = spark_application(
        Owner("StreamingJob", "rmi", "default", "u-1"),
        streaming_job_config(job),
        Launch(job.spec.image, job.spec.driver, job.spec.executor, "spark", LIVE_RESTART),
        "h",
    )
    bf = spark_application(
        Owner("Backfill", "rmi-outage", "default", "abcdef0123"),
        backfill_config(backfill, job, "http://c:8471"),
        Launch(job.spec.image, job.spec.driver, job.spec.executor, "spark", BACKFILL_RESTART, "kappa-coordinator"),
        "h",
    )
    assert validate(crd, live) == []
    assert validate(crd, bf) == []
    assert bf["spec"]["driver"]["env"][0]["valueFrom"]["secretKeyRef"] == {"name": "kappa-coordinator", "key": "token"}


def test_a_backfills_driver_plans_while_its_executors_start_and_a_live_job_keeps_sparks_wait(
    job: StreamingJob, backfill: Backfill
) -> None:
    """Spark on Kubernetes holds a new session until 80% of its executors registered (or 30 s):
    a backfill's applications do not wait (its driver plans meanwhile), unless its job says
    otherwise; a live job keeps Spark's default."""
    launch = Launch(job.spec.image, job.spec.driver, job.spec.executor, "spark", BACKFILL_RESTART)
    owner = Owner("Backfill", "rmi-outage", "default", "abcdef0123")
    cfg = backfill_config(backfill, job, "http://c:8471")
    for command in ("run", "publish", "plan"):
        conf = spark_application(owner, cfg, launch, "h", command=command)["spec"]["sparkConf"]
        assert conf["spark.scheduler.minRegisteredResourcesRatio"] == "0", command
    own = cfg.model_copy(update={"spark_conf": {**cfg.spark_conf, "spark.scheduler.minRegisteredResourcesRatio": "1"}})
    conf = spark_application(owner, own, launch, "h")["spec"]["sparkConf"]
    assert conf["spark.scheduler.minRegisteredResourcesRatio"] == "1", "the job's own setting wins"
    live = spark_application(Owner("StreamingJob", "rmi", "default", "u-1"), streaming_job_config(job), launch, "h")
    assert "spark.scheduler.minRegisteredResourcesRatio" not in live["spec"]["sparkConf"]


def test_every_application_counts_executor_failures_in_a_window_and_a_jobs_own_setting_wins(
    job: StreamingJob, backfill: Backfill
) -> None:
    """Spark's own limit (max(2 x executors, 3) over the application's life, each failed pod
    creation counted) ends a driver in a 60-s API server outage; ours is 300 within 10 minutes."""
    launch = Launch(job.spec.image, job.spec.driver, job.spec.executor, "spark", BACKFILL_RESTART)
    live_cfg = streaming_job_config(job)
    bf_cfg = backfill_config(backfill, job, "http://c:8471")
    for owner, cfg in (
        (Owner("StreamingJob", "rmi", "default", "u-1"), live_cfg),
        (Owner("Backfill", "rmi-outage", "default", "abcdef0123"), bf_cfg),
    ):
        conf = spark_application(owner, cfg, launch, "h")["spec"]["sparkConf"]
        assert conf["spark.executor.failuresValidityInterval"] == "10m", owner.kind
        assert conf["spark.executor.maxNumFailures"] == "300", owner.kind
    own = live_cfg.model_copy(update={"spark_conf": {**live_cfg.spark_conf, "spark.executor.maxNumFailures": "8"}})
    conf = spark_application(Owner("StreamingJob", "rmi", "default", "u-1"), own, launch, "h")["spec"]["sparkConf"]
    assert conf["spark.executor.maxNumFailures"] == "8", "the job's own setting wins"
    assert conf["spark.executor.failuresValidityInterval"] == "10m"


def test_the_config_hash_changes_with_the_spec(job: StreamingJob) -> None:
    data = job.model_dump(by_alias=True, exclude_none=True)
    data["spec"]["pipelineArgs"] = {"lateness": "45 minutes"}
    changed = StreamingJob.model_validate(data)
    assert config_hash(streaming_job_config(job)) != config_hash(streaming_job_config(changed))
    assert config_hash(streaming_job_config(job)) == config_hash(streaming_job_config(job))


def test_every_application_of_a_job_carries_its_credentials_and_validates(
    job: StreamingJob, backfill: Backfill
) -> None:
    """The job's envFrom (its catalog and object-store credentials) goes to the driver and the
    executors of each application the operator renders for it: live, backfill, publish and a
    Rewind's restore; the operator itself never mounts or reads them."""
    from kappa_operator.models.rewind import Rewind, SinkRestore
    from kappa_operator.render.jobconfig import restore_config
    from kappa_operator.render.spark_application import job_launch
    from tests.crd_validation import load_crd, validate

    env_from = [{"secretRef": {"name": "lake-credentials"}}, {"configMapRef": {"name": "lake"}, "prefix": "LAKE_"}]
    data = job.model_dump(by_alias=True, exclude_none=True)
    data["spec"]["envFrom"] = env_from
    job = StreamingJob.model_validate(data)
    rw = Rewind.model_validate({**manifest("rmi-rewind.yaml"), "metadata": {"name": "rmi-before-outage", "uid": "r-1"}})
    point = SinkRestore(sink="attributed_plays", batch_id=3, committed_at="2026-11-01T13:00:00Z", query_id="q")
    bf_owner = Owner("Backfill", "rmi-outage", "default", "abcdef0123")
    apps = [
        spark_application(
            Owner("StreamingJob", "rmi", "default", "u-1"),
            streaming_job_config(job),
            job_launch(job, LIVE_RESTART),
            "h",
        ),
        spark_application(
            bf_owner, backfill_config(backfill, job, None), job_launch(job, BACKFILL_RESTART, None, "t"), "h"
        ),
        spark_application(
            bf_owner, backfill_config(backfill, job, None), job_launch(job, BACKFILL_RESTART), "h", command="publish"
        ),
        spark_application(
            Owner("Rewind", "rmi-before-outage", "default", "r-1"),
            restore_config(rw, job, (point,), "s3a://lake/checkpoints/rmi/rewinds/x"),
            job_launch(job, BACKFILL_RESTART),
            "h",
            command="restore",
        ),
    ]
    crd = load_crd(ROOT / "tests" / "fixtures" / "sparkoperator.k8s.io_sparkapplications.yaml")
    names = [a["metadata"]["name"] for a in apps]
    assert names == ["rmi", "rmi-outage-backfill", "rmi-outage-backfill-publish", "rmi-before-outage-rewind"]
    for app in apps:
        assert validate(crd, app) == [], app["metadata"]["name"]
        assert app["spec"]["driver"]["envFrom"] == env_from == app["spec"]["executor"]["envFrom"]
    assert apps[3]["spec"]["arguments"] == ["restore", "--config", "/etc/kappa/job.json"]
    plain = StreamingJob.model_validate({**data, "spec": {**data["spec"], "envFrom": []}})
    assert (
        "envFrom"
        not in spark_application(
            Owner("StreamingJob", "rmi", "default", "u-1"),
            streaming_job_config(plain),
            job_launch(plain, LIVE_RESTART),
            "h",
        )["spec"]["driver"]
    )


def test_a_backfills_read_limit_becomes_its_queries_read_rate(job: StreamingJob, backfill: Backfill) -> None:
    data = backfill.model_dump(by_alias=True, exclude_none=True)
    assert backfill_config(backfill, job, None).read_rate is None
    data["spec"]["readLimit"] = {"maxBytesPerSecond": 50_000_000, "maxFilesPerSecond": 20}
    cfg = backfill_config(Backfill.model_validate(data), job, None)
    assert cfg.read_rate is not None
    assert (cfg.read_rate.max_bytes_per_second, cfg.read_rate.max_files_per_second) == (50_000_000, 20)
    assert json.loads(cfg.to_json())["readRate"] == {"maxBytesPerSecond": 50_000_000, "maxFilesPerSecond": 20.0}


def test_the_kafka_examples_render_an_archive_and_a_job_reading_it() -> None:
    archive = StreamingJob.model_validate(manifest("kafka-archive-streamingjob.yaml"))
    reader = StreamingJob.model_validate(manifest("kafka-rmi-streamingjob.yaml"))
    archived = streaming_job_config(archive)
    src = archived.sources["impressions"]
    sink = archived.sinks["copy"]
    assert isinstance(src, KafkaSource) and src.schema_ddl is not None and "__metadata__ STRUCT<" in src.schema_ddl
    assert isinstance(sink, IcebergSink) and sink.table == "archive.impressions"
    for name, source in streaming_job_config(reader).sources.items():
        assert isinstance(source, KafkaSource) and source.schema_from == f"default:archive.{name}"
    assert sink.table == reader.spec.sources["impressions"].history.table, "the archive is the reader's history"


POD_SETTINGS: dict[str, Any] = {
    "memoryOverhead": "1g",
    "nodeSelector": {"pool": "spark", "topology.kubernetes.io/zone": "eu-west-1a"},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "spark", "effect": "NoSchedule"}],
    "affinity": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "arch", "operator": "In", "values": ["amd64"]}]}]
            }
        }
    },
    "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
    "env": [
        {"name": "TZ", "value": "UTC"},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    ],
    "labels": {"team": "growth", "kappa.dev/config-hash": "mine"},
    "annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"},
    "securityContext": {"runAsNonRoot": True, "allowPrivilegeEscalation": False},
    "podSecurityContext": {"fsGroup": 185},
    "serviceAccount": "spark-growth",
    "priorityClassName": "batch-high",
}


def test_each_pod_carries_how_long_it_may_stay_on_a_node_that_stopped_answering() -> None:
    """Issue 59: ``nodeLostAfter`` (30 s by default) on each pod as an annotation the operator
    reads back (not a toleration: Kubernetes keeps the first matching one, and the API
    server's 300 s default comes before the spark-operator's webhook adds any)."""
    from kappa_operator.models.common import Resources
    from kappa_operator.render.spark_application import NODE_LOST_AFTER, node_lost_after_annotation

    assert node_lost_after_annotation(Resources()) == {NODE_LOST_AFTER: "30"}
    assert node_lost_after_annotation(Resources(nodeLostAfter="2m")) == {NODE_LOST_AFTER: "120"}
    with pytest.raises(ValueError, match="nodeLostAfter"):
        Resources(nodeLostAfter="soon")


def test_pod_settings_reach_the_spark_application_field_by_field_and_validate(job: StreamingJob) -> None:
    """Issue 30 item 2: every pod setting a spark-operator user expects, on the StreamingJob's
    driver and executors, rendered into the SparkApplication (v1beta2) as it is and valid
    against the spark-operator's own CRD; the operator's labels and mounts are never replaced."""
    from kappa_operator.render.spark_application import job_launch
    from tests.crd_validation import load_crd, validate

    data = job.model_dump(by_alias=True, exclude_none=True)
    data["spec"]["driver"] = {"cores": 2, "memory": "4g", **POD_SETTINGS}
    data["spec"]["executor"] = {"instances": 3, "cores": 2, "memory": "8g", **POD_SETTINGS, "serviceAccount": "exec"}
    data["spec"]["volumes"] = [{"name": "scratch", "emptyDir": {"sizeLimit": "10Gi"}}]
    data["spec"]["imagePullSecrets"] = ["registry-creds"]
    job = StreamingJob.model_validate(data)
    app = spark_application(
        Owner("StreamingJob", "rmi", "default", "u-1"), streaming_job_config(job), job_launch(job, LIVE_RESTART), "h"
    )
    spec = app["spec"]
    assert spec["imagePullSecrets"] == ["registry-creds"]
    assert spec["volumes"][1:] == data["spec"]["volumes"] and spec["volumes"][0]["name"] == "jobconfig"
    for role, account in (("driver", "spark-growth"), ("executor", "exec")):
        pod = spec[role]
        for key in (
            "memoryOverhead",
            "nodeSelector",
            "tolerations",
            "affinity",
            "env",
            "securityContext",
            "podSecurityContext",
            "priorityClassName",
        ):
            assert pod[key] == POD_SETTINGS[key], (role, key)
        assert pod["annotations"] == {**POD_SETTINGS["annotations"], "kappa.dev/node-lost-after": "30"}
        assert pod["serviceAccount"] == account
        assert pod["volumeMounts"] == [{"name": "jobconfig", "mountPath": "/etc/kappa"}, *POD_SETTINGS["volumeMounts"]]
        assert pod["labels"]["team"] == "growth" and pod["labels"]["kappa.dev/config-hash"] == "h", "ours win"
    assert (spec["driver"]["cores"], spec["driver"]["memory"]) == (2, "4g")
    assert (spec["executor"]["instances"], spec["executor"]["memory"]) == (3, "8g")
    crd = load_crd(ROOT / "tests" / "fixtures" / "sparkoperator.k8s.io_sparkapplications.yaml")
    assert validate(crd, app) == []
    broken = {**app, "spec": {**spec, "driver": {**spec["driver"], "tolerations": [{"effect": 7}]}}}
    assert validate(crd, broken), "the spark-operator's CRD checks the Kubernetes objects we pass through"


def test_a_backfill_overrides_its_jobs_pods_field_by_field(job: StreamingJob, backfill: Backfill) -> None:
    from kappa_operator.render.spark_application import job_launch
    from tests.crd_validation import load_crd, validate

    data = job.model_dump(by_alias=True, exclude_none=True)
    data["spec"]["executor"] = {"instances": 2, "memory": "4g", "nodeSelector": {"pool": "live"}, "labels": {"a": "1"}}
    job = StreamingJob.model_validate(data)
    bf = backfill.model_dump(by_alias=True, exclude_none=True)
    bf["spec"]["executor"] = {"instances": 10, "nodeSelector": {"pool": "spot"}}
    bf["spec"]["driver"] = {"memory": "8g"}
    backfill = Backfill.model_validate(bf)
    launch = job_launch(job, BACKFILL_RESTART, None, "t", backfill.spec.driver, backfill.spec.executor)
    app = spark_application(
        Owner("Backfill", "rmi-outage", "default", "b-1"), backfill_config(backfill, job, None), launch, "h"
    )
    executor, driver = app["spec"]["executor"], app["spec"]["driver"]
    assert (executor["instances"], executor["memory"], executor["nodeSelector"]) == (10, "4g", {"pool": "spot"})
    assert executor["labels"]["a"] == "1", "what the Backfill does not set is the job's"
    assert (driver["memory"], driver["cores"]) == ("8g", job.spec.driver.cores)
    assert validate(load_crd(ROOT / "tests" / "fixtures" / "sparkoperator.k8s.io_sparkapplications.yaml"), app) == []


def test_a_live_source_reads_its_event_time_from_the_column_its_history_names() -> None:
    """examples/enrich-changes-streamingjob.yaml: the change log's event time is changed_ts, in
    its history and live alike (its live source once read event_ts, which the log has not)."""
    doc = yaml.safe_load((ROOT / "examples" / "enrich-changes-streamingjob.yaml").read_text())
    cfg = streaming_job_config(StreamingJob.model_validate(doc))
    assert cfg.ordering_column("promotion_changes") == "changed_ts"
    assert cfg.ordering_column("impressions") == "event_ts"


def test_no_executors_runs_the_tasks_in_the_driver_on_its_cores_and_validates(
    job: StreamingJob, backfill: Backfill
) -> None:
    """``executor.instances: 0`` (a job's, or a Backfill's own): the JobConfig's master is local on
    the driver's cores (the driver's session sets it; spark-submit's is Kubernetes'), and the
    SparkApplication asks for no executor count, which the spark-operator's schema would refuse."""
    from kappa_operator.render.spark_application import job_launch
    from tests.crd_validation import load_crd, validate

    crd = load_crd(ROOT / "tests" / "fixtures" / "sparkoperator.k8s.io_sparkapplications.yaml")
    assert streaming_job_config(job).master is None and backfill_config(backfill, job, None).master is None
    bf = backfill.model_dump(by_alias=True, exclude_none=True)
    bf["spec"]["executor"], bf["spec"]["driver"] = {"instances": 0}, {"cores": 2}
    small = Backfill.model_validate(bf)
    cfg = backfill_config(small, job, None)
    assert cfg.master == "local[2]"
    app = spark_application(
        Owner("Backfill", "rmi-outage", "default", "b-1"),
        cfg,
        job_launch(job, BACKFILL_RESTART, None, None, small.spec.driver, small.spec.executor),
        config_hash(cfg),
    )
    assert "instances" not in app["spec"]["executor"] and app["spec"]["driver"]["cores"] == 2
    assert validate(crd, app) == []
    assert config_hash(cfg) != config_hash(backfill_config(backfill, job, None)), "a move into the driver is a change"

    data = job.model_dump(by_alias=True, exclude_none=True)
    data["spec"]["executor"] = {"instances": 0}
    alone = StreamingJob.model_validate(data)
    assert streaming_job_config(alone).master == f"local[{alone.spec.driver.cores}]"
    bf["spec"]["executor"] = {"instances": 3}
    assert backfill_config(Backfill.model_validate(bf), alone, None).master is None, "the Backfill's own count wins"
    with pytest.raises(ValueError, match="instances"):
        data["spec"]["executor"] = {"instances": -1}
        StreamingJob.model_validate(data)
