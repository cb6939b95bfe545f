"""The restore application (``python -m spark_app restore``), the data side of a Rewind: from
the config the operator renders, it copies the chosen snapshot into the fresh checkpoint,
drops the abandoned timeline, undoes the sink, and leaves the report the operator reads.
Run again after a finished or a crashed run, it changes nothing twice and reports the same;
a refusal is a report naming the sink, with nothing changed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from pyiceberg.catalog.sql import SqlCatalog

from harness.checkpoint_data import live_ids, sink_batches, tree_hash, write_checkpoint
from kappa_operator.models.rewind import Rewind, SinkRestore
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.render.jobconfig import restore_config
from spark_app.__main__ import main
from spark_app.contract.checkpoints import externalize, list_snapshots, open_location
from spark_app.contract.config import JobConfig
from spark_app.contract.reports.restore import read_report

ROOT = Path(__file__).resolve().parents[4]
TABLE = "marts.attributed_plays"


def setup(tmp_path: Path) -> tuple[StreamingJob, SqlCatalog, Path]:
    """A job whose query committed batches 0-5 (one sink file each), snapshots at 2 and 5."""
    props = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": f"file://{tmp_path}/wh"}
    catalog = SqlCatalog("default", **{k: v for k, v in props.items() if k != "type"})
    catalog.create_namespace("marts")
    sink_batches(catalog, TABLE, "q-up", 6)
    live = tmp_path / "ckpt" / "live" / "attributed_plays"
    write_checkpoint(live, "q-up", 6, minute=0)
    for b in (2, 5):
        externalize(open_location(str(live)), open_location(str(tmp_path / "ext" / "attributed_plays")), batch_id=b)
    data = yaml.safe_load((ROOT / "examples" / "rmi-streamingjob.yaml").read_text())
    data["metadata"]["uid"] = "uid-rmi"
    data["spec"]["catalogs"] = {"default": props}
    data["spec"]["checkpoints"] = {"location": str(tmp_path / "ckpt"), "externalLocation": str(tmp_path / "ext")}
    return StreamingJob.model_validate(data), catalog, live


def config(tmp_path: Path, job: StreamingJob, batch: int, reset: bool = True) -> JobConfig:
    rw = yaml.safe_load((ROOT / "examples" / "rmi-rewind.yaml").read_text())
    rw["spec"]["resetSinks"] = reset
    point = SinkRestore(sink="attributed_plays", batch_id=batch, committed_at="2026-11-01T12:20:00Z", query_id="q-up")
    return restore_config(Rewind.model_validate(rw), job, (point,), str(tmp_path / "restored"))


def run(tmp_path: Path, cfg: JobConfig) -> int:
    path = tmp_path / "restore.json"
    path.write_text(cfg.to_json())
    return main(["restore", "--config", str(path)])


def test_restores_resets_and_reports_and_a_second_run_changes_nothing(tmp_path: Path) -> None:
    job, catalog, live = setup(tmp_path)
    before = tree_hash(live)
    cfg = config(tmp_path, job, 2)
    assert run(tmp_path, cfg) == 0
    report = read_report(cfg)
    assert report is not None and report.state == "Restored" and report.rewind == "default/rmi-before-outage"
    (sink,) = report.sinks
    assert (sink.batch_id, sink.table, sink.files_removed, sink.rows_removed) == (2, TABLE, 3, 3)
    assert sink.discarded == [5], "the abandoned timeline's snapshot is dropped"
    restored = tmp_path / "restored" / "attributed_plays"
    assert sorted(p.name for p in (restored / "commits").iterdir()) == ["0", "1", "2"]
    assert json.loads((restored / "metadata").read_text())["id"] == "q-up", "the same query resumes"
    assert live_ids(catalog, TABLE) == ["q-up-0", "q-up-1", "q-up-2"]
    assert tree_hash(live) == before, "the live checkpoint is only read"
    snapshots = len(catalog.load_table(TABLE).snapshots())

    assert run(tmp_path, cfg) == 0  # e.g. the application re-submitted after its pod was lost
    again = read_report(cfg)
    assert again is not None and again.state == "Restored"
    assert again.sinks[0].files_removed == 3 and again.sinks[0].snapshot_id == sink.snapshot_id, "the first run's undo"
    assert len(catalog.load_table(TABLE).snapshots()) == snapshots, "nothing committed twice"
    assert live_ids(catalog, TABLE) == ["q-up-0", "q-up-1", "q-up-2"]


def test_a_restore_cut_short_is_cleared_and_redone(tmp_path: Path) -> None:
    job, catalog, _ = setup(tmp_path)
    cfg = config(tmp_path, job, 2, reset=False)
    partial = tmp_path / "restored" / "attributed_plays" / "offsets"
    partial.mkdir(parents=True)
    (partial / "0").write_text("half a file")  # a crash mid-copy: no completion marker
    assert run(tmp_path, cfg) == 0
    restored = tmp_path / "restored" / "attributed_plays"
    assert (restored / "offsets" / "0").read_text().startswith("v1\n")
    report = read_report(cfg)
    assert report is not None and report.sinks[0].table is None and report.sinks[0].files_removed == 0
    assert len(live_ids(catalog, TABLE)) == 6, "resetSinks: false leaves the table"


def test_a_snapshot_gone_is_a_report_naming_the_sink_and_nothing_changes(tmp_path: Path) -> None:
    job, catalog, _ = setup(tmp_path)
    cfg = config(tmp_path, job, 4)  # no snapshot of batch 4 (retention took it, say)
    assert run(tmp_path, cfg) == 3
    report = read_report(cfg)
    assert report is not None and report.state == "Failed" and not report.sinks
    assert report.error is not None and report.error.startswith(
        "sink attributed_plays: the snapshot of batch 4 is gone"
    )
    assert "new Rewind" in report.error
    assert len(live_ids(catalog, TABLE)) == 6
    remaining = list_snapshots(open_location(str(tmp_path / "ext" / "attributed_plays")))
    assert [m.batch_id for m in remaining] == [2, 5]


def test_a_config_without_points_or_snapshots_is_refused_naming_the_field(tmp_path: Path, capsys: Any) -> None:
    job, _, _ = setup(tmp_path)
    data: dict[str, Any] = json.loads(config(tmp_path, job, 2).to_json())
    data["restore"]["points"][0]["sink"] = "nope"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    assert main(["restore", "--config", str(path)]) == 2
    assert "restore.points[0].sink 'nope' is not one of the sinks (attributed_plays)" in capsys.readouterr().err
    del data["checkpoint"]["external"]
    data["restore"]["points"][0]["sink"] = "attributed_plays"
    path.write_text(json.dumps(data))
    assert main(["restore", "--config", str(path)]) == 2
    assert "restore needs checkpoint.external" in capsys.readouterr().err


def test_a_cascade_over_a_kafka_sink_without_a_produced_record_is_refused_a_plain_rewind_is_not(
    tmp_path: Path,
) -> None:
    """A checkpoint older than the Kafka sink's produced records cannot say which records of the
    topic came after the restored batch: a cascade (downstream jobs would skip them) refuses,
    naming the record and the fix; a rewind of the job alone goes on without the ranges."""
    job, _, _ = setup(tmp_path)
    data = job.model_dump(by_alias=True, exclude_none=True)
    data["spec"]["sinks"]["attributed_plays"] = {
        "kind": "kafka", "bootstrapServers": "127.0.0.1:1", "topic": "plays", "key": ["playback_id"],
    }  # fmt: skip
    kafka_job = StreamingJob.model_validate(data)
    rw = yaml.safe_load((ROOT / "examples" / "rmi-rewind.yaml").read_text())
    point = SinkRestore(sink="attributed_plays", batch_id=5, committed_at="2026-11-01T12:20:00Z", query_id="q-up")
    for downstream, state in ((True, "Failed"), (False, "Restored")):
        rw["spec"]["downstream"] = downstream
        cfg = restore_config(Rewind.model_validate(rw), kafka_job, (point,), str(tmp_path / f"restored-{downstream}"))
        assert cfg.restore is not None and cfg.restore.downstream is downstream
        run(tmp_path, cfg)
        report = read_report(cfg)
        assert report is not None and report.state == state
        if downstream:
            assert "kafka-produced/5" in str(report.error) and "rewind the downstream jobs by hand" in str(report.error)
        else:
            assert report.sinks[0].undone_records == []


def test_a_failed_drivers_error_goes_to_its_termination_log_on_one_line_and_nowhere_outside_a_pod(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kubelet makes the file and keeps what is in it in the pod's status, where the
    operator reads it; outside a pod (no such file) nothing is created."""
    import spark_app.__main__ as entry

    log = tmp_path / "termination-log"
    monkeypatch.setattr(entry, "TERMINATION_LOG", str(log))
    entry.last_words("job rmi failed:\n  ValueError: bad\trow")
    assert not log.exists(), "not made where the kubelet did not make it"
    log.write_text("an older message, longer than the new one")
    entry.last_words("job rmi failed:\n  ValueError: bad\trow")
    assert log.read_text() == "job rmi failed: ValueError: bad row"
    entry.last_words("x" * 5000)
    assert len(log.read_text()) == entry.LAST_WORDS_MAX and log.read_text().endswith("...")
