"""`kappa checkpoints list` and `kappa rewind` (the dry run): what a person reads before
applying a Rewind, from the same snapshots and tables the operator would use."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pyiceberg.catalog.sql import SqlCatalog

from harness.checkpoint_data import live_ids, sink_batches, tree_hash, write_checkpoint
from kappa_operator.cli.commands import main
from spark_app.contract.checkpoints import externalize, list_snapshots, open_location

ROOT = Path(__file__).resolve().parents[4]


@pytest.fixture(autouse=True)
def wide(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "300")  # rich wraps cells to the terminal's width


@pytest.fixture
def world(tmp_path: Path) -> dict[str, Path]:
    """rmi with 6 committed batches (snapshots at 2 and 5), its sink table, a downstream job."""
    props = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": f"file://{tmp_path}/wh"}
    catalog = SqlCatalog("default", **{k: v for k, v in props.items() if k != "type"})
    catalog.create_namespace("marts")
    sink_batches(catalog, "marts.attributed_plays", "q-up", 6)
    live = tmp_path / "ckpt" / "live" / "attributed_plays"
    write_checkpoint(live, "q-up", 6, minute=0)
    external = tmp_path / "ext" / "attributed_plays"
    for b in (2, 5):
        externalize(open_location(str(live)), open_location(str(external)), batch_id=b)
    job = yaml.safe_load((ROOT / "examples" / "rmi-streamingjob.yaml").read_text())
    job["spec"]["catalogs"] = {"default": props}
    job["spec"]["checkpoints"] = {"location": str(tmp_path / "ckpt"), "externalLocation": str(tmp_path / "ext")}
    down = yaml.safe_load(yaml.safe_dump(job))
    down["metadata"]["name"] = "titles"
    down["spec"]["sources"] = {
        "plays": {
            "live": {"kind": "icebergLive", "table": "marts.attributed_plays"},
            "history": {"table": "marts.attributed_plays"},
        }
    }
    rw = yaml.safe_load((ROOT / "examples" / "rmi-rewind.yaml").read_text())
    rw["spec"]["target"] = {"time": "2026-11-01T12:30:00Z"}
    paths = {"live": live, "external": external, "job": tmp_path / "job.yaml", "down": tmp_path / "down.yaml"}
    paths["rewind"] = tmp_path / "rewind.yaml"
    for key, doc in (("job", job), ("down", down), ("rewind", rw)):
        paths[key].write_text(yaml.safe_dump(doc))
    paths["catalog"] = tmp_path
    return paths


def test_list_a_live_checkpoint_and_its_snapshots(world: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["checkpoints", "list", str(world["live"])]) == 0
    out = capsys.readouterr().out
    assert "committed batches" in out and "2026-11-01 12:50:00" in out, "batch 5's commit time"
    assert "live snapshot 1005 pos 0" in out, "our Iceberg offsets decoded"
    assert main(["checkpoints", "list", str(world["external"])]) == 0
    out = capsys.readouterr().out
    assert "restorable snapshots" in out and "2026-11-01 12:20:00" in out
    assert main(["checkpoints", "list", str(world["live"].parent / "nothing")]) == 2
    assert "no files there" in capsys.readouterr().err


def test_rewind_dry_run_says_what_would_happen_and_changes_nothing(
    world: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    before = tree_hash(world["live"]), tree_hash(world["external"])
    args = ["rewind", str(world["rewind"]), "--job", str(world["job"]), "--jobs", str(world["down"])]
    assert main(args) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "nothing is changed by this command" in out
    assert "marts.attributed_plays: undo batches 3..5 (3 files)" in out
    assert "resumes at" in out and "rmi-before-outage-titles of titles" in out
    assert (tree_hash(world["live"]), tree_hash(world["external"])) == before
    catalog = SqlCatalog("default", uri=f"sqlite:///{world['catalog']}/catalog.db", warehouse="file:///unused")
    assert live_ids(catalog, "marts.attributed_plays") == [f"q-up-{b}" for b in range(6)]
    assert [m.batch_id for m in list_snapshots(open_location(str(world["external"])))] == [2, 5]


def test_rewind_dry_run_refuses_clearly_without_a_point(
    world: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    rw = yaml.safe_load(world["rewind"].read_text())
    rw["spec"]["target"] = {"time": "2026-11-01T12:00:00Z"}
    world["rewind"].write_text(yaml.safe_dump(rw))
    assert main(["rewind", str(world["rewind"]), "--job", str(world["job"])]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "refused: no restorable point" in out and "earliest restorable point is batch 2" in out


def test_rewind_dry_run_of_the_examples_with_local_catalogs_and_checkpoints(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`kappa rewind --local DIR`, as `kappa run --local DIR` maps the example's REST catalog and
    s3:// checkpoints: the restore points and the sink's batches are read from under DIR."""
    from kappa_operator.local.overrides import localize
    from kappa_operator.models.streaming_job import StreamingJob

    local = tmp_path / "local"
    example = ROOT / "examples" / "rmi-streamingjob.yaml"
    job, _ = localize(StreamingJob.model_validate(yaml.safe_load(example.read_text())), local)
    props = {k: v for k, v in job.spec.catalogs["default"].items() if k != "type"}
    (local / "catalogs").mkdir(parents=True)
    catalog = SqlCatalog("default", **props)
    catalog.create_namespace("marts")
    sink_batches(catalog, "marts.attributed_plays", "q-up", 6)
    live = Path(job.spec.checkpoints.location) / "live" / "attributed_plays"
    write_checkpoint(live, "q-up", 6, minute=0)
    assert job.spec.checkpoints.external_location is not None
    external = Path(job.spec.checkpoints.external_location) / "attributed_plays"
    externalize(open_location(str(live)), open_location(str(external)), batch_id=2)
    rw = yaml.safe_load((ROOT / "examples" / "rmi-rewind.yaml").read_text())
    rw["spec"]["target"] = {"time": "2026-11-01T12:30:00Z"}
    (tmp_path / "rewind.yaml").write_text(yaml.safe_dump(rw))
    args = ["rewind", str(tmp_path / "rewind.yaml"), "--job", str(example), "--local", str(local)]
    assert main(args) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "marts.attributed_plays: undo batches 3..5 (3 files)" in out, out
