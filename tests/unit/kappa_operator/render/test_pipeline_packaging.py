"""Issue 30 item 1, a pipeline that is not in the image (pure, no Spark): ``spec.deps`` and
``spec.pipelineFrom`` rendered into every SparkApplication of a job as the spark-operator's CRD
expects them, into its JobConfigs (hence their hash), refused the same way by the API server
and the models when malformed, and applied by `kappa run` as spark-submit would."""

from __future__ import annotations

import json
import os
import sys
import zipfile
from pathlib import Path
from typing import Any

import pydantic
import pytest
import yaml

from kappa_operator.local.deps import local_code, py_file_paths
from kappa_operator.local.overrides import RunOptions, runtime_config
from kappa_operator.models.backfill import Backfill
from kappa_operator.models.packaging import Dependencies, fetched_by_driver
from kappa_operator.models.rewind import Rewind, SinkRestore
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.render.jobconfig import backfill_config, config_hash, restore_config, streaming_job_config
from kappa_operator.render.spark_application import (
    BACKFILL_RESTART,
    LIVE_RESTART,
    Owner,
    job_launch,
    spark_application,
)
from spark_app.apps.pipeline_code import driver_path, make_importable, shipped, zipped_modules
from spark_app.contract.errors import ConfigError
from tests.crd_validation import load_crd, validate
from tests.unit.crd_documents import crd

ROOT = Path(__file__).resolve().parents[4]
SPARK_CRD = ROOT / "tests" / "fixtures" / "sparkoperator.k8s.io_sparkapplications.yaml"
EXAMPLE = ROOT / "examples" / "own-pipeline" / "watch-time-streamingjob.yaml"
DEPS = {
    "pyFiles": ["s3a://player-insights-artifacts/pipelines/watch_time-0.1.0.zip", "local:///opt/team/util.py"],
    "jars": ["https://repo.example.com/jars/udfs-1.0.jar"],
    "packages": ["org.apache.spark:spark-avro_2.13:4.0.0"],
    "repositories": ["https://repo.example.com/maven2"],
    "excludePackages": ["com.google.guava:guava"],
    "files": ["s3a://player-insights-artifacts/conf/tiers.json"],
    "archives": ["s3a://player-insights-artifacts/envs/geo.tar.gz#geo"],
}


def manifest(**spec: Any) -> dict[str, Any]:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["metadata"]["uid"] = "u-1"
    data["spec"].update(spec)
    return data


def job_of(**spec: Any) -> StreamingJob:
    data = manifest(**spec)
    data["spec"] = {k: v for k, v in data["spec"].items() if v is not None}
    return StreamingJob.model_validate(data)


def backfill_of(job: StreamingJob) -> Backfill:
    return Backfill.model_validate(
        {
            "apiVersion": "kappa.dev/v1alpha1",
            "kind": "Backfill",
            "metadata": {"name": "replay", "namespace": job.metadata.namespace, "uid": "b-1"},
            "spec": {
                "jobRef": {"name": job.metadata.name},
                "window": {"start": "2026-11-01T12:00:00Z", "end": "2026-11-01T13:00:00Z"},
                "alignment": {"mode": "unordered"},
            },
        }
    )


# --- rendering ------------------------------------------------------------------------------


def test_the_example_ships_its_package_by_py_files_and_its_crd_takes_it() -> None:
    data = yaml.safe_load(EXAMPLE.read_text())
    assert validate(crd("StreamingJob"), data) == []
    job = StreamingJob.model_validate(data)
    assert job.spec.deps is not None and job.spec.deps.py_files[0].endswith("watch_time-0.1.0.zip")
    assert job.spec.pipeline == "watch_time.engagement:pipeline"


def test_deps_and_a_config_map_reach_every_application_of_the_job_as_the_spark_operator_expects() -> None:
    """Live, backfill, publish, plan and a Rewind's restore: each has the job's deps field by
    field and the ConfigMap mounted into its driver, and each validates against the
    spark-operator's own CRD (v1beta2)."""
    ckpt = {"location": "s3a://x/checkpoints/watch-time", "externalLocation": "s3://x/snapshots/watch-time"}
    job = job_of(deps=DEPS, pipelineFrom={"configMap": {"name": "watch-time-v2"}}, checkpoints=ckpt)
    bf = backfill_of(job)
    bf_owner = Owner("Backfill", "replay", job.metadata.namespace, "b-1")
    bf_cfg = backfill_config(bf, job, None)
    rw = Rewind.model_validate(
        {
            "apiVersion": "kappa.dev/v1alpha1",
            "kind": "Rewind",
            "metadata": {"name": "undo", "namespace": job.metadata.namespace, "uid": "r-1"},
            "spec": {"jobRef": {"name": job.metadata.name}, "target": {"batchId": 3}},
        }
    )
    point = SinkRestore(sink="engaged_plays", batch_id=3, committed_at="2026-11-01T13:00:00Z", query_id="q")
    apps = [
        spark_application(
            Owner("StreamingJob", "watch-time", job.metadata.namespace, "u-1"),
            streaming_job_config(job),
            job_launch(job, LIVE_RESTART),
            "h",
        ),
        spark_application(bf_owner, bf_cfg, job_launch(job, BACKFILL_RESTART, None, "t"), "h"),
        spark_application(bf_owner, bf_cfg, job_launch(job, BACKFILL_RESTART), "h", command="publish"),
        spark_application(bf_owner, bf_cfg, job_launch(job, BACKFILL_RESTART), "h", command="plan"),
        spark_application(
            Owner("Rewind", "undo", job.metadata.namespace, "r-1"),
            restore_config(rw, job, (point,), "s3a://x/rewinds/undo"),
            job_launch(job, BACKFILL_RESTART),
            "h",
            command="restore",
        ),
    ]
    spark_crd = load_crd(SPARK_CRD)
    for app in apps:
        spec = app["spec"]
        assert validate(spark_crd, app) == [], app["metadata"]["name"]
        # the spark-operator's field names, entries as written, but the zip on S3: spark-submit
        # would open S3 in the spark-operator's pod, which has no S3A and no credentials (the
        # driver fetches it: pythonPath below)
        assert spec["deps"] == {**DEPS, "pyFiles": ["local:///opt/team/util.py"]}
        assert {"name": "kappa-pipeline", "configMap": {"name": "watch-time-v2"}} in spec["volumes"]
        mount = {"name": "kappa-pipeline", "mountPath": "/opt/kappa/pipelines/watch-time-v2", "readOnly": True}
        assert spec["driver"]["volumeMounts"] == [{"name": "jobconfig", "mountPath": "/etc/kappa"}, mount]
        assert mount not in spec["executor"]["volumeMounts"], "the driver ships the modules to the executors"
    assert bf_cfg.deps is not None and bf_cfg.deps.py_files == DEPS["pyFiles"], "a Backfill inherits the job's"
    assert bf_cfg.python_path == [DEPS["pyFiles"][0], "/opt/kappa/pipelines/watch-time-v2"]


def test_pyfiles_on_a_hadoop_filesystem_are_the_drivers_to_fetch_and_the_others_spark_submits() -> None:
    fetched = [
        "s3a://b/p.zip",
        "gs://b/p.zip",
        "abfss://c@a.dfs.core.windows.net/p.zip",
        "hdfs://nn/p.egg",
        "S3A://b/x.py",
    ]
    submitted = ["local:///opt/p.zip", "https://h/p.zip", "http://h/p.py", "file:///tmp/p.zip", "/tmp/p.zip", "p.py"]
    assert [fetched_by_driver(f) for f in fetched] == [True] * len(fetched)
    assert [fetched_by_driver(f) for f in submitted] == [False] * len(submitted)
    deps = Dependencies.model_validate({"pyFiles": ["s3a://b/p.zip", "local:///opt/u.py"], "jars": ["s3a://b/j.jar"]})
    assert deps.submitted() == {"pyFiles": ["local:///opt/u.py"], "jars": ["s3a://b/j.jar"]}
    assert deps.driver_fetched() == ["s3a://b/p.zip"]
    only = Dependencies.model_validate({"pyFiles": ["s3a://b/p.zip"]})
    assert only.submitted() == {} and only.rendered() == {"pyFiles": ["s3a://b/p.zip"]}


def test_only_the_deps_that_are_set_are_rendered_and_a_job_without_any_renders_as_before() -> None:
    job = job_of(deps={"packages": ["org.apache.spark:spark-avro_2.13:4.0.0"]})
    app = spark_application(
        Owner("StreamingJob", "w", "ns", "u"), streaming_job_config(job), job_launch(job, LIVE_RESTART), "h"
    )
    assert app["spec"]["deps"] == {"packages": ["org.apache.spark:spark-avro_2.13:4.0.0"]}
    plain = job_of(deps=None)
    cfg = streaming_job_config(plain)
    app = spark_application(Owner("StreamingJob", "w", "ns", "u"), cfg, job_launch(plain, LIVE_RESTART), "h")
    assert "deps" not in app["spec"] and [v["name"] for v in app["spec"]["volumes"]] == ["jobconfig"]
    assert not {"deps", "pythonPath"} & set(json.loads(cfg.to_json())), "hashes of image-only jobs are unchanged"


def test_a_new_version_of_the_code_changes_the_config_hash_so_the_job_restarts() -> None:
    v1 = config_hash(streaming_job_config(job_of()))
    newer = {"pyFiles": ["s3a://player-insights-artifacts/pipelines/watch_time-0.2.0.zip"]}
    assert config_hash(streaming_job_config(job_of(deps=newer))) != v1
    cm = {"configMap": {"name": "watch-time-v1"}}
    v1_cm = config_hash(streaming_job_config(job_of(deps=None, pipelineFrom=cm)))
    v2_cm = config_hash(streaming_job_config(job_of(deps=None, pipelineFrom={"configMap": {"name": "watch-time-v2"}})))
    assert v1_cm != v2_cm


# --- refusals: the API server and the models agree, naming the field -------------------------

REFUSED = [
    ({"pyFiles": ["s3a://b/watch_time.tar.gz"]}, "spec.deps.pyFiles.0", "zip the package"),
    ({"pyFiles": ["s3a://b/a.zip,s3a://b/b.zip"]}, "spec.deps.pyFiles.0", "without commas"),
    ({"jars": ["a.jar b.jar"]}, "spec.deps.jars.0", "without commas or spaces"),
    ({"packages": ["spark-avro"]}, "spec.deps.packages.0", "groupId:artifactId:version"),
    (
        {"excludePackages": ["com.google.guava:guava:32.0"], "packages": ["a:b:1"]},
        "spec.deps.excludePackages.0",
        "no version",
    ),
    ({"repositories": ["repo.example.com"], "packages": ["a:b:1"]}, "spec.deps.repositories.0", "repository URL"),
    ({"excludePackages": ["com.google.guava:guava"]}, "spec.deps", "set packages too"),
    ({"pyFiles": [f"s3a://b/{i}.zip" for i in range(4)]}, "spec.deps.pyFiles", "at most 3"),
]


@pytest.mark.parametrize(("deps", "field", "words"), REFUSED)
def test_malformed_deps_are_refused_by_both_naming_the_field(deps: dict[str, Any], field: str, words: str) -> None:
    data = manifest(deps=deps)
    server = validate(crd("StreamingJob"), data)
    assert server, f"the API server takes {deps}"
    assert any(e.startswith(field.rsplit(".", 1)[0] if field[-1].isdigit() else field) for e in server), server
    with pytest.raises(pydantic.ValidationError) as caught:
        StreamingJob.model_validate(data)
    errors = caught.value.errors()
    assert ".".join(map(str, errors[0]["loc"])) == field
    assert words in str(caught.value)


def test_a_config_map_name_must_be_a_kubernetes_name() -> None:
    data = manifest(pipelineFrom={"configMap": {"name": "Watch_Time"}})
    assert validate(crd("StreamingJob"), data)
    with pytest.raises(pydantic.ValidationError, match=r"spec\.pipelineFrom\.configMap\.name"):
        StreamingJob.model_validate(data)


# --- kappa run: what spark-submit does, here ------------------------------------------------


def test_kappa_run_turns_deps_into_the_spark_conf_spark_submit_sets(tmp_path: Path) -> None:
    jar = tmp_path / "udfs.jar"
    jar.write_bytes(b"jar")
    deps = {**DEPS, "jars": [f"file://{jar}"], "pyFiles": ["s3a://player-insights-artifacts/p/watch_time-0.1.0.zip"]}
    cfg = streaming_job_config(job_of(deps=deps))
    mapped = tmp_path / "s3" / "player-insights-artifacts" / "p" / "watch_time-0.1.0.zip"
    (tmp_path / "s3" / "player-insights-artifacts" / "conf").mkdir(parents=True)
    (tmp_path / "s3" / "player-insights-artifacts" / "conf" / "tiers.json").write_text("{}")
    (tmp_path / "s3" / "player-insights-artifacts" / "envs").mkdir()
    (tmp_path / "s3" / "player-insights-artifacts" / "envs" / "geo.tar.gz").write_text("")
    mapped.parent.mkdir(parents=True)
    mapped.write_bytes(b"zip")
    out, notes = runtime_config(cfg, RunOptions(local=tmp_path, spark_conf={"spark.jars.packages": "x:y:1"}))
    conf = out.spark_conf
    assert conf["spark.jars.packages"] == "x:y:1,org.apache.spark:spark-avro_2.13:4.0.0", "--spark-conf's kept"
    assert conf["spark.jars.repositories"] == "https://repo.example.com/maven2"
    assert conf["spark.jars.excludes"] == "com.google.guava:guava"
    assert conf["spark.jars"] == str(jar)
    assert conf["spark.files"].endswith("s3/player-insights-artifacts/conf/tiers.json"), "--local maps object stores"
    assert out.python_path == [str(mapped)]
    assert any(n.startswith("deps.packages -> sparkConf spark.jars.packages=") for n in notes), notes
    assert any(n.startswith("deps.pyFiles -> pythonPath") for n in notes), notes


def test_without_local_object_store_uris_go_to_spark_as_they_are() -> None:
    cfg = streaming_job_config(job_of())
    out, _ = runtime_config(cfg, RunOptions())
    assert out.python_path == ["s3a://player-insights-artifacts/pipelines/watch_time-0.1.0.zip"]


def test_kappa_run_says_where_a_missing_py_file_was_looked_for_and_the_fix(tmp_path: Path) -> None:
    cfg = streaming_job_config(job_of())
    with pytest.raises(
        ValueError,
        match=r"spec.deps.pyFiles: s3a://.*--local maps it to .*does not exist: copy the "
        r"file to .*, or replace the pyFiles with --py-files PATH",
    ):
        runtime_config(cfg, RunOptions(local=tmp_path))
    image = streaming_job_config(job_of(deps={"pyFiles": ["local:///opt/team/nowhere.zip"]}))
    with pytest.raises(ValueError, match="local:// names a path inside the Spark image"):
        runtime_config(image, RunOptions())


def test_py_files_replace_deps_and_stand_in_for_the_config_map(tmp_path: Path) -> None:
    cm = streaming_job_config(job_of(deps=None, pipelineFrom={"configMap": {"name": "watch-time-v2"}}))
    with pytest.raises(
        ValueError, match=r"spec\.pipelineFrom\.configMap watch-time-v2 is a ConfigMap on the cluster.*--py-files DIR"
    ):
        runtime_config(cm, RunOptions())
    out, notes = runtime_config(cm, RunOptions(py_files=(tmp_path,)))
    assert out.python_path == [str(tmp_path)]
    assert any("instead of the ConfigMap mounted at /opt/kappa/pipelines/watch-time-v2" in n for n in notes)
    zipped = streaming_job_config(job_of())
    out, notes = runtime_config(zipped, RunOptions(py_files=(tmp_path,)))
    assert out.python_path == [str(tmp_path)] and any("instead of spec.deps.pyFiles" in n for n in notes)


def test_py_files_are_checked_when_the_command_line_is_read(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("")
    (tmp_path / "b.zip").write_bytes(b"")
    (tmp_path / "c.txt").write_text("")
    assert py_file_paths([f"{tmp_path / 'a.py'},{tmp_path / 'b.zip'}", str(tmp_path)]) == [
        tmp_path / "a.py",
        tmp_path / "b.zip",
        tmp_path,
    ]
    with pytest.raises(ValueError, match=r"--py-files .*c\.txt: expected a directory or a \.py, \.zip or \.egg file"):
        py_file_paths([str(tmp_path / "c.txt")])
    with pytest.raises(ValueError, match="no such file or directory"):
        py_file_paths([str(tmp_path / "nope.zip")])


def test_local_code_leaves_a_job_without_deps_alone() -> None:
    cfg = streaming_job_config(job_of(deps=None))
    assert local_code(cfg, {"a": "b"}, (), None) == ({}, [])


# --- the driver: a ConfigMap's mount on sys.path, shipped to the executors --------------------


def config_map_mount(root: Path, files: dict[str, bytes]) -> Path:
    """A directory laid out as the kubelet mounts a ConfigMap: its keys are symlinks into a
    hidden, timestamped directory."""
    data = root / "..2026_11_26_10_00_00.1"
    data.mkdir(parents=True)
    for name, content in files.items():
        (data / name).write_bytes(content)
    os.symlink(data.name, root / "..data")
    for name in files:
        os.symlink(f"..data/{name}", root / name)
    return root


def package_zip(path: Path) -> bytes:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("insights_pkg/__init__.py", "")
        zf.writestr("insights_pkg/tiers.py", "def tier():\n    return 'zipped'\n")
    return path.read_bytes()


def test_a_config_map_mount_goes_on_the_path_and_its_modules_and_zips_to_the_executors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    zipped = package_zip(tmp_path / "src.zip")
    mount = config_map_mount(
        tmp_path / "mount", {"flat_pipeline.py": b"def pipeline():\n    return 'flat'\n", "insights_pkg.zip": zipped}
    )
    assert driver_path([str(mount)]) == [str(mount), str(mount / "insights_pkg.zip")]
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    ships = shipped([str(mount), "s3a://b/x.zip"], scratch)
    assert ships[1:] == [str(mount / "insights_pkg.zip"), "s3a://b/x.zip"]
    with zipfile.ZipFile(ships[0]) as zf:
        assert zf.namelist() == ["flat_pipeline.py"], "hidden ..data skipped, the symlinked key followed"
    assert zipped_modules(mount, scratch) == Path(ships[0]), "same code, same name"

    monkeypatch.setattr(sys, "path", list(sys.path))
    for name in ("flat_pipeline", "insights_pkg", "insights_pkg.tiers"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    make_importable([str(mount)])
    import flat_pipeline  # type: ignore[import-not-found]
    import insights_pkg.tiers  # type: ignore[import-not-found]

    assert flat_pipeline.pipeline() == "flat" and insights_pkg.tiers.tier() == "zipped"
    for name in ("flat_pipeline", "insights_pkg", "insights_pkg.tiers"):
        sys.modules.pop(name, None)


def test_a_missing_mount_is_a_config_error_naming_python_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"pythonPath: .*nowhere not found on the driver"):
        make_importable([str(tmp_path / "nowhere")])


def test_a_pipeline_that_does_not_import_says_where_code_can_come_from() -> None:
    from spark_app.sources.frames import load_pipeline

    with pytest.raises(ConfigError, match=r"spec\.deps\.pyFiles or spec\.pipelineFrom \(kappa run: --py-files PATH\)"):
        load_pipeline("watch_time_nowhere.engagement:pipeline")


def test_kappa_plan_takes_py_files_for_a_backfill_of_a_config_map_job(tmp_path: Path) -> None:
    from kappa_operator.local.plan import PlanOptions, backfill_job_config

    job = manifest(pipelineFrom={"configMap": {"name": "watch-time-v2"}})
    del job["spec"]["deps"]
    bf = {
        "apiVersion": "kappa.dev/v1alpha1",
        "kind": "Backfill",
        "metadata": {"name": "replay", "namespace": job["metadata"]["namespace"]},
        "spec": {
            "jobRef": {"name": "watch-time"},
            "window": {"start": "2026-11-01T12:00:00Z", "end": "2026-11-01T13:00:00Z"},
        },
    }
    path = tmp_path / "replay.yaml"
    path.write_text(yaml.safe_dump_all([job, bf]))
    with pytest.raises(ValueError, match=r"--py-files DIR"):
        backfill_job_config(path, None, PlanOptions())
    cfg, _ = backfill_job_config(path, None, PlanOptions(py_files=(tmp_path,)))
    assert cfg.python_path == [str(tmp_path)] and cfg.mode == "backfill"
