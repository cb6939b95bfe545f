"""`kappa run`'s walkers with Spark replaced by a fake engine: the operator's plans carried out
locally on real checkpoints (Spark's layout, written by the tests), real externalized
snapshots, a real SQLite Iceberg table, a real embedded coordinator."""

from __future__ import annotations

import io
import json
import os
import shutil
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from pyiceberg.catalog.sql import SqlCatalog
from rich.console import Console

from harness.checkpoint_data import live_ids, sink_batches, write_checkpoint
from kappa_operator.local.display import Display
from kappa_operator.local.manifests import load
from kappa_operator.local.objects import LocalObjects
from kappa_operator.local.overrides import RunOptions, local_catalog, localize
from kappa_operator.local.runs import run_manifests
from kappa_operator.models.rewind import Rewind
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.render.jobconfig import CHECKPOINT_ANNOTATION, PAUSED_ANNOTATION
from spark_app.apps.result import RunResult
from spark_app.checkpoints.driver import externalize_sinks
from spark_app.contract.checkpoints import layout, list_snapshots, open_location
from spark_app.contract.config import JobConfig
from spark_app.contract.reports.publish import PublishReport, report_location

ROOT = Path(__file__).resolve().parents[4]
EXAMPLES = ROOT / "examples"
SINK = "attributed_plays"
NOW = datetime.now(UTC)


def publish_report(cfg: JobConfig, state: str = "Published", error: str | None = None) -> PublishReport:
    """What a publish leaves where the operator reads it (its real location, next to the checkpoint)."""
    at = datetime.now(UTC)
    assert cfg.publish is not None
    report = PublishReport(backfill=cfg.publish.tag, state=state, tables=[], error=error, started_at=at, finished_at=at)  # type: ignore[arg-type]
    loc, name = report_location(cfg)
    loc.write_bytes(name, report.model_dump_json().encode())
    return report


class FakeEngine:
    """Records what it was asked to run; ``effect`` stands in for what Spark would write;
    ``driver_publishes``: the state of the publish a backfill's run does in its driver (None: a
    driver that does not publish, as an image from before that)."""

    def __init__(self, effect: Callable[[JobConfig], None] | None = None, driver_publishes: str | None = None) -> None:
        self.configs: list[JobConfig] = []
        self.effect = effect
        self.driver_publishes = driver_publishes
        self.told: list[str] = []
        self.published: list[JobConfig] = []

    def run(self, cfg: JobConfig, publishing: Callable[[str], None] | None = None) -> RunResult:
        self.configs.append(cfg)
        if self.effect is not None:
            self.effect(cfg)
        if cfg.publish is not None and self.driver_publishes is not None:
            line = f"validating {cfg.sink_branch(SINK)} against main and publishing"
            self.told.append(line)
            if publishing is not None:
                publishing(line)
            publish_report(cfg, self.driver_publishes, None if self.driver_publishes == "Published" else "below")
        report = RunResult(cfg.name, cfg.mode, 0.5, [])
        if cfg.mode == "live" and cfg.checkpoint.external is not None:  # as the driver's externalizer does
            report.externalized = externalize_sinks(cfg, datetime.now(UTC))
        return report

    def publish(self, cfg: JobConfig) -> PublishReport:
        """The separate publish application's code: publishes."""
        self.published.append(cfg)
        return publish_report(cfg)

    def activity(self) -> str | None:
        return None

    def open_tables(self, job: StreamingJob, backfill: bool) -> None:
        """No catalog here: the walkers' decisions are what these tests check."""


class World:
    """The examples run with --local under one directory, output captured."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.out = io.StringIO()
        job = StreamingJob.model_validate(yaml.safe_load((EXAMPLES / "rmi-streamingjob.yaml").read_text()))
        self.job, _ = localize(job, root)
        self.props = local_catalog("default", dict(job.spec.catalogs["default"]), root.resolve())

    def run(self, manifest: Path, engine: FakeEngine, job_file: Path | None = None, **opts: Any) -> int:
        self.out.truncate(0)
        self.out.seek(0)
        show = Display(Console(file=self.out, width=300))
        return run_manifests(load(manifest, job_file), RunOptions(local=self.root, **opts), show, engine)

    @property
    def text(self) -> str:
        return " ".join(self.out.getvalue().split())

    def catalog(self) -> SqlCatalog:
        return SqlCatalog("default", **{k: v for k, v in self.props.items() if k != "type"})

    def live(self) -> Path:
        return Path(self.job.spec.checkpoints.location) / "live" / SINK

    def external(self) -> Path:
        assert self.job.spec.checkpoints.external_location is not None
        return Path(self.job.spec.checkpoints.external_location) / SINK

    def record(self, kind: str, name: str) -> dict[str, Any]:
        return dict(json.loads((self.root / "objects" / kind / "default" / f"{name}.json").read_text()))


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path / "local")


def spark_wrote(batches: int) -> Callable[[JobConfig], None]:
    """What the live query leaves behind: ``batches`` committed batches of query q-up, batch i
    committed ``batches - i`` minutes ago (wall clock, as Spark commits; within retention)."""

    def effect(cfg: JobConfig) -> None:
        live = Path(cfg.checkpoint.location) / SINK
        write_checkpoint(live, "q-up", batches, minute=0)
        for i in range(batches):
            ts = (NOW - timedelta(minutes=batches - i)).timestamp()
            os.utime(live / "commits" / str(i), (ts, ts))

    return effect


# --- StreamingJob --------------------------------------------------------------------------


def test_a_streaming_job_runs_its_rendered_config_then_externalizes_every_batch(world: World) -> None:
    engine = FakeEngine(spark_wrote(6))
    assert world.run(EXAMPLES / "rmi-streamingjob.yaml", engine, starting_position="earliest") == 0
    (cfg,) = engine.configs
    assert (cfg.name, cfg.mode, cfg.master, cfg.effective_trigger.kind) == ("rmi", "live", "local[2]", "availableNow")
    assert cfg.checkpoint.location == str(world.live().parent)
    assert [m.batch_id for m in list_snapshots(open_location(str(world.external())))] == [0, 1, 2, 3, 4, 5]
    status = world.record("streamingjob", "rmi")["status"]
    assert status["phase"] == "Completed" and status["applicationState"] == "COMPLETED"
    assert [p["batchId"] for p in status["checkpoints"]] == [5, 4, 3, 2, 1], "the newest five, as the operator shows"
    assert status["lastCheckpoint"] == (NOW - timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    for line in ("--local", "StreamingJob default/rmi: Submitted", "StreamingJob default/rmi: Running", "Completed"):
        assert line in world.text
    assert "externalized attributed_plays batches 0..5" in world.text
    assert "startingPosition earliest" in world.text


def test_a_second_run_externalizes_only_the_new_batches(world: World) -> None:
    world.run(EXAMPLES / "rmi-streamingjob.yaml", FakeEngine(spark_wrote(3)))
    assert world.run(EXAMPLES / "rmi-streamingjob.yaml", FakeEngine(rewritten(5, watermark_shift=0))) == 0
    assert "externalized attributed_plays batches 3..4" in world.text
    assert [m.batch_id for m in list_snapshots(open_location(str(world.external())))] == [0, 1, 2, 3, 4]


def test_snapshots_of_another_timeline_are_refused_not_mixed(world: World) -> None:
    """A live checkpoint started over (its batch 2 is not the externalized batch 2): nothing is
    externalized next to the old timeline's snapshots, and the run says why."""
    world.run(EXAMPLES / "rmi-streamingjob.yaml", FakeEngine(spark_wrote(3)))
    assert world.run(EXAMPLES / "rmi-streamingjob.yaml", FakeEngine(rewritten(5, watermark_shift=7))) == 1
    assert "already holds a snapshot of batch 2 with other offsets" in world.text
    assert [m.batch_id for m in list_snapshots(open_location(str(world.external())))] == [0, 1, 2]


def rewritten(batches: int, watermark_shift: int) -> Callable[[JobConfig], None]:
    """The live checkpoint now holds ``batches`` batches; their offsets equal the earlier
    run's unless ``watermark_shift`` (minutes) changes them."""

    def effect(cfg: JobConfig) -> None:
        live = Path(cfg.checkpoint.location) / SINK
        shutil.rmtree(live)
        write_checkpoint(live, "q-up", batches, minute=watermark_shift)
        for i in range(batches):
            ts = (NOW - timedelta(minutes=batches - i)).timestamp()
            os.utime(live / "commits" / str(i), (ts, ts))

    return effect


def test_a_failed_run_is_a_failed_application(world: World) -> None:
    def boom(cfg: JobConfig) -> None:
        raise RuntimeError("ConfigError: table ingest.impressions does not exist in catalog 'default'\n\tat ...")

    assert world.run(EXAMPLES / "rmi-streamingjob.yaml", FakeEngine(boom)) == 1
    status = world.record("streamingjob", "rmi")["status"]
    assert status["phase"] == "Failed" and status["message"].startswith("ConfigError: table ingest.impressions")
    assert "the tables live in the SQLite catalogs under" in world.text


def test_follow_keeps_the_processing_time_trigger_until_ctrl_c(world: World) -> None:
    def interrupted(cfg: JobConfig) -> None:
        raise KeyboardInterrupt

    engine = FakeEngine(interrupted)
    assert world.run(EXAMPLES / "rmi-streamingjob.yaml", engine, follow=True) == 0
    assert engine.configs[0].effective_trigger.kind == "processingTime"
    assert world.record("streamingjob", "rmi")["status"]["message"] == "stopped by Ctrl-C"


def test_a_job_paused_by_a_rewind_is_not_run(world: World) -> None:
    objects = LocalObjects(world.root / "objects")
    objects.annotate(objects.apply(world.job), {PAUSED_ANNOTATION: "rewind/r1"})
    engine = FakeEngine()
    assert world.run(EXAMPLES / "rmi-streamingjob.yaml", engine) == 1
    assert engine.configs == [] and "Rewinding stopped by rewind/r1" in world.text


def test_flags_of_another_kind_are_refused(world: World) -> None:
    assert world.run(EXAMPLES / "rmi-backfill.yaml", FakeEngine(), follow=True) == 2
    assert "a Backfill ends by itself" in world.text
    assert world.run(EXAMPLES / "rmi-streamingjob.yaml", FakeEngine(), target_batch=1) == 2
    assert "--target-batch / --target-time are for a Rewind" in world.text
    assert world.run(EXAMPLES / "rmi-streamingjob.yaml", FakeEngine(), snapshots_per_batch=0) == 2
    assert "--snapshots-per-batch must be at least 1" in world.text


# --- Rewind ----------------------------------------------------------------------------------


@pytest.fixture
def rewound(world: World, tmp_path: Path) -> tuple[World, Path]:
    """rmi ran 6 batches (committed in the last minutes) into marts.attributed_plays, externalized;
    titles reads that table live (downstream). Returns the world and the jobs file."""
    world.run(EXAMPLES / "rmi-streamingjob.yaml", FakeEngine(spark_wrote(6)))
    catalog = world.catalog()
    catalog.create_namespace("marts")
    sink_batches(catalog, "marts.attributed_plays", "q-up", 6)
    job = yaml.safe_load((EXAMPLES / "rmi-streamingjob.yaml").read_text())
    titles = yaml.safe_load(yaml.safe_dump(job))
    titles["metadata"]["name"] = "titles"
    titles["spec"]["sources"] = {
        "plays": {"live": {"kind": "icebergLive", "table": "marts.attributed_plays"}, "history": {"table": "x.y"}}
    }
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(yaml.safe_dump_all([job, titles]))
    return world, jobs


def test_the_example_target_time_precedes_every_local_snapshot_and_says_so(rewound: tuple[World, Path]) -> None:
    world, jobs = rewound
    engine = FakeEngine()
    assert world.run(EXAMPLES / "rmi-rewind.yaml", engine, job_file=jobs) == 1
    text = world.text
    assert "Rewind default/rmi-before-outage: Failed no restorable point" in text
    assert "no snapshot committed before 2026-11-01T14:00:00+00:00: the earliest restorable point is batch 0" in text
    assert "--target-batch N" in text and "the manifest stays as it is" in text
    assert engine.configs == [] and live_ids(world.catalog(), "marts.attributed_plays") == [
        f"q-up-{b}" for b in range(6)
    ]
    assert PAUSED_ANNOTATION not in world.record("streamingjob", "rmi")["annotations"], "nothing was changed"


def test_a_rewind_walks_the_operator_phases_and_resumes_the_job(rewound: tuple[World, Path]) -> None:
    world, jobs = rewound
    live_before = sorted(p.read_bytes() for p in world.live().rglob("*") if p.is_file())
    world.run(EXAMPLES / "rmi-rewind.yaml", FakeEngine(), job_file=jobs)  # Failed in Pending, as above
    engine = FakeEngine()
    assert world.run(EXAMPLES / "rmi-rewind.yaml", engine, job_file=jobs, target_batch=2) == 0
    text = world.text
    assert 'spec.target {"time": "2026-11-01T14:00:00Z"} -> {"batchId": 2} (--target-batch)' in text
    assert "failed before changing anything: running it again as a new Rewind" in text
    phases = [p for p in ("Stopping", "Restoring", "Resuming", "Succeeded") if f": {p} " in text]
    assert phases == ["Stopping", "Restoring", "Resuming", "Succeeded"]
    rw = world.record("rewind", "rmi-before-outage")["status"]
    location = rw["checkpointLocation"]
    assert location.startswith(str(world.job.spec.checkpoints.location) + "/rewinds/rmi-before-outage-")
    assert rw["restoredBatch"] == 2 and rw["restores"][0]["filesRemoved"] == 3
    assert rw["downstream"] == ["rmi-before-outage-titles"]
    created = yaml.safe_load((world.root / "objects" / "created" / "rmi-before-outage-titles.yaml").read_text())
    assert (
        created["spec"]["jobRef"] == {"name": "titles"}
        and created["spec"]["target"]["time"] == rw["restores"][0]["committedAt"]
    )
    # restored at batch 2, sink undone after it, job resumed from the restored checkpoint
    restored = open_location(f"{location}/{SINK}").list_files()
    assert max(layout.committed_batches(restored)) == 2
    assert live_ids(world.catalog(), "marts.attributed_plays") == ["q-up-0", "q-up-1", "q-up-2"]
    ((cfg),) = engine.configs
    assert cfg.checkpoint.location == location and cfg.mode == "live"
    annotations = world.record("streamingjob", "rmi")["annotations"]
    assert annotations[CHECKPOINT_ANNOTATION] == location and annotations.get(PAUSED_ANNOTATION) is None
    assert sorted(p.read_bytes() for p in world.live().rglob("*") if p.is_file()) == live_before, "only read"
    assert [m.batch_id for m in list_snapshots(open_location(str(world.external())))] == [0, 1, 2], "after 2: dropped"

    # as on a cluster: the Rewind is done, and its job now runs from the restored checkpoint
    again = FakeEngine()
    assert world.run(EXAMPLES / "rmi-rewind.yaml", again, job_file=jobs, target_batch=2) == 0
    assert again.configs == [] and "already Succeeded" in world.text
    later = FakeEngine()
    assert world.run(EXAMPLES / "rmi-streamingjob.yaml", later) == 0
    assert later.configs[0].checkpoint.location == location


def test_a_fresh_rewind_unpauses_the_job_it_left_paused(rewound: tuple[World, Path]) -> None:
    world, jobs = rewound
    objects = LocalObjects(world.root / "objects")
    rw = Rewind.model_validate(yaml.safe_load((EXAMPLES / "rmi-rewind.yaml").read_text()))
    objects.patch_status(
        objects.apply(rw),
        {
            "phase": "Failed",
            "message": "Restoring: the snapshot of batch 1 is gone",
            "restores": [{"sink": SINK, "batchId": 1, "committedAt": "2026-11-22T00:00:00Z", "queryId": "q-up"}],
        },
    )
    objects.annotate(objects.apply(world.job), {PAUSED_ANNOTATION: "rewind/rmi-before-outage"})
    assert world.run(EXAMPLES / "rmi-rewind.yaml", FakeEngine(), job_file=jobs) == 1
    assert "already Failed" in world.text and "--fresh" in world.text
    assert world.run(EXAMPLES / "rmi-rewind.yaml", FakeEngine(), job_file=jobs, target_batch=4, fresh=True) == 0
    assert "rmi unpaused" in world.text
    assert live_ids(world.catalog(), "marts.attributed_plays") == [f"q-up-{b}" for b in range(5)]


# --- Backfill --------------------------------------------------------------------------------


def backfill_file(tmp_path: Path, **spec: Any) -> Path:
    """The example Backfill with its job in one file (the spec changed as given)."""
    bf = yaml.safe_load((EXAMPLES / "rmi-backfill.yaml").read_text())
    bf["spec"].update(spec)
    job = yaml.safe_load((EXAMPLES / "rmi-streamingjob.yaml").read_text())
    path = tmp_path / "bf.yaml"
    path.write_text(yaml.safe_dump_all([job, bf]))
    return path


def test_a_backfill_declares_its_group_runs_and_succeeds(world: World, tmp_path: Path) -> None:
    seen: dict[str, Any] = {}

    def check_group(cfg: JobConfig) -> None:
        assert cfg.coordinator is not None and cfg.coordinator.token
        req = urllib.request.Request(
            f"{cfg.coordinator.url}/v1/groups/default.rmi-outage",
            headers={"Authorization": f"Bearer {cfg.coordinator.token}"},
        )
        with urllib.request.urlopen(req, timeout=5) as resp:
            seen["group"] = json.loads(resp.read())
        seen["cfg"] = cfg

    path = backfill_file(tmp_path, publish={"enabled": False})
    assert world.run(path, FakeEngine(check_group)) == 0
    cfg = seen["cfg"]
    assert cfg.mode == "backfill" and cfg.sinks[SINK].branch == "backfill-rmi-outage"
    assert sorted(seen["group"]["declared"]) == [f"rmi-outage/{SINK}/impressions", f"rmi-outage/{SINK}/playbacks"]
    status = world.record("backfill", "rmi-outage")["status"]
    assert status["phase"] == "Succeeded" and "publish is not enabled" in status["message"]
    assert status["checkpoint"] == cfg.checkpoint.location and "/backfills/rmi-outage-" in cfg.checkpoint.location
    assert "Backfill default/rmi-outage: Running backfilling 2026-11-01T14:00:00Z .. 2026-11-01T18:00:00Z" in world.text

    engine = FakeEngine()
    assert world.run(path, engine) == 0 and engine.configs == [] and "already Succeeded" in world.text
    assert world.run(path, engine, fresh=True) == 0
    assert engine.configs[0].checkpoint.location != cfg.checkpoint.location, "a new object: a fresh checkpoint"


def test_a_backfill_publishes_in_its_run_and_succeeds_on_the_report_as_on_a_cluster(
    world: World, tmp_path: Path
) -> None:
    """One run that publishes, as the backfill's driver does: no Publishing phase, no separate
    publish step; the end is the operator's decision from the report the run left."""
    engine = FakeEngine(driver_publishes="Published")
    assert world.run(backfill_file(tmp_path), engine) == 0
    assert engine.told == ["validating backfill-rmi-outage against main and publishing"] and engine.published == []
    status = world.record("backfill", "rmi-outage")["status"]
    assert status["phase"] == "Succeeded" and status["message"].startswith("published backfill-rmi-outage into main")
    assert "Backfill default/rmi-outage: Publishing" not in world.text
    assert "then validating it against main and publishing, in the same application" in world.text


def test_a_refused_publish_in_the_run_fails_the_backfill_from_its_report(world: World, tmp_path: Path) -> None:
    engine = FakeEngine(driver_publishes="Refused")
    assert world.run(backfill_file(tmp_path), engine) == 1
    status = world.record("backfill", "rmi-outage")["status"]
    assert status["phase"] == "Failed" and status["message"] == "publish refused: below"
    assert [c["reason"] for c in status["conditions"] if c["type"] == "Failed"] == ["ValidationFailed"]
    assert engine.published == [], "refused is an answer: nothing runs again until restartNonce changes"


def test_a_run_that_left_no_publish_report_is_published_by_the_publish_applications_code(
    world: World, tmp_path: Path
) -> None:
    """As the operator decides on a cluster (an image whose driver does not publish): Publishing,
    then the separate publish application's code, in-process."""
    engine = FakeEngine()
    assert world.run(backfill_file(tmp_path), engine) == 0
    assert [c.name for c in engine.published] == ["rmi-outage"]
    assert "Backfill default/rmi-outage: Publishing" in world.text
    status = world.record("backfill", "rmi-outage")["status"]
    assert status["phase"] == "Succeeded" and status["publishApplicationName"] == "rmi-outage-backfill-publish"


def test_a_failed_backfill_resumes_when_restart_nonce_is_bumped(world: World, tmp_path: Path) -> None:
    def boom(cfg: JobConfig) -> None:
        raise RuntimeError("LatenessError: watermark delay 5m < maxDrift 10m + largest split span 14m")

    path = backfill_file(tmp_path)
    assert world.run(path, FakeEngine(boom)) == 1
    status = world.record("backfill", "rmi-outage")["status"]
    assert status["phase"] == "Failed" and "bump spec.restartNonce to resume" in status["message"]
    assert "LatenessError" in status["message"]
    engine = FakeEngine()
    assert world.run(path, engine) == 1 and engine.configs == [] and "Failed earlier" in world.text
    first = status["checkpoint"]
    path = backfill_file(tmp_path, restartNonce=1, publish={"enabled": False})
    assert world.run(path, engine) == 0
    assert engine.configs[0].checkpoint.location == first, "the same checkpoint and branch, resumed"
    assert world.record("backfill", "rmi-outage")["status"]["restartNonce"] == 1
