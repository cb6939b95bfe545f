"""What the custom resources share: the model base, durations and timestamps as users write
them, and the status vocabulary (phase, conditions, observedGeneration).

Every field has a description (the attribute docstring): it becomes the CRD's, so `kubectl
explain` says what the field is for. Cross-field rules are declared once, as CEL
(``x-kubernetes-validations``) for the API server, and checked again in Python so `kappa run`
refuses the same manifests offline.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from spark_app.config import parse_duration, parse_timestamp

GROUP = "kappa.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

#: Kubernetes' (Go) duration syntax, which CEL's ``duration()`` also reads. Durations and
#: timestamps stay plain strings in the schema (no ``format``), so CEL rules convert them
#: explicitly with ``duration()`` / ``timestamp()``.
DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"


def _duration(value: str) -> str:
    parse_duration(value)
    return value


def _timestamp(value: str) -> str:
    parse_timestamp(value)
    return value


DurationStr = Annotated[
    str,
    Field(pattern=DURATION_PATTERN),
    AfterValidator(_duration),
]
TimestampStr = Annotated[
    str,
    Field(pattern=r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$"),
    AfterValidator(_timestamp),
]


def instant(t: str) -> datetime:
    return parse_timestamp(t)


def as_timedelta(d: str) -> timedelta:
    return parse_duration(d)


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


class Resources(CRModel):
    """Cores and memory of a Spark driver or executor."""

    cores: int = Field(default=1, ge=1)
    """CPU cores."""
    memory: str = Field(default="2g", pattern=r"^[0-9]+[kmgt]?$")
    """JVM memory in Spark's notation, e.g. 2g or 512m."""


class ExecutorResources(Resources):
    instances: int = Field(default=2, ge=1)
    """Number of executors."""


def manifest_fields(data: dict[str, Any]) -> dict[str, Any]:
    """A manifest without the server-managed fields pydantic should not see."""
    return {
        k: v for k, v in data.items() if k in ("apiVersion", "kind", "metadata", "spec", "status") and v is not None
    }
