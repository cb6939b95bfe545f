"""An API-server semantics layer on top of kmock: what kube-apiserver does and kmock does not.

kmock (``kmock.KubernetesEmulator``) is an in-memory store over HTTP: it merges whatever
dict it is sent into the stored object. That hides a whole class of operator bugs - status
written through the main resource (silently ignored by a real server), a create of an
existing name (409), a manifest the CRD's schema or CEL rules refuse (422), a finalizer that
keeps an object alive, objects over etcd's size limit. :class:`ApiServer` is a kmock
subclass that behaves like kube-apiserver for these, usable as the kmock fixture's class::

    @pytest.mark.kmock(cls=ApiServer)
    async def test_x(kmock: ApiServer) -> None: ...

Per request, before kmock's own reactions and fallbacks answer (so ``kmock[...] << ...``
reactions and the request log keep working):

* **create** (POST): ``generateName`` (+5 random characters), uid, resourceVersion (one
  counter for the whole server, like etcd's revision), ``generation: 1`` (custom resources
  and objects with a ``spec``), creationTimestamp; ``.status`` is dropped when the resource
  has the status subresource; 409 ``AlreadyExists`` for an existing name.
* **update** (PATCH merge/JSON/strategic, PUT): writes to the main resource keep the old
  ``.status``, writes to ``/status`` change only ``.status``; server-owned metadata is kept;
  ``generation`` grows when anything but metadata/status changes; resourceVersion on every
  change, not on a no-op; a stale ``metadata.resourceVersion`` in a PUT or a patch is 409
  ``Conflict``; a failing JSON-patch ``test`` is 422 (kopf relies on it).
* **schema + CEL** for kinds with a CRD in crds/*.yaml (kappa.dev), through
  ``tests/crd_validation.py`` (jsonschema + celpy), transition rules (``oldSelf``) on updates:
  pruning and defaulting as stored, 422 ``Invalid`` with the API server's message and causes;
  on ``/status`` writes too.
* **finalizers**: DELETE of an object with finalizers sets deletionTimestamp (MODIFIED); it
  goes (DELETED) when a write empties them; new finalizers on a deleting object: 422.
* **sizes**: a request body over 3 MiB: 413; an object over etcd's 1.5 MiB: 500
  ``etcdserver: request is too large`` (what kube-apiserver answers, kubernetes#112152);
  annotations over 256 KiB: 422.
* **garbage collection**: when an object is gone, the objects it owns (ownerReferences by
  uid) are deleted in the background propagation's way (or lose the dangling reference when
  another owner still exists).
* **events**: stored for every post (generateName); :func:`events` lists them.
* **Secrets**: ``stringData`` is write-only, merged into ``data`` (base64).

Not emulated: server-side apply, dryRun, foreground/orphan propagation, label/field
selectors, watch resourceVersion semantics (kmock replays all objects), admission webhooks,
validation ratcheting, defaulting on read from etcd.
A create answers 200 (kmock's fallback), not 201.
"""

from __future__ import annotations

import base64
import copy
import datetime
import json
import random
import uuid
from pathlib import Path
from typing import Any

import aiohttp.web
import attrs
import jsonpatch
import jsonpointer
import kmock
import yaml

from tests import crd_validation

ROOT = Path(__file__).resolve().parents[2]
CRD_FILES = sorted((ROOT / "crds").glob("*.yaml"))

MAX_REQUEST_BYTES = 3 * 1024 * 1024  # kube-apiserver's MaxRequestBodyBytes
MAX_OBJECT_BYTES = 1536 * 1024  # etcd's default --max-request-bytes
MAX_ANNOTATIONS_BYTES = 256 * 1024  # apimachinery's TotalAnnotationSizeLimitB

_bundled = kmock.ResourcesArray()
_bundled.load_bundled()
BUILTIN_GROUPS = frozenset(r.group for r in _bundled)

_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # apimachinery's utilrand alphabet
_CAUSE_TYPES = {
    "Invalid value": "FieldValueInvalid",
    "Required value": "FieldValueRequired",
    "Unsupported value": "FieldValueNotSupported",
    "Too long": "FieldValueTooLong",
    "Too many": "FieldValueTooMany",
    "Forbidden": "FieldValueForbidden",
    "Duplicate value": "FieldValueDuplicate",
}
_NAMESPACE_MISMATCH = "the namespace of the provided object does not match the namespace sent on the request"
_MERGE = "application/merge-patch+json"
_JSON_PATCH = "application/json-patch+json"
_STRATEGIC = "application/strategic-merge-patch+json"


class Refusal(Exception):
    """A request the API server answers with a failure ``Status``."""

    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure"}
        body["message"] = self.message
        if self.reason:
            body["reason"] = self.reason
        if self.details is not None:
            body["details"] = self.details
        body["code"] = self.code
        return body

    def response(self) -> aiohttp.web.Response:
        return aiohttp.web.json_response(self.status(), status=self.code)


def crd_admit(
    crd: dict[str, Any], obj: dict[str, Any], old: dict[str, Any] | None
) -> tuple[dict[str, Any], list[str], list[str]]:
    """The one call into tests/crd_validation.py: the object to store (pruned, defaulted),
    the schema/CEL errors (transition rules, ``oldSelf``, on an update: ``old`` is the stored
    object) and the unknown (pruned) field paths."""
    stored, errors = crd_validation.admit(crd, obj, "Strict", old=old)
    unknown = [e[len('unknown field "') : -1] for e in errors if e.startswith('unknown field "')]
    return stored, [e for e in errors if not e.startswith('unknown field "')], unknown


def _now() -> str:
    return datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge, ``null`` removes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _size(obj: Any) -> int:
    return len(json.dumps(obj, separators=(",", ":")).encode())


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        meta = obj["metadata"] = {}
    return meta


def _without(obj: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in keys}


@attrs.define(kw_only=True)
class ApiServer(kmock.KubernetesEmulator):
    """kmock with kube-apiserver's semantics for writes (see the module's docstring).

    A superset of ``tests.operator.kube.ApiServerLike``. Our CRDs (crds/*.yaml) are
    registered for discovery on start, with their schemas; other resources (e.g. through
    ``kube.register``) get the generic semantics, with the status subresource if their
    ``kmock.ResourceInfo`` declares it (as discovery tells kopf).
    """

    #: The CRD of a (group, plural), for schema + CEL validation.
    crds: dict[tuple[str, str], dict[str, Any]] = attrs.field(factory=dict, init=False)
    #: Unknown fields pruned from requests without ``fieldValidation=Strict`` (the API server
    #: sends them as ``Warning`` headers): ``"<Kind> <name>: unknown field \"spec.x\""``.
    warnings: list[str] = attrs.field(factory=list, init=False)
    #: What an object over etcd's limit gets (kube-apiserver passes etcd's error on as 500).
    too_large_code: int = attrs.field(default=500, init=False)
    _revision: int = attrs.field(default=0, init=False)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.fallback[kmock.method.PUT] << self._serve_update  # kmock knows no PUT
        self.resources.load_bundled()
        for path in CRD_FILES:
            self.install_crd(crd_validation.load_crd(path))

    def install_crd(self, crd: dict[str, Any] | str | Path) -> None:
        """Serve a CRD: discovery (kind, scope, short names, subresources) and its schema."""
        if not isinstance(crd, dict):
            crd = yaml.safe_load(Path(crd).read_text())
        spec = crd["spec"]
        names = spec["names"]
        for version in spec["versions"]:
            if not version.get("served", True):
                continue
            self.resources[f"{spec['group']}/{version['name']}/{names['plural']}"] = kmock.ResourceInfo(
                kind=names["kind"],
                singular=names.get("singular"),
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                verbs={"list", "watch", "get", "patch", "create", "delete", "update"},
                shortnames=set(names.get("shortNames") or ()),
                categories=set(names.get("categories") or ()),
                subresources=set(version.get("subresources") or ()),
            )
        self.crds[spec["group"], names["plural"]] = crd

    # --- inspection helpers ---------------------------------------------------------------

    def stored(self, resource: str | kmock.resource, namespace: str | None = None) -> list[dict[str, Any]]:
        """The live objects of ``resource`` (e.g. ``"kappa.dev/v1alpha1/backfills"``,
        ``"v1/events"``), in creation order; all namespaces unless ``namespace``."""
        wanted = kmock.resource(resource)
        return [
            copy.deepcopy(obj.raw)
            for (res, ns, _), obj in list(self.objects.items())
            if res == wanted and not obj.deleted and (namespace is None or ns == namespace)
        ]

    @property
    def revision(self) -> int:
        """The last resourceVersion handed out."""
        return self._revision

    # --- request handling -----------------------------------------------------------------

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        # aiohttp refuses bodies over 1 MiB before kmock sees them; let the 3 MiB rule answer
        raw_request._client_max_size = 4 * MAX_REQUEST_BYTES  # type: ignore[attr-defined]
        return await super().__call__(raw_request)

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        method = str(request.method.value if request.method else "").upper()
        writes = (method == "POST" and request.name is None) or (
            method in ("PATCH", "PUT", "DELETE") and request.name is not None
        )
        if request.resource is None or not writes:
            return await super()._handle(request)
        try:
            if method in ("POST", "PATCH", "PUT") and len(request.body) > MAX_REQUEST_BYTES:
                raise Refusal(413, "RequestEntityTooLarge", f"Request entity too large: limit is {MAX_REQUEST_BYTES}")
            async with self._lock:
                if method == "POST":
                    await self._create(request)
                elif method == "DELETE":
                    if request.subresource is not None:
                        raise self._no_subresource(request)
                    await self._delete(request.resource, request.namespace, request.name, request.data)
                else:
                    await self._update(request)
        except Refusal as refusal:
            return refusal.response()
        # The state is stored; kmock's reactions or fallbacks answer (with the stored object).
        return await kmock.RawHandler._handle(self, request)

    async def _serve_list(self, request: kmock.Request) -> Any:
        listing = await super()._serve_list(request)
        listing["metadata"]["resourceVersion"] = str(self._revision)
        return listing

    # --- create ---------------------------------------------------------------------------

    async def _create(self, request: kmock.Request) -> None:
        resource = request.resource
        assert resource is not None
        if not isinstance(request.data, dict):
            raise Refusal(400, "BadRequest", "the body of the request was not a JSON object")
        meta = _meta(request.data)
        ns = request.namespace
        if ns is not None and meta.get("namespace") not in (None, "", ns):
            raise Refusal(400, "BadRequest", _NAMESPACE_MISMATCH)
        if not meta.get("name") and meta.get("generateName"):
            for _ in range(100):
                name = meta["generateName"] + "".join(random.choices(_NAME_CHARS, k=5))
                if not self._live(resource, ns, name):
                    break
            meta["name"] = name  # kmock's create fallback finds the stored object by the body's name
        if ns is not None:
            meta["namespace"] = ns
        name = meta.get("name") or ""

        obj = copy.deepcopy(request.data)
        meta = _meta(obj)
        for key in ("deletionTimestamp", "deletionGracePeriodSeconds", "resourceVersion", "uid", "generation"):
            meta.pop(key, None)
        meta["uid"] = self._new_uid(request.data["metadata"].get("uid"))
        meta["creationTimestamp"] = _now()
        if self._has_status(resource):
            obj.pop("status", None)
        if not name:
            raise self._invalid(resource, obj, ["metadata.name: Required value: name or generateName is required"])
        obj = self._admit(request, obj, None)
        if self._tracks_generation(resource, obj):
            meta = _meta(obj)
            meta["generation"] = 1
        if self._live(resource, ns, name) is not None:
            raise Refusal(
                409,
                "AlreadyExists",
                f"{self._qualified(resource)} {json.dumps(name)} already exists",
                self._details(resource, name),
            )
        await self._store(resource, ns, name, obj, "ADDED")

    def _new_uid(self, requested: str | None) -> str:
        """A create's uid. The API server ignores the client's (``requested``); a subclass may not."""
        return str(uuid.uuid4())

    # --- update ---------------------------------------------------------------------------

    async def _update(self, request: kmock.Request) -> None:
        resource, ns, name = request.resource, request.namespace, request.name
        assert resource is not None and name is not None
        if request.subresource not in (None, "status") or (
            request.subresource == "status" and not self._has_status(resource)
        ):
            raise self._no_subresource(request)
        old = self._live(resource, ns, name)
        if old is None:
            raise self._not_found(resource, name)
        method = str(request.method.value).upper()
        if method == "PUT":
            if not isinstance(request.data, dict):
                raise Refusal(400, "BadRequest", "the body of the request was not a JSON object")
            new = copy.deepcopy(request.data)
            if not _meta(new).get("resourceVersion") and resource.group not in BUILTIN_GROUPS:
                raise self._invalid(
                    resource, old, ["metadata.resourceVersion: Invalid value: 0x0: must be specified for an update"]
                )
        else:
            new = self._patched(request, old)
        meta, old_meta = _meta(new), _meta(old)
        if meta.get("name", name) != name:
            raise Refusal(
                400,
                "BadRequest",
                f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})",
            )
        if ns is not None and meta.get("namespace", ns) != ns:
            raise Refusal(400, "BadRequest", _NAMESPACE_MISMATCH)
        rv = meta.get("resourceVersion")
        if rv not in (None, "") and str(rv) != old_meta.get("resourceVersion"):
            raise self._conflict(resource, name)

        if request.subresource == "status":
            # only .status is taken from the request (and kept absent if it removes it)
            result = copy.deepcopy(old)
            result.pop("status", None)
            if "status" in new:
                result["status"] = new["status"]
        else:
            result = new
            if self._has_status(resource):  # the main resource ignores .status
                result.pop("status", None)
                if "status" in old:
                    result["status"] = copy.deepcopy(old["status"])
            self._keep_server_metadata(resource, name, _meta(result), old_meta)
        _meta(result)["resourceVersion"] = old_meta.get("resourceVersion")
        result = self._admit(request, result, old)
        meta = _meta(result)
        meta.pop("generation", None)
        if "generation" in old_meta:
            meta["generation"] = old_meta["generation"]
        if result == old:
            return  # a no-op: nothing is written, no resourceVersion, no event
        if self._tracks_generation(resource, result):
            skip = ("metadata", "status") if self._has_status(resource) else ("metadata",)
            if _without(result, *skip) != _without(old, *skip):
                meta["generation"] = int(old_meta.get("generation") or 0) + 1
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            await self._remove(resource, ns, name, result)  # no MODIFIED: the object goes at once
        else:
            await self._store(resource, ns, name, result, "MODIFIED")

    def _patched(self, request: kmock.Request, old: dict[str, Any]) -> dict[str, Any]:
        resource = request.resource
        assert resource is not None
        ctype = str(request.headers.get("Content-Type", "")).split(";")[0].strip().lower()
        custom = resource.group not in BUILTIN_GROUPS
        accepted = [_JSON_PATCH, _MERGE] + ([] if custom else [_STRATEGIC])
        if ctype not in accepted:
            formats = ", ".join(accepted)
            message = f"the body of the request was in an unknown format - accepted media types include: {formats}"
            raise Refusal(415, "UnsupportedMediaType", message)
        if ctype == _JSON_PATCH:
            if not isinstance(request.data, list):
                raise Refusal(400, "BadRequest", "json: cannot unmarshal object into Go value of type jsonpatch.Patch")
            try:
                new = jsonpatch.apply_patch(old, request.data, in_place=False)
            except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as exc:
                raise Refusal(
                    422, "Invalid", f"the server rejected our request due to an error in our request ({exc})"
                ) from exc
        else:  # a strategic merge patch of a built-in is taken as a merge patch (no patchMergeKey lists)
            if not isinstance(request.data, dict):
                raise Refusal(400, "BadRequest", "the body of the request was not a JSON object")
            new = merge_patch(old, request.data)
        if not isinstance(new, dict):
            raise Refusal(422, "Invalid", "the server rejected our request: the patched object is not an object")
        return copy.deepcopy(new)

    def _keep_server_metadata(
        self, resource: kmock.resource, name: str, meta: dict[str, Any], old: dict[str, Any]
    ) -> None:
        """rest.BeforeUpdate + ValidateObjectMetaUpdate: what a client cannot change."""
        errors = []
        if meta.get("uid") and old.get("uid") and meta["uid"] != old["uid"]:
            errors.append(f"metadata.uid: Invalid value: {json.dumps(meta['uid'])}: field is immutable")
        for key in ("uid", "creationTimestamp"):
            meta.pop(key, None)
            if key in old:
                meta[key] = old[key]
        for key in ("deletionTimestamp", "deletionGracePeriodSeconds"):
            if key in old:
                meta[key] = old[key]
            elif key in meta:
                errors.append(f"metadata.{key}: Invalid value: {json.dumps(meta[key])}: field is immutable")
        if old.get("deletionTimestamp"):
            added = [f for f in meta.get("finalizers") or [] if f not in (old.get("finalizers") or [])]
            if added:
                found = "[]string{" + ", ".join(json.dumps(f) for f in added) + "}"
                errors.append(
                    "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, "
                    f"found new finalizers {found}"
                )
        if errors:
            raise self._invalid(resource, {"metadata": {"name": name}}, errors)

    # --- delete, finalizers, garbage collection -------------------------------------------

    async def _delete(self, resource: kmock.resource, ns: str | None, name: str, options: Any) -> None:
        old = self._live(resource, ns, name)
        if old is None:
            raise self._not_found(resource, name)
        meta = _meta(old)
        pre = (options.get("preconditions") if isinstance(options, dict) else None) or {}
        if pre.get("uid") and pre["uid"] != meta.get("uid"):
            raise self._conflict(
                resource,
                name,
                f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: {meta.get('uid')}",
            )
        if pre.get("resourceVersion") and pre["resourceVersion"] != meta.get("resourceVersion"):
            raise self._conflict(
                resource,
                name,
                f"the ResourceVersion in the precondition ({pre['resourceVersion']}) does not match the "
                f"ResourceVersion in record ({meta.get('resourceVersion')}). The object might have been modified",
            )
        if not meta.get("finalizers"):
            await self._remove(resource, ns, name)
        elif not meta.get("deletionTimestamp"):
            marked = copy.deepcopy(old)
            _meta(marked).update(deletionTimestamp=_now(), deletionGracePeriodSeconds=0)
            await self._store(resource, ns, name, marked, "MODIFIED")

    async def _remove(
        self, resource: kmock.resource, ns: str | None, name: str, final: dict[str, Any] | None = None
    ) -> None:
        """Gone for good: one DELETED event (with a new resourceVersion), then the garbage collector."""
        stored = self.objects[resource, ns, name]
        final = copy.deepcopy(final if final is not None else stored.raw)
        self._revision += 1
        _meta(final)["resourceVersion"] = str(self._revision)
        stored.history.append(final)
        stored.delete()
        await self._buses[resource].put({"type": "DELETED", "object": final})
        if _meta(final).get("uid"):
            await self._collect_garbage(_meta(final)["uid"])

    async def _collect_garbage(self, owner_uid: str) -> None:
        """The garbage collector's background propagation: dependents of a gone owner go,
        unless another owner still exists (then only the dangling reference goes)."""
        live_uids = {
            obj.raw["metadata"].get("uid")
            for obj in self.objects.values()
            if not obj.deleted and isinstance(obj.raw.get("metadata"), dict)
        }
        for (resource, ns, name), obj in list(self.objects.items()):
            if obj.deleted:
                continue
            refs = (obj.raw.get("metadata") or {}).get("ownerReferences") or []
            if not any(ref.get("uid") == owner_uid for ref in refs):
                continue
            solid = [ref for ref in refs if ref.get("uid") in live_uids]
            if solid:
                updated = copy.deepcopy(obj.raw)
                updated["metadata"]["ownerReferences"] = solid
                await self._store(resource, ns, name, updated, "MODIFIED")
            elif self._live(resource, ns, name) is not None:
                await self._delete(resource, ns, name, None)

    # --- admission ------------------------------------------------------------------------

    def _admit(self, request: kmock.Request, obj: dict[str, Any], old: dict[str, Any] | None) -> dict[str, Any]:
        resource = request.resource
        assert resource is not None
        if (resource.group, resource.plural) == ("", "secrets") and isinstance(obj.get("stringData"), dict):
            # write-only: merged into .data (base64), never stored or shown
            data = obj.get("data") if isinstance(obj.get("data"), dict) else {}
            encoded = {k: base64.b64encode(str(v).encode()).decode() for k, v in obj.pop("stringData").items()}
            obj["data"] = {**data, **encoded}
        errors: list[str] = []
        crd = self.crds.get((resource.group or "", resource.plural or ""))
        if crd is not None:
            obj, errors, unknown = crd_admit(crd, obj, old)
            if unknown:
                kind = crd["spec"]["names"]["kind"]
                if request.params.get("fieldValidation") == "Strict":
                    fields = ", ".join(f"unknown field {json.dumps(u)}" for u in unknown)
                    raise Refusal(
                        400,
                        "BadRequest",
                        f'{kind} in version "{resource.version}" cannot be handled as a {kind}: '
                        f"strict decoding error: {fields}",
                    )
                name = _meta(obj).get("name")
                self.warnings += [f"{kind} {name}: unknown field {json.dumps(u)}" for u in unknown]
        annotations = _meta(obj).get("annotations") or {}
        if sum(len(str(k).encode()) + len(str(v).encode()) for k, v in annotations.items()) > MAX_ANNOTATIONS_BYTES:
            errors.append(f"metadata.annotations: Too long: must have at most {MAX_ANNOTATIONS_BYTES} bytes")
        if errors:
            raise self._invalid(resource, obj, errors)
        if _size(obj) > MAX_OBJECT_BYTES:
            raise Refusal(self.too_large_code, "", "etcdserver: request is too large")
        return obj

    # --- storage --------------------------------------------------------------------------

    def _live(self, resource: kmock.resource, ns: str | None, name: str) -> dict[str, Any] | None:
        key = (resource, ns, name)
        if key not in self.objects or self.objects[key].deleted:
            return None
        return copy.deepcopy(self.objects[key].raw)

    async def _store(
        self, resource: kmock.resource, ns: str | None, name: str, obj: dict[str, Any], event: str
    ) -> None:
        self._revision += 1
        obj = copy.deepcopy(obj)
        _meta(obj)["resourceVersion"] = str(self._revision)
        key = (resource, ns, name)
        if key in self.objects:
            self.objects[key].history.append(obj)
        else:
            self.objects[key] = obj
        await self._buses[resource].put({"type": event, "object": copy.deepcopy(obj)})

    # --- resource facts and errors --------------------------------------------------------

    def _has_status(self, resource: kmock.resource) -> bool:
        return resource in self.resources and "status" in self.resources[resource].subresources

    def _tracks_generation(self, resource: kmock.resource, obj: dict[str, Any]) -> bool:
        return resource.group not in BUILTIN_GROUPS or "spec" in obj

    def _kind(self, resource: kmock.resource, obj: dict[str, Any] | None = None) -> str:
        crd = self.crds.get((resource.group or "", resource.plural or ""))
        if crd is not None:
            return str(crd["spec"]["names"]["kind"])
        if resource in self.resources and self.resources[resource].kind:
            return str(self.resources[resource].kind)
        return str((obj or {}).get("kind") or (resource.plural or "").capitalize())

    @staticmethod
    def _qualified(resource: kmock.resource) -> str:
        return f"{resource.plural}.{resource.group}" if resource.group else str(resource.plural)

    @staticmethod
    def _details(resource: kmock.resource, name: str) -> dict[str, Any]:
        return {"name": name, "group": resource.group or "", "kind": resource.plural}

    def _not_found(self, resource: kmock.resource, name: str) -> Refusal:
        message = f"{self._qualified(resource)} {json.dumps(name)} not found"
        return Refusal(404, "NotFound", message, self._details(resource, name))

    def _conflict(self, resource: kmock.resource, name: str, why: str | None = None) -> Refusal:
        why = why or "the object has been modified; please apply your changes to the latest version and try again"
        message = f"Operation cannot be fulfilled on {self._qualified(resource)} {json.dumps(name)}: {why}"
        return Refusal(409, "Conflict", message, self._details(resource, name))

    @staticmethod
    def _no_subresource(request: kmock.Request) -> Refusal:
        return Refusal(404, "NotFound", "the server could not find the requested resource")

    def _invalid(self, resource: kmock.resource, obj: dict[str, Any], errors: list[str]) -> Refusal:
        """apierrors.NewInvalid: ``<Kind>.<group> "<name>" is invalid: <error>`` or ``[e1, e2]``."""
        kind = self._kind(resource, obj)
        group_kind = f"{kind}.{resource.group}" if resource.group else kind
        name = (obj.get("metadata") or {}).get("name") or ""
        causes = []
        for error in errors:
            field, _, body = error.partition(": ")
            cause_type = next((t for prefix, t in _CAUSE_TYPES.items() if body.startswith(prefix)), "FieldValueInvalid")
            causes.append({"reason": cause_type, "message": body, "field": field})
        joined = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
        details = {"name": name, "group": resource.group or "", "kind": kind, "causes": causes}
        return Refusal(422, "Invalid", f"{group_kind} {json.dumps(name)} is invalid: {joined}", details)


def events(emulator: kmock.KubernetesEmulator, involved_name: str | None = None) -> list[dict[str, Any]]:
    """Stored events (core v1 and events.k8s.io), oldest first, as ``{reason, message, type,
    involvedObject}``; only those about ``involved_name`` if given."""
    found = []
    for (resource, _, _), obj in list(emulator.objects.items()):
        if obj.deleted or resource.plural != "events" or resource.group not in ("", "events.k8s.io"):
            continue
        raw = obj.raw
        involved = raw.get("involvedObject") or raw.get("regarding") or {}
        if involved_name is not None and involved.get("name") != involved_name:
            continue
        found.append(
            {
                "reason": raw.get("reason"),
                "message": raw.get("message", raw.get("note")),
                "type": raw.get("type"),
                "involvedObject": involved,
            }
        )
    return found
