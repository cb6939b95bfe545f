"""Offline CustomResourceDefinition checks: what kmock (the Kubernetes API emulator) does not do.

kmock stores whatever it is sent. The API server first checks the CRD itself (structural
schema, valid defaults, compilable CEL) and then, for every create, prunes unknown fields,
applies ``default``s, validates the OpenAPI v3 schema and evaluates the
``x-kubernetes-validations`` CEL rules. This module does the same offline, with
``jsonschema`` and ``celpy``:

* :func:`structural_problems` - what makes the API server refuse the CRD (structural schema,
  ``additionalProperties``, status subresource, unknown schema keywords);
* :func:`default_problems` - defaults that do not validate against their own schema/rules;
* :func:`column_problems` - printer columns whose ``jsonPath`` is not in the schema;
* :func:`compile_rules` - compile every CEL rule (raises :class:`CelRuleError`);
* :func:`validate` / :func:`admit` - what ``kubectl apply`` of a manifest gets back: a create,
  or an update when given the stored object (``old=``), which also runs the transition rules;
* :func:`worst_case_size` - the most characters a value of a schema node can take (None when
  a string, list or map in it has no bound).

Messages mimic the API server's (``spec.alignment.mode: Unsupported value: "fast": ...``).
A CEL rule that does not compile, names a field its node does not declare, or fails to
evaluate on a value that passed the schema raises :class:`CelRuleError`: a broken rule is a
bug in the CRD, never a rejection of the manifest. An evaluation error caused by the data
(a timestamp the pattern lets through but ``timestamp()`` cannot parse) or on a value the
schema already refused is reported, as the API server does.

CEL's ``timestamp()`` and ``duration()`` behave as in Go (cel-go, which the API server runs),
not as in celpy: celpy parses timestamps with pendulum (it takes ``2026-11-01 14:00:00Z``, and an
offset of +24:00 that it then cannot compare) and durations as floats at microsecond precision
(``0.0001ms`` is 0 there, 100ns in Go; ``2562048h`` is fine there, an int64 overflow in Go).
Here ``timestamp()`` is Go's ``time.Parse(time.RFC3339, s)`` (strict fast path, then the lenient
one, which takes offsets up to 24:60 and a comma before the fraction; a day that its month does
not have, such as 2026-02-30, is refused) followed by cel-go's range check (years 0001-9999);
``duration()`` is Go's ``time.ParseDuration`` with its int64-nanosecond overflow (celpy keeps
whole microseconds of what it returns, rounded away from zero). (celpy's own ``timestamp()``
refuses 2026-02-30 too.) ``a && b`` and ``a || b`` of two errors are an error, as in cel-go
(celpy raises a TypeError), and an integer beyond int64 is not an integer (the API server
decodes it as a float).

Transition rules (those naming ``oldSelf``) run on an update only, on the nodes where the old
object has a value at the same place (properties and map entries; not list items, which need
``x-kubernetes-list-type: map``), as on the API server; on a create they are skipped. What a
request may change of an object (the status subresource) is left to the caller.

Not emulated: the CEL extension libraries of Kubernetes (strings, lists, quantity, url, ...;
a rule using one raises), cost limits (tests/unit/kappa_operator/models/test_crds.py checks what drives them: every
string and collection a rule reads is bounded), validation ratcheting of unchanged invalid
values on update, ``x-kubernetes-list-type``/``map-type`` semantics and embedded resources.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import celpy
import yaml
from celpy import celtypes
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

__all__ = [
    "CelRuleError",
    "admit",
    "column_problems",
    "compile_rules",
    "default_problems",
    "go_duration_ns",
    "go_timestamp",
    "is_transition_rule",
    "load_crd",
    "map_key_length",
    "structural_problems",
    "validate",
    "worst_case_size",
]

FieldValidation = Literal["Strict", "Warn", "Ignore"]
JsonPath = tuple[str | int, ...]


class CelRuleError(Exception):
    """A CEL rule that cannot compile or evaluate: a bug in the CRD, not a rejected manifest."""


def load_crd(path: str | Path) -> dict[str, Any]:
    crd = yaml.safe_load(Path(path).read_text())
    if not isinstance(crd, dict) or crd.get("kind") != "CustomResourceDefinition":
        raise ValueError(f"{path} is not a CustomResourceDefinition")
    return crd


def _versions(crd: dict[str, Any]) -> list[dict[str, Any]]:
    return list(crd.get("spec", {}).get("versions") or [])


def openapi_schema(crd: dict[str, Any], version: str | None = None) -> dict[str, Any]:
    """The openAPIV3Schema of ``version`` (default: the storage version)."""
    versions = _versions(crd)
    for v in versions:
        if (v.get("name") == version) if version else v.get("storage"):
            return v["schema"]["openAPIV3Schema"]
    raise KeyError(f"{crd.get('metadata', {}).get('name')}: no version {version or '(storage)'}")


# --- paths ----------------------------------------------------------------------------------


def _child_path(rendered: str, key: str | int, is_property: bool) -> str:
    """The API server's field paths: ``spec.window.start``, ``spec.sources[impressions]``, ``x[0]``."""
    if is_property:
        return f"{rendered}.{key}" if rendered else str(key)
    return f"{rendered}[{key}]"


def _child_schema(node: dict[str, Any], key: str | int) -> tuple[dict[str, Any], bool]:
    """The schema of ``node``'s child ``key`` and whether it is a declared property."""
    if isinstance(key, int):
        items = node.get("items")
        return (items if isinstance(items, dict) else {}), False
    props = node.get("properties") or {}
    if key in props:
        return props[key], True
    addl = node.get("additionalProperties")
    return (addl if isinstance(addl, dict) else {}), False


def _render(node: dict[str, Any], path: JsonPath, prefix: str = "") -> str:
    rendered = prefix
    for key in path:
        node, is_property = _child_schema(node, key)
        rendered = _child_path(rendered, key, is_property)
    return rendered


def _show(path: str) -> str:
    return path or "<root>"


def _go_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _shown_type(node: dict[str, Any], value: Any) -> str:
    """How the API server prints the value a CEL rule refused: its schema type."""
    return json.dumps(node.get("type") or _go_type(value))


def _shown_value(value: Any) -> str:
    """How the API server prints a rejected value: scalars as JSON, containers by type."""
    if isinstance(value, dict | list):
        return f'"{_go_type(value)}"'
    return json.dumps(value)


# --- structural checks ----------------------------------------------------------------------

_TYPES = {"object", "array", "string", "integer", "number", "boolean"}
#: The keywords of apiextensions.k8s.io/v1 JSONSchemaProps; anything else is refused by
#: kubectl (strict field validation) or silently dropped.
_KNOWN = {
    "id", "$schema", "$ref", "description", "type", "format", "title", "default", "maximum",
    "exclusiveMaximum", "minimum", "exclusiveMinimum", "maxLength", "minLength", "pattern",
    "maxItems", "minItems", "uniqueItems", "multipleOf", "enum", "maxProperties",
    "minProperties", "required", "items", "allOf", "oneOf", "anyOf", "not", "properties",
    "additionalProperties", "patternProperties", "dependencies", "additionalItems",
    "definitions", "externalDocs", "example", "nullable", "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-embedded-resource", "x-kubernetes-int-or-string", "x-kubernetes-list-map-keys",
    "x-kubernetes-list-type", "x-kubernetes-map-type", "x-kubernetes-validations",
}  # fmt: skip
#: Known to JSONSchemaProps but refused in a v1 CRD.
_FORBIDDEN = {"id", "$schema", "$ref", "patternProperties", "dependencies", "additionalItems", "definitions"}
#: What a node under allOf/anyOf/oneOf/not must leave to the structural part of the schema.
_NOT_IN_JUNCTORS = {
    "type", "default", "description", "title", "nullable", "additionalProperties",
    "x-kubernetes-preserve-unknown-fields", "x-kubernetes-embedded-resource",
    "x-kubernetes-int-or-string", "x-kubernetes-list-map-keys", "x-kubernetes-list-type",
    "x-kubernetes-map-type",
}  # fmt: skip
_JUNCTORS = ("allOf", "anyOf", "oneOf")


def structural_problems(crd: dict[str, Any]) -> list[str]:
    """Why the API server would refuse ``crd`` (empty: it is a valid, structural CRD).

    Checked: every node has a ``type`` unless it preserves unknown fields or is int-or-string;
    no ``additionalProperties: false``; ``additionalProperties`` with a schema never next to
    ``properties`` (``additionalProperties: true`` there is accepted by the API server); arrays
    have ``items``; value validations under allOf/anyOf/oneOf/not carry no structural keywords;
    only JSONSchemaProps keywords, none of those a v1 CRD forbids; OpenAPI v3.0 boolean
    ``exclusiveMinimum``/``exclusiveMaximum``; ``metadata`` restricts at most name/generateName;
    one storage version; a status subresource on every version; transition rules (``oldSelf``)
    only where the old value can be correlated (not under a list unless ``listType: map``).
    """
    problems: list[str] = []
    spec = crd.get("spec") or {}
    versions = _versions(crd)
    if not versions:
        return ["spec.versions: Required value"]
    if sum(bool(v.get("storage")) for v in versions) != 1:
        problems.append("spec.versions: exactly one version must be the storage version")
    for v in versions:
        where = f"spec.versions[{v.get('name')}]"
        if "status" not in (v.get("subresources") or {}):
            problems.append(f"{where}.subresources.status: Required value (the operator writes /status)")
        schema = (v.get("schema") or {}).get("openAPIV3Schema")
        if not isinstance(schema, dict):
            problems.append(f"{where}.schema.openAPIV3Schema: Required value")
            continue
        _walk_structural(schema, f"{where}.schema.openAPIV3Schema", "root", problems)
        _walk_transition_rules(schema, f"{where}.schema.openAPIV3Schema", True, problems)
    if spec.get("preserveUnknownFields"):
        problems.append("spec.preserveUnknownFields: must be false in apiextensions.k8s.io/v1")
    return problems


def _walk_structural(node: Any, where: str, level: str, problems: list[str]) -> None:
    if not isinstance(node, dict):
        problems.append(f"{where}: must be a schema object, not {node!r}")
        return
    unknown = sorted(set(node) - _KNOWN)
    if unknown:
        problems.append(f"{where}: unknown keyword(s) {unknown}: not in JSONSchemaProps")
    for key in sorted(set(node) & _FORBIDDEN):
        problems.append(f"{where}.{key}: Forbidden: not allowed in a CRD schema")
    if node.get("uniqueItems") is True:
        problems.append(f"{where}.uniqueItems: Forbidden: uniqueItems cannot be set to true")
    for key in ("exclusiveMinimum", "exclusiveMaximum", "nullable", "x-kubernetes-int-or-string"):
        if key in node and not isinstance(node[key], bool):
            problems.append(f"{where}.{key}: must be a boolean, not {node[key]!r}")
    if node.get("x-kubernetes-preserve-unknown-fields") is False:
        problems.append(f"{where}.x-kubernetes-preserve-unknown-fields: must be true or undefined")

    preserve = node.get("x-kubernetes-preserve-unknown-fields") is True
    int_or_string = node.get("x-kubernetes-int-or-string") is True
    typ = node.get("type")
    if level == "junctor":
        for key in sorted(set(node) & _NOT_IN_JUNCTORS):
            problems.append(f"{where}.{key}: Forbidden: must be undefined to be structural")
        if "metadata" in (node.get("properties") or {}):
            problems.append(f"{where}.properties[metadata]: Forbidden: must not be specified in a nested context")
    elif typ is None:
        if not (preserve or int_or_string) or level == "root":
            what = {"root": "at the root", "item": "for specified array items"}.get(
                level, "for specified object fields"
            )
            problems.append(f"{where}.type: Required value: must not be empty {what}")
    elif typ not in _TYPES:
        problems.append(f"{where}.type: Unsupported value: {typ!r}")
    if level == "root" and typ not in (None, "object"):
        problems.append(f"{where}.type: must be object at the root")
    if preserve and int_or_string:
        problems.append(f"{where}.x-kubernetes-preserve-unknown-fields: must be false if x-kubernetes-int-or-string")

    addl = node.get("additionalProperties")
    props = node.get("properties")
    if addl is False:
        problems.append(f"{where}.additionalProperties: Forbidden: false is not structural (unknown fields are pruned)")
    if props and isinstance(addl, dict):
        problems.append(
            f"{where}.additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive"
        )
    if level == "root" and addl is not None:
        problems.append(f"{where}.additionalProperties: Forbidden: must not be used at the root")
    if typ == "array" and "items" not in node:
        problems.append(f"{where}.items: Required value: must be specified")
    if "items" in node and isinstance(node["items"], list):
        problems.append(f"{where}.items: must be a single schema")

    for rule in node.get("x-kubernetes-validations") or []:
        if not isinstance(rule, dict) or not str(rule.get("rule", "")).strip():
            problems.append(f"{where}.x-kubernetes-validations: rule is not specified: {rule!r}")
        elif "\n" in str(rule.get("message", "")).strip():
            problems.append(f"{where}.x-kubernetes-validations: message must not contain line breaks")

    if level == "root":
        for name in ("apiVersion", "kind"):
            if name in (props or {}) and props[name].get("type") != "string":
                problems.append(f"{where}.properties[{name}].type: must be string")
        meta = (props or {}).get("metadata")
        if meta is not None:
            extra = set(meta) - {"type", "properties"}
            extra |= set(meta.get("properties") or {}) - {"name", "generateName"}
            if meta.get("type") != "object" or extra:
                problems.append(
                    f"{where}.properties[metadata]: must not specify anything other than name and generateName"
                )

    child_level = "junctor" if level == "junctor" else "field"
    for name, sub in (props or {}).items():
        _walk_structural(sub, f"{where}.properties[{name}]", child_level, problems)
    if isinstance(addl, dict):
        _walk_structural(addl, f"{where}.additionalProperties", child_level, problems)
    if isinstance(node.get("items"), dict):
        _walk_structural(node["items"], f"{where}.items", "junctor" if level == "junctor" else "item", problems)
    for key in _JUNCTORS:
        for i, sub in enumerate(node.get(key) or []):
            _walk_structural(sub, f"{where}.{key}[{i}]", "junctor", problems)
    if "not" in node:
        _walk_structural(node["not"], f"{where}.not", "junctor", problems)


def _walk_transition_rules(node: Any, where: str, correlatable: bool, problems: list[str]) -> None:
    if not isinstance(node, dict):
        return
    if not correlatable and any(is_transition_rule(r) for r in node.get("x-kubernetes-validations") or []):
        problems.append(
            f"{where}.x-kubernetes-validations: Forbidden: oldSelf cannot be used on the uncorrelatable portion "
            "of the schema (under a list that is not x-kubernetes-list-type: map)"
        )
    for name, sub in (node.get("properties") or {}).items():
        _walk_transition_rules(sub, f"{where}.properties[{name}]", correlatable, problems)
    if isinstance(node.get("additionalProperties"), dict):
        _walk_transition_rules(node["additionalProperties"], f"{where}.additionalProperties", correlatable, problems)
    if isinstance(node.get("items"), dict):
        keep = correlatable and node.get("x-kubernetes-list-type") == "map"
        _walk_transition_rules(node["items"], f"{where}.items", keep, problems)


# --- OpenAPI v3 -> JSON Schema --------------------------------------------------------------

_DROPPED = {"nullable", "default", "example", "description", "title", "externalDocs"}


def to_json_schema(node: dict[str, Any]) -> dict[str, Any]:
    """One OpenAPI v3 (Kubernetes flavour) schema node as a Draft 2020-12 JSON Schema."""
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED or key.startswith("x-kubernetes-") or key in ("exclusiveMinimum", "exclusiveMaximum"):
            continue
        if key == "properties":
            out[key] = {name: to_json_schema(sub) for name, sub in value.items()}
        elif key in ("additionalProperties", "items", "not"):
            out[key] = to_json_schema(value) if isinstance(value, dict) else value
        elif key in _JUNCTORS:
            out[key] = [to_json_schema(sub) for sub in value]
        else:
            out[key] = value
    # OpenAPI v3.0: exclusiveMinimum is a flag on minimum; JSON Schema: a bound of its own.
    for flag, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if node.get(flag) is True and bound in node:
            out[flag] = out.pop(bound)
    if node.get("x-kubernetes-int-or-string"):
        out["type"] = ["integer", "string"]
    if node.get("x-kubernetes-preserve-unknown-fields") and "type" not in node:
        out.pop("type", None)  # anything goes
    if node.get("nullable"):
        if "type" in out:
            types = out["type"] if isinstance(out["type"], list) else [out["type"]]
            out["type"] = [*types, "null"]
        if "enum" in out and None not in out["enum"]:
            out["enum"] = [*out["enum"], None]
    return out


# --- pruning and defaulting -----------------------------------------------------------------


def prune(node: dict[str, Any] | None, value: Any, path: str = "", *, root: bool = False) -> list[str]:
    """Drop the fields ``node`` does not declare, in place, as the API server does; returns their paths."""
    pruned: list[str] = []
    if node is not None and node.get("x-kubernetes-preserve-unknown-fields") and not node.get("properties"):
        return pruned
    if isinstance(value, dict):
        props = (node or {}).get("properties") or {}
        addl = (node or {}).get("additionalProperties")
        preserve = bool((node or {}).get("x-kubernetes-preserve-unknown-fields"))
        for key in list(value):
            if root and key == "metadata":
                continue  # ObjectMeta has its own rules
            if key in props:
                pruned += prune(props[key], value[key], _child_path(path, key, True))
            elif isinstance(addl, dict):
                pruned += prune(addl, value[key], _child_path(path, key, False))
            elif preserve:
                continue
            elif addl is True:  # the API server keeps the key, with no schema for its content
                pruned += prune(None, value[key], _child_path(path, key, False))
            else:
                pruned.append(_child_path(path, key, True))
                del value[key]
    elif isinstance(value, list) and node is not None:
        items = node.get("items")
        for i, item in enumerate(value):
            pruned += prune(items if isinstance(items, dict) else None, item, _child_path(path, i, False))
    return pruned


def _non_nullable_null(value: Any, node: dict[str, Any] | None) -> bool:
    return value is None and node is not None and not node.get("nullable")


def apply_defaults(node: dict[str, Any], value: Any) -> None:
    """Apply ``node``'s nested defaults to ``value`` in place (not ``node``'s own default).

    As the API server does: a property with a default is set when absent or a null it does not
    accept; the defaulted value is then defaulted itself; objects that are absent and have no
    default of their own stay absent. Nulls of non-nullable fields without a default are pruned.
    """
    if isinstance(value, dict):
        props = node.get("properties") or {}
        for key, prop in props.items():
            if prop.get("default") is None:
                continue
            if key not in value or _non_nullable_null(value[key], prop):
                value[key] = copy.deepcopy(prop["default"])
        addl = node.get("additionalProperties")
        for key in list(value):
            sub = props.get(key) if key in props else (addl if isinstance(addl, dict) else None)
            if sub is None:
                continue
            if _non_nullable_null(value[key], sub):
                if sub.get("default") is None:
                    del value[key]
                    continue
                value[key] = copy.deepcopy(sub["default"])
            apply_defaults(sub, value[key])
    elif isinstance(value, list) and isinstance(node.get("items"), dict):
        items = node["items"]
        for i, item in enumerate(value):
            if _non_nullable_null(item, items) and items.get("default") is not None:
                value[i] = copy.deepcopy(items["default"])
            apply_defaults(items, value[i])


# --- CEL's timestamp() and duration() as in Go ------------------------------------------------

#: What Go's ``time.Parse(time.RFC3339, s)`` reads: its strict fast path, and the lenient layout
#: parse it falls back to (an hour of one digit, a comma before the fraction, an offset up to
#: 24:60; the ranges are checked below).
_GO_RFC3339 = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{1,2}):([0-9]{2}):([0-9]{2})(?:[.,]([0-9]+))?"
    r"(?:Z|([+-])([0-9]{2}):([0-9]{2}))"
)
_CEL_TIMESTAMP_MIN = datetime(1, 1, 1, tzinfo=UTC)
_CEL_TIMESTAMP_MAX = datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)


def go_timestamp(value: Any) -> Any:
    """cel-go's ``timestamp(string)``: ``time.Parse(time.RFC3339, s)``, then its range check
    (0001-01-01 to 9999-12-31). Errors are ``ValueError``s: a rejection of the data."""
    if not isinstance(value, str):
        return celtypes.TimestampType(value)  # timestamp(timestamp), timestamp(int): celpy's
    value = str(value)  # not celpy's StringType, for the messages
    m = _GO_RFC3339.fullmatch(value)
    if m is None:
        raise ValueError(f"timestamp {value!r}: cannot parse as RFC 3339")
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    fraction, sign, off_h, off_m = m.group(7), m.group(8), m.group(9), m.group(10)
    if not 1 <= month <= 12:
        raise ValueError(f"timestamp {value!r}: month out of range")
    if hour > 23 or minute > 59 or second > 59:
        raise ValueError(f"timestamp {value!r}: hour, minute or second out of range")
    if sign and (int(off_h) > 24 or int(off_m) > 60):
        raise ValueError(f"timestamp {value!r}: time zone offset out of range")
    if year == 0:  # Go reads it; cel-go's range check refuses it (Python cannot hold it)
        raise ValueError(f"timestamp {value!r}: timestamp out of range")
    try:
        local = datetime(year, month, day, hour, minute, second, int((fraction or "0")[:6].ljust(6, "0")))
    except ValueError:
        raise ValueError(f"timestamp {value!r}: day out of range") from None
    offset = timedelta(hours=int(off_h), minutes=int(off_m)) * (-1 if sign == "-" else 1) if sign else timedelta(0)
    try:
        instant = (local - offset).replace(tzinfo=UTC)
    except OverflowError:
        raise ValueError(f"timestamp {value!r}: timestamp out of range") from None
    if not _CEL_TIMESTAMP_MIN <= instant <= _CEL_TIMESTAMP_MAX:
        raise ValueError(f"timestamp {value!r}: timestamp out of range")
    return celtypes.TimestampType(instant)


_GO_UNITS_NS = {"ns": 1, "us": 10**3, "\u00b5s": 10**3, "\u03bcs": 10**3, "ms": 10**6, "s": 10**9}
_GO_UNITS_NS |= {"m": 60 * 10**9, "h": 3600 * 10**9}
_GO_DURATION_PART = re.compile(r"([0-9]*)(?:\.([0-9]*))?([^0-9.]*)")


def go_duration_ns(value: str) -> int:
    """Go's ``time.ParseDuration`` in nanoseconds (exact; Go scales a fraction in float64),
    with its overflow: at most 2^63-1 ns (~2562047h)."""
    value = str(value)  # not celpy's StringType, for the messages
    text, negative = value, False
    if text[:1] in ("-", "+"):
        negative, text = text[0] == "-", text[1:]
    if text == "0":
        return 0
    if not text:
        raise ValueError(f"invalid duration {value!r}")
    total, pos = 0, 0
    while pos < len(text):
        m = _GO_DURATION_PART.match(text, pos)
        assert m is not None  # every part of the pattern is optional
        whole, fraction, unit = m.groups()
        if not (whole or fraction) or unit not in _GO_UNITS_NS:
            raise ValueError(f"invalid duration {value!r}")
        scale = _GO_UNITS_NS[unit]
        total += int(whole or "0") * scale + (int(fraction) * scale // 10 ** len(fraction) if fraction else 0)
        if total > 2**63 - (0 if negative else 1):
            raise ValueError(f"invalid duration {value!r}: overflow")
        pos = m.end()
    return -total if negative else total


def go_duration(value: Any) -> Any:
    """cel-go's ``duration(string)``. celpy's :class:`~celpy.celtypes.DurationType` holds whole
    microseconds: a sub-microsecond rest is rounded away from zero, so that a duration that is
    not zero stays so (``0.0001ms > 0s`` holds, as in Go)."""
    if not isinstance(value, str):
        return celtypes.DurationType(value)
    ns = go_duration_ns(value)
    micros = -(-abs(ns) // 1000)  # ceil
    seconds, rest = divmod(micros, 10**6)
    sign = -1 if ns < 0 else 1
    return celtypes.DurationType(sign * seconds, sign * rest * 1000)


def _and(x: Any, y: Any) -> Any:
    """``&&`` as in cel-go: ``error && error`` is the (first) error; celpy raises a TypeError."""
    both_errors = isinstance(x, celpy.CELEvalError) and isinstance(y, celpy.CELEvalError)
    return x if both_errors else celtypes.logical_and(x, y)


def _or(x: Any, y: Any) -> Any:
    """``||`` as in cel-go: ``error || error`` is the (first) error."""
    both_errors = isinstance(x, celpy.CELEvalError) and isinstance(y, celpy.CELEvalError)
    return x if both_errors else celtypes.logical_or(x, y)


_GO_FUNCTIONS = {"timestamp": go_timestamp, "duration": go_duration, "_&&_": _and, "_||_": _or}


# --- CEL ------------------------------------------------------------------------------------

_ENV = celpy.Environment()
_PROGRAMS: dict[str, Any] = {}
_FIELD_REF = re.compile(r"\b(?:self|oldSelf)\.([A-Za-z_]\w*)\b(?!\s*\()")
_OLD_SELF = re.compile(r"\boldSelf\b")


def _program(rule: str, node: dict[str, Any], where: str) -> Any:
    """Compile ``rule`` for ``node`` as the API server does when the CRD is created.

    celpy is dynamically typed; the API server type-checks the rule against the schema. The
    type check done here: every ``self.<field>`` (and ``oldSelf.<field>``) must be a property
    of the node.
    """
    props = node.get("properties")
    if props is not None and not node.get("x-kubernetes-preserve-unknown-fields"):
        undeclared = sorted({name for name in _FIELD_REF.findall(rule) if name not in props})
        if undeclared:
            raise CelRuleError(f"{_show(where)}: rule {rule!r}: undefined field(s) {undeclared}")
    if rule not in _PROGRAMS:
        try:
            _PROGRAMS[rule] = _ENV.program(_ENV.compile(rule), functions=_GO_FUNCTIONS)
        except Exception as exc:  # CELParseError and whatever celpy's parser raises
            raise CelRuleError(f"{_show(where)}: rule {rule!r} does not compile: {exc}") from exc
    return _PROGRAMS[rule]


def _rules(node: dict[str, Any]) -> list[dict[str, Any]]:
    return list(node.get("x-kubernetes-validations") or [])


def is_transition_rule(rule: dict[str, Any]) -> bool:
    """A rule naming ``oldSelf``: the API server runs it on updates only."""
    return bool(_OLD_SELF.search(str(rule.get("rule", ""))))


def _schema_nodes(node: dict[str, Any], path: str = "") -> Iterator[tuple[dict[str, Any], str]]:
    """Every schema node with a path (``[*]`` for map values and array items)."""
    yield node, path
    for name, sub in (node.get("properties") or {}).items():
        yield from _schema_nodes(sub, _child_path(path, name, True))
    for key in ("additionalProperties", "items"):
        if isinstance(node.get(key), dict):
            yield from _schema_nodes(node[key], f"{path}[*]")


def compile_rules(crd: dict[str, Any]) -> int:
    """Compile every rule of every version (raises :class:`CelRuleError`); returns how many."""
    count = 0
    for v in _versions(crd):
        for node, path in _schema_nodes(v["schema"]["openAPIV3Schema"]):
            for rule in _rules(node):
                _program(rule["rule"], node, path)
                if rule.get("messageExpression"):
                    _program(rule["messageExpression"], {}, path)
                count += 1
    return count


def to_cel(value: Any, node: dict[str, Any] | None) -> Any:
    """``value`` as the API server shows it to CEL: null properties of an object are absent
    (``has()`` is false), numbers are doubles, date-time/duration strings are typed."""
    if value is None:
        return None
    node = node or {}
    if isinstance(value, dict):
        props = node.get("properties")
        addl = node.get("additionalProperties")
        entries = {}
        for key, sub in value.items():
            if props is not None and key in props:
                if sub is None:
                    continue
                entries[celtypes.StringType(key)] = to_cel(sub, props[key])
            else:
                entries[celtypes.StringType(key)] = to_cel(sub, addl if isinstance(addl, dict) else None)
        return celtypes.MapType(entries)
    if isinstance(value, list):
        items = node.get("items")
        return celtypes.ListType([to_cel(item, items if isinstance(items, dict) else None) for item in value])
    typ = node.get("type")
    if typ == "number" and isinstance(value, int | float) and not isinstance(value, bool):
        return celtypes.DoubleType(float(value))
    if typ == "string" and isinstance(value, str):
        if node.get("format") == "date-time":
            return celtypes.TimestampType(value)
        if node.get("format") == "duration":
            return celtypes.DurationType(value)
    return celpy.json_to_cel(value)


def _subtree_invalid(path: JsonPath, invalid: set[JsonPath]) -> bool:
    return any(p[: len(path)] == path for p in invalid)


def _old_item(node: dict[str, Any], item: Any, old: Any) -> Any:
    """The old list item correlated with ``item``: only in a ``listType: map`` (by its keys)."""
    keys = node.get("x-kubernetes-list-map-keys") or []
    if (
        node.get("x-kubernetes-list-type") != "map"
        or not keys
        or not isinstance(old, list)
        or not isinstance(item, dict)
    ):
        return None
    matches = [o for o in old if isinstance(o, dict) and all(o.get(k) == item.get(k) for k in keys)]
    return matches[0] if matches else None


def _evaluate_rules(
    node: dict[str, Any],
    value: Any,
    path: JsonPath,
    rendered: str,
    invalid: set[JsonPath],
    errors: list[str],
    old: Any = None,
) -> None:
    """Run ``node``'s rules on ``value`` and recurse; ``old`` is the stored value at the same
    place on an update (None: a create, or nothing to correlate with): transition rules run
    only when it is there."""
    if value is None:
        return  # the API server does not run rules on null
    for rule in _rules(node):
        transition = is_transition_rule(rule)
        if transition and old is None:
            continue
        program = _program(rule["rule"], node, rendered)
        activation = {"self": to_cel(value, node)}
        if transition:
            activation["oldSelf"] = to_cel(old, node)
        try:
            result = program.evaluate(activation)
        except Exception as exc:
            cause = exc.args[1] if isinstance(exc, celpy.CELEvalError) and len(exc.args) > 1 else type(exc)
            data_error = isinstance(cause, type) and issubclass(cause, ValueError | ArithmeticError)
            if data_error or _subtree_invalid(path, invalid):
                # as the API server: "<error> evaluating rule: <rule>"
                inner = exc.args[2] if isinstance(exc, celpy.CELEvalError) and len(exc.args) > 2 else exc.args
                detail = inner[0] if isinstance(inner, tuple) and inner else exc
                errors.append(
                    f"{_show(rendered)}: Invalid value: {_shown_type(node, value)}: "
                    f"{detail} evaluating rule: {rule['rule']}"
                )
                continue
            raise CelRuleError(f"{_show(rendered)}: rule {rule['rule']!r} failed on a valid value: {exc}") from exc
        if not isinstance(result, celtypes.BoolType):
            raise CelRuleError(f"{_show(rendered)}: rule {rule['rule']!r} returned {result!r}, not a bool")
        if result:
            continue
        message = rule.get("message")
        if rule.get("messageExpression"):
            message = str(_program(rule["messageExpression"], {}, rendered).evaluate(activation))
        message = message or f"failed rule: {rule['rule']}"
        where = rendered + rule["fieldPath"] if rule.get("fieldPath") else rendered
        errors.append(f"{_show(where)}: Invalid value: {_shown_type(node, value)}: {message}")
    if isinstance(value, dict):
        props = node.get("properties") or {}
        addl = node.get("additionalProperties")
        for key, sub in value.items():
            old_sub = old.get(key) if isinstance(old, dict) else None
            if key in props:
                where = _child_path(rendered, key, True)
                _evaluate_rules(props[key], sub, (*path, key), where, invalid, errors, old_sub)
            elif isinstance(addl, dict):
                where = _child_path(rendered, key, False)
                _evaluate_rules(addl, sub, (*path, key), where, invalid, errors, old_sub)
    elif isinstance(value, list) and isinstance(node.get("items"), dict):
        for i, item in enumerate(value):
            where = _child_path(rendered, i, False)
            _evaluate_rules(node["items"], item, (*path, i), where, invalid, errors, _old_item(node, item, old))


# --- validation -----------------------------------------------------------------------------


def _schema_error(node: dict[str, Any], err: ValidationError, prefix: str) -> list[str]:
    path = _render(node, tuple(err.absolute_path), prefix)
    where, inst, bound = _show(path), err.instance, err.validator_value
    body = f"{where} in body"
    match err.validator:
        case "required":
            missing = [name for name in bound if isinstance(inst, dict) and name not in inst]
            return [f"{_child_path(path, name, True)}: Required value" for name in missing]
        case "enum":
            supported = ", ".join(json.dumps(v) for v in bound)
            return [f"{where}: Unsupported value: {json.dumps(inst)}: supported values: {supported}"]
        case "type":
            expected = bound if isinstance(bound, str) else "/".join(t for t in bound if t != "null")
            return [
                f'{where}: Invalid value: "{_go_type(inst)}": {body} must be of type {expected}: "{_go_type(inst)}"'
            ]
        case "pattern":
            return [f"{where}: Invalid value: {json.dumps(inst)}: {body} should match '{bound}'"]
        case "minimum" | "maximum" | "exclusiveMinimum" | "exclusiveMaximum":
            relation = {
                "minimum": "greater than or equal to",
                "maximum": "less than or equal to",
                "exclusiveMinimum": "greater than",
                "exclusiveMaximum": "less than",
            }[err.validator]
            return [f"{where}: Invalid value: {json.dumps(inst)}: {body} should be {relation} {bound}"]
        case "minLength":
            return [f"{where}: Invalid value: {json.dumps(inst)}: {body} should be at least {bound} chars long"]
        case "maxLength":
            return [f"{where}: Too long: may not be more than {bound} bytes"]
        case "minProperties":
            return [f"{where}: Invalid value: {len(inst)}: {body} should have at least {bound} properties"]
        case "maxProperties":
            return [f"{where}: Too many: {len(inst)}: must have at most {bound} items"]
        case "minItems":
            return [f"{where}: Invalid value: {len(inst)}: {body} should have at least {bound} items"]
        case "maxItems":
            return [f"{where}: Too many: {len(inst)}: must have at most {bound} items"]
    return [f"{where}: Invalid value: {_shown_value(inst)}: {err.message}"]


def check(node: dict[str, Any], value: Any, prefix: str = "", old: Any = None) -> list[str]:
    """Schema validation, then the CEL rules, of an already pruned and defaulted ``value``
    (an update when ``old``, the stored value, is given: transition rules run too)."""
    validator = Draft202012Validator(to_json_schema(node), format_checker=Draft202012Validator.FORMAT_CHECKER)
    errors: list[str] = []
    # The API server decodes an integer beyond int64 as a float: not an integer any more.
    beyond = list(_beyond_int64(value, ()))
    invalid: set[JsonPath] = set(beyond)
    blocking = bool(beyond)
    for path in beyond:
        where = _show(_render(node, path, prefix))
        errors.append(f'{where}: Invalid value: "number": {where} in body must be of type integer: "number"')
    for err in sorted(validator.iter_errors(value), key=lambda e: [str(p) for p in e.absolute_path]):
        if tuple(err.absolute_path) in beyond:
            continue
        invalid.add(tuple(err.absolute_path))
        blocking |= err.validator == "type"
        for message in _schema_error(node, err, prefix):
            if message not in errors:
                errors.append(message)
    # As the API server: a value of the wrong type keeps the rules from running at all.
    if not blocking:
        _evaluate_rules(node, value, (), prefix, invalid, errors, old)
    return errors


def _beyond_int64(value: Any, path: JsonPath) -> Iterator[JsonPath]:
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**63:
        yield path
    elif isinstance(value, dict):
        for key, sub in value.items():
            yield from _beyond_int64(sub, (*path, key))
    elif isinstance(value, list):
        for i, sub in enumerate(value):
            yield from _beyond_int64(sub, (*path, i))


_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _type_meta_errors(crd: dict[str, Any], manifest: dict[str, Any]) -> tuple[str | None, list[str]]:
    spec = crd.get("spec", {})
    errors = []
    kind = spec.get("names", {}).get("kind")
    if manifest.get("kind") != kind:
        errors.append(f"kind: Invalid value: {json.dumps(manifest.get('kind'))}: must be {kind}")
    served = {f"{spec.get('group')}/{v.get('name')}": v.get("name") for v in _versions(crd) if v.get("served")}
    version = served.get(manifest.get("apiVersion", ""))
    if version is None:
        errors.append(
            f"apiVersion: Invalid value: {json.dumps(manifest.get('apiVersion'))}: must be one of {sorted(served)}"
        )
    meta = manifest.get("metadata") or {}
    name = meta.get("name")
    if not name and not meta.get("generateName"):
        errors.append("metadata.name: Required value: name or generateName is required")
    elif name and (len(name) > 253 or not _DNS_SUBDOMAIN.match(name)):
        errors.append(
            f"metadata.name: Invalid value: {json.dumps(name)}: a lowercase RFC 1123 subdomain must consist of "
            "lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
        )
    return version, errors


def admit(
    crd: dict[str, Any],
    manifest: dict[str, Any],
    field_validation: FieldValidation = "Strict",
    old: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """What the API server does with a create of ``manifest`` (or, given the stored object
    ``old``, an update to it): the object it would store (pruned and defaulted) and the errors
    it would answer with (empty: accepted).

    ``field_validation`` is the request's: ``Strict`` (kubectl's default) refuses unknown
    fields, ``Warn``/``Ignore`` prune them silently. On an update the transition rules
    (``oldSelf``) run too. ``manifest`` is the object as the update would store it: which of its
    parts a request may change (the main resource ignores ``.status``, the status subresource
    everything else) is the caller's to apply first.
    """
    version, errors = _type_meta_errors(crd, manifest)
    schema = openapi_schema(crd, version)
    obj = copy.deepcopy(manifest)
    for path in prune(schema, obj, root=True):
        if field_validation == "Strict":
            errors.append(f'unknown field "{path}"')
    stored = None
    if old is not None:
        stored = copy.deepcopy(old)  # as read back from etcd: pruned and defaulted
        prune(schema, stored, root=True)
        apply_defaults(schema, stored)
    apply_defaults(schema, obj)
    errors += check(schema, obj, old=stored)
    return obj, errors


def validate(
    crd: dict[str, Any],
    manifest: dict[str, Any],
    field_validation: FieldValidation = "Strict",
    old: dict[str, Any] | None = None,
) -> list[str]:
    """The API server's errors for a create of ``manifest``, or an update of ``old`` to it
    (empty list: accepted)."""
    return admit(crd, manifest, field_validation, old)[1]


def default_problems(crd: dict[str, Any]) -> list[str]:
    """Defaults the API server refuses: with unknown fields, or invalid (after their own
    nested defaults) against their node's schema and rules."""
    problems = []
    for v in _versions(crd):
        for node, path in _schema_nodes(v["schema"]["openAPIV3Schema"]):
            if node.get("default") is None:
                continue
            value = copy.deepcopy(node["default"])
            pruned = prune(node, value, path)
            if pruned:
                problems.append(f"{_show(path)}.default: unknown fields {pruned}")
            apply_defaults(node, value)
            problems += [f"{_show(path)}.default: {e}" for e in check(node, value, path)]
    return problems


_COLUMN_TYPES = {"integer", "number", "string", "boolean", "date"}


def column_problems(crd: dict[str, Any]) -> list[str]:
    """Printer columns of an unknown type or whose ``jsonPath`` is not a declared field
    (such a column stays empty forever; metadata is taken on trust)."""
    problems = []
    for v in _versions(crd):
        schema = v["schema"]["openAPIV3Schema"]
        for col in v.get("additionalPrinterColumns") or []:
            name, json_path = col.get("name"), col.get("jsonPath", "")
            if col.get("type") not in _COLUMN_TYPES:
                problems.append(f"column {name!r}: type {col.get('type')!r} not in {sorted(_COLUMN_TYPES)}")
            parts = json_path.split(".")
            if parts[0] != "" or len(parts) < 2 or not all(parts[1:]):
                problems.append(f"column {name!r}: jsonPath {json_path!r} is not a simple .field.path")
                continue
            node = schema
            for part in parts[1:]:
                props = node.get("properties")
                if props is None and (node.get("type") == "object" or node.get("additionalProperties")):
                    break  # an opaque object or a map: taken on trust
                if part not in (props or {}):
                    problems.append(f"column {name!r}: jsonPath {json_path!r}: no field {part!r}")
                    break
                node = props[part]
    return problems


# --- size -----------------------------------------------------------------------------------

_KEY_BOUND = re.compile(r"^self\.all\(k, (?:size\(k\) >= \d+ && )?size\(k\) <= (\d+)\)$")
_SCALAR_SIZE = {"integer": len(str(-(2**63))), "number": 24, "boolean": len("false")}


def map_key_length(node: dict[str, Any]) -> int | None:
    """The longest key a map's rules allow (``self.all(k, size(k) <= N)``), None: unbounded."""
    bounds = [_KEY_BOUND.match(str(r.get("rule", ""))) for r in node.get("x-kubernetes-validations") or []]
    lengths = [int(m.group(1)) for m in bounds if m]
    return min(lengths) if lengths else None


def worst_case_size(node: dict[str, Any]) -> int | None:
    """The most characters a value of ``node`` can take as compact JSON (None: unbounded).

    Characters as ``maxLength`` counts them (Unicode code points, and no JSON escapes): a
    value of non-ASCII or escaped characters takes up to 4 (6 when escaped) bytes a character.
    """
    if node.get("x-kubernetes-preserve-unknown-fields") or node.get("x-kubernetes-int-or-string"):
        return None
    typ = node.get("type")
    if "enum" in node:
        return max(len(json.dumps(v)) for v in node["enum"])
    if typ == "string":
        return node["maxLength"] + 2 if "maxLength" in node else None
    if typ in _SCALAR_SIZE:
        return _SCALAR_SIZE[typ]
    if typ == "array":
        item = worst_case_size(node.get("items") or {})
        if item is None or "maxItems" not in node:
            return None
        return 2 + node["maxItems"] * (item + 1)
    props = node.get("properties")
    if props:
        sizes = [worst_case_size(sub) for sub in props.values()]
        if any(s is None for s in sizes):
            return None
        return 2 + sum(len(json.dumps(name)) + 2 + s for name, s in zip(props, sizes, strict=True))  # type: ignore[operator]
    addl = node.get("additionalProperties")
    if isinstance(addl, dict):
        value, key = worst_case_size(addl), map_key_length(node)
        if value is None or key is None or "maxProperties" not in node:
            return None
        return 2 + node["maxProperties"] * (key + 2 + 2 + value)
    return None
