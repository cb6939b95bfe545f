"""What the custom resources share: the model base, durations and timestamps as users write
them, the size bounds of free-form fields, and the status vocabulary (phase, conditions,
observedGeneration).

Every field has a description (the attribute docstring): it becomes the CRD's, so `kubectl
explain` says what the field is for. Cross-field rules are declared once, as CEL
(``x-kubernetes-validations``) for the API server, and checked again in Python so `kappa run`
refuses the same manifests offline.

The API server and the models must agree on what is valid (tests/unit/kappa_operator/models/test_schema_agreement.py
runs a table of manifests through both). Hence:

* Durations and timestamps have a pattern (syntax), a ``maxLength`` and a CEL rule calling
  ``duration()`` / ``timestamp()`` (what the pattern cannot say: a day that does not exist, a
  bound), and the model checks the same bounds. Anything the models refuse is a pydantic
  ``ValidationError`` naming the field, never an ``OverflowError``.
* Every string, list and map a user fills has a ``maxLength`` / ``maxItems`` /
  ``maxProperties`` (map keys: ``propertyNames``, which the CRD renders as a CEL rule), so a
  maximal spec stays within ``SPEC_JSON_MAX`` and CEL cost estimates stay small. Declared once
  with ``Field(max_length=...)``: pydantic enforces it and emits the JSON Schema keyword.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, create_model
from pydantic.alias_generators import to_camel

from spark_app.contract.base import parse_timestamp
from spark_app.contract.config import NO_DRIFT_HINT
from spark_app.contract.durations import (
    DURATION_LENGTH_MAX,
    DURATION_MAX,
    DURATION_PATTERN,
    check_duration,
    check_positive,
    parse_duration,
)

GROUP = "kappa.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

# --- sizes ----------------------------------------------------------------------------------
# Bounds of what users write, chosen so that a maximal spec of every kind stays within
# SPEC_JSON_MAX (test_schema_agreement.py computes the worst case from the CRDs): kopf keeps a copy of
# the spec in an annotation (all annotations: at most 256 KB), the operator renders it into a
# ConfigMap and a SparkApplication, and the API server prices CEL rules by these bounds.

INT64_MAX = 2**63 - 1
"""The API server stores integers as int64. Never a CRD bound: kube-apiserver parses a
schema's ``maximum`` as float64, where 2^63-1 rounds to 2^63 and wraps to -2^63 when compared
with an integer (issue 27: the CRD is refused, or the field refuses every value)."""
INT64_BOUND = 2**63 - 1024
"""The largest int64 that float64 holds exactly: the bound of an int64 field in a CRD, so the
server's bound and the model's are the same number."""
INT32_MAX = 2**31 - 1
"""A count (cores, instances, snapshots to keep): the SparkApplication fields it lands in are
int32, and no count of ours needs more."""
NAME_MAX = 63
"""A name: a jobRef, a catalog reference, an alignment group, a key of sources, sinks,
catalogs and pipelineArgs."""
COLUMN_MAX = 128
"""A column name or a partition transform (orderingColumn, timeColumn, columns, key, partitionBy)."""
TABLE_MAX = 255
"""``namespace.table``."""
URI_MAX = 512
"""A location (checkpoints, snapshots, a parquet path) or an image."""
HOSTS_MAX = 256
"""Kafka bootstrap servers."""
FILTER_MAX = 512
"""A row filter (pyiceberg expression syntax)."""
SETTING_KEY_MAX = 128
"""A key of sparkConf."""
PROPERTY_KEY_MAX = 64
"""A key of a catalog's properties."""
SETTING_MAX = 256
"""A value of sparkConf, pipelineArgs or a catalog's properties."""
ARGS_MAX = 16
"""Entries of pipelineArgs."""
SPARK_CONF_MAX = 30
"""Entries of sparkConf (30, not 32: what a StreamingJob's worst-case spec must fit in, ``SPEC_JSON_MAX``)."""
CATALOGS_MAX = 3
"""Catalogs of a job."""
CATALOG_PROPERTIES_MAX = 16
"""Properties of a catalog."""
SOURCES_MAX = 8
"""Sources of a pipeline (and overrides of a backfill)."""
SINKS_MAX = 4
"""Sinks of a pipeline (one streaming query each)."""
COLUMNS_MAX = 16
"""Columns of a source's projection."""
KEY_COLUMNS_MAX = 6
"""Columns of a sink's key (an Iceberg sink's diff key, a Kafka sink's record key)."""
PARTITION_FIELDS_MAX = 4
"""Fields of the partition spec of a table a sink creates."""

Name = Annotated[str, Field(min_length=1, max_length=NAME_MAX)]
Column = Annotated[str, Field(max_length=COLUMN_MAX)]
SettingKey = Annotated[str, Field(max_length=SETTING_KEY_MAX)]
PropertyKey = Annotated[str, Field(max_length=PROPERTY_KEY_MAX)]
Setting = Annotated[str, Field(max_length=SETTING_MAX)]
ArgName = Annotated[str, Field(max_length=NAME_MAX)]

# --- durations ------------------------------------------------------------------------------

# The grammar is spark_app.contract.durations', shared with JobConfig (a Backfill's durations are copied
# into it): the pattern here is for the API server, check_duration for the words users read.
# Durations stay plain strings in the schema (no ``format``), so CEL rules convert them
# explicitly; the CEL bound repeats DURATION_MAX for the server.
_MAX_RULE = {
    "rule": f"duration(self) <= duration('{DURATION_MAX}')",
    "message": f"must be at most {DURATION_MAX} (10 years)",
}
_POSITIVE_RULE = {"rule": "duration(self) > duration('0s')", "message": "must be > 0"}
_DRIFT_RULE = {**_POSITIVE_RULE, "message": f"must be > 0{NO_DRIFT_HINT}"}

_DURATION_FIELD = {"pattern": DURATION_PATTERN, "max_length": DURATION_LENGTH_MAX}
DurationStr = Annotated[
    str,
    Field(**_DURATION_FIELD, json_schema_extra={"x-kubernetes-validations": [_MAX_RULE]}),
    BeforeValidator(check_duration),
]
"""A duration such as ``10m``, ``1h30m`` or ``1.5s``: whole milliseconds, at most 87600h."""
PositiveDurationStr = Annotated[
    str,
    Field(**_DURATION_FIELD, json_schema_extra={"x-kubernetes-validations": [_MAX_RULE, _POSITIVE_RULE]}),
    BeforeValidator(check_duration),
    AfterValidator(check_positive),
]
"""A :data:`DurationStr` greater than zero (so at least 1ms)."""
DriftStr = Annotated[
    str,
    Field(**_DURATION_FIELD, json_schema_extra={"x-kubernetes-validations": [_MAX_RULE, _DRIFT_RULE]}),
    BeforeValidator(check_duration),
    AfterValidator(lambda value: check_positive(value, NO_DRIFT_HINT)),
]
"""``alignment.maxDrift``: a :data:`PositiveDurationStr` whose message says what to use for no
drift, in JobConfig's words."""

# --- timestamps -----------------------------------------------------------------------------

#: RFC 3339 as Go's ``time.Parse`` reads it (CEL's ``timestamp()``), with the ranges Python can
#: represent: hours 00-23, minutes and seconds 00-59 (no leap second), a zone ``Z`` or an
#: offset of at most ±23:59 (Go also reads +24:00, Python cannot), at most 9 fraction digits.
#: Whether the day exists in its month (2026-02-30) is left to ``timestamp()`` in the CEL rule.
TIMESTAMP_PATTERN = (
    r"^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]"
    r"(\.[0-9]{1,9})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$"
)
TIMESTAMP_LENGTH_MAX = len("2026-11-01T14:00:00.123456789+02:00")
TIMESTAMP_MIN = "1900-01-01T00:00:00Z"
TIMESTAMP_END = "3000-01-01T00:00:00Z"
"""Timestamps are in ``[TIMESTAMP_MIN, TIMESTAMP_END)``: a window's start minus the longest
warm-up and its end plus the longest drain stay far inside what Python's datetime holds."""
_TIMESTAMP_RULE = {
    "rule": f"timestamp(self) >= timestamp('{TIMESTAMP_MIN}') && timestamp(self) < timestamp('{TIMESTAMP_END}')",
    "message": "must be a date-time from 1900-01-01 to before 3000-01-01",
}


def _timestamp(value: str) -> str:
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))  # for its message: "day is out of range..."
    except ValueError as exc:
        raise ValueError(f"{value!r} is not a date-time: {exc}") from None
    try:
        t = parse_timestamp(value)
    except OverflowError:  # 0001-01-01T00:00:00+01:00 is before year 1 in UTC
        t = None
    if t is None or not parse_timestamp(TIMESTAMP_MIN) <= t < parse_timestamp(TIMESTAMP_END):
        raise ValueError(f"must be a date-time from 1900-01-01 to before 3000-01-01, got {value!r}")
    return value


TimestampStr = Annotated[
    str,
    Field(
        pattern=TIMESTAMP_PATTERN,
        max_length=TIMESTAMP_LENGTH_MAX,
        json_schema_extra={"x-kubernetes-validations": [_TIMESTAMP_RULE]},
    ),
    AfterValidator(_timestamp),
]
"""An RFC 3339 date-time such as ``2026-11-01T14:00:00Z`` or ``2026-11-01T16:00:00.5+02:00``."""


def instant(t: str) -> datetime:
    return parse_timestamp(t)


def rfc3339(t: datetime, *, micros: bool = False) -> str:
    """``t`` in UTC as status shows times: to the second, or to the microsecond for a restore
    point's commit time (which a later choice compares with the manifests' exact times)."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micros else "%Y-%m-%dT%H:%M:%SZ")


def as_timedelta(d: str) -> timedelta:
    return parse_duration(d)


def exactly_one(a: str, b: str, message: str) -> ConfigDict:
    """The CEL rule (in the ternary form kube-apiserver 1.25 accepts within its cost budget)
    that exactly one of the optional fields ``a`` and ``b`` is set; the model says the same."""
    rule = f"has(self.{a}) ? !has(self.{b}) : has(self.{b})"
    return ConfigDict(json_schema_extra={"x-kubernetes-validations": [{"rule": rule, "message": message}]})


class CRModel(BaseModel):
    """Frozen, camelCase, unknown fields refused (a typo must not be silently ignored)."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        strict=True,  # like the API server: "2" is not an integer, "yes" not a boolean
        alias_generator=to_camel,
        populate_by_name=True,
        use_attribute_docstrings=True,
    )


class ObjectMeta(BaseModel):
    """The part of Kubernetes metadata the operator reads."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    name: str = Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    namespace: str = "default"
    uid: str | None = None
    generation: int | None = None
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}


class Condition(CRModel):
    """A standard Kubernetes condition."""

    type: str
    """What is reported, e.g. Ready, Progressing, Failed, Published."""
    status: Literal["True", "False", "Unknown"]
    """Whether the condition holds."""
    reason: str = ""
    """A CamelCase word for machines."""
    message: str = ""
    """A sentence for people."""
    last_transition_time: str | None = None
    """When status last changed (RFC 3339)."""
    observed_generation: int | None = None
    """The metadata.generation the condition was set for."""


class StatusBase(CRModel):
    """Status every kind has."""

    model_config = ConfigDict(extra="allow")
    phase: str | None = None
    """Where the resource is in its life."""
    observed_generation: int | None = None
    """The metadata.generation this status describes."""
    conditions: list[Condition] = []
    """Ready, Progressing, Failed and the like."""
    message: str | None = None
    """The last thing a person should read."""


K8sObject = Annotated[dict[str, Any], Field(json_schema_extra={"x-kubernetes-preserve-unknown-fields": True})]
"""A Kubernetes object of a core type (an Affinity, a Toleration, a Volume, ...), passed to the
SparkApplication as it is. Its schema is Kubernetes' own: the API server checks it when the
operator creates the SparkApplication (the spark-operator's CRD carries the full schemas),
and the operator reports a refusal in status, naming the field. Our CRDs do not copy those
schemas (an Affinity alone is ~1,000 lines; `kubectl apply` of a CRD holding them all fails
on the size of its last-applied annotation)."""
LabelMap = Annotated[
    dict[Annotated[str, Field(max_length=317)], Annotated[str, Field(max_length=1024)]], Field(max_length=32)
]
MEMORY = r"^[0-9]+[kmgt]?$"


class PodSettings(CRModel):
    """Where and how the driver's or the executors' pods run, beyond cores and memory: what
    the spark-operator's SparkPodSpec (v1beta2) takes, rendered into it as it is."""

    memory_overhead: str | None = Field(default=None, pattern=MEMORY, max_length=16)
    """Non-heap memory of the pod on top of `memory` (Spark's notation, e.g. 512m); default:
    Spark's (10%, at least 384m)."""
    node_selector: LabelMap = {}
    """Node labels the pods must run on."""
    tolerations: list[K8sObject] = Field(default=[], max_length=32)
    """Kubernetes Tolerations of the pods."""
    node_lost_after: PositiveDurationStr = "30s"
    """How long the pods may stay on a node that stopped answering (its Ready condition not
    True: a preempted VM, a kernel panic, a cut network) before the operator deletes them and
    what ran there moves to a live node: an executor is replaced by its driver, a driver's
    application restarts from its checkpoint. Kubernetes alone would evict them after 5
    minutes (its default tolerations) and then leave them Terminating until the node returns."""
    affinity: K8sObject | None = None
    """A Kubernetes Affinity (node, pod, anti-affinity) of the pods."""
    volume_mounts: list[K8sObject] = Field(default=[], max_length=32)
    """Kubernetes VolumeMounts of the Spark container (of `spec.volumes`)."""
    env: list[K8sObject] = Field(default=[], max_length=64)
    """Kubernetes EnvVars of the Spark container (`value` or `valueFrom`)."""
    labels: LabelMap = {}
    """Labels of the pods (the operator's own, `kappa.dev/*` and `app.kubernetes.io/managed-by`,
    win over these)."""
    annotations: LabelMap = {}
    """Annotations of the pods."""
    security_context: K8sObject | None = None
    """A Kubernetes SecurityContext of the Spark container."""
    pod_security_context: K8sObject | None = None
    """A Kubernetes PodSecurityContext of the pods."""
    service_account: str | None = Field(default=None, max_length=253)
    """The pods' service account (default: the job's `serviceAccount`)."""
    priority_class_name: str | None = Field(default=None, max_length=253)
    """The pods' PriorityClass."""


class Resources(PodSettings):
    """Cores, memory and pod settings of a Spark driver or executors."""

    cores: int = Field(default=1, ge=1, le=INT32_MAX)
    """CPU cores."""
    memory: str = Field(default="2g", pattern=MEMORY, max_length=16)
    """JVM memory in Spark's notation, e.g. 2g or 512m."""


class ExecutorResources(Resources):
    instances: int = Field(default=2, ge=0, le=INT32_MAX)
    """Number of executors. 0: the job's tasks run in its driver (Spark's local master on the
    driver's `cores`), no executor pod: for work one pod holds, a Backfill then pays neither the
    executors' start nor the hops between JVMs (`bench/node.py` measures both)."""


def _unset_by_default(model: type[BaseModel]) -> dict[str, Any]:
    """``model``'s fields, each optional and unset by default (its constraints kept on the value)."""
    fields: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        inner = Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
        extra = info.json_schema_extra
        fields[name] = (inner | None, Field(default=None, description=info.description, json_schema_extra=extra))
    return fields


PodOverrides = create_model(
    "PodOverrides",
    __base__=CRModel,
    __doc__="""A Backfill's own settings for its driver or executors: each field set here replaces its
    StreamingJob's (a list or map as a whole); every other field is the job's. No field has a
    default: the API server would write it into the stored object, and it would then replace
    the job's.""",
    **_unset_by_default(ExecutorResources),
)


SPEC_JSON_MAX = 108_000
"""The most characters (compact JSON) a spec's schema lets it take, pod settings aside. The spec
appears twice in the object's annotations (kubectl's last-applied, kopf's last-handled), which
must all fit in 256 KiB: 2 x (108,000 + ``POD_SETTINGS_JSON_MAX``) leaves 13,376 characters
for the object's other annotations (raised from 105,000 for the dead-letter table and the schema
registries' Secrets, to 107,200 for the blueGreen upgrade's overlap, catchUp and minMatchRatio,
and to 108,000 for an icebergLive source's maxSnapshotsPerTrigger and maxFilesPerTrigger)."""
POD_SETTINGS_JSON_MAX = 16_384
"""The most characters (compact JSON) a spec's pod settings may take together: `driver`,
`executor`, `volumes` and `imagePullSecrets`. The Kubernetes objects among them pass through
unbounded in the CRD (the API server cannot bound their size), and the spec appears twice in
the object's annotations (kubectl's last-applied, kopf's last-handled), which must all fit in
256 KiB: the rest of a spec is bounded to ``SPEC_JSON_MAX`` characters by its schema, this budget by
the models, which refuse more with the size and the fields."""


def pod_settings_size(**parts: Any) -> int:
    """Compact JSON characters of the given pod settings (models dumped as they are written)."""
    import json

    dumped = {
        name: part.model_dump(by_alias=True, exclude_defaults=True) if isinstance(part, BaseModel) else part
        for name, part in parts.items()
        if part
    }
    return len(json.dumps(dumped, separators=(",", ":"), ensure_ascii=False))


def check_pod_settings_size(**parts: Any) -> None:
    size = pod_settings_size(**parts)
    if size > POD_SETTINGS_JSON_MAX:
        raise ValueError(
            f"{', '.join(parts)}: the pod settings take {size} characters as JSON, more than {POD_SETTINGS_JSON_MAX}: "
            "move long lists (env, volumes) into a ConfigMap or Secret (envFrom) or shorten them"
        )


def overridden(base: Resources, override: BaseModel | None) -> Resources:
    """``base`` with the fields ``override`` (a PodOverrides) sets (pure): a Backfill's pods
    from its job's."""
    if override is None:
        return base
    wanted = {
        k: v
        for k in type(base).model_fields
        if k in type(override).model_fields and (v := getattr(override, k)) is not None
    }
    return base.model_copy(update=wanted)


def manifest_fields(data: dict[str, Any]) -> dict[str, Any]:
    """A manifest without the server-managed fields pydantic should not see."""
    return {
        k: v for k, v in data.items() if k in ("apiVersion", "kind", "metadata", "spec", "status") and v is not None
    }
