"""The CRDs as the API server sees them (tests/crd_validation.py), and agreement with the models.

kmock stores whatever it is sent; these tests check what it does not: the checked-in CRDs are
current, structural and installable, the examples are accepted, and every manifest the API
server refuses is refused by the operator's models too (and the other way round).
"""

from __future__ import annotations

import math
import re
from typing import Any

import pydantic
import pytest
import yaml

from kappa_operator.models.crd import render_all
from tests.crd_validation import (
    CelRuleError,
    admit,
    column_problems,
    compile_rules,
    default_problems,
    structural_problems,
    validate,
    worst_case_size,
)
from tests.unit.crd_documents import (
    DELETE,
    KINDS,
    MODELS,
    ROOT,
    _crd,
    crd,
    edited,
    example,
)


def model_rejects(kind: str, manifest: dict[str, Any]) -> bool:
    try:
        MODELS[kind].model_validate(manifest)
    except pydantic.ValidationError:
        return True
    return False


# --- the CRD files --------------------------------------------------------------------------


def test_checked_in_crds_are_current() -> None:
    rendered = render_all()
    on_disk = sorted(p.name for p in (ROOT / "crds").glob("*.yaml"))
    assert on_disk == sorted(rendered), f"crds/ holds {on_disk}, the models render {sorted(rendered)}: run `kappa crds`"
    for name, text in rendered.items():
        assert (ROOT / "crds" / name).read_text() == text, f"crds/{name} is stale: run `kappa crds`"


def _rules(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [v["rule"] for v in node.get("x-kubernetes-validations", [])]
        return own + [r for v in node.values() for r in _rules(v)]
    if isinstance(node, list):
        return [r for v in node for r in _rules(v)]
    return []


#: The API server's limit on one rule's estimated cost (``PerCallLimit``), and on the sum over
#: a CRD (``StaticEstimatedCRDCostLimit`` is 100x more: this is 10x stricter).
RULE_COST_LIMIT = 1_000_000
CRD_COST_LIMIT = 10_000_000
_REF = re.compile(r"\b(self|oldSelf)((?:\.[A-Za-z_]\w*)*)(\s*\()?")
METADATA_NAME_SIZE = 253 + 2  # the API server bounds metadata.name itself


def _rule_sites(node: dict[str, Any], path: str = "", times: float = 1) -> list[tuple[dict[str, Any], str, str, float]]:
    """(node, path, rule, how many times the rule runs at most) for every rule of a schema."""
    sites = [(node, path, r["rule"], times) for r in node.get("x-kubernetes-validations", [])]
    for name, sub in (node.get("properties") or {}).items():
        sites += _rule_sites(sub, f"{path}.{name}", times)
    if isinstance(node.get("additionalProperties"), dict):
        sites += _rule_sites(node["additionalProperties"], f"{path}[*]", times * node.get("maxProperties", math.inf))
    if isinstance(node.get("items"), dict):
        sites += _rule_sites(node["items"], f"{path}[*]", times * node.get("maxItems", math.inf))
    return sites


def rule_cost(node: dict[str, Any], rule: str, root: bool = False) -> float:
    """A coarse, conservative estimate of one evaluation: every character of the data the
    rule reads costs 1 (the API server charges 0.1 a character to compare or parse a string and
    1 an element to iterate; an unbounded string or collection is priced at the 3 MB request
    size, which is why every one a rule reads must have a maxLength/maxItems/maxProperties)."""
    cost = 1.0
    for m in _REF.finditer(rule):
        chain = [c for c in m.group(2).split(".") if c]
        method = chain.pop() if m.group(3) and chain else None
        if root and chain[:2] == ["metadata", "name"]:
            cost += METADATA_NAME_SIZE
            continue
        target: dict[str, Any] | None = node
        for name in chain:
            target = (target.get("properties") or {}).get(name) if target is not None else None
        if target is None:
            return math.inf
        if method == "all" and not chain:  # self.all(k, size(k) ...): iterates the keys
            cost += target.get("maxProperties", math.inf) * 2
            continue
        size = worst_case_size(target)
        cost += math.inf if size is None else size
    return cost


def test_cel_rules_stay_within_the_cost_budget_of_older_api_servers() -> None:
    """kube-apiserver 1.25 refused the Rewind CRD: its cost estimator prices `has(a) != has(b)`
    over the budget; the ternary form `has(a) ? !has(b) : has(b)` says the same and is cheap."""
    rules = [r for text in render_all().values() for r in _rules(yaml.safe_load(text))]
    assert any("has(self.time)" in r for r in rules)
    costly = [r for r in rules if re.search(r"has\([^)]*\)\s*[!=]=\s*!?has\(", r)]
    assert costly == [], f"rules comparing has() results exceed the CEL cost budget on 1.25: {costly}"


@pytest.mark.parametrize("kind", KINDS)
def test_cel_rules_read_only_bounded_data_and_stay_cheap(kind: str) -> None:
    """Every rule (transition rules too) reads strings and collections with a maxLength /
    maxItems / maxProperties, runs a bounded number of times, and its estimated cost times that
    number stays under the API server's per-rule limit; the sum stays under the CRD's."""
    schema = crd(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    total = 0.0
    for node, path, rule, times in _rule_sites(schema):
        cost = rule_cost(node, rule, root=path == "") * times
        assert cost <= RULE_COST_LIMIT, f"{kind} {path or '<root>'}: {rule!r} costs {cost} (unbounded data?)"
        total += cost
    assert total <= CRD_COST_LIMIT, f"{kind}: all rules cost {total}"


def test_cost_estimate_refuses_unbounded_data() -> None:
    unbounded = {"type": "object", "properties": {"s": {"type": "string"}}}
    assert rule_cost(unbounded, "self.s == 'x'") == math.inf
    bounded = {"type": "object", "properties": {"s": {"type": "string", "maxLength": 10}}}
    assert rule_cost(bounded, "self.s == 'x'") == 13
    assert rule_cost({"type": "object", "additionalProperties": {"type": "string"}}, "self.all(k, size(k) < 3)") == (
        math.inf
    )


@pytest.mark.parametrize("kind", KINDS)
def test_crd_is_structural_and_installable(kind: str) -> None:
    c = crd(kind)
    assert structural_problems(c) == []
    assert default_problems(c) == []
    assert column_problems(c) == []
    assert compile_rules(c) >= 1


@pytest.mark.parametrize(
    ("kind", "short", "columns"),
    [
        ("Backfill", "bf", {"Phase", "Progress", "Global Watermark", "Lag", "ETA"}),
        ("StreamingJob", "sj", {"Phase", "State", "Last Checkpoint"}),
    ],
)
def test_names_subresource_and_columns(kind: str, short: str, columns: set[str]) -> None:
    spec = crd(kind)["spec"]
    assert spec["group"] == "kappa.dev"
    assert spec["names"]["kind"] == kind
    assert short in spec["names"]["shortNames"]
    [version] = spec["versions"]
    assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
    assert version["subresources"]["status"] == {}
    shown = {c["name"] for c in version["additionalPrinterColumns"]}
    assert columns <= shown, f"missing printer columns {columns - shown}"


# --- the examples ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_example_is_accepted_by_api_server_and_model(kind: str) -> None:
    manifest = example(kind)
    stored, errors = admit(crd(kind), manifest)
    assert errors == []
    model = MODELS[kind].model_validate(manifest)
    # The CRD's defaults are the model's: the object the API server stores parses to the same model.
    assert MODELS[kind].model_validate(stored) == model


# --- manifests the API server refuses: the models must refuse them too ----------------------


BF, SJ, RW = "Backfill", "StreamingJob", "Rewind"
START = "2026-11-01T14:00:00Z"
LIVE_IMPRESSIONS = "spec.sources.impressions.live"
SINK = "spec.sinks.attributed_plays"

# (id, kind, edits, a substring of one of the API server's errors)
REJECTED: list[tuple[str, str, dict[str, Any], str]] = [
    ("rw-two-targets", RW, {"spec.target.batchId": 41}, "set exactly one of target.time, target.batchId"),
    ("rw-no-target", RW, {"spec.target.time": DELETE}, "set exactly one of target.time, target.batchId"),
    ("rw-negative-batch", RW, {"spec.target": {"batchId": -1}}, "spec.target.batchId in body should be greater"),
    ("rw-bad-time", RW, {"spec.target.time": "yesterday"}, "spec.target.time in body should match"),
    ("rw-no-job", RW, {"spec.jobRef": DELETE}, "spec.jobRef: Required value"),
    ("rw-offsets-and-batch", RW, {"spec.target": {"batchId": 3, "beforeSkippedOffsets": True}}, "set exactly one"),
    ("rw-offsets-no-skip", RW, {"spec.target": {"beforeSkippedOffsets": True}}, "needs spec.skipOffsets"),
    (
        "rw-skip-backwards",
        RW,
        {"spec.skipOffsets": [{"topic": "t", "partitions": [{"partition": 0, "start": 9, "end": 3}]}]},
        "end < start",
    ),
    ("rw-reset-string", RW, {"spec.resetSinks": "yes"}, "spec.resetSinks in body must be of type boolean"),
    ("sj-retention-zero", SJ, {"spec.checkpoints.retention": {"count": 0}}, "retention.count in body should be"),
    ("sj-interval-words", SJ, {"spec.checkpoints.interval": "hourly"}, "spec.checkpoints.interval in body should"),
    (
        "sj-env-from-both",
        SJ,
        {"spec.envFrom": [{"secretRef": {"name": "lake"}, "configMapRef": {"name": "lake"}}]},
        'spec.envFrom[0]: Invalid value: "object": set exactly one of secretRef, configMapRef',
    ),
    ("sj-env-from-none", SJ, {"spec.envFrom": [{"prefix": "LAKE_"}]}, "set exactly one of secretRef, configMapRef"),
    (
        "sj-env-from-bad-name",
        SJ,
        {"spec.envFrom": [{"secretRef": {"name": "Lake_Creds"}}]},
        "spec.envFrom[0].secretRef.name in body should match",
    ),
    # Backfill
    ("bf-end-before-start", BF, {"spec.window.end": "2026-11-01T13:00:00Z"}, "window.end must be after start"),
    ("bf-end-equals-start", BF, {"spec.window.end": START}, 'spec.window: Invalid value: "object": window.end must'),
    ("bf-end-before-start-offset", BF, {"spec.window.end": "2026-11-01T15:00:00+02:00"}, "end must be after start"),
    (
        "bf-maxdrift-zero",
        BF,
        {"spec.alignment.maxDrift": "0s"},
        'spec.alignment.maxDrift: Invalid value: "string": must',
    ),
    ("bf-maxdrift-words", BF, {"spec.alignment.maxDrift": "ten minutes"}, "spec.alignment.maxDrift in body should"),
    (
        "bf-negative-row-budget",
        BF,
        {"spec.alignment.batchRowBudget": -1},
        "spec.alignment.batchRowBudget in body should be greater than or equal to 0",
    ),
    ("bf-priority-high", BF, {"spec.priority": 5000}, "spec.priority in body should be less than or equal to 1000"),
    ("bf-priority-text", BF, {"spec.priority": "high"}, "spec.priority in body must be of type integer"),
    (
        "bf-read-limit-empty",
        BF,
        {"spec.readLimit": {}},
        "set readLimit.maxBytesPerSecond or readLimit.maxFilesPerSecond",
    ),
    (
        "bf-read-limit-tiny",
        BF,
        {"spec.readLimit": {"maxBytesPerSecond": 10}},
        "spec.readLimit.maxBytesPerSecond in body should be greater than or equal to 1024",
    ),
    (
        "bf-read-limit-negative-files",
        BF,
        {"spec.readLimit": {"maxFilesPerSecond": -1}},
        "spec.readLimit.maxFilesPerSecond in body should be greater than or equal to 0.001",
    ),
    ("bf-dry-run-text", BF, {"spec.dryRun": "yes"}, "spec.dryRun in body must be of type boolean"),
    ("bf-start-space", BF, {"spec.window.start": "2026-11-01 14:00:00Z"}, "spec.window.start in body should match"),
    ("bf-start-no-zone", BF, {"spec.window.start": "2026-11-01T14:00:00"}, "spec.window.start in body should match"),
    ("bf-start-month-13", BF, {"spec.window.start": "2026-13-01T14:00:00Z"}, "spec.window: Invalid value"),
    ("bf-start-missing", BF, {"spec.window.start": DELETE}, "spec.window.start: Required value"),
    ("bf-warmup-negative", BF, {"spec.window.warmup": "-5m"}, "spec.window.warmup in body should match"),
    ("bf-mode-fast", BF, {"spec.alignment.mode": "fast"}, 'spec.alignment.mode: Unsupported value: "fast"'),
    ("bf-no-jobref", BF, {"spec.jobRef": DELETE}, "spec.jobRef: Required value"),
    ("bf-jobref-empty", BF, {"spec.jobRef.name": ""}, "spec.jobRef.name in body should be at least 1 chars"),
    ("bf-no-window", BF, {"spec.window": DELETE}, "spec.window: Required value"),
    (
        "bf-ratio-1.5",
        BF,
        {"spec.publish.minMatchRatio": 1.5},
        "minMatchRatio in body should be less than or equal to 1",
    ),
    ("bf-ratio-negative", BF, {"spec.publish.minMatchRatio": -0.1}, "should be greater than or equal to 0"),
    ("bf-publish-enabled-list", BF, {"spec.publish.enabled": [True]}, "spec.publish.enabled in body must be of"),
    ("bf-branch-dash", BF, {"spec.output": {"branch": "-x"}}, "spec.output.branch in body should match"),
    ("bf-override-table", BF, {"spec.sources": {"impressions": {"table": "t"}}}, "spec.sources[impressions].table"),
    ("bf-override-snapshot", BF, {"spec.sources": {"impressions": {"snapshotId": "x"}}}, "must be of type integer"),
    ("bf-typo-field", BF, {"spec.windw": {}}, 'unknown field "spec.windw"'),
    ("bf-wrong-kind", BF, {"kind": "StreamingJob"}, "kind: Invalid value"),
    ("bf-wrong-version", BF, {"apiVersion": "kappa.dev/v1"}, "apiVersion: Invalid value"),
    ("bf-name-upper", BF, {"metadata.name": "RMI"}, "metadata.name: Invalid value"),
    ("bf-no-name", BF, {"metadata.name": DELETE}, "metadata.name: Required value"),
    # StreamingJob
    ("sj-no-image", SJ, {"spec.image": DELETE}, "spec.image: Required value"),
    (
        "sj-bluegreen-live-history-elsewhere",
        SJ,
        {"spec.upgrade": {"mode": "blueGreen"}, "spec.sources.impressions.history.table": "archive.impressions"},
        "every source kafka, or icebergLive with history the same table",
    ),
    (
        "sj-bluegreen-parquet-sink",
        SJ,
        {"spec.upgrade": {"mode": "blueGreen"}, SINK: {"kind": "parquet", "path": "s3a://lake/out"}},
        "needs every sink to be kind iceberg with timeColumn",
    ),
    ("sj-empty-image", SJ, {"spec.image": ""}, "spec.image in body should be at least 1 chars long"),
    ("sj-null-image", SJ, {"spec.image": None}, "spec.image: Required value"),
    ("sj-pipeline-no-colon", SJ, {"spec.pipeline": "spark_app.examples.rmi.pipeline"}, "spec.pipeline in body should"),
    ("sj-pipeline-no-function", SJ, {"spec.pipeline": "spark_app.examples.rmi:"}, "spec.pipeline in body should"),
    ("sj-live-no-table", SJ, {f"{LIVE_IMPRESSIONS}.table": DELETE}, "spec.sources[impressions].live: Invalid value"),
    ("sj-live-null-table", SJ, {f"{LIVE_IMPRESSIONS}.table": None}, "icebergLive needs table"),
    ("sj-live-bad-table", SJ, {f"{LIVE_IMPRESSIONS}.table": "impressions"}, "live.table in body should match"),
    (
        "sj-kafka-per-trigger-files",
        SJ,
        {LIVE_IMPRESSIONS: {"kind": "kafka", "bootstrapServers": "k:9092", "topic": "t", "maxFilesPerTrigger": 5}},
        "are for an icebergLive source",
    ),
    (
        "sj-live-per-trigger-zero",
        SJ,
        {f"{LIVE_IMPRESSIONS}.maxSnapshotsPerTrigger": 0},
        "maxSnapshotsPerTrigger in body should be greater than or equal to 1",
    ),
    ("sj-kafka-no-topic", SJ, {LIVE_IMPRESSIONS: {"kind": "kafka", "bootstrapServers": "k:9092"}}, "kafka needs"),
    ("sj-kafka-no-servers", SJ, {LIVE_IMPRESSIONS: {"kind": "kafka", "topic": "t"}}, "bootstrapServers and one"),
    (
        "sj-kafka-topic-and-pattern",
        SJ,
        {LIVE_IMPRESSIONS: {"kind": "kafka", "bootstrapServers": "k:9092", "topic": "t", "topicPattern": "t.*"}},
        "one of topic or topicPattern",
    ),
    (
        "sj-kafka-bad-starting-time",
        SJ,
        {LIVE_IMPRESSIONS: {"kind": "kafka", "bootstrapServers": "k:9092", "topic": "t", "startingTime": "noon"}},
        "startingTime in body should match",
    ),
    ("sj-live-kinesis", SJ, {f"{LIVE_IMPRESSIONS}.kind": "kinesis"}, 'live.kind: Unsupported value: "kinesis"'),
    ("sj-live-no-kind", SJ, {f"{LIVE_IMPRESSIONS}.kind": DELETE}, "spec.sources[impressions].live.kind: Required"),
    ("sj-starting-middle", SJ, {f"{LIVE_IMPRESSIONS}.startingPosition": "middle"}, 'Unsupported value: "middle"'),
    ("sj-non-append-ignore", SJ, {f"{LIVE_IMPRESSIONS}.onNonAppend": "ignore"}, 'Unsupported value: "ignore"'),
    ("sj-history-no-table", SJ, {"spec.sources.impressions.history.table": DELETE}, "history.table: Required value"),
    ("sj-live-typo", SJ, {f"{LIVE_IMPRESSIONS}.tabel": "a.b"}, 'unknown field "spec.sources[impressions].live.tabel"'),
    ("sj-sink-no-table", SJ, {f"{SINK}.table": DELETE}, 'spec.sinks[attributed_plays]: Invalid value: "object": an'),
    # the sink's kind defaults to iceberg before the rule runs
    ("sj-sink-no-table-no-kind", SJ, {f"{SINK}.table": DELETE, f"{SINK}.kind": DELETE}, "an iceberg sink needs table"),
    ("sj-parquet-no-path", SJ, {f"{SINK}.kind": "parquet"}, "a parquet sink needs path"),
    (
        "sj-kafka-sink-no-key",
        SJ,
        {SINK: {"kind": "kafka", "bootstrapServers": "k:9092", "topic": "t"}},
        "a kafka sink needs",
    ),
    ("sj-sink-delta", SJ, {f"{SINK}.kind": "delta"}, 'Unsupported value: "delta"'),
    ("sj-executors-neg", SJ, {"spec.executor.instances": -1}, "spec.executor.instances in body should be greater than"),
    ("sj-executors-str", SJ, {"spec.executor.instances": "two"}, "spec.executor.instances in body must be of type"),
    ("sj-driver-cores-0", SJ, {"spec.driver.cores": 0}, "spec.driver.cores in body should be greater than or equal"),
    ("sj-memory-4GB", SJ, {"spec.executor.memory": "4GB"}, "spec.executor.memory in body should match"),
    ("sj-no-sources", SJ, {"spec.sources": {}}, "spec.sources in body should have at least 1 properties"),
    ("sj-no-sinks", SJ, {"spec.sinks": {}}, "spec.sinks in body should have at least 1 properties"),
    ("sj-no-catalogs", SJ, {"spec.catalogs": {}}, "spec.catalogs in body should have at least 1 properties"),
    ("sj-catalog-prop-int", SJ, {"spec.catalogs.default.uri": 8181}, "spec.catalogs[default][uri] in body must be"),
    ("sj-no-checkpoint", SJ, {"spec.checkpoints": DELETE}, "spec.checkpoints: Required value"),
    ("sj-checkpoint-empty", SJ, {"spec.checkpoints.location": ""}, "spec.checkpoints.location in body should be at"),
    ("sj-trigger-words", SJ, {"spec.triggerInterval": "30 seconds"}, "spec.triggerInterval in body should match"),
    ("sj-spark-conf-int", SJ, {"spec.sparkConf": {"spark.x": 1}}, "spec.sparkConf[spark.x] in body must be of type"),
    ("sj-pipeline-args-nested", SJ, {"spec.pipelineArgs": {"n": {"a": 1}}}, "spec.pipelineArgs[n] in body must be of"),
    ("sj-no-spec", SJ, {"spec": DELETE}, "spec: Required value"),
    (
        "sj-avro-keys-without-avro-values",
        SJ,
        {LIVE_IMPRESSIONS: {"kind": "kafka", "bootstrapServers": "k:9092", "topic": "t", "keyFormat": "avro"}},
        "keyFormat avro needs valueFormat avro",
    ),
    (
        "sj-dead-letters-without-avro",
        SJ,
        {"spec.deadLetterTable": {"table": "ops.dead"}},
        "deadLetterTable holds the records an Avro source cannot decode",
    ),
]


@pytest.mark.parametrize(("kind", "edits", "expected"), [c[1:] for c in REJECTED], ids=[c[0] for c in REJECTED])
def test_api_server_and_model_refuse(kind: str, edits: dict[str, Any], expected: str) -> None:
    manifest = edited(kind, edits)
    errors = validate(crd(kind), manifest)
    assert any(expected in e for e in errors), f"expected {expected!r} in {errors}"
    assert model_rejects(kind, manifest), f"the API server refuses it ({errors}) but {kind}.model_validate accepts it"


# Valid edits: both accept them.
ACCEPTED: list[tuple[str, str, dict[str, Any]]] = [
    ("sj-bluegreen-live", SJ, {"spec.upgrade": {"mode": "blueGreen", "overlap": "1h"}}),
    ("bf-minimal", BF, {"spec.alignment": DELETE, "spec.publish": DELETE, "spec.window.warmup": DELETE}),
    ("bf-offsets-fraction", BF, {"spec.window.start": "2026-11-01T16:00:00.5+02:00"}),
    ("bf-compound-drift", BF, {"spec.alignment.maxDrift": "1h30m", "spec.alignment.lateness": "1.5h"}),
    ("bf-ratio-int", BF, {"spec.publish.minMatchRatio": 1}),
    ("bf-override", BF, {"spec.sources": {"impressions": {"table": "a.b", "snapshotId": 7}}}),
    ("sj-kafka", SJ, {LIVE_IMPRESSIONS: {"kind": "kafka", "bootstrapServers": "k:9092", "topic": "t"}}),
    (
        "sj-live-per-trigger",
        SJ,
        {f"{LIVE_IMPRESSIONS}.maxSnapshotsPerTrigger": 1, f"{LIVE_IMPRESSIONS}.maxFilesPerTrigger": 2**40},
    ),
    ("sj-parquet", SJ, {SINK: {"kind": "parquet", "path": "s3a://lake/out"}}),
    ("sj-kafka-sink", SJ, {SINK: {"kind": "kafka", "bootstrapServers": "k:9092", "topic": "t", "key": ["id"]}}),
    (
        "rw-cascade-child",
        RW,
        {
            "spec.target": {"beforeSkippedOffsets": True},
            "spec.skipOffsets": [{"topic": "t", "partitions": [{"partition": 0, "start": 3, "end": 9}]}],
        },
    ),
    (
        "sj-avro-dead-letters",
        SJ,
        {
            "spec.schemaRegistries": {"company": {"url": "http://registry:8081"}},
            LIVE_IMPRESSIONS: {
                "kind": "kafka",
                "bootstrapServers": "k:9092",
                "topic": "t",
                "valueFormat": "avro",
                "keyFormat": "avro",
                "schemaRegistry": "company",
            },
            "spec.deadLetterTable": {"table": "ops.dead"},
        },
    ),
    ("sj-pipeline-args", SJ, {"spec.pipelineArgs": {"lateness": "45 minutes", "key": "impression_id"}}),
    ("sj-status", SJ, {"status": {"phase": "Running", "somethingNew": {"a": 1}}}),
]


@pytest.mark.parametrize(("kind", "edits"), [c[1:] for c in ACCEPTED], ids=[c[0] for c in ACCEPTED])
def test_api_server_and_model_accept(kind: str, edits: dict[str, Any]) -> None:
    manifest = edited(kind, edits)
    stored, errors = admit(crd(kind), manifest)
    assert errors == []
    assert MODELS[kind].model_validate(stored) == MODELS[kind].model_validate(manifest)


# Cases where the API server and the models once disagreed (names, quoted scalars) and one
# where they still do (strict xfail: fixing it turns it into a failure, so the mark is removed).
DISAGREE = [
    pytest.param(
        BF,
        {"metadata.name": "rmi.outage"},
        id="name-with-dot",
    ),
    pytest.param(
        SJ,
        {"metadata.name": "a" * 64},
        id="name-64-chars",
    ),
    pytest.param(
        SJ,
        {"spec.executor.instances": "2"},
        id="quoted-number",
    ),
    pytest.param(
        BF,
        {"spec.publish.enabled": "yes"},
        id="quoted-bool",
    ),
    pytest.param(
        BF,
        {"spec.alignment": None},
        id="null-defaulted-field",
        marks=pytest.mark.xfail(strict=True, reason="the API server defaults a null; the model refuses None"),
    ),
]


@pytest.mark.parametrize(("kind", "edits"), DISAGREE)
def test_api_server_and_model_agree(kind: str, edits: dict[str, Any]) -> None:
    manifest = edited(kind, edits)
    errors = validate(crd(kind), manifest)
    assert bool(errors) == model_rejects(kind, manifest), f"API server errors: {errors}"


# --- the validator itself, on tiny CRDs -----------------------------------------------------


def tiny_crd(spec: dict[str, Any], version: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.dev"},
        "spec": {
            "group": "example.dev",
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec,
                            },
                        }
                    },
                    **(version or {}),
                }
            ],
        },
    }


def widget(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "example.dev/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": spec}


def ruled(rule: str) -> dict[str, Any]:
    props = {"size": {"type": "integer"}, "name": {"type": "string"}}
    return {"type": "object", "properties": props, "x-kubernetes-validations": [{"rule": rule, "message": "no"}]}


@pytest.mark.parametrize(
    "rule",
    [
        pytest.param("self.size >", id="syntax"),
        pytest.param("self.sise > 0", id="undeclared-field"),
    ],
)
def test_rule_that_does_not_compile_raises(rule: str) -> None:
    c = tiny_crd(ruled(rule))
    with pytest.raises(CelRuleError):
        compile_rules(c)
    with pytest.raises(CelRuleError):
        validate(c, widget({"size": 1}))


@pytest.mark.parametrize(
    "rule",
    [
        pytest.param("nosuch(self.size)", id="unknown-function"),
        pytest.param("self.name > 1", id="type-mismatch"),
        pytest.param("self.name == 'x'", id="absent-field-without-has"),
        pytest.param("self.size", id="not-a-bool"),
    ],
)
def test_rule_that_cannot_evaluate_raises_instead_of_accepting(rule: str) -> None:
    c = tiny_crd(ruled(rule))
    compile_rules(c)  # celpy only finds these when it evaluates
    with pytest.raises(CelRuleError):
        validate(c, widget({"size": 1}))


def test_rules_run_on_every_instance_of_their_node() -> None:
    item = ruled("self.size > 0")
    spec = {
        "type": "object",
        "properties": {
            "things": {"type": "object", "additionalProperties": item},
            "list": {"type": "array", "items": item},
        },
    }
    c = tiny_crd(spec)
    errors = validate(c, widget({"things": {"a": {"size": 1}, "b": {"size": 0}}, "list": [{"size": 2}, {"size": -1}]}))
    assert errors == [
        'spec.things[b]: Invalid value: "object": no',
        'spec.list[1]: Invalid value: "object": no',
    ]
    assert validate(c, widget({"things": {"a": {"size": 1}}, "list": []})) == []


def test_has_is_false_for_absent_and_null_fields() -> None:
    props = {"a": {"type": "string", "nullable": True}}
    spec = {
        "type": "object",
        "properties": props,
        "x-kubernetes-validations": [{"rule": "has(self.a)", "message": "a"}],
    }
    c = tiny_crd(spec)
    assert validate(c, widget({"a": "x"})) == []
    assert validate(c, widget({})) == ['spec: Invalid value: "object": a']
    assert validate(c, widget({"a": None})) == ['spec: Invalid value: "object": a']


def test_openapi_extensions() -> None:
    props = {
        "n": {"type": "string", "nullable": True, "enum": ["x"]},
        "port": {"x-kubernetes-int-or-string": True},
        "free": {"x-kubernetes-preserve-unknown-fields": True},
        "ratio": {"type": "number", "minimum": 0, "exclusiveMinimum": True},
    }
    c = tiny_crd({"type": "object", "properties": props})
    assert structural_problems(c) == []
    assert validate(c, widget({"n": None, "port": 80, "free": [1, {"a": None}], "ratio": 0.5})) == []
    assert validate(c, widget({"port": "http", "free": "anything"})) == []
    errors = validate(c, widget({"n": "y", "port": True, "ratio": 0}))
    assert any(e.startswith("spec.n: Unsupported value") for e in errors), errors
    assert any(e.startswith("spec.port: Invalid value") for e in errors), errors
    assert validate(c, widget({"ratio": 0})) == [
        "spec.ratio: Invalid value: 0: spec.ratio in body should be greater than 0"
    ]


def test_defaults_like_the_api_server() -> None:
    leaf = {"type": "string", "default": "d"}
    props = {
        "absent": {"type": "object", "properties": {"leaf": leaf}},  # no default of its own: stays absent
        "present": {"type": "object", "properties": {"leaf": leaf}},
        "own": {"type": "object", "properties": {"leaf": leaf}, "default": {}},  # defaulted, then its leaf
        "nulled": {"type": "string", "default": "n"},
        "dropped": {"type": "string"},
        "map": {"type": "object", "additionalProperties": {"type": "object", "properties": {"leaf": leaf}}},
    }
    c = tiny_crd({"type": "object", "properties": props})
    stored, errors = admit(c, widget({"present": {}, "nulled": None, "dropped": None, "map": {"k": {}}}))
    assert errors == []
    assert stored["spec"] == {
        "present": {"leaf": "d"},
        "own": {"leaf": "d"},
        "nulled": "n",
        "map": {"k": {"leaf": "d"}},
    }


def test_unknown_fields_are_refused_or_pruned() -> None:
    c = tiny_crd({"type": "object", "properties": {"a": {"type": "string"}}})
    assert validate(c, widget({"a": "x", "b": 1})) == ['unknown field "spec.b"']
    stored, errors = admit(c, widget({"a": "x", "b": 1}), field_validation="Ignore")
    assert errors == [] and stored["spec"] == {"a": "x"}


@pytest.mark.parametrize(
    ("spec", "version", "problem"),
    [
        ({"properties": {"a": {"type": "string"}}}, None, "type: Required value"),
        ({"type": "object", "properties": {"a": {}}}, None, "properties[a].type: Required value"),
        ({"type": "object", "additionalProperties": False}, None, "additionalProperties: Forbidden"),
        (
            {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "string"}},
            None,
            "mutual exclusive",
        ),
        ({"type": "array"}, None, "items: Required value"),
        ({"type": "object", "anyOf": [{"type": "string"}]}, None, "anyOf[0].type: Forbidden"),
        ({"type": "integer", "exclusiveMinimum": 0}, None, "exclusiveMinimum: must be a boolean"),
        ({"type": "string", "const": "x"}, None, "unknown keyword(s) ['const']"),
        ({"type": "object", "$ref": "#/x"}, None, "$ref: Forbidden"),
        ({"type": "object"}, {"subresources": {}}, "subresources.status: Required value"),
    ],
)
def test_structural_problems_are_found(spec: dict[str, Any], version: dict[str, Any] | None, problem: str) -> None:
    problems = structural_problems(tiny_crd(spec, version))
    assert any(problem in p for p in problems), problems


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ({"type": "string", "pattern": "^[a-z]+$", "default": "A"}, "spec.default: spec: Invalid value"),
        ({"type": "object", "properties": {"a": {"type": "integer"}}, "default": {"b": 1}}, "unknown fields"),
        ({**ruled("self.size > 0"), "default": {"size": 0}}, 'spec.default: spec: Invalid value: "object": no'),
    ],
)
def test_invalid_defaults_are_found(spec: dict[str, Any], problem: str) -> None:
    problems = default_problems(tiny_crd(spec))
    assert any(problem in p for p in problems), problems


@pytest.mark.parametrize(
    ("json_path", "problem"),
    [(".status.nope", "no field 'nope'"), ("status.phase", "not a simple")],
)
def test_column_problems_are_found(json_path: str, problem: str) -> None:
    c = tiny_crd({"type": "object"}, {"additionalPrinterColumns": [{"name": "X", "type": "string", "jsonPath": ""}]})
    c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"] = {
        "type": "object",
        "properties": {"phase": {"type": "string"}},
    }
    c["spec"]["versions"][0]["additionalPrinterColumns"][0]["jsonPath"] = json_path
    problems = column_problems(c)
    assert any(problem in p for p in problems), problems


def test_kubectl_style_messages_name_the_field() -> None:
    manifest = edited(BF, {"spec.alignment.mode": "fast", "spec.window.end": START})
    errors = validate(crd(BF), manifest)
    assert errors == [
        'spec.alignment.mode: Unsupported value: "fast": supported values: '
        '"auto", "aligned", "strict", "unordered", "bounded"',
        'spec.window: Invalid value: "object": window.end must be after start',
    ]


def test_the_reference_for_people_is_current_and_covers_every_field() -> None:
    from kappa_operator.models.reference import render_reference

    text = render_reference()
    assert (ROOT / "docs" / "crd-reference.md").read_text() == text, "docs/crd-reference.md is stale: run `kappa crds`"
    for kind in KINDS:
        props = _crd(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        for name in props:
            assert f"`spec.{name}`" in text, f"{kind}: spec.{name} missing from the reference"
    assert "rule: set exactly one of target.time, target.batchId" in text


def test_transition_rules_run_on_updates_only() -> None:
    keep = {"rule": "self == oldSelf", "message": "immutable"}
    item = {"type": "object", "properties": {"v": {"type": "integer", "x-kubernetes-validations": [keep]}}}
    spec = {
        "type": "object",
        "properties": {
            "a": {"type": "integer"},
            "map": {"type": "object", "additionalProperties": item},
            "list": {"type": "array", "items": {"type": "object", "properties": {"v": {"type": "integer"}}}},
        },
        "x-kubernetes-validations": [{"rule": "self.a == oldSelf.a", "message": "a is immutable"}],
    }
    c = tiny_crd(spec)
    old = widget({"a": 1, "map": {"x": {"v": 1}}})
    assert compile_rules(c) == 2
    assert validate(c, widget({"a": 2, "map": {"x": {"v": 2}}})) == []  # a create: no oldSelf
    assert validate(c, old, old=old) == []
    assert validate(c, widget({"a": 2, "map": {"x": {"v": 1}}}), old=old) == [
        'spec: Invalid value: "object": a is immutable'
    ]
    assert validate(c, widget({"a": 1, "map": {"x": {"v": 2}}}), old=old) == [
        'spec.map[x].v: Invalid value: "integer": immutable'
    ]
    # a new map entry has nothing to correlate with: its transition rules do not run
    assert validate(c, widget({"a": 1, "map": {"x": {"v": 1}, "y": {"v": 5}}}), old=old) == []


def test_transition_rules_under_a_plain_list_are_not_structural() -> None:
    keep = [{"rule": "self == oldSelf", "message": "immutable"}]
    item = {"type": "object", "properties": {"k": {"type": "string"}}, "x-kubernetes-validations": keep}
    plain = tiny_crd({"type": "object", "properties": {"l": {"type": "array", "items": item}}})
    assert any("oldSelf cannot be used" in p for p in structural_problems(plain))
    as_map = {"type": "array", "items": item, "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["k"]}
    assert structural_problems(tiny_crd({"type": "object", "properties": {"l": as_map}})) == []


@pytest.mark.parametrize(
    ("value", "accepted"),
    [
        pytest.param("2026-11-01T14:00:00Z", True, id="utc"),
        pytest.param("2028-02-29T23:59:59.999999999-23:59", True, id="leap-day-max-offset"),
        pytest.param("2026-11-01T14:00:00+24:00", True, id="offset-24h-go-lenient"),
        pytest.param("2026-11-01T14:00:00,5Z", True, id="comma-fraction-go-lenient"),
        pytest.param("2026-02-30T00:00:00Z", False, id="day-out-of-range"),
        pytest.param("2026-11-01T24:00:00Z", False, id="hour-24"),
        pytest.param("2026-11-01T14:00:60Z", False, id="leap-second"),
        pytest.param("2026-11-01 14:00:00Z", False, id="space"),
        pytest.param("2026-11-01T14:00:00", False, id="no-zone"),
        pytest.param("2026-11-01T14:00:00+25:00", False, id="offset-25h"),
        pytest.param("0001-01-01T00:00:00+01:00", False, id="before-year-1"),
        pytest.param("9999-12-31T23:00:00-02:00", False, id="after-year-9999"),
    ],
)
def test_cel_timestamp_parses_as_go_does(value: str, accepted: bool) -> None:
    c = tiny_crd(
        {
            "type": "object",
            "properties": {"t": {"type": "string"}},
            "x-kubernetes-validations": [{"rule": "timestamp(self.t) > timestamp('0001-01-01T00:00:00Z')"}],
        }
    )
    errors = validate(c, widget({"t": value}))
    assert (errors == []) == accepted, errors
    if not accepted:
        assert "evaluating rule" in errors[0], errors


@pytest.mark.parametrize(
    ("value", "positive"),
    [
        pytest.param("1h30m", True, id="compound"),
        pytest.param("0.0001ms", True, id="100ns-is-not-zero"),
        pytest.param("2562047h", True, id="largest-hours"),
        pytest.param("0s", False, id="zero"),
        pytest.param("-5m", False, id="negative"),
        pytest.param("2562048h", None, id="int64-overflow"),
        pytest.param("99999999999h", None, id="huge"),
        pytest.param("10 minutes", None, id="words"),
        pytest.param("1d", None, id="days-are-not-go"),
    ],
)
def test_cel_duration_parses_as_go_does(value: str, positive: bool | None) -> None:
    c = tiny_crd(
        {
            "type": "object",
            "properties": {"d": {"type": "string"}},
            "x-kubernetes-validations": [{"rule": "duration(self.d) > duration('0s')", "message": "not positive"}],
        }
    )
    errors = validate(c, widget({"d": value}))
    if positive is None:
        assert len(errors) == 1 and "evaluating rule" in errors[0], errors
    else:
        assert errors == ([] if positive else ['spec: Invalid value: "object": not positive'])
