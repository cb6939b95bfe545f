"""The API server and the operator agree on what is valid, what may change, and how big a
resource can be (issue 14: defects 4, 6 and the schema half of 8).

* A table of manifests, each run through both the offline API server (tests/crd_validation.py:
  the CRD's schema and CEL rules, with CEL's ``timestamp()``/``duration()`` as in Go) and the
  pydantic models: both accept it, or both refuse it and both name the field. The cases are the
  edges where they used to disagree: sub-millisecond durations (``0.0001ms`` is 100ns in Go and
  0 in a Python timedelta), durations too long for Go or Python (``99999999999h``), offsets of
  24 hours, days their month does not have, oversized free-form fields.
* Updates: a Backfill's spec (but restartNonce and publish) and a Rewind's spec are immutable;
  a StreamingJob's spec is not (a change restarts it from its checkpoint).
* Size: the worst-case spec computed from the CRDs' bounds is within ``SPEC_JSON_MAX``, and a maximal
  manifest built from the schema is accepted by both and no larger than that bound.
"""

from __future__ import annotations

import json
from typing import Any

import pydantic
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kappa_operator.models.common import INT32_MAX, INT64_BOUND, INT64_MAX, SPARK_CONF_MAX, SPEC_JSON_MAX
from tests.crd_validation import admit, map_key_length, openapi_schema, validate, worst_case_size
from tests.unit.crd_documents import DELETE, MODELS, crd, edited, example

BF, SJ, RW = "Backfill", "StreamingJob", "Rewind"
ALIGN, WINDOW, TARGET = "spec.alignment", "spec.window", "spec.target"


def model_errors(kind: str, manifest: dict[str, Any]) -> list[tuple[str, str]] | None:
    """(field path, message) of each error the model reports; None: it accepts the manifest.
    Anything else than a ValidationError (an OverflowError, say) fails the test."""
    try:
        MODELS[kind].model_validate(manifest)
    except pydantic.ValidationError as exc:
        return [(".".join(str(p) for p in e["loc"]), e["msg"]) for e in exc.errors()]
    return None


def x(n: int, c: str = "x") -> str:
    return c * n


def entries(n: int, value: Any, key_length: int = 3) -> dict[str, Any]:
    return {str(i).rjust(key_length, "k"): value for i in range(n)}


KAFKA = {"kind": "kafka", "bootstrapServers": "k:9092", "topic": "t"}

# (id, kind, edits, the field a refusal names; None: both accept)
CASES: list[tuple[str, str, dict[str, Any], str | None]] = [
    # durations: whole milliseconds, at most 87600h
    ("bf-maxdrift-100ns", BF, {f"{ALIGN}.maxDrift": "0.0001ms"}, f"{ALIGN}.maxDrift"),
    ("bf-maxdrift-half-ms", BF, {f"{ALIGN}.maxDrift": "0.5ms"}, f"{ALIGN}.maxDrift"),
    ("bf-maxdrift-sub-ms-fraction", BF, {f"{ALIGN}.maxDrift": "1.0001s"}, f"{ALIGN}.maxDrift"),
    ("bf-maxdrift-zero", BF, {f"{ALIGN}.maxDrift": "0s"}, f"{ALIGN}.maxDrift"),
    ("bf-maxdrift-zero-compound", BF, {f"{ALIGN}.maxDrift": "0h0m0.000s"}, f"{ALIGN}.maxDrift"),
    ("bf-maxdrift-negative", BF, {f"{ALIGN}.maxDrift": "-10m"}, f"{ALIGN}.maxDrift"),
    ("bf-maxdrift-huge", BF, {f"{ALIGN}.maxDrift": "99999999999h"}, f"{ALIGN}.maxDrift"),
    ("bf-maxdrift-int64-overflow", BF, {f"{ALIGN}.maxDrift": "2562048h"}, f"{ALIGN}.maxDrift"),
    ("bf-maxdrift-over-max", BF, {f"{ALIGN}.maxDrift": "87600h1ms"}, f"{ALIGN}.maxDrift"),
    ("bf-maxdrift-days", BF, {f"{ALIGN}.maxDrift": "1d"}, f"{ALIGN}.maxDrift"),
    ("bf-maxdrift-iso", BF, {f"{ALIGN}.maxDrift": "PT10M"}, f"{ALIGN}.maxDrift"),
    ("bf-maxdrift-too-long", BF, {f"{ALIGN}.maxDrift": "1m" + "0s" * 16}, f"{ALIGN}.maxDrift"),
    ("bf-maxdrift-1ms", BF, {f"{ALIGN}.maxDrift": "1ms"}, None),
    ("bf-maxdrift-0.001s", BF, {f"{ALIGN}.maxDrift": "0.001s"}, None),
    ("bf-maxdrift-max", BF, {f"{ALIGN}.maxDrift": "87600h"}, None),
    ("bf-maxdrift-just-under-max", BF, {f"{ALIGN}.maxDrift": "87599h59m59.999s"}, None),
    ("bf-maxdrift-fraction-of-hour", BF, {f"{ALIGN}.maxDrift": "0.00001h"}, None),
    ("bf-lateness-huge", BF, {f"{ALIGN}.lateness": "999999999h"}, f"{ALIGN}.lateness"),
    ("bf-warmup-zero", BF, {f"{WINDOW}.warmup": "0s"}, None),
    ("bf-warmup-sub-ms", BF, {f"{WINDOW}.warmup": "0.1ms"}, f"{WINDOW}.warmup"),
    ("bf-warmup-negative", BF, {f"{WINDOW}.warmup": "-5m"}, f"{WINDOW}.warmup"),
    ("bf-drain-over-max", BF, {f"{WINDOW}.drain": "87601h"}, f"{WINDOW}.drain"),
    ("bf-drain-compound", BF, {f"{WINDOW}.drain": "1h30m15.5s"}, None),
    # timestamps: RFC 3339, offsets up to ±23:59, days that exist, 1900 <= t < 3000
    ("bf-start-offset-24h", BF, {f"{WINDOW}.start": "2026-11-01T16:00:00+24:00"}, f"{WINDOW}.start"),
    ("bf-start-offset-60m", BF, {f"{WINDOW}.start": "2026-11-01T16:00:00+02:60"}, f"{WINDOW}.start"),
    ("bf-start-offset-23:59", BF, {f"{WINDOW}.start": "2026-11-02T13:59:00+23:59"}, None),
    ("bf-end-offset-minus-23:59", BF, {f"{WINDOW}.end": "2026-11-01T00:00:00-23:59"}, None),
    ("bf-start-feb-30", BF, {f"{WINDOW}.start": "2026-02-30T00:00:00Z"}, f"{WINDOW}.start"),
    ("bf-start-apr-31", BF, {f"{WINDOW}.start": "2026-04-31T00:00:00Z"}, f"{WINDOW}.start"),
    ("bf-start-feb-29-not-leap", BF, {f"{WINDOW}.start": "2027-02-29T00:00:00Z"}, f"{WINDOW}.start"),
    (
        "bf-leap-day",
        BF,
        {f"{WINDOW}.start": "2028-02-29T00:00:00Z", f"{WINDOW}.end": "2028-03-01T00:00:00Z"},
        None,
    ),
    ("bf-start-hour-24", BF, {f"{WINDOW}.start": "2026-11-01T24:00:00Z"}, f"{WINDOW}.start"),
    ("bf-start-leap-second", BF, {f"{WINDOW}.start": "2026-11-01T13:59:60Z"}, f"{WINDOW}.start"),
    ("bf-start-one-digit-hour", BF, {f"{WINDOW}.start": "2026-11-01T9:00:00Z"}, f"{WINDOW}.start"),
    ("bf-start-lowercase", BF, {f"{WINDOW}.start": "2026-11-01t14:00:00z"}, f"{WINDOW}.start"),
    ("bf-start-nanoseconds", BF, {f"{WINDOW}.start": "2026-11-01T14:00:00.123456789Z"}, None),
    ("bf-start-10-fraction-digits", BF, {f"{WINDOW}.start": "2026-11-01T14:00:00.1234567891Z"}, f"{WINDOW}.start"),
    ("bf-start-1899", BF, {f"{WINDOW}.start": "1899-12-31T23:59:59Z"}, f"{WINDOW}.start"),
    ("bf-start-1900-by-offset", BF, {f"{WINDOW}.start": "1900-01-01T00:30:00+01:00"}, f"{WINDOW}.start"),
    ("bf-start-year-1-offset", BF, {f"{WINDOW}.start": "0001-01-01T00:00:00+01:00"}, f"{WINDOW}.start"),
    ("bf-end-year-3000", BF, {f"{WINDOW}.end": "3000-01-01T00:00:00Z"}, f"{WINDOW}.end"),
    ("bf-end-year-9999-offset", BF, {f"{WINDOW}.end": "9999-12-31T23:00:00-02:00"}, f"{WINDOW}.end"),
    ("bf-end-2999", BF, {f"{WINDOW}.end": "2999-12-31T23:59:59.999999999Z"}, None),
    ("bf-start-1900", BF, {f"{WINDOW}.start": "1900-01-01T00:00:00Z"}, None),
    # free-form fields and integers
    ("bf-image-empty", BF, {"spec.image": ""}, "spec.image"),
    ("bf-image-max", BF, {"spec.image": x(512)}, None),
    ("bf-image-oversized", BF, {"spec.image": x(513)}, "spec.image"),
    # int64 bounds a real API server can hold (a float64 bound of 2^63-1 wraps: issue 27)
    ("bf-restart-nonce-bound", BF, {"spec.restartNonce": INT64_BOUND}, None),
    ("bf-restart-nonce-over-bound", BF, {"spec.restartNonce": INT64_BOUND + 1}, "spec.restartNonce"),
    ("bf-restart-nonce-int64", BF, {"spec.restartNonce": INT64_MAX}, "spec.restartNonce"),
    ("bf-restart-nonce-over-int64", BF, {"spec.restartNonce": INT64_MAX + 1}, "spec.restartNonce"),
    ("bf-read-files-zero", BF, {"spec.readLimit": {"maxFilesPerSecond": 0}}, "spec.readLimit"),
    ("bf-read-files-min", BF, {"spec.readLimit": {"maxFilesPerSecond": 0.001}}, None),
    ("bf-read-bytes-bound", BF, {"spec.readLimit": {"maxBytesPerSecond": INT64_BOUND}}, None),
    ("bf-sources-too-many", BF, {"spec.sources": entries(9, {})}, "spec.sources"),
    ("bf-sources-max", BF, {"spec.sources": entries(8, {"filter": x(512)}, 63)}, None),
    ("bf-source-key-oversized", BF, {"spec.sources": {x(64): {}}}, "spec.sources"),
    ("bf-source-key-empty", BF, {"spec.sources": {"": {}}}, "spec.sources"),
    ("bf-filter-oversized", BF, {"spec.sources": {"impressions": {"filter": x(513)}}}, "spec.sources"),
    ("bf-snapshot-over-int64", BF, {"spec.sources": {"impressions": {"snapshotId": -(2**63) - 1}}}, "spec.sources"),
    ("bf-snapshot-negative", BF, {"spec.sources": {"impressions": {"snapshotId": -1}}}, "spec.sources"),
    ("bf-snapshot-bound", BF, {"spec.sources": {"impressions": {"snapshotId": INT64_BOUND}}}, None),
    ("bf-group-oversized", BF, {f"{ALIGN}.group": x(64)}, f"{ALIGN}.group"),
    ("bf-branch-oversized", BF, {"spec.output": {"branch": x(129)}}, "spec.output.branch"),
    ("bf-jobref-oversized", BF, {"spec.jobRef.name": x(64)}, "spec.jobRef.name"),
    # StreamingJob
    ("sj-trigger-100ns", SJ, {"spec.triggerInterval": "0.0001ms"}, "spec.triggerInterval"),
    ("sj-trigger-zero", SJ, {"spec.triggerInterval": "0s"}, None),
    ("sj-trigger-huge", SJ, {"spec.triggerInterval": "99999999999h"}, "spec.triggerInterval"),
    ("sj-interval-sub-ms", SJ, {"spec.checkpoints.interval": "1.0001s"}, "spec.checkpoints.interval"),
    ("sj-max-age-over-max", SJ, {"spec.checkpoints.retention": {"maxAge": "87601h"}}, "spec.checkpoints.retention"),
    ("sj-max-age-10y", SJ, {"spec.checkpoints.retention": {"maxAge": "87600h"}}, None),
    ("sj-image-oversized", SJ, {"spec.image": x(513)}, "spec.image"),
    ("sj-pipeline-oversized", SJ, {"spec.pipeline": x(250) + ".m:" + x(10)}, "spec.pipeline"),
    ("sj-args-max", SJ, {"spec.pipelineArgs": entries(16, x(256), 63)}, None),
    ("sj-args-too-many", SJ, {"spec.pipelineArgs": entries(17, "v")}, "spec.pipelineArgs"),
    ("sj-arg-oversized", SJ, {"spec.pipelineArgs": {"lateness": x(257)}}, "spec.pipelineArgs"),
    ("sj-arg-name-oversized", SJ, {"spec.pipelineArgs": {x(64): "v"}}, "spec.pipelineArgs"),
    ("sj-arg-number", SJ, {"spec.pipelineArgs": {"n": 5}}, "spec.pipelineArgs"),
    ("sj-arg-list", SJ, {"spec.pipelineArgs": {"l": ["a"]}}, "spec.pipelineArgs"),
    ("sj-conf-max", SJ, {"spec.sparkConf": entries(SPARK_CONF_MAX, x(256), 128)}, None),
    ("sj-conf-too-many", SJ, {"spec.sparkConf": entries(SPARK_CONF_MAX + 1, "v")}, "spec.sparkConf"),
    ("sj-conf-oversized", SJ, {"spec.sparkConf": {"spark.driver.extraJavaOptions": x(257)}}, "spec.sparkConf"),
    ("sj-conf-key-oversized", SJ, {"spec.sparkConf": {x(129): "v"}}, "spec.sparkConf"),
    ("sj-catalogs-too-many", SJ, {"spec.catalogs": entries(4, {"type": "rest"})}, "spec.catalogs"),
    ("sj-catalog-properties-too-many", SJ, {"spec.catalogs.default": entries(17, "v")}, "spec.catalogs"),
    ("sj-catalog-property-oversized", SJ, {"spec.catalogs.default.uri": x(257)}, "spec.catalogs"),
    ("sj-catalog-property-key-oversized", SJ, {"spec.catalogs.default": {x(65): "v"}}, "spec.catalogs"),
    ("sj-catalog-name-oversized", SJ, {"spec.catalogs": {x(64): {}}}, "spec.catalogs"),
    (
        "sj-sources-too-many",
        SJ,
        {"spec.sources": entries(9, {"live": KAFKA, "history": {"table": "a.b"}})},
        "spec.sources",
    ),
    ("sj-columns-too-many", SJ, {"spec.sources.impressions.columns": [f"c{i}" for i in range(17)]}, "spec.sources"),
    ("sj-column-oversized", SJ, {"spec.sources.impressions.columns": [x(129)]}, "spec.sources"),
    ("sj-filter-oversized", SJ, {"spec.sources.impressions.filter": x(513)}, "spec.sources"),
    ("sj-table-oversized", SJ, {"spec.sources.impressions.history.table": x(200) + "." + x(55)}, "spec.sources"),
    ("sj-topic-oversized", SJ, {"spec.sources.impressions.live": {**KAFKA, "topic": x(250)}}, "spec.sources"),
    (
        "sj-servers-oversized",
        SJ,
        {"spec.sources.impressions.live": {**KAFKA, "bootstrapServers": x(257)}},
        "spec.sources",
    ),
    (
        "sj-sinks-too-many",
        SJ,
        {"spec.sinks": entries(5, {"kind": "parquet", "path": "s3a://lake/out"})},
        "spec.sinks",
    ),
    ("sj-partition-fields-too-many", SJ, {"spec.sinks.attributed_plays.partitionBy": ["a"] * 5}, "spec.sinks"),
    ("sj-key-too-many", SJ, {"spec.sinks.attributed_plays.key": ["a"] * 9}, "spec.sinks"),
    ("sj-path-oversized", SJ, {"spec.sinks.attributed_plays.path": x(513)}, "spec.sinks"),
    ("sj-location-oversized", SJ, {"spec.checkpoints.location": x(513)}, "spec.checkpoints.location"),
    ("sj-memory-oversized", SJ, {"spec.executor.memory": "9" * 16 + "g"}, "spec.executor.memory"),
    ("sj-executors-over-int64", SJ, {"spec.executor.instances": INT64_MAX + 1}, "spec.executor.instances"),
    ("sj-service-account-oversized", SJ, {"spec.serviceAccount": x(254)}, "spec.serviceAccount"),
    # Rewind
    ("rw-time-feb-30", RW, {f"{TARGET}.time": "2026-02-30T14:00:00Z"}, f"{TARGET}.time"),
    ("rw-time-offset-24h", RW, {f"{TARGET}.time": "2026-11-01T14:00:00+24:00"}, f"{TARGET}.time"),
    ("rw-time-offset-minus-24h", RW, {f"{TARGET}.time": "2026-11-01T14:00:00-24:00"}, f"{TARGET}.time"),
    ("rw-time-offset-23:59", RW, {f"{TARGET}.time": "2026-11-01T14:00:00+23:59"}, None),
    ("rw-time-leap-day", RW, {f"{TARGET}.time": "2028-02-29T14:00:00.5-05:00"}, None),
    ("rw-time-not-leap", RW, {f"{TARGET}.time": "2100-02-29T14:00:00Z"}, f"{TARGET}.time"),
    ("rw-time-1899", RW, {f"{TARGET}.time": "1899-06-01T00:00:00Z"}, f"{TARGET}.time"),
    ("rw-time-year-0", RW, {f"{TARGET}.time": "0000-01-01T00:00:00Z"}, f"{TARGET}.time"),
    ("rw-time-oversized", RW, {f"{TARGET}.time": "2026-11-01T14:00:00.1234567890+02:00"}, f"{TARGET}.time"),
    # sizes land in 32-bit SparkApplication fields (issue 27)
    ("sj-executors-2^62", SJ, {"spec.executor.instances": 2**62}, "spec.executor.instances"),
    ("sj-driver-cores-2^40", SJ, {"spec.driver.cores": 2**40}, "spec.driver.cores"),
    ("sj-executors-int32", SJ, {"spec.executor.instances": INT32_MAX}, None),
    ("sj-executor-cores-over-int32", SJ, {"spec.executor.cores": INT32_MAX + 1}, "spec.executor.cores"),
    ("sj-retention-over-int32", SJ, {"spec.checkpoints.retention": {"count": INT32_MAX + 1}}, "spec.checkpoints"),
    ("rw-batch-bound", RW, {TARGET: {"batchId": INT64_BOUND}}, None),
    ("rw-batch-int64", RW, {TARGET: {"batchId": INT64_MAX}}, f"{TARGET}.batchId"),
    ("rw-batch-over-int64", RW, {TARGET: {"batchId": INT64_MAX + 1}}, f"{TARGET}.batchId"),
    ("rw-jobref-oversized", RW, {"spec.jobRef.name": x(64)}, "spec.jobRef.name"),
]


@pytest.mark.parametrize(("kind", "edits", "field"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_api_server_and_models_agree(kind: str, edits: dict[str, Any], field: str | None) -> None:
    manifest = edited(kind, edits)
    stored, server = admit(crd(kind), manifest)
    model = model_errors(kind, manifest)
    if field is None:
        assert server == [], f"the API server refuses it: {server}"
        assert model is None, f"the model refuses it: {model}"
        assert model_errors(kind, stored) is None, "the model refuses the object the API server stores"
        return
    assert server, f"the API server accepts it; the model says {model}"
    assert any(field in e for e in server), f"the API server's errors do not name {field}: {server}"
    assert model is not None, f"the API server refuses it ({server}), the model accepts it"
    assert any(loc.startswith(field) for loc, _ in model), f"the model's errors do not name {field}: {model}"
    assert model_errors(kind, stored) is not None, "the model accepts the object the API server stores"


# --- updates --------------------------------------------------------------------------------


def stored(kind: str, edits: dict[str, Any] | None = None) -> dict[str, Any]:
    """The object the API server stores for a create of the (edited) example."""
    obj, errors = admit(crd(kind), edited(kind, edits or {}))
    assert errors == []
    return obj


@pytest.mark.parametrize(
    ("edits", "message"),
    [
        pytest.param(
            {f"{WINDOW}.end": "2026-11-01T20:00:00Z"},
            "spec.window is immutable: create a new Backfill for another window",
            id="window-end",
        ),
        pytest.param({f"{WINDOW}.warmup": "1h"}, "spec.window is immutable", id="window-warmup"),
        pytest.param({"spec.jobRef.name": "other"}, "spec.jobRef is immutable", id="job"),
        pytest.param({f"{ALIGN}.maxDrift": "5m"}, "spec.alignment is immutable", id="max-drift"),
        pytest.param({"spec.sources": {"impressions": {"filter": "x > 0"}}}, "spec.sources is immutable", id="source"),
        pytest.param({"spec.output": {"branch": "other"}}, "spec.output is immutable", id="branch"),
        pytest.param({"spec.image": "spark:other"}, "spec.image is immutable", id="image-added"),
    ],
)
def test_backfill_spec_is_immutable_but_for_nonce_and_publish(edits: dict[str, Any], message: str) -> None:
    old = stored(BF)
    errors = validate(crd(BF), edited(BF, edits), old=old)
    field = message.split(" is immutable")[0]  # a changed value: the field; an added or removed one: the spec
    assert any(e.split(":")[0] in (field, "spec") and message in e for e in errors), errors
    assert validate(crd(BF), edited(BF, edits)) == [], "a create of the same manifest is accepted"


def test_backfill_field_removed_takes_its_default_which_may_be_a_change() -> None:
    same = validate(crd(BF), edited(BF, {ALIGN: DELETE}), old=stored(BF))
    assert same == [], "the example's alignment is the default one: removing it changes nothing"
    old = stored(BF, {f"{ALIGN}.maxDrift": "5m"})
    errors = validate(crd(BF), edited(BF, {ALIGN: DELETE}), old=old)
    assert any("spec.alignment is immutable" in e for e in errors), errors


def test_backfill_image_cannot_be_removed() -> None:
    old = stored(BF, {"spec.image": "spark:one"})
    assert any("spec.image is immutable" in e for e in validate(crd(BF), example(BF), old=old))


@pytest.mark.parametrize(
    "edits",
    [
        pytest.param({"spec.restartNonce": 1}, id="restart-nonce"),
        pytest.param({"spec.publish.enabled": False}, id="publish-enabled"),
        pytest.param({"spec.publish.minMatchRatio": 0.99}, id="publish-ratio"),
        pytest.param({"metadata.labels": {"team": "a"}}, id="labels"),
        pytest.param({"status": {"phase": "Succeeded"}}, id="status"),
        pytest.param({}, id="unchanged"),
    ],
)
def test_backfill_updates_that_are_allowed(edits: dict[str, Any]) -> None:
    assert validate(crd(BF), edited(BF, edits), old=stored(BF)) == []


def test_backfill_immutability_compares_what_was_written() -> None:
    """600s is the same duration as 10m, but another spec: the rule compares the strings."""
    errors = validate(crd(BF), edited(BF, {f"{ALIGN}.maxDrift": "600s"}), old=stored(BF))
    assert any("spec.alignment is immutable" in e for e in errors), errors


@pytest.mark.parametrize(
    "edits",
    [
        pytest.param({f"{TARGET}.time": "2026-11-01T13:00:00Z"}, id="target"),
        pytest.param({"spec.downstream": False}, id="downstream"),
        pytest.param({"spec.jobRef.name": "other"}, id="job"),
    ],
)
def test_rewind_spec_is_immutable(edits: dict[str, Any]) -> None:
    errors = validate(crd(RW), edited(RW, edits), old=stored(RW))
    assert errors == ['spec: Invalid value: "object": spec is immutable: a Rewind runs once, create a new Rewind']


def test_rewind_metadata_and_status_may_change() -> None:
    assert validate(crd(RW), edited(RW, {"metadata.labels": {"a": "b"}}), old=stored(RW)) == []
    old = {**stored(RW), "status": {"phase": "Restoring"}}
    assert validate(crd(RW), {**example(RW), "status": {"phase": "Failed"}}, old=old) == []


@pytest.mark.parametrize(
    "edits",
    [
        pytest.param({"spec.image": "spark:next"}, id="image"),
        pytest.param({"spec.pipelineArgs": {"lateness": "45 minutes"}}, id="pipeline-args"),
        pytest.param({"spec.suspend": True}, id="suspend"),
        pytest.param({"spec.sources.impressions.filter": "x > 0"}, id="source"),
    ],
)
def test_streaming_job_spec_stays_mutable(edits: dict[str, Any]) -> None:
    assert validate(crd(SJ), edited(SJ, edits), old=stored(SJ)) == []


# --- size -----------------------------------------------------------------------------------


def spec_schema(kind: str) -> dict[str, Any]:
    return openapi_schema(crd(kind))["properties"]["spec"]


POD_SETTINGS = ("driver", "executor", "volumes", "imagePullSecrets")
"""Bounded by the models (``POD_SETTINGS_JSON_MAX``), not the schema: the Kubernetes objects
they pass through cannot be bounded in a CRD."""


def spec_rest(kind: str) -> dict[str, Any]:
    """The spec's schema without its pod settings."""
    schema = spec_schema(kind)
    return {**schema, "properties": {k: v for k, v in schema["properties"].items() if k not in POD_SETTINGS}}


def pod_scalars(kind: str) -> dict[str, Any]:
    """The pod settings' scalar fields at their maxima (cores, memory, instances, ...): what of
    them a maximal manifest can hold within the models' budget for pod settings."""
    props = spec_schema(kind)["properties"]
    return {
        role: {
            k: maximal(sub, k)
            for k, sub in props[role]["properties"].items()
            if sub.get("type") in ("integer", "string", "boolean")
        }
        for role in ("driver", "executor")
        if role in props
    }


@pytest.mark.parametrize("kind", [BF, SJ, RW])
def test_worst_case_spec_fits_in_the_annotations_twice(kind: str) -> None:
    from kappa_operator.models.common import POD_SETTINGS_JSON_MAX

    schema, rest = spec_schema(kind), spec_rest(kind)
    size = worst_case_size(rest)
    assert size is not None, f"{kind}: a field without maxLength/maxItems/maxProperties makes the spec unbounded"
    assert size < SPEC_JSON_MAX, f"{kind}: a maximal spec takes {size} characters"
    pods = [k for k in POD_SETTINGS if k in schema["properties"]]
    assert 2 * (size + (POD_SETTINGS_JSON_MAX if pods else 0)) < 256 * 1024, "both copies in the annotations"


def test_pod_settings_beyond_their_budget_are_refused_naming_them() -> None:
    from kappa_operator.models.common import POD_SETTINGS_JSON_MAX

    job = example(SJ)
    env = [{"name": f"V{i}", "value": "x" * 400} for i in range(60)]
    job["spec"]["executor"] = {"env": env}
    with pytest.raises(pydantic.ValidationError, match=f"more than {POD_SETTINGS_JSON_MAX}: move long lists"):
        MODELS[SJ].model_validate(job)
    job["spec"]["executor"] = {"env": env[:20]}
    MODELS[SJ].model_validate(job)


def test_worst_case_size_counts_what_a_user_can_write() -> None:
    string = {"type": "string", "maxLength": 10}
    assert worst_case_size(string) == 12
    assert worst_case_size({"type": "string"}) is None
    assert worst_case_size({"type": "array", "items": string, "maxItems": 3}) == 2 + 3 * 13
    bounded_map = {
        "type": "object",
        "additionalProperties": string,
        "maxProperties": 2,
        "x-kubernetes-validations": [{"rule": "self.all(k, size(k) <= 5)"}],
    }
    assert map_key_length(bounded_map) == 5
    assert worst_case_size(bounded_map) == 2 + 2 * (5 + 2 + 2 + 12)
    assert worst_case_size({**bounded_map, "x-kubernetes-validations": []}) is None  # keys unbounded
    assert worst_case_size({"type": "object", "x-kubernetes-preserve-unknown-fields": True}) is None


# Values for the fields with a pattern, as long as their maxLength allows (or as long as valid).
LONGEST: dict[str, Any] = {
    "table": x(127, "t") + "." + x(127, "t"),
    "pipeline": x(254, "m") + ":f",
    "duration": "0h" * 14 + "10ms",  # 32 characters, 10ms: valid for every duration field
    "memory": "9" * 15 + "g",
    "branch": x(128, "b"),
    "group": x(63, "g"),
    "object": x(253, "o"),
    "prefix": x(64, "P"),
    "pyfile": x(196, "p") + ".zip",  # spec.deps (models/packaging.py)
    "repository": "https://" + x(192, "r"),
    "coordinate": x(63, "g") + ":" + x(62, "a") + ":1",
    "exclusion": x(63, "g") + ":" + x(64, "a"),
    "location": x(200, "l"),
    "secretkey": x(63, "s"),
}
TIMESTAMPS = {"start": "2026-11-01T14:00:00.123456789+02:00", "end": "2026-11-01T18:00:00.123456789+02:00"}


def kafka_when_bootstrapped(spec: dict[str, Any]) -> None:
    """A maximal StreamingJob has a bootstrap, which reads Kafka topics (and their archives):
    every source's live part becomes a topic (``topic``, as long as ``topicPattern``), without
    icebergLive's per-micro-batch caps."""
    if "bootstrap" in spec:
        for source in spec["sources"].values():
            source["live"]["kind"] = "kafka"
            del source["live"]["topicPattern"]
            for cap in ("maxSnapshotsPerTrigger", "maxFilesPerTrigger"):
                del source["live"][cap]


def kafka_security_named(spec: dict[str, Any]) -> None:
    """A maximal StreamingJob's Kafka clients name a block of spec.kafkaSecurity each, and each
    block is SASL_SSL (the longest protocol that takes both sasl and tls)."""
    blocks = spec.get("kafkaSecurity") or {}
    for block in blocks.values():
        block["protocol"] = "SASL_SSL"
    first = next(iter(blocks), None)
    live = [s["live"] for s in spec.get("sources", {}).values() if "live" in s]
    for client in live + list(spec.get("sinks", {}).values()):
        if "security" not in client:
            continue
        if client.get("kind") == "kafka":
            client["security"] = first
        else:  # the longest kind is not Kafka's: only a Kafka client takes security
            del client["security"]


def avro_named(spec: dict[str, Any]) -> None:
    """A maximal StreamingJob's Kafka sources and sinks use Avro with the first of
    spec.schemaRegistries; any other takes neither."""
    first = next(iter(spec.get("schemaRegistries") or {}), None)
    clients = [s.get("live", {}) for s in spec.get("sources", {}).values()] + list(spec.get("sinks", {}).values())
    for client in clients:
        if client.get("kind") == "kafka" and first is not None:
            client.update(valueFormat="avro", schemaRegistry=first)
        else:
            client.pop("schemaRegistry", None)
            client.pop("valueFormat", None)
            client.pop("keyFormat", None)


def maximal(node: dict[str, Any], name: str = "") -> Any:
    """The largest value ``node`` accepts: every optional field set, every string, list and map
    at its bound (map keys too), the longest enum value and integer."""
    if "enum" in node:
        return max(node["enum"], key=lambda v: len(json.dumps(v)))
    typ = node.get("type")
    if typ == "string":
        rules = str(node.get("x-kubernetes-validations"))
        if "timestamp(" in rules:
            return TIMESTAMPS.get(name, TIMESTAMPS["start"])
        if "duration(" in rules:
            return LONGEST["duration"]
        if "pattern" not in node:
            return x(node["maxLength"])
        kind = _pattern_kind(node["pattern"])
        if kind == "table" and node["maxLength"] < len(LONGEST["table"]):  # a shorter bound (deadLetterTable's)
            half = (node["maxLength"] - 1) // 2
            return x(half, "t") + "." + x(node["maxLength"] - 1 - half, "t")
        return LONGEST[kind]
    if typ == "integer":
        bounds = [node.get("maximum", 0), node.get("minimum", 0)]
        return max(bounds, key=lambda v: len(str(v)))
    if typ == "number":
        return node.get("maximum", 0)
    if typ == "boolean":
        return False
    if typ == "array":
        return [maximal(node["items"], name) for _ in range(node["maxItems"])]
    if node.get("properties"):
        return {k: maximal(sub, k) for k, sub in node["properties"].items()}
    key = map_key_length(node)
    assert key is not None
    return {str(i).rjust(key, "k"): maximal(node["additionalProperties"]) for i in range(node["maxProperties"])}


def _pattern_kind(pattern: str) -> str:
    for kind, marker in (
        ("pyfile", "[eE][gG][gG]"),
        ("repository", "://"),
        ("coordinate", "[A-Za-z0-9_.+-]"),
        ("exclusion", "[A-Za-z0-9_.-]+:[A-Za-z0-9_.-]+$"),
        ("location", r"[^,\s]+$"),
        ("table", r"(\."),
        ("pipeline", ":"),
        ("memory", "[kmgt]"),
        ("branch", "[-_."),
        ("group", "[-_a-z0-9]"),
        ("object", "[-a-z0-9.]"),
        ("prefix", "[A-Za-z0-9_]"),
        ("secretkey", "[-._a-zA-Z0-9]"),
    ):
        if marker in pattern:
            return kind
    raise KeyError(f"no maximal value for the pattern {pattern}")


@pytest.mark.parametrize("kind", [BF, SJ, RW])
def test_a_maximal_manifest_is_accepted_by_both_and_within_the_bound(kind: str) -> None:
    """Pod settings aside: the models bound those (``POD_SETTINGS_JSON_MAX``), and a schema
    maximum of their maps would be refused by that budget."""
    schema = spec_rest(kind)
    spec = maximal(schema)
    if kind == RW:
        del spec["target"]["batchId"]  # exactly one target: the time is the longer
    for env in spec.get("envFrom", []):
        del env["configMapRef"]  # exactly one source per entry
    if "initialSnapshot" in spec:
        del spec["initialSnapshot"]["batchId"]  # exactly one of the two: the time is the longer
    kafka_when_bootstrapped(spec)
    kafka_security_named(spec)
    avro_named(spec)
    manifest = {**example(kind), "spec": spec}
    _, errors = admit(crd(kind), manifest)
    assert errors == []
    assert model_errors(kind, manifest) is None
    size = len(json.dumps(spec, separators=(",", ":")))
    bound = worst_case_size(schema)
    assert bound is not None and size <= bound < SPEC_JSON_MAX
    if kind != RW:  # a Rewind has one target of two
        assert size > 0.9 * bound, f"the maximal manifest ({size}) should come close to the bound ({bound})"


# --- any string -----------------------------------------------------------------------------

DURATION_LIKE = r"\A[-+]?[0-9]{0,12}(\.[0-9]{0,7})?(ns|us|ms|s|m|h|d)?([0-9]{1,4}(\.[0-9]{1,6})?(ms|s|m|h))?\Z"


@st.composite
def timestamp_like(draw: st.DrawFn) -> str:
    """RFC 3339 look-alikes on both sides of every range: year, month, day, hour, minute,
    second, fraction digits, offset."""
    n = st.integers
    date = f"{draw(n(1890, 3010)):04d}-{draw(n(0, 13)):02d}-{draw(n(0, 32)):02d}"
    time = f"{draw(n(0, 24)):02d}:{draw(n(0, 60)):02d}:{draw(n(0, 60)):02d}"
    fraction = draw(st.sampled_from(["", "." + "1" * draw(n(1, 10))]))
    zone = draw(
        st.sampled_from(["Z", "", "z", f"{draw(st.sampled_from('+-'))}{draw(n(0, 25)):02d}:{draw(n(0, 60)):02d}"])
    )
    return f"{date}{draw(st.sampled_from('TTTT t'))}{time}{fraction}{zone}"


def _same_verdict(kind: str, edits: dict[str, Any]) -> None:
    manifest = edited(kind, edits)
    server = validate(crd(kind), manifest)
    model = model_errors(kind, manifest)  # raises on anything but a ValidationError
    assert bool(server) == (model is not None), f"API server: {server}; model: {model}"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.from_regex(DURATION_LIKE), st.text(max_size=40)))
def test_any_duration_gets_the_same_verdict_from_both(value: str) -> None:
    _same_verdict(BF, {f"{ALIGN}.maxDrift": value})
    _same_verdict(SJ, {"spec.triggerInterval": value})


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(timestamp_like(), st.text(max_size=40)))
def test_any_timestamp_gets_the_same_verdict_from_both(value: str) -> None:
    _same_verdict(RW, {f"{TARGET}.time": value})
    _same_verdict(BF, {f"{WINDOW}.start": value, f"{WINDOW}.end": "2999-12-31T23:59:59Z"})
