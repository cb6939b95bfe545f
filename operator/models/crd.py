"""CustomResourceDefinitions generated from the models (``kappa crds``), so the API server's
schema and the operator's models cannot drift apart (a test fails on stale ``crds/*.yaml``).

pydantic's JSON Schema becomes a *structural* OpenAPI v3 schema: ``$ref`` inlined,
``X | None`` as an optional field whose null the server prunes (not ``nullable``), no
``title``/``additionalProperties: false`` (Kubernetes prunes unknown fields instead), CEL
rules kept as ``x-kubernetes-validations``, ``propertyNames`` (a bound on map keys, which a
CRD schema cannot say) turned into a CEL rule, and fractional bounds of numbers doubled by
CEL rules (the server compares an integer value with the bound truncated).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import BaseModel

from kappa_operator.models.backfill import BackfillSpec, BackfillStatus
from kappa_operator.models.common import GROUP, VERSION
from kappa_operator.models.rewind import RewindSpec, RewindStatus
from kappa_operator.models.streaming_job import StreamingJobSpec
from kappa_operator.models.streaming_job_status import StreamingJobStatus

RULES = "x-kubernetes-validations"


@dataclass(frozen=True)
class Kind:
    kind: str
    plural: str
    short: str
    spec: type[BaseModel]
    status: type[BaseModel]
    description: str
    columns: tuple[dict[str, Any], ...]


def column(name: str, json_path: str, type_: str = "string", wide: bool = False) -> dict[str, Any]:
    """A printer column of ``kubectl get``; ``wide``: shown only with ``-o wide`` (priority 1)."""
    return {"name": name, "type": type_, "jsonPath": json_path, **({"priority": 1} if wide else {})}


AGE = column("Age", ".metadata.creationTimestamp", "date")
CALLS = column("Calls/s", ".status.externalCalls.observedPerSecond", "number", wide=True)
"""The pipeline's external calls per second under ``spec.externalCalls`` (``-o wide``)."""
KINDS = (
    Kind(
        "StreamingJob",
        "streamingjobs",
        "sj",
        StreamingJobSpec,
        StreamingJobStatus,
        "A live PySpark Structured Streaming job run as a SparkApplication.",
        (
            column("Phase", ".status.phase"),
            column("State", ".status.applicationState"),
            column("Watermark", ".status.watermark"),
            column("Kafka Lag", ".status.kafkaLag.total", "integer"),
            column("Last Checkpoint", ".status.lastCheckpoint"),
            column("Last Progress", ".status.lastProgressAt", "date", wide=True),
            column("Restarts", ".status.restarts", "integer", wide=True),
            CALLS,
            column("Suspended", ".spec.suspend", "boolean", wide=True),
            column("Application", ".status.applicationName", wide=True),
            AGE,
        ),
    ),
    Kind(
        "Backfill",
        "backfills",
        "bf",
        BackfillSpec,
        BackfillStatus,
        "Re-run a StreamingJob's pipeline over its Iceberg history for a window, aligned, into a branch.",
        (
            column("Phase", ".status.phase"),
            column("Progress", ".status.progress"),
            column("Global Watermark", ".status.globalWatermark"),
            column("Lag", ".status.alignmentLag"),
            column("ETA", ".status.eta"),
            column("Batches", ".status.plan.expectedBatches", "integer"),
            column("Planned ETA", ".status.plan.eta"),
            column("Queue", ".status.queuePosition", "integer", wide=True),
            column("Read Rate", ".status.readRate", wide=True),
            column("Priority", ".spec.priority", "integer", wide=True),
            column("Job", ".spec.jobRef.name", wide=True),
            column("Branch", ".status.branch", wide=True),
            CALLS,
            AGE,
        ),
    ),
    Kind(
        "Rewind",
        "rewinds",
        "rw",
        RewindSpec,
        RewindStatus,
        "Restart a StreamingJob from a checkpoint taken before an outage, and undo what its sinks wrote since.",
        (
            column("Phase", ".status.phase"),
            column("Job", ".spec.jobRef.name"),
            column("Target Time", ".spec.target.time"),
            column("Target Batch", ".spec.target.batchId", "integer"),
            column("Restored Batch", ".status.restoredBatch", "integer"),
            column("Message", ".status.message", wide=True),
            AGE,
        ),
    ),
)

_DROP = {"title", "$defs"}
NAME_RULE = {
    # The name becomes the SparkApplication's, its pods' label values and an Iceberg branch:
    # a DNS label, stricter than what the API server allows for custom resources.
    "rule": "!has(self.metadata.name) || (self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')"
    " && size(self.metadata.name) <= 63)",
    "message": "metadata.name must be a DNS label: lowercase letters, digits and '-', at most 63 characters",
}


def key_rules(names: dict[str, Any]) -> list[dict[str, str]]:
    """pydantic's ``propertyNames`` (from ``dict[Annotated[str, Field(max_length=N)], ...]``) as CEL:
    a CRD schema has no keyword for map keys. Cheap: ``size()`` is constant-time, and the map
    has a ``maxProperties``."""
    unsupported = set(names) - {"minLength", "maxLength"}
    if unsupported or "maxLength" not in names:
        raise ValueError(f"map keys can only be bounded by maxLength (and minLength), not {names}")
    low, high = names.get("minLength", 0), names["maxLength"]
    if low:
        return [
            {
                "rule": f"self.all(k, size(k) >= {low} && size(k) <= {high})",
                "message": f"keys must be {low} to {high} characters long",
            }
        ]
    return [{"rule": f"self.all(k, size(k) <= {high})", "message": f"keys must be at most {high} characters long"}]


def fraction_bound_rules(node: dict[str, Any]) -> list[dict[str, str]]:
    """kube-apiserver checks an integer value (``0``) of a ``number`` field against the bound
    truncated to an integer: ``minimum: 0.001`` let ``0`` through (issue 27). A CEL rule on
    each fractional bound compares as doubles."""
    out = []
    for key, op in (("minimum", ">="), ("maximum", "<=")):
        bound = node.get(key)
        if bound is not None and float(bound) != int(bound):
            out.append({"rule": f"self {op} {bound}", "message": f"must be {op} {bound}"})
    return out


def _without_nulls(value: Any) -> Any:
    """A default as the server can hold it: fields are optional, not nullable, so an unset
    field of a default object is absent, not null (the server refuses the CRD otherwise)."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _merged(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``extra`` over ``base``, their CEL rules together (a field's own rules and its type's)."""
    rules = [*base.get(RULES, []), *extra.get(RULES, [])]
    return {**base, **extra, **({RULES: rules} if rules else {})}


def structural(schema: dict[str, Any], defs: dict[str, Any] | None = None) -> dict[str, Any]:
    """One pydantic JSON Schema node as a structural OpenAPI v3 node."""
    defs = schema.get("$defs", {}) if defs is None else defs
    if "$ref" in schema:
        target = defs[schema["$ref"].split("/")[-1]]
        return structural(_merged(target, {k: v for k, v in schema.items() if k != "$ref"}), defs)
    out: dict[str, Any] = {}
    options = schema.get("anyOf")
    if options is not None:
        non_null = [o for o in options if o.get("type") != "null"]
        if len(non_null) != 1:
            raise ValueError(f"a CRD field must have one type, not {options}")
        # Optional, not nullable: the API server prunes a null of a non-nullable field before
        # validation, so `drain: null` is stored as absent. A stored null would reach CEL as a
        # value: transition rules (immutability) then refused every later update of the
        # object, status and finalizers included (issue 27).
        out = structural(non_null[0], defs)
        out = _merged(out, {k: v for k, v in schema.items() if k not in ("anyOf", "default", *_DROP)})
        if schema.get("default") is not None:
            out["default"] = _without_nulls(schema["default"])
        return out
    for key, value in schema.items():
        if key in _DROP or (key == "default" and value is None):
            continue
        if key == "additionalProperties":
            if value is False:
                continue
            out[key] = structural(value, defs) if isinstance(value, dict) else value
        elif key == "properties":
            out[key] = {name: structural(v, defs) for name, v in value.items()}
        elif key == "items":
            out[key] = structural(value, defs)
        elif key == "const":
            out["enum"] = [value]
        elif key == "propertyNames":
            out[RULES] = [*out.get(RULES, []), *key_rules(value)]
        elif key == "default":
            out[key] = _without_nulls(value)
        elif key == RULES:
            out[RULES] = [*value, *out.get(RULES, [])]
        else:
            out[key] = value
    if out.get("type") == "number":
        out[RULES] = [*out.get(RULES, []), *fraction_bound_rules(out)]
    if out.get("x-kubernetes-preserve-unknown-fields"):
        out["type"] = "object"
        out.pop("additionalProperties", None)
    if "type" not in out and "properties" in out:
        out["type"] = "object"
    return out


class _Written(yaml.SafeDumper):
    """Every schema written out where it is used: two fields sharing a model (one restore point
    type in three lists) must not read as YAML anchors and aliases to whoever opens the file."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def crd(kind: Kind) -> dict[str, Any]:
    spec = structural(kind.spec.model_json_schema(by_alias=True))
    status = structural(kind.status.model_json_schema(by_alias=True))
    status["x-kubernetes-preserve-unknown-fields"] = True  # the operator may add fields before the schema
    status.pop("additionalProperties", None)
    spec.pop("description", None)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{kind.plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": kind.kind,
                "listKind": f"{kind.kind}List",
                "plural": kind.plural,
                "singular": kind.kind.lower(),
                "shortNames": [kind.short],
                "categories": ["kappa"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": list(kind.columns),
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": kind.description,
                            "x-kubernetes-validations": [NAME_RULE],
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec,
                                "status": status,
                            },
                        }
                    },
                }
            ],
        },
    }


def render_all() -> dict[str, str]:
    """File name -> YAML text of every CRD."""
    header = "# Generated by `kappa crds` from kappa_operator.models; do not edit.\n"
    return {
        f"{k.plural}.{GROUP}.yaml": header + yaml.dump(crd(k), Dumper=_Written, sort_keys=False, width=100)
        for k in KINDS
    }
