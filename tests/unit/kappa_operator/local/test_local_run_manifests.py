"""`kappa run`, before anything runs: reading manifests, finding a Backfill's or Rewind's job,
the --local mapping, the rewind target override and the local runtime settings (no Spark)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kappa_operator.cli.commands import main
from kappa_operator.local.manifests import ManifestError, load
from kappa_operator.local.objects import LocalObjects
from kappa_operator.local.overrides import (
    RunOptions,
    local_catalog,
    local_path,
    localize,
    parse_spark_conf,
    retarget,
    runtime_config,
)
from kappa_operator.models.backfill import Backfill
from kappa_operator.models.rewind import Rewind
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.render.jobconfig import (
    backfill_branch,
    backfill_config,
    backfill_group,
    live_checkpoint,
    streaming_job_config,
)
from spark_app.contract.errors import ConfigError
from tests.secured_kafka import secured

ROOT = Path(__file__).resolve().parents[4]
EXAMPLES = ROOT / "examples"


def example(name: str) -> dict[str, Any]:
    return yaml.safe_load((EXAMPLES / f"rmi-{name}.yaml").read_text())


def write(path: Path, *docs: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump_all(docs))
    return path


@pytest.fixture(autouse=True)
def wide(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "300")  # rich wraps to the terminal's width


# --- manifests and job resolution ------------------------------------------------------------


def test_a_backfill_finds_its_job_next_to_it_as_the_examples_are_laid_out() -> None:
    found = load(EXAMPLES / "rmi-backfill.yaml")
    assert isinstance(found.target, Backfill) and found.target.metadata.name == "rmi-outage"
    assert found.job.metadata.name == "rmi" and found.job_from == str(EXAMPLES / "rmi-streamingjob.yaml")
    rw = load(EXAMPLES / "rmi-rewind.yaml")
    assert isinstance(rw.target, Rewind) and rw.job.metadata.name == "rmi"


def test_a_streaming_job_is_its_own_job() -> None:
    found = load(EXAMPLES / "rmi-streamingjob.yaml")
    assert isinstance(found.target, StreamingJob) and found.job is found.target


def test_one_file_may_hold_the_job_and_the_backfill(tmp_path: Path) -> None:
    path = write(tmp_path / "both.yaml", example("streamingjob"), example("backfill"))
    found = load(path)
    assert isinstance(found.target, Backfill) and found.job_from == str(path)


def test_job_flag_wins_and_must_hold_the_named_job(tmp_path: Path) -> None:
    other = example("streamingjob")
    other["metadata"]["name"] = "titles"
    jobs = write(tmp_path / "jobs.yaml", other, example("streamingjob"))
    bf = write(tmp_path / "bf.yaml", example("backfill"))
    found = load(bf, jobs)
    assert found.job.metadata.name == "rmi" and [j.metadata.name for j in found.others] == ["titles"]
    with pytest.raises(ManifestError, match=r"--job .* holds no StreamingJob rmi in namespace default .*titles"):
        load(bf, write(tmp_path / "titles.yaml", other))


def test_a_missing_job_is_named_with_the_ways_to_give_it(tmp_path: Path) -> None:
    bf = write(tmp_path / "bf.yaml", example("backfill"))
    with pytest.raises(ManifestError) as exc:
        load(bf)
    text = str(exc.value)
    assert "StreamingJob rmi in namespace default (spec.jobRef.name of Backfill rmi-outage)" in text
    assert "--job JOB.yaml" in text


def test_a_job_in_another_namespace_is_not_the_job(tmp_path: Path) -> None:
    job = example("streamingjob")
    job["metadata"]["namespace"] = "team-b"
    write(tmp_path / "job.yaml", job)
    with pytest.raises(ManifestError, match="StreamingJob rmi in namespace default"):
        load(write(tmp_path / "bf.yaml", example("backfill")))


def test_two_candidate_jobs_are_an_error_not_a_guess(tmp_path: Path) -> None:
    write(tmp_path / "a.yaml", example("streamingjob"))
    write(tmp_path / "b.yml", example("streamingjob"))
    with pytest.raises(ManifestError, match="defined 2 times"):
        load(write(tmp_path / "bf.yaml", example("backfill")))


def test_invalid_manifests_name_the_file_and_every_bad_field(tmp_path: Path) -> None:
    bf = example("backfill")
    bf["spec"]["window"]["end"] = "2026-11-01T13:00:00Z"
    bf["spec"]["alignment"]["maxDrfit"] = "5m"
    bf["spec"]["publish"]["enabled"] = "yes"
    path = write(tmp_path / "bf.yaml", bf)
    with pytest.raises(ManifestError) as exc:
        load(path)
    text = str(exc.value)
    assert text.startswith(f"{path}: invalid Backfill rmi-outage:")
    assert "spec.window: window.end must be after start" in text
    assert "spec.alignment.maxDrfit: unknown field" in text
    assert "spec.publish.enabled: Input should be a valid boolean" in text


def test_an_invalid_job_next_to_it_is_reported_when_it_is_the_one(tmp_path: Path) -> None:
    job = example("streamingjob")
    del job["spec"]["image"]
    write(tmp_path / "job.yaml", job)
    with pytest.raises(ManifestError, match=r"invalid StreamingJob rmi:\n  spec.image: required field missing"):
        load(write(tmp_path / "bf.yaml", example("backfill")))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("kind: Deployment\nmetadata: {name: x}\n", "kind 'Deployment' is not one kappa runs"),
        ("a: [1\n", "is not valid YAML"),
        ("- 1\n- 2\n", "expected a manifest"),
        ("", "holds no manifest"),
    ],
)
def test_files_that_are_not_our_manifests(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "x.yaml").write_text(text)
    with pytest.raises(ManifestError, match=message):
        load(tmp_path / "x.yaml")


def test_one_thing_to_run_per_file(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match=r"2 manifests to run \(Backfill rmi-outage, Rewind rmi-before-outage\)"):
        load(write(tmp_path / "two.yaml", example("backfill"), example("rewind"), example("streamingjob")))


def test_the_command_refuses_bad_input_with_exit_2_before_any_spark(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bf = example("backfill")
    bf["spec"]["window"]["warmup"] = "half an hour"
    assert main(["run", str(write(tmp_path / "bf.yaml", bf)), "--job", str(EXAMPLES / "rmi-streamingjob.yaml")]) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert "error:" in out and "spec.window.warmup" in out
    assert main(["run", str(write(tmp_path / "alone.yaml", example("rewind")))]) == 2
    assert "needs its StreamingJob rmi" in " ".join(capsys.readouterr().out.split())
    args = ["run", str(EXAMPLES / "rmi-streamingjob.yaml"), "--spark-conf", "novalue", "--local", str(tmp_path)]
    assert main(args) == 2
    assert "expected KEY=VALUE" in capsys.readouterr().out


# --- --local ------------------------------------------------------------------------------


def test_local_paths_keep_bucket_and_path_under_the_directory(tmp_path: Path) -> None:
    assert local_path("s3a://lake/checkpoints/rmi", tmp_path) == str(tmp_path / "s3/lake/checkpoints/rmi")
    assert local_path("s3://lake/checkpoints/rmi/", tmp_path) == str(tmp_path / "s3/lake/checkpoints/rmi")
    assert local_path("hdfs://nn:8020/ck", tmp_path) == str(tmp_path / "hdfs/nn-8020/ck")
    assert local_path("file:///data/ck", tmp_path) == str(tmp_path / "file/data/ck")
    assert local_path("/data/ck", tmp_path) == str(tmp_path / "file/data/ck")


def test_catalogs_become_sqlite_one_per_catalog_identity(tmp_path: Path) -> None:
    rest = {"type": "rest", "uri": "http://iceberg-rest.data.svc:8181", "warehouse": "s3://lake/warehouse"}
    local = local_catalog("default", rest, tmp_path)
    assert local == {
        "type": "sql",
        "uri": f"sqlite:///{tmp_path}/catalogs/iceberg-rest.data.svc-8181_lake-warehouse.db",
        "warehouse": f"file://{tmp_path}/s3/lake/warehouse",
    }
    assert local_catalog("lake", rest, tmp_path)["uri"] == local["uri"], "the same catalog under another name"
    other = local_catalog("default", {**rest, "warehouse": "s3://other/wh"}, tmp_path)
    assert other["uri"] != local["uri"]
    assert "credential" not in local_catalog("x", {**rest, "credential": "k:s"}, tmp_path)


def test_localize_moves_only_catalogs_and_locations(tmp_path: Path) -> None:
    """The rendered JobConfigs differ from the cluster's only in catalogs and locations: the
    decisions (sources, sinks, branch, group, window, alignment) are the same."""
    job = StreamingJob.model_validate(example("streamingjob"))
    bf = Backfill.model_validate(example("backfill"))
    local, rows = localize(job, tmp_path)
    assert {r.field for r in rows} == {
        "catalogs.default",
        "catalogs.default.warehouse",
        "checkpoints.location",
        "checkpoints.externalLocation",
    }
    assert live_checkpoint(local) == str(tmp_path / "s3/lake/checkpoints/rmi/live")
    assert local.spec.checkpoints.external_location == str(tmp_path / "s3/lake/kappa-snapshots/rmi")
    for render in (streaming_job_config, lambda j: backfill_config(bf, j, "http://127.0.0.1:1")):
        theirs, ours = json.loads(render(job).to_json()), json.loads(render(local).to_json())
        assert ours["catalogs"]["default"]["type"] == "sql"
        assert ours["checkpoint"]["location"].startswith(str(tmp_path))
        for d in (theirs, ours):
            del d["catalogs"], d["checkpoint"]
        assert ours == theirs
    assert (backfill_branch(bf), backfill_group(bf)) == ("backfill-rmi-outage", "default.rmi-outage")


def test_localize_maps_parquet_sink_paths(tmp_path: Path) -> None:
    data = example("streamingjob")
    data["spec"]["sinks"]["attributed_plays"] = {"kind": "parquet", "path": "s3a://lake/out/plays"}
    local, rows = localize(StreamingJob.model_validate(data), tmp_path)
    assert local.spec.sinks["attributed_plays"].path == str(tmp_path / "s3/lake/out/plays")
    assert any(r.field == "sinks.attributed_plays.path" for r in rows)


# --- the rewind target and the local runtime ------------------------------------------------


def test_retarget_replaces_the_target_through_the_model() -> None:
    rw = Rewind.model_validate(example("rewind"))
    same, note = retarget(rw, RunOptions())
    assert same is rw and note is None
    by_batch, note = retarget(rw, RunOptions(target_batch=3))
    assert by_batch.spec.target.batch_id == 3 and by_batch.spec.target.time is None
    assert note == 'spec.target {"time": "2026-11-01T14:00:00Z"} -> {"batchId": 3} (--target-batch)'
    by_time, _ = retarget(rw, RunOptions(target_time="2026-11-22T10:00:00Z"))
    assert by_time.spec.target.time == "2026-11-22T10:00:00Z"
    with pytest.raises(ValueError, match=r"target\.time"):
        retarget(rw, RunOptions(target_time="yesterday"))
    with pytest.raises(ValueError, match="batchId"):
        retarget(rw, RunOptions(target_batch=-1))


def test_runtime_config_of_the_live_job(tmp_path: Path) -> None:
    job, _ = localize(StreamingJob.model_validate(example("streamingjob")), tmp_path)
    rendered = streaming_job_config(job)
    cfg, notes = runtime_config(rendered, RunOptions(starting_position="earliest", snapshots_per_batch=2))
    assert cfg.master == "local[2]" and cfg.effective_trigger.kind == "availableNow"
    assert cfg.spark_conf["spark.sql.shuffle.partitions"] == "2"
    for src in cfg.sources.values():
        assert src.starting_position == "earliest" and src.read_limit.max_snapshots == 2  # type: ignore[union-attr]
    assert any("trigger availableNow" in n and "processingTime 30s" in n for n in notes)
    assert cfg.checkpoint.location == rendered.checkpoint.location and cfg.sinks == rendered.sinks
    assert rendered.checkpoint.external is not None and not rendered.checkpoint.external.every_batch
    assert cfg.checkpoint.external == rendered.checkpoint.external.model_copy(update={"every_batch": True})
    assert any("the driver copies every committed batch" in n for n in notes), "a run of a minute: every batch"
    follow, notes = runtime_config(rendered, RunOptions(follow=True))
    assert follow.effective_trigger.kind == "processingTime" and follow.effective_trigger.interval.total_seconds() == 30
    assert follow.sources == rendered.sources and not any("trigger" in n for n in notes)


def test_runtime_config_of_a_backfill_carries_the_token_and_conf_precedence(tmp_path: Path) -> None:
    data = example("streamingjob")
    data["spec"]["sparkConf"] = {"spark.sql.shuffle.partitions": "8", "spark.x": "manifest"}
    job, _ = localize(StreamingJob.model_validate(data), tmp_path)
    rendered = backfill_config(Backfill.model_validate(example("backfill")), job, "http://127.0.0.1:9")
    opts = RunOptions(spark_conf=parse_spark_conf(["spark.x=flag", "spark.y=a=b"]))
    cfg, _ = runtime_config(rendered, opts, token="t0k", trace_path=str(tmp_path / "t.jsonl"))
    assert cfg.coordinator is not None and (cfg.coordinator.url, cfg.coordinator.token) == ("http://127.0.0.1:9", "t0k")
    assert cfg.spark_conf == {
        "spark.sql.shuffle.partitions": "8",  # the manifest over the local default
        "spark.ui.showConsoleProgress": "false",
        "spark.x": "flag",  # --spark-conf over the manifest
        "spark.y": "a=b",
    }
    assert cfg.window == rendered.window and cfg.alignment == rendered.alignment and cfg.trace_path


# --- local records -----------------------------------------------------------------------------


def test_records_hold_uid_generation_annotations_and_status(tmp_path: Path) -> None:
    objects = LocalObjects(tmp_path)
    job = StreamingJob.model_validate(example("streamingjob"))
    first = objects.apply(job)
    assert first.metadata.uid and first.metadata.generation == 1 and first.status is None
    assert objects.apply(job).metadata.uid == first.metadata.uid, "the same object"
    changed = StreamingJob.model_validate({**example("streamingjob"), "spec": {**example("streamingjob")["spec"]}})
    changed = changed.model_copy(update={"spec": changed.spec.model_copy(update={"trigger_interval": "1m"})})
    assert objects.apply(changed).metadata.generation == 2, "a spec change is a new generation"
    moved = objects.annotate(first, {"kappa.dev/checkpoint-location": "/x", "kappa.dev/paused-by": "rewind/r"})
    assert live_checkpoint(moved) == "/x"
    unpaused = objects.annotate(moved, {"kappa.dev/paused-by": None})
    assert "kappa.dev/paused-by" not in unpaused.metadata.annotations
    done = objects.patch_status(unpaused, {"phase": "Completed", "checkpoints": [], "message": "m"})
    done = objects.patch_status(done, {"message": None, "watermark": "w"})
    assert done.status is not None and (done.status.phase, done.status.message, done.status.watermark) == (
        "Completed",
        None,
        "w",
    )
    assert objects.apply(job).status == done.status, "what the next run sees"
    objects.forget(job)
    assert objects.apply(job).metadata.uid != first.metadata.uid, "forgotten: a new object"


def secured_kafka_job() -> StreamingJob:
    return StreamingJob.model_validate(secured(yaml.safe_load((EXAMPLES / "kafka-rmi-streamingjob.yaml").read_text())))


def test_secrets_dir_gives_kappa_run_the_files_the_pods_get_from_the_mounted_secrets(tmp_path: Path) -> None:
    job, _ = localize(secured_kafka_job(), tmp_path)
    rendered = streaming_job_config(job)
    secrets = tmp_path / "secrets"
    for secret, key, value in (
        ("kafka-user", "username", "u"),
        ("kafka-user", "password", "p"),
        ("kafka-ca", "ca.crt", ""),
    ):
        (secrets / secret).mkdir(parents=True, exist_ok=True)
        (secrets / secret / key).write_text(value)

    cfg, notes = runtime_config(rendered, RunOptions(secrets_dir=secrets))

    security = cfg.sources["impressions"].security  # type: ignore[union-attr]
    assert security is not None and security.sasl is not None and security.tls is not None
    assert security.sasl.password_file == str((secrets / "kafka-user" / "password").resolve())
    assert security.tls.ca_file == str((secrets / "kafka-ca" / "ca.crt").resolve())
    assert cfg.sources["playbacks"].security is None  # type: ignore[union-attr]
    assert sorted(n for n in notes if n.startswith("Secret ")) == [
        f"Secret kafka-ca: from {(secrets / 'kafka-ca').resolve()}",
        f"Secret kafka-user: from {(secrets / 'kafka-user').resolve()}",
    ]

    with pytest.raises(
        ConfigError, match=r"sources.impressions.security names the Secret kafka-user: give --secrets-dir"
    ):
        runtime_config(rendered, RunOptions())
    (secrets / "kafka-ca" / "ca.crt").unlink()
    with pytest.raises(
        ConfigError, match=r"security needs key ca.crt of the Secret kafka-ca: no file .*kafka-ca/ca.crt"
    ):
        runtime_config(rendered, RunOptions(secrets_dir=secrets))


def test_secrets_dir_gives_kappa_run_the_registrys_credentials_too(tmp_path: Path) -> None:
    data = yaml.safe_load((EXAMPLES / "kafka-rmi-streamingjob.yaml").read_text())
    data["spec"]["schemaRegistries"] = {
        "company": {"url": "http://registry:8081", "basicAuth": {"secretRef": {"name": "registry-key"}}}
    }
    data["spec"]["sources"]["impressions"]["live"] |= {"valueFormat": "avro", "schemaRegistry": "company"}
    job, _ = localize(StreamingJob.model_validate(data), tmp_path)
    rendered = streaming_job_config(job)
    secrets = tmp_path / "secrets" / "registry-key"
    secrets.mkdir(parents=True)
    (secrets / "username").write_text("u")
    with pytest.raises(ConfigError, match=r"impressions.registry needs key password of the Secret registry-key"):
        runtime_config(rendered, RunOptions(secrets_dir=tmp_path / "secrets"))
    (secrets / "password").write_text("p")

    cfg, notes = runtime_config(rendered, RunOptions(secrets_dir=tmp_path / "secrets"))

    registry = cfg.sources["impressions"].registry  # type: ignore[union-attr]
    assert registry is not None and registry.password_file == str((secrets / "password").resolve())
    assert f"Secret registry-key: from {secrets.resolve()}" in notes
