"""A StreamingJob or Backfill as the JobConfig its Spark driver runs (pure).

A Backfill reruns its job's pipeline with every source switched to its history table (plus
the Backfill's overrides), a window, alignment, a fresh checkpoint under the job's location,
and Iceberg sinks writing to the backfill branch; with spec.publish.enabled its ``publish``
settings, which make its driver validate the branch against main and publish the window once
the query has written it (the same JobConfig serves a separate publish application where one
is still needed)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from kappa_operator.models.backfill import Backfill
from kappa_operator.models.common import ExecutorResources, instant, overridden
from kappa_operator.models.external_calls import backfill_rate
from kappa_operator.models.kafka_security import KafkaSecuritySpec
from kappa_operator.models.rewind import Rewind, SinkRestore
from kappa_operator.models.sinks import JobSink
from kappa_operator.models.sources import JobSource, SchemaRegistrySpec
from kappa_operator.models.streaming_job import CheckpointSpec, StreamingJob, StreamingJobSpec
from kappa_operator.models.streaming_job_status import RestorePointStatus
from kappa_operator.render.kafka_security import contract_security, registry_files
from spark_app.contract.config import JobConfig, parse_config
from spark_app.contract.durations import duration_ms
from spark_app.contract.snapshot_requests import REQUESTS_FILE

CONFIG_PATH = "/etc/kappa/job.json"
PIPELINE_MOUNT = "/opt/kappa/pipelines"
"""Where a ``spec.pipelineFrom`` ConfigMap is mounted in the driver, one directory per
ConfigMap name: a new name (a new version) changes the JobConfig, hence its hash."""


def pipeline_mount(name: str) -> str:
    return f"{PIPELINE_MOUNT}/{name}"


def pipeline_code(spec: StreamingJobSpec) -> dict[str, Any]:
    """The JobConfig's ``deps`` and ``pythonPath`` of a job (and of its Backfills and
    Rewinds): nothing when the pipeline is in the image, so those configs (and their
    hashes) are what they were before these fields existed. ``pythonPath``: the pyFiles the
    driver fetches, then the ConfigMap's mount."""
    out: dict[str, Any] = {}
    path = []
    if spec.deps is not None and spec.deps.rendered():
        out["deps"] = spec.deps.rendered()
        path += spec.deps.driver_fetched()  # not spark-submit's: the driver's (packaging.fetched_by_driver)
    if spec.pipeline_from is not None:
        path.append(pipeline_mount(spec.pipeline_from.config_map.name))
    if path:
        out["pythonPath"] = path
    return out


def external_calls(rate: float | None) -> dict[str, Any]:
    """The JobConfig's ``externalCalls`` for a run limited to ``rate`` calls per second
    (nothing without a limit, so those configs and their hashes are what they were)."""
    return {} if rate is None else {"externalCalls": {"ratePerSecond": rate}}


def _kafka_source(
    src: JobSource,
    skip: list[dict[str, Any]],
    security: KafkaSecuritySpec | None,
    registry: SchemaRegistrySpec | None = None,
) -> dict[str, Any]:
    """A kafka live source as Spark's Kafka source options (where a new query starts: a
    checkpoint's offsets win over them, as in Spark), with the ranges of its topics a cascade
    Rewind said not to process."""
    live = src.live
    options: dict[str, str] = {"startingOffsets": live.starting_position}
    if live.starting_time is not None:
        options = {"startingTimestamp": str(int(instant(live.starting_time).timestamp() * 1000))}
    if live.max_offsets_per_trigger is not None:
        options["maxOffsetsPerTrigger"] = str(live.max_offsets_per_trigger)
    options["failOnDataLoss"] = str(live.fail_on_data_loss).lower()
    out: dict[str, Any] = {"kind": "kafka", "bootstrapServers": live.bootstrap_servers, "options": options}
    out |= _security(security)
    if live.topic is not None:
        out["topic"] = live.topic
    else:
        out["topicPattern"] = live.topic_pattern
    if registry is not None:  # nothing for JSON: those configs and hashes are what they were
        topics = [t.strip() for t in (live.topic or "").split(",") if t.strip()]
        subjects = [f"{t}-value" for t in topics]  # a pattern's topics: their ids learned as met
        keys = {"keySubjects": [f"{t}-key" for t in topics]} if live.key_format == "avro" else {}
        out |= {"keyFormat": "avro"} if keys else {}
        out |= {
            "valueFormat": "avro",
            "registry": {"url": registry.url, "subjects": subjects, **keys, **registry_files(registry)},
        }
    if live.value_schema is not None:
        out["schemaDdl"] = live.value_schema
    else:
        out["schemaFrom"] = f"{src.history.catalog}:{src.history.table}"
    pattern = re.compile(live.topic_pattern) if live.topic_pattern else None
    mine = [r for r in skip if r["topic"] == live.topic or (pattern is not None and pattern.fullmatch(r["topic"]))]
    if mine:
        out["skip"] = mine
    return out


def _security(spec: KafkaSecuritySpec | None) -> dict[str, Any]:
    """The JobConfig's ``security``: the files the Secrets are mounted as (nothing without one,
    so those configs and their hashes are what they were)."""
    sec = contract_security(spec)
    return {} if sec is None else {"security": sec.model_dump(by_alias=True, exclude_none=True)}


def skipped_offsets(job: StreamingJob) -> list[dict[str, Any]]:
    """The offset ranges a cascade Rewind told the job not to process (its annotation)."""
    raw = job.metadata.annotations.get(SKIP_ANNOTATION)
    return list(json.loads(raw)) if raw else []


def _live_source(src: JobSource, skip: list[dict[str, Any]], spec: StreamingJobSpec) -> dict[str, Any]:
    live = src.live
    if live.kind == "kafka":
        return _kafka_source(src, skip, spec.security_of(live.security), spec.registry_of(live.schema_registry))
    out: dict[str, Any] = {
        "kind": "icebergLive",
        "catalog": live.catalog,
        "table": live.table,
        "startingPosition": live.starting_position,
        "onNonAppend": live.on_non_append,
    }
    if src.columns is not None:
        out["columns"] = src.columns
    if src.filter:
        out["filter"] = src.filter
    if src.history.ordering_column:  # the source's event time, live as in its history
        out["orderingColumn"] = src.history.ordering_column
    if live.per_trigger():  # nothing without a cap: those configs and their hashes are what they were
        out["readLimit"] = live.per_trigger()
    return out


def rewind_horizon_batches(spec: StreamingJobSpec) -> int:
    """How many of a live query's newest batches a Rewind may undo: the span of restore points
    the retention keeps (count x interval, capped by maxAge, plus the interval being filled),
    in trigger intervals (a batch is never shorter). Compaction leaves their files whole."""
    ckpt = spec.checkpoints
    if ckpt.external_location is None:
        return 0  # no restore points: no Rewind to protect
    interval = duration_ms(ckpt.interval)
    horizon = interval * ckpt.retention.count
    if ckpt.retention.max_age is not None:
        horizon = min(horizon, duration_ms(ckpt.retention.max_age))
    return -(-(horizon + interval) // max(duration_ms(spec.trigger_interval), 1))


def _sink(
    sink: JobSink,
    spec: StreamingJobSpec,
    branch: str | None = None,
    path_suffix: str = "",
    protect_batches: int = 0,
    backfill: str | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": sink.kind}
    if sink.time_column:
        out["timeColumn"] = sink.time_column
    if sink.kind == "iceberg":
        out.update(catalog=sink.catalog, table=sink.table, partitionBy=sink.partition_by, key=sink.key)
        out["history"] = sink.history.model_dump(by_alias=True)
        out["compaction"] = {**sink.compaction.model_dump(by_alias=True), "protectBatches": protect_batches}
        if branch:
            out["branch"] = branch
    elif sink.kind == "kafka":
        topic = str(sink.topic) if backfill is None else backfill_topic(str(sink.topic), backfill)
        security = _security(spec.security_of(sink.security))
        out.update(bootstrapServers=sink.bootstrap_servers, topic=topic, key=sink.key, **security)
        registry = spec.registry_of(sink.schema_registry)
        if registry is not None:  # nothing for JSON: those configs and hashes are what they were
            access = {"url": registry.url, "subject": f"{topic}-value", **registry_files(registry)}
            if sink.key_format == "avro":
                access["keySubject"] = f"{topic}-key"
                out["keyFormat"] = "avro"
            out |= {"valueFormat": "avro", "registry": access}
    else:
        out["path"] = f"{sink.path}{path_suffix}"
    return out


def backfill_topic(topic: str, backfill: str) -> str:
    """Where a Backfill's Kafka sink writes: never the live topic its job's readers consume."""
    return f"{topic}-backfill-{backfill}"[:249]


def _catalogs(job: StreamingJob) -> dict[str, Any]:
    return {name: dict(props) for name, props in job.spec.catalogs.items()}


def _external(ckpt: CheckpointSpec) -> dict[str, Any]:
    """The driver's snapshot settings (it copies its own checkpoint; the operator reads)."""
    if ckpt.external_location is None:
        return {}
    retention = ckpt.retention
    ext: dict[str, Any] = {
        "location": ckpt.external_location,
        "interval": ckpt.interval,
        "keepLast": retention.count,
        "requestsFile": REQUESTS_FILE,  # the control ConfigMap, mounted into the live driver
    }
    if retention.max_age:
        ext["maxAge"] = retention.max_age
    return {"external": ext}


def in_driver(executors: int, driver_cores: int) -> dict[str, Any]:
    """The JobConfig's master when the job has no executors (``executor.instances: 0``): Spark's
    local master on the driver's cores, so its tasks run in the driver's JVM. Why it is the
    JobConfig's and not spark-submit's: the spark-operator submits every application to the
    Kubernetes master; the driver's session (``spark_app.apps.session``) sets its own."""
    return {"master": f"local[{driver_cores}]"} if executors == 0 else {}


def streaming_job_config(job: StreamingJob) -> JobConfig:
    spec = job.spec
    return parse_config(
        {
            "name": job.metadata.name,
            "pipeline": spec.pipeline,
            "pipelineArgs": spec.pipeline_args,
            "mode": "live",
            "catalogs": _catalogs(job),
            "sources": {n: _live_source(s, skipped_offsets(job), spec) for n, s in spec.sources.items()},
            "sinks": {n: _sink(s, spec, protect_batches=rewind_horizon_batches(spec)) for n, s in spec.sinks.items()},
            "checkpoint": {"location": live_checkpoint(job), **_external(spec.checkpoints)},
            "trigger": {"kind": "processingTime", "interval": spec.trigger_interval},
            "alignment": {"orderingColumn": spec.ordering_column, **_bootstrap_drift(spec)},
            "sparkConf": spec.spark_conf,
            **in_driver(spec.executor.instances, spec.driver.cores),
            **_bootstrap(spec),
            **pipeline_code(spec),
            **external_calls(spec.external_calls.rate_per_second if spec.external_calls else None),
            **dead_letters(spec),
        },
        origin=f"(StreamingJob {job.metadata.namespace}/{job.metadata.name})",
    )


def dead_letters(spec: StreamingJobSpec) -> dict[str, Any]:
    """The JobConfig's ``deadLetters`` (nothing without a table, so those configs and their
    hashes are what they were)."""
    table = spec.dead_letter_table
    return {} if table is None else {"deadLetters": {"catalog": table.catalog, "table": table.table}}


def _bootstrap(spec: StreamingJobSpec) -> dict[str, Any]:
    """``spec.bootstrap``: each source's history is its topic's archive, read as a Backfill of
    the job reads it (same table, ordering column, filter and columns)."""
    if spec.bootstrap is None:
        return {}
    return {"bootstrap": {"from": spec.bootstrap.start, "archives": archives_of(spec)}}


def archives_of(spec: StreamingJobSpec) -> dict[str, Any]:
    """Each source's history as its topic's archive (a bootstrap's, or a blueGreen upgrade's
    green, which bootstraps whether or not the job did)."""
    archives = {}
    for name, src in spec.sources.items():
        history = src.history
        archive: dict[str, Any] = {"kind": "icebergBackfill", "catalog": history.catalog, "table": history.table}
        if src.history.ordering_column:
            archive["orderingColumn"] = src.history.ordering_column
        if src.filter:
            archive["filter"] = src.filter
        if src.columns is not None:
            archive["columns"] = src.columns
        archives[name] = archive
    return archives


def _bootstrap_drift(spec: StreamingJobSpec) -> dict[str, Any]:
    return {} if spec.bootstrap is None else {"maxDrift": spec.bootstrap.max_drift}


#: Set by a Rewind on its StreamingJob: the restored checkpoint the job resumes from.
CHECKPOINT_ANNOTATION = "kappa.dev/checkpoint-location"
#: Set by a cascade Rewind on a downstream StreamingJob: JSON offset ranges of the topics it
#: reads not to process (what the upstream job wrote after its restored batch).
SKIP_ANNOTATION = "kappa.dev/skip-offsets"
#: Set by a Rewind while it runs: the job's application is stopped and not recreated.
PAUSED_ANNOTATION = "kappa.dev/paused-by"


def live_checkpoint(job: StreamingJob) -> str:
    """Where the live queries keep their checkpoints (one directory per sink below it)."""
    moved = job.metadata.annotations.get(CHECKPOINT_ANNOTATION)
    return moved or f"{job.spec.checkpoints.location.rstrip('/')}/live"


def backfill_branch(bf: Backfill) -> str:
    return bf.spec.output.branch or f"backfill-{bf.metadata.name}"


def backfill_group(bf: Backfill) -> str:
    return group_name(bf.metadata.namespace, bf.metadata.name, bf.spec.alignment.group)


def group_name(namespace: str, name: str, group: str | None) -> str:
    """Groups are global in the coordinator: namespaced, so two teams' "rmi" never meet."""
    return f"{namespace}.{group or name}"


def backfill_checkpoint(bf: Backfill, job: StreamingJob) -> str:
    """A fresh location per Backfill object (its uid): a retry of the same object resumes it,
    a new Backfill of the same name starts clean."""
    tag = (bf.metadata.uid or "local")[:8]
    return f"{job.spec.checkpoints.location.rstrip('/')}/backfills/{bf.metadata.name}-{tag}"


def backfill_config(bf: Backfill, job: StreamingJob, coordinator_url: str | None) -> JobConfig:
    spec, jspec = bf.spec, job.spec
    unknown = sorted(set(spec.sources) - set(jspec.sources))
    if unknown:
        raise ValueError(f"spec.sources: {unknown} are not sources of StreamingJob {job.metadata.name}")
    sources = {}
    for name, src in jspec.sources.items():
        o = spec.sources.get(name)
        hist: dict[str, Any] = {
            "kind": "icebergBackfill",
            "catalog": (o.catalog if o and o.catalog else src.history.catalog),
            "table": (o.table if o and o.table else src.history.table),
        }
        filters = [f for f in (src.filter, o.filter if o else None) if f]
        if filters:
            hist["filter"] = " and ".join(f"({f})" for f in filters)
        if src.columns is not None:
            hist["columns"] = src.columns
        if src.history.ordering_column:
            hist["orderingColumn"] = src.history.ordering_column
        if o and o.snapshot_id is not None:
            hist["snapshotId"] = o.snapshot_id
        sources[name] = hist
    a = spec.alignment
    alignment: dict[str, Any] = {
        "mode": a.mode,
        "group": backfill_group(bf),
        "maxDrift": a.max_drift,
        "orderingColumn": a.ordering_column or jspec.ordering_column,
        "allowLateDrops": a.allow_late_drops,
        "batchRowBudget": a.batch_row_budget,
    }
    if a.lateness:
        alignment["lateness"] = a.lateness
    executors = overridden(jspec.executor, spec.executor)  # the Backfill's own pods, as job_launch merges them
    assert isinstance(executors, ExecutorResources)
    cfg: dict[str, Any] = {
        "name": bf.metadata.name,
        "pipeline": jspec.pipeline,
        "pipelineArgs": jspec.pipeline_args,
        "mode": "backfill",
        "catalogs": _catalogs(job),
        "sources": sources,
        "sinks": {
            n: _sink(
                s,
                jspec,
                backfill_branch(bf),
                f"/backfills/{bf.metadata.name}",
                backfill=bf.metadata.name,
            )
            for n, s in jspec.sinks.items()
        },
        "checkpoint": {"location": backfill_checkpoint(bf, job)},
        "trigger": {"kind": "availableNow"},
        "window": spec.window.model_dump(by_alias=True, exclude_none=True),
        "alignment": alignment,
        "sparkConf": jspec.spark_conf,
        **in_driver(executors.instances, overridden(jspec.driver, spec.driver).cores),
        **pipeline_code(jspec),
        **external_calls(backfill_rate(jspec.external_calls, spec.external_calls)),
    }
    if spec.publish.enabled:  # the driver validates and publishes once its query wrote the window
        tag = f"{bf.metadata.namespace}/{bf.metadata.name}"
        cfg["publish"] = {"minMatchRatio": spec.publish.min_match_ratio, "tag": tag}
    if spec.read_limit is not None:
        cfg["readRate"] = spec.read_limit.model_dump(by_alias=True, exclude_none=True)
    if coordinator_url and a.mode in ("aligned", "strict", "auto"):  # auto: aligned unless it proves bounded
        cfg["coordinator"] = {"url": coordinator_url}  # the token comes from the driver's env (a Secret)
    return parse_config(cfg, origin=f"(Backfill {bf.metadata.namespace}/{bf.metadata.name})")


def restore_config(rw: Rewind, job: StreamingJob, points: tuple[SinkRestore, ...], location: str) -> JobConfig:
    """What a Rewind's restore application runs (``python -m spark_app restore``): the job's
    own config (its catalogs, sinks, external checkpoint location: the job's credentials),
    pointed at the fresh checkpoint ``location``, with the points to restore."""
    live = streaming_job_config(job).model_dump(by_alias=True, exclude_none=True, mode="json")
    live["checkpoint"]["location"] = location
    live["restore"] = {
        "points": [{"sink": r.sink, "batchId": r.batch_id, "queryId": r.query_id} for r in points],
        "resetSinks": rw.spec.reset_sinks,
        "downstream": rw.spec.downstream,
        "tag": f"{rw.metadata.namespace}/{rw.metadata.name}",
    }
    return parse_config(live, origin=f"(Rewind {rw.metadata.namespace}/{rw.metadata.name})")


def initial_restore_config(job: StreamingJob, points: list[RestorePointStatus]) -> JobConfig:
    """What a new job's restore application runs (``spec.initialSnapshot``): the job's own
    config, reading snapshots from the initial snapshot's location into the job's live
    checkpoint, copying only (that job's later snapshots, sinks and topics are not touched)."""
    assert job.spec.initial_snapshot is not None
    live = streaming_job_config(job).model_dump(by_alias=True, exclude_none=True, mode="json")
    external = live["checkpoint"].get("external") or {}
    live["checkpoint"]["external"] = {**external, "location": job.spec.initial_snapshot.location}
    live["restore"] = {
        "points": [{"sink": p.sink, "batchId": p.batch_id, "queryId": p.query_id} for p in points],
        "resetSinks": False,
        "downstream": False,
        "copyOnly": True,
        "tag": f"{job.metadata.namespace}/{job.metadata.name} initialSnapshot",
    }
    return parse_config(live, origin=f"(StreamingJob {job.metadata.namespace}/{job.metadata.name} initialSnapshot)")


def config_hash(cfg: JobConfig, secret_versions: Mapping[str, str] | None = None, image: str | None = None) -> str:
    """What a running application was started with: a different hash means restart it.
    ``secret_versions``: the ``resourceVersion`` of each Secret its Kafka security mounts, so a
    rotated password restarts it too (none: the hash a job without Secrets always had).
    ``image``: a StreamingJob's image, which carries its code (a new image is an upgrade)."""
    text = cfg.to_json()
    if secret_versions:
        text += json.dumps(dict(sorted(secret_versions.items())))
    if image:
        text += f"\nimage {image}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def job_hash(job: StreamingJob, cfg: JobConfig, secret_versions: Mapping[str, str] | None = None) -> str:
    """A StreamingJob application's hash: its config, its Secrets' versions and its image."""
    return config_hash(cfg, secret_versions, job.spec.image)


def running_hash_of(
    job: StreamingJob, cfg: JobConfig, running: str | None, secret_versions: Mapping[str, str] | None
) -> str | None:
    """The hash an application carries, read as ``job_hash``'s: an application created before
    the image was hashed carries its config's hash alone; when that is the config's hash now
    and the spec that last ran (``status.lastStableSpec``) had the same image, it runs the
    current spec, and is not restarted for the operator's upgrade."""
    if running is None or running != config_hash(cfg, secret_versions):
        return running
    stable = job.status.last_stable_spec if job.status else None
    ran_image = json.loads(stable).get("image") if stable else job.spec.image
    return job_hash(job, cfg, secret_versions) if ran_image == job.spec.image else running
