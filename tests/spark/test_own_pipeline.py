"""Issue 30 item 1: a team's own pipeline, not in the image, run with `kappa run` as the team
would before shipping it (each run its own process and JVM, as a person types it): the example
package examples/own-pipeline/watch_time shipped as a pyFiles zip (where --local maps the
manifest's s3a:// URI), then as a ConfigMap would mount it (a kubelet-style directory holding
the zipped package, given with --py-files). Its tier is a Python UDF, so the executors' Python
workers must import the shipped module: every output row is checked against the input."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from pyiceberg.catalog.sql import SqlCatalog

from kappa_operator.local.example_data import write_example_data
from kappa_operator.local.overrides import local_catalog, local_path

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
OWN = ROOT / "examples" / "own-pipeline"
MANIFEST = OWN / "watch-time-streamingjob.yaml"
KAPPA = str(Path(sys.executable).parent / "kappa")


def package_zip(target: Path) -> Path:
    """`cd examples/own-pipeline && zip -r watch_time-0.1.0.zip watch_time`, in Python."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(target, "w") as zf:
        for path in sorted((OWN / "watch_time").glob("*.py")):
            zf.write(path, f"watch_time/{path.name}")
    return target


def kappa_run(*args: str) -> str:
    env = {**os.environ, "COLUMNS": "200"}
    done = subprocess.run([KAPPA, "run", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return " ".join(done.stdout.split())


def expected_tiers(catalog: SqlCatalog, binge_minutes: int) -> dict[str, str]:
    """Each input playback's tier, by the team's own function (imported from its file here)."""
    spec = importlib.util.spec_from_file_location("own_engagement", OWN / "watch_time" / "engagement.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    plays = catalog.load_table("ingest.playbacks").scan(selected_fields=("playback_id", "duration_s")).to_arrow()
    return {r["playback_id"]: module.tier(r["duration_s"], binge_minutes) for r in plays.to_pylist()}


def written(catalog: SqlCatalog, table: str) -> dict[str, str]:
    rows = catalog.load_table(table).scan(selected_fields=("playback_id", "tier")).to_arrow().to_pylist()
    assert len(rows) == len({r["playback_id"] for r in rows}), "each playback once"
    return {r["playback_id"]: r["tier"] for r in rows}


def test_own_pipeline_from_a_py_files_zip_and_from_a_config_map_directory(tmp_path: Path) -> None:
    root = (tmp_path / "local").resolve()
    write_example_data(root, MANIFEST, hours=1, per_hour=2000)
    job: dict[str, Any] = yaml.safe_load(MANIFEST.read_text())
    props = local_catalog("default", job["spec"]["catalogs"]["default"], root)
    catalog = SqlCatalog("default", uri=props["uri"], warehouse=props["warehouse"])
    want = expected_tiers(catalog, int(job["spec"]["pipelineArgs"]["binge_minutes"]))
    assert len(want) == 500 and set(want.values()) == {"sampled", "watched", "binged"}

    # 1. the manifest as it is: its pyFiles zip "uploaded" where --local maps s3a:// URIs
    uri = job["spec"]["deps"]["pyFiles"][0]
    package_zip(Path(local_path(uri, root)))
    out = kappa_run(str(MANIFEST), "--local", str(root), "--starting-position", "earliest")
    assert "deps.pyFiles -> pythonPath" in out
    assert written(catalog, "insights.engaged_plays") == want

    # 2. the same package from a ConfigMap (`kubectl create configmap watch-time
    #    --from-file=watch_time-0.1.0.zip`), mounted as the kubelet does, given with --py-files
    mount = tmp_path / "configmap"
    data = mount / "..2026_11_26_10_00_00.1"
    package_zip(data / "watch_time-0.1.0.zip")
    os.symlink(data.name, mount / "..data")
    os.symlink("..data/watch_time-0.1.0.zip", mount / "watch_time-0.1.0.zip")
    cm = yaml.safe_load(MANIFEST.read_text())
    del cm["spec"]["deps"]
    cm["metadata"]["name"] = "watch-time-cm"
    cm["spec"]["pipelineFrom"] = {"configMap": {"name": "watch-time"}}
    cm["spec"]["sinks"]["engaged_plays"]["table"] = "insights.engaged_plays_cm"
    cm["spec"]["checkpoints"]["location"] += "-cm"
    cm_file = tmp_path / "watch-time-cm.yaml"
    cm_file.write_text(yaml.safe_dump(cm))
    out = kappa_run(str(cm_file), "--local", str(root), "--starting-position", "earliest", "--py-files", str(mount))
    assert "instead of the ConfigMap mounted at /opt/kappa/pipelines/watch-time" in out
    assert written(catalog, "insights.engaged_plays_cm") == want
