"""The Kubernetes API as the operator uses it (the I/O edge): every write is idempotent, so a
handler re-run after an operator restart creates nothing twice."""

from __future__ import annotations

import base64
import json
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import kubernetes
from kubernetes.client.exceptions import ApiException
from urllib3.util.retry import Retry

from kappa_operator.kube.packed import unpacked
from kappa_operator.models.common import GROUP, VERSION
from kappa_operator.render.spark_application import APP_LABEL, MANAGED_BY, SPARK_API, Owner
from spark_app.contract.errors import KappaError

DRIVER_CONTAINER = "spark-kubernetes-driver"
"""The Spark container of a driver pod, as Spark on Kubernetes names it."""

SPARK_GROUP, SPARK_VERSION = SPARK_API.split("/")
APPS = "sparkapplications"
METADATA_ONLY = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
"""What a GET asks for to get an object's metadata and nothing else (a Secret without its data)."""
log = logging.getLogger("kappa.operator")


class _Stale(Exception):
    """A delete decided on a copy from the watch found a newer object under the name."""


class ForeignObjectError(Exception):
    """A child's name is taken by an object another owner controls: never adopted, never
    deleted; the owner's status says whose it is and what to rename."""

    def __init__(self, kind: str, namespace: str, name: str, existing: dict[str, Any], owner: Owner) -> None:
        self.kind, self.name = kind, name
        super().__init__(
            f"{kind} {namespace}/{name} already exists and belongs to {describe_owners(existing)}; "
            f"the operator does not take over objects it does not own: rename this {owner.kind} "
            f"(or delete that {kind})"
        )


def describe_owners(obj: dict[str, Any]) -> str:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    if not refs:
        return "no kappa object (it has no owner)"
    return " and ".join(f"{r.get('kind')} {r.get('name')} (uid {r.get('uid') or '?'})" for r in refs)


def _camel_meta(obj: dict[str, Any]) -> dict[str, Any]:
    """Core objects come back from the client as snake_case dicts: the metadata as the API
    server spells it, for ``Owner.owns``."""
    meta = obj.get("metadata") or {}
    refs = meta.get("ownerReferences", meta.get("owner_references")) or []
    return {"metadata": {"uid": meta.get("uid"), "ownerReferences": refs}}


def _preconditions(uid: str | None) -> dict[str, Any] | None:
    return {"preconditions": {"uid": uid}} if uid else None


POOL_SIZE = 64
"""HTTP connections kept to the API server: the handler threads (32, see runner), the Events
writer, and the threads asyncio lends to the async handlers."""


class TooManyRequests(Retry):
    """Requests the API server's priority and fairness refused (429) are sent again, whatever
    their method, after its Retry-After: a 429 means the request was never handled, so even a
    create is safe to repeat. Everything else keeps urllib3's defaults (connection errors
    retried, a read error only for idempotent methods)."""

    def is_retry(self, method: str, status_code: int, has_retry_after: bool = False) -> bool:
        return status_code == 429 and (self.total is None or self.total > 0)


RETRIES = TooManyRequests(
    total=12, connect=3, read=3, status=10, backoff_factor=0.25, backoff_max=10, raise_on_status=False
)
"""Ten 429s in a row (each after the server's Retry-After, or a growing backoff to 10 s) before a
handler sees the error, which kopf then retries."""


class SecretsForbiddenError(Exception):
    """The chart's RBAC does not let the operator read Secrets (metadata) in a job's namespace."""


class NotLeadingError(Exception):
    """A write refused in this process: it may no longer hold the operator's Lease."""


fence: Callable[[], str | None] = lambda: None  # noqa: E731 - replaced by the runner once it leads
"""Why this process must not write now (None: it may): the leader's check that its Lease is
still its own, renewed within the renew deadline (``LeaderElector.may_write``). A leader frozen
for longer (a paused VM, a long pause of the process) wakes with its writes refused until it
has exited, while a follower may already lead."""


class FencedApiClient(kubernetes.client.ApiClient):
    """Every request but a read asks ``fence`` first."""

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if method not in ("GET", "HEAD", "OPTIONS") and (why := fence()) is not None:
            raise NotLeadingError(f"{method} {url.split('?', 1)[0]} not sent: {why}")
        return super().request(method, url, *args, **kwargs)


def api_client(host: str | None = None, fenced: bool = True) -> kubernetes.client.ApiClient:
    """A client of ``host`` (tests, emulators), else of the in-cluster config, else of the
    kubeconfig; ``fenced``: its writes ask ``fence`` (all but the election's own)."""
    if host is not None:
        config = kubernetes.client.Configuration(host=host)
    else:
        config = kubernetes.client.Configuration()
        try:
            kubernetes.config.load_incluster_config(client_configuration=config)
        except kubernetes.config.ConfigException:
            kubernetes.config.load_kube_config(client_configuration=config)
    # one connection per handler thread: the default pool (10) made the rest open and
    # drop a connection per request ("Connection pool is full") under a burst of objects
    config.connection_pool_maxsize = POOL_SIZE
    config.retries = RETRIES
    client = (FencedApiClient if fenced else kubernetes.client.ApiClient)(config)
    # which replica sent a request, in the API server's audit log (the chart sets POD_NAME)
    client.user_agent = f"kappa-operator/{os.environ.get('POD_NAME') or 'local'}"
    return client


def observed(app: Mapping[str, Any]) -> dict[str, Any]:
    """What the operator decides on of an application: all but its spec and the server's
    bookkeeping of who set which field (``managedFields``, a few KB)."""
    out = {k: v for k, v in dict(app).items() if k != "spec"}
    meta = out.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        out["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
    return out


class Cluster:
    def __init__(self, client: kubernetes.client.ApiClient) -> None:
        self.core = kubernetes.client.CoreV1Api(client)
        self.policy = kubernetes.client.PolicyV1Api(client)
        self.custom = kubernetes.client.CustomObjectsApi(client)
        self.applications: Mapping[tuple[str, str], Iterable[bytes]] | None = None
        """Our SparkApplications as the operator's watch last saw them (kopf's index, filled
        from its listing before any handler runs), by (namespace, name); None: read each."""

    @classmethod
    def connect(cls, host: str | None = None) -> Cluster:
        """``host`` for tests and local emulators; else in-cluster config, else the kubeconfig."""
        return cls(api_client(host))

    # --- children (SparkApplications, ConfigMaps, Secrets): owned, uid-checked ------------

    def get_app(self, namespace: str, name: str, owner: Owner | None = None) -> dict[str, Any] | None:
        """The application named ``name``; with ``owner``, only if it is that object's (a
        namesake's application raises: it must never be read as ours).

        From the watch's copy when there is one, as controller-runtime's clients read from
        their informer's cache: a read per reconcile was a fifth of the requests 200 objects
        created at once cost the API server. A copy a moment behind is safe: a create of an
        application the copy missed gets 409 and reads the server (``_create_owned``), and the
        application's next event reconciles its owner again. Not ours (no kappa label): not
        in the copy, found by that 409."""
        if self.applications is not None:
            app = self._cached_app(namespace, name)
        else:
            app = self._read(self._app_reader(namespace, name))
        if app is not None and owner is not None and not owner.owns(app):
            raise ForeignObjectError("SparkApplication", namespace, name, app, owner)
        return app

    def _cached_app(self, namespace: str, name: str) -> dict[str, Any] | None:
        assert self.applications is not None
        for app in self.applications.get((namespace, name), ()):
            return unpacked(app)
        return None

    def create_app(self, body: dict[str, Any], owner: Owner) -> None:
        ns, name = body["metadata"]["namespace"], body["metadata"]["name"]
        self._create_owned(
            "SparkApplication",
            lambda: self.custom.create_namespaced_custom_object(SPARK_GROUP, SPARK_VERSION, ns, APPS, body),
            self._app_reader(ns, name),
            body,
            owner,
        )

    def delete_app(self, namespace: str, name: str, owner: Owner) -> bool:
        """Delete the application if it is ``owner``'s (False: absent, or someone else's).

        Decided on the watch's copy when it holds one (two of the 13 requests per object of a
        deletion at 5,000 objects were these reads): its uid is the delete's precondition, so a
        copy a moment behind deletes nothing it should not; a 409 (the copy was of an older
        namesake) or no copy reads the server, as before."""

        def delete(uid: str | None) -> Any:
            return self.custom.delete_namespaced_custom_object(
                SPARK_GROUP, SPARK_VERSION, namespace, APPS, name, body=_preconditions(uid)
            )

        reader = self._app_reader(namespace, name)
        cached = self._cached_app(namespace, name) if self.applications is not None else None
        if cached is not None and cached["metadata"].get("uid"):
            try:
                return self._delete_owned(
                    "SparkApplication", lambda: cached, delete, namespace, name, owner, strict=True
                )
            except _Stale:
                pass
        return self._delete_owned("SparkApplication", reader, delete, namespace, name, owner)

    def apply_config_map(self, body: dict[str, Any], owner: Owner) -> None:
        """Create, or update the data of, ``owner``'s ConfigMap (the data keys are ours)."""
        ns, name = body["metadata"]["namespace"], body["metadata"]["name"]
        patch = {"metadata": {"labels": body["metadata"]["labels"]}, "data": body["data"]}
        if not self._create_owned(
            "ConfigMap",
            lambda: self.core.create_namespaced_config_map(ns, body),
            lambda: self.core.read_namespaced_config_map(name, ns).to_dict(),
            body,
            owner,
        ):
            self.core.patch_namespaced_config_map(name, ns, patch)

    def get_config_map(self, namespace: str, name: str, owner: Owner) -> dict[str, Any] | None:
        cm = self._read(lambda: self.core.read_namespaced_config_map(name, namespace).to_dict())
        return cm if cm is not None and owner.owns(_camel_meta(cm)) else None

    def driver_last_words(self, namespace: str, pod: str) -> str | None:
        """A failed driver's termination message (``spark_app`` writes its error there; the
        kubelet keeps it in the pod's status): the cause, one line, without reading its log."""
        found = self._read(lambda: self.core.read_namespaced_pod(pod, namespace).to_dict())
        for c in ((found or {}).get("status") or {}).get("container_statuses") or []:
            terminated = (c.get("state") or {}).get("terminated") or {}
            if c.get("name") == DRIVER_CONTAINER and terminated.get("message"):
                return " ".join(str(terminated["message"]).split())
        return None

    def pods_of_application(self, namespace: str, app: str) -> list[dict[str, Any]]:
        """The driver and executor pods of the SparkApplication ``app`` (the spark-operator's
        label on both), as the API server has them: one list, filtered by the server."""
        answer = self.core.list_namespaced_pod(namespace, label_selector=f"{APP_LABEL}={app}", _preload_content=False)
        return list(json.loads(answer.data).get("items") or [])

    def delete_lost_pod(self, namespace: str, name: str, uid: str) -> bool:
        """Delete a pod left on a node that stopped answering, at once (grace period 0: no
        kubelet is there to confirm its containers stopped), if it is still that pod (``uid``).
        False: gone already, or another pod by now."""
        body = {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}}
        try:
            self.core.delete_namespaced_pod(name, namespace, body=body)
        except ApiException as exc:
            if exc.status in (404, 409):
                return False
            raise
        return True

    def apply_disruption_budget(self, body: dict[str, Any], owner: Owner) -> None:
        """Create ``owner``'s driver's PodDisruptionBudget if absent (its spec never changes: the
        selector is the application's name)."""
        ns, name = body["metadata"]["namespace"], body["metadata"]["name"]
        self._create_owned(
            "PodDisruptionBudget",
            lambda: self.policy.create_namespaced_pod_disruption_budget(ns, body),
            lambda: self.policy.read_namespaced_pod_disruption_budget(name, ns).to_dict(),
            body,
            owner,
        )

    def annotate_app(self, namespace: str, name: str, annotations: dict[str, str | None]) -> None:
        """Set (None: remove) annotations of one of our SparkApplications (a merge patch)."""
        self.custom.patch_namespaced_custom_object(
            SPARK_GROUP, SPARK_VERSION, namespace, APPS, name, {"metadata": {"annotations": annotations}}
        )

    def delete_config_map(self, namespace: str, name: str, owner: Owner) -> bool:
        return self._delete_owned(
            "ConfigMap",
            lambda: self.core.read_namespaced_config_map(name, namespace).to_dict(),
            lambda uid: self.core.delete_namespaced_config_map(name, namespace, body=_preconditions(uid)),
            namespace,
            name,
            owner,
        )

    def apply_secret(self, body: dict[str, Any], owner: Owner) -> None:
        """Create, or update the data of, ``owner``'s Secret (a credential only it may read)."""
        ns, name = body["metadata"]["namespace"], body["metadata"]["name"]
        if not self._create_owned(
            "Secret",
            lambda: self.core.create_namespaced_secret(ns, body),
            lambda: self.core.read_namespaced_secret(name, ns).to_dict(),
            body,
            owner,
        ):
            self.core.patch_namespaced_secret(name, ns, {"stringData": body["stringData"]})

    def delete_secret(self, namespace: str, name: str, owner: Owner) -> bool:
        return self._delete_owned(
            "Secret",
            lambda: self.core.read_namespaced_secret(name, namespace).to_dict(),
            lambda uid: self.core.delete_namespaced_secret(name, namespace, body=_preconditions(uid)),
            namespace,
            name,
            owner,
        )

    def secret_versions(self, namespace: str, names: Iterable[str]) -> dict[str, str | None]:
        """Each of ``names``' ``resourceVersion`` in ``namespace`` (None: it does not exist): a
        new one means its values changed. Each is read as metadata only
        (``PartialObjectMetadata``): a Secret's values never reach the operator."""
        versions: dict[str, str | None] = {}
        for name in names:
            try:
                meta = self.core.api_client.call_api(
                    f"/api/v1/namespaces/{namespace}/secrets/{name}",
                    "GET",
                    header_params={"Accept": METADATA_ONLY},
                    auth_settings=["BearerToken"],
                    response_types_map={200: "object"},
                    _return_http_data_only=True,
                )
            except ApiException as exc:
                if exc.status == 403:
                    raise SecretsForbiddenError(
                        f"the operator may not read Secrets in namespace {namespace} (403), so it cannot tell whether "
                        f"{name}, which spec.kafkaSecurity names, exists: grant it the chart's <release>-coordinator-"
                        "secrets role there (rbac.coordinatorSecrets.namespaces), as for Backfills"
                    ) from None
                if exc.status != 404:
                    raise
                versions[name] = None
                continue
            versions[name] = str((meta.get("metadata") or {}).get("resourceVersion") or "")
        return versions

    def secret_values(self, namespace: str, name: str) -> dict[str, str]:
        """A Secret's data, decoded: for the operator's own Kafka client (a Rewind's retention
        check), held in memory for that call only. A missing Secret or a 403 is said naming it."""
        try:
            secret = self.core.read_namespaced_secret(name, namespace)
        except ApiException as exc:
            if exc.status == 403:
                raise SecretsForbiddenError(
                    f"the operator may not read Secret {name} in namespace {namespace} (403), which spec.kafkaSecurity "
                    "names, to ask its brokers for offsets: grant it the chart's <release>-coordinator-secrets role "
                    "there (rbac.coordinatorSecrets.namespaces)"
                ) from None
            if exc.status == 404:
                said = f"Secret {name}, which spec.kafkaSecurity names, does not exist in {namespace}"
                raise KappaError(said) from None
            raise
        return {k: base64.b64decode(v).decode() for k, v in (secret.data or {}).items()}

    def _app_reader(self, namespace: str, name: str) -> Callable[[], dict[str, Any]]:
        return lambda: self.custom.get_namespaced_custom_object(SPARK_GROUP, SPARK_VERSION, namespace, APPS, name)

    @staticmethod
    def _read(read: Callable[[], dict[str, Any]]) -> dict[str, Any] | None:
        try:
            return read()
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def _create_owned(
        self,
        kind: str,
        create: Callable[[], Any],
        read: Callable[[], dict[str, Any]],
        body: dict[str, Any],
        owner: Owner,
    ) -> bool:
        """Create ``body``; True if created. A 409 is "already mine" only when the object there
        is ``owner``'s (a re-run after a restart); anyone else's is a ``ForeignObjectError``."""
        try:
            create()
            return True
        except ApiException as exc:
            if exc.status != 409:
                raise
        existing = self._read(read)
        if existing is None:  # deleted in between: create again (a conflict now is real)
            create()
            return True
        if not owner.owns(_camel_meta(existing)):
            ns, name = body["metadata"]["namespace"], body["metadata"]["name"]
            raise ForeignObjectError(kind, ns, name, _camel_meta(existing), owner)
        return False

    def _delete_owned(
        self,
        kind: str,
        read: Callable[[], dict[str, Any]],
        delete: Callable[[str | None], Any],
        namespace: str,
        name: str,
        owner: Owner,
        strict: bool = False,
    ) -> bool:
        """``strict``: ``read`` is a copy that may be behind; a 409 (its uid is no longer the
        object's) raises ``_Stale`` for the caller to read the server instead."""
        existing = self._read(read)
        if existing is None:
            return False
        meta = _camel_meta(existing)
        if not owner.owns(meta):
            log.warning(
                "%s/%s: not deleting %s %s: it belongs to %s",
                owner.namespace,
                owner.name,
                kind,
                name,
                describe_owners(meta),
            )
            return False
        try:  # the uid precondition: never a newer namesake created since the read
            delete(meta["metadata"].get("uid"))
        except ApiException as exc:
            if exc.status == 409 and strict:
                raise _Stale from exc
            if exc.status not in (404, 409):
                raise
            return False
        return True

    # --- our resources -------------------------------------------------------------------

    def get_resource(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self._read(lambda: self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, plural, name))

    def patch_status(self, plural: str, namespace: str, name: str, status: dict[str, Any]) -> None:
        """The one way the operator writes its resources' status: a merge patch of the status
        subresource (a write to the main resource would drop status on a real API server). A
        merge patch carries no resourceVersion, so it never conflicts; None removes a field."""
        try:
            self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, plural, name, {"status": status}
            )
        except ApiException as exc:
            if exc.status != 404:  # deleted meanwhile: nothing left to describe
                raise

    # --- our resources, written by a Rewind ----------------------------------------------

    def list_resources(self, plural: str, namespace: str) -> list[dict[str, Any]]:
        listed = self.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, plural)
        return list(listed.get("items", []))

    def list_watched(self, plural: str, namespaces: tuple[str, ...]) -> list[dict[str, Any]]:
        """Every ``plural`` object the operator watches: in ``namespaces``, or (none given) in
        the whole cluster (what its ClusterRole allows)."""
        if not namespaces:
            return list(self.custom.list_cluster_custom_object(GROUP, VERSION, plural).get("items", []))
        return [item for ns in namespaces for item in self.list_resources(plural, ns)]

    def shared_config_map_data(self, namespace: str, name: str) -> dict[str, str] | None:
        """The data of a ConfigMap the operator keeps for a namespace (no owner: it outlives
        the objects whose results it holds)."""
        cm = self._read(lambda: self.core.read_namespaced_config_map(name, namespace).to_dict())
        return None if cm is None else dict(cm.get("data") or {})

    def merge_shared_config_map(self, namespace: str, name: str, data: dict[str, str | None]) -> None:
        """Create it, or merge ``data`` into it (a None value removes that key)."""
        body = {"metadata": {"name": name, "namespace": namespace, "labels": dict(MANAGED_BY)}, "data": data}
        if self._read(lambda: self.core.read_namespaced_config_map(name, namespace).to_dict()) is None:
            try:
                self.core.create_namespaced_config_map(
                    namespace, {**body, "data": {k: v for k, v in data.items() if v is not None}}
                )
                return
            except ApiException as exc:
                if exc.status != 409:  # created meanwhile: merge into it
                    raise
        self.core.patch_namespaced_config_map(name, namespace, {"data": data})

    def create_resource(self, plural: str, namespace: str, body: dict[str, Any], owner: Owner) -> None:
        """Create ``owner``'s child resource (a Rewind's downstream Rewinds); a namesake of
        someone else's is a ``ForeignObjectError``."""
        name = body["metadata"]["name"]
        self._create_owned(
            body["kind"],
            lambda: self.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, plural, body),
            lambda: self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, plural, name),
            body,
            owner,
        )

    # --- Events (kappa_operator.kube.events decides what to write) ----------------------------

    def create_event(self, namespace: str, body: dict[str, Any]) -> None:
        self.core.create_namespaced_event(namespace, body)

    def patch_event(self, namespace: str, name: str, patch: dict[str, Any]) -> bool:
        """Update an Event posted before (count, lastTimestamp, message); False when it is
        gone (Events expire, an hour by default), so the caller creates it again."""
        try:
            self.core.patch_namespaced_event(name, namespace, patch)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def annotate(self, plural: str, namespace: str, name: str, annotations: dict[str, str | None]) -> None:
        """Set (None: remove) annotations with a merge patch."""
        self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, plural, name, {"metadata": {"annotations": annotations}}
        )
