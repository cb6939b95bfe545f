"""The lookup examples' manifests (examples/enrich-*.yaml): accepted by the API server's schema
and the models, rendered into JobConfigs whose pipeline and sources fit each other, and a
Python-state lookup gets a drain like any operator that emits on the watermark."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest
import yaml

from kappa_operator.models.backfill import Backfill
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.render.jobconfig import backfill_config, streaming_job_config
from spark_app.sources.frames import load_pipeline
from spark_app.window.horizon import emits_on_watermark
from tests.crd_validation import admit, load_crd

ROOT = Path(__file__).resolve().parents[4]
PAIRS = [
    ("enrich-streamingjob.yaml", "enrich-backfill.yaml"),
    ("enrich-changes-streamingjob.yaml", "enrich-changes-backfill.yaml"),
]


def manifest(name: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / "examples" / name).read_text())


@pytest.mark.parametrize(("job_file", "backfill_file"), PAIRS)
def test_examples_are_admitted_and_render_configs_the_pipeline_fits(job_file: str, backfill_file: str) -> None:
    job_doc, bf_doc = manifest(job_file), manifest(backfill_file)
    for doc, crd in ((job_doc, "streamingjobs.kappa.dev.yaml"), (bf_doc, "backfills.kappa.dev.yaml")):
        _, errors = admit(load_crd(ROOT / "crds" / crd), doc)
        assert errors == []
    job = StreamingJob.model_validate(job_doc)
    bf = Backfill.model_validate(bf_doc)
    assert bf.spec.job_ref.name == job.metadata.name
    live = streaming_job_config(job)
    backfill = backfill_config(bf, job, None)
    pipeline = load_pipeline(live.pipeline)
    # pipelineArgs are the function's keyword arguments; its sources the manifest's.
    assert set(live.pipeline_args) <= set(inspect.signature(pipeline).parameters)
    source = inspect.getsource(pipeline)
    assert all(f'sources["{name}"]' in source for name in live.sources)
    assert backfill.mode == "backfill" and set(backfill.sources) == set(live.sources)
    if "changes" in job_file:  # the change log is replayed in the order of its own time column
        assert backfill.ordering_column("promotion_changes") == "changed_ts"


def test_python_state_operators_emit_on_the_watermark() -> None:
    """applyInPandasWithState (solution 2's join) holds facts until the watermark passes them: a
    backfill must read past its end by the watermark delay to emit the window's last ones."""
    plan = "+- ~FlatMapGroupsInPandasWithState _step(title_id#7L, _kappa_t#10-T60000ms, ...)"
    assert emits_on_watermark(plan)
    assert emits_on_watermark("+- TransformWithStateInPySpark step(...)")
    assert not emits_on_watermark("+- Project [title_id#7L, FlatMapGroupsInPandasWithStateX#3]")
