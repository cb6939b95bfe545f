"""The operator's Kubernetes client (issue 62) under the API server's priority and fairness: a request
refused with 429 is sent again after the server's Retry-After, a create included (a 429 was never
handled); another error is not repeated. A real client against a real HTTP server on loopback."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from kubernetes.client.exceptions import ApiException

from kappa_operator.kube import api as kube_api
from kappa_operator.kube.api import Cluster, NotLeadingError, api_client, observed
from kappa_operator.reconcile.phases import app_state


def send_json(handler: BaseHTTPRequestHandler, status: int, out: object, headers: dict[str, str]) -> None:
    data = json.dumps(out).encode()
    handler.send_response(status)
    for name, value in {**headers, "Content-Type": "application/json", "Content-Length": str(len(data))}.items():
        handler.send_header(name, value)
    handler.end_headers()
    handler.wfile.write(data)


class Refusing(BaseHTTPRequestHandler):
    """Answers 429 (Retry-After: 1, as the API server says) to the first ``refusals`` requests, then ``then``."""

    refusals = 0
    then = 201
    seen: list[str] = []

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        type(self).seen.append(f"{self.command} {self.path}")
        if type(self).refusals > 0:
            type(self).refusals -= 1
            status, out = 429, {"kind": "Status", "code": 429, "reason": "TooManyRequests"}
        else:
            status, out = type(self).then, body
        send_json(self, status, out, {"Retry-After": "1"} if status == 429 else {})

    do_POST = do_PATCH = do_GET = _answer

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    Refusing.seen = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


CONFIG_MAP = {"metadata": {"name": "a", "namespace": "ns"}, "data": {"k": "v"}}


def test_a_create_refused_with_429_is_sent_again_until_it_is_handled(server: str) -> None:
    Refusing.refusals, Refusing.then = 3, 201
    Cluster(api_client(server)).core.create_namespaced_config_map("ns", CONFIG_MAP)
    assert Refusing.seen == ["POST /api/v1/namespaces/ns/configmaps"] * 4


def test_a_server_that_keeps_refusing_is_an_error_the_handler_sees(server: str) -> None:
    Refusing.refusals = 100
    with pytest.raises(ApiException) as refused:
        Cluster(api_client(server)).core.create_namespaced_config_map("ns", CONFIG_MAP)
    assert refused.value.status == 429
    assert len(Refusing.seen) == 11, "ten more after the first"


def test_other_errors_are_not_repeated(server: str) -> None:
    Refusing.refusals, Refusing.then = 0, 500
    with pytest.raises(ApiException) as failed:
        Cluster(api_client(server)).core.create_namespaced_config_map("ns", CONFIG_MAP)
    assert failed.value.status == 500 and len(Refusing.seen) == 1


def test_the_requests_name_the_replica_that_sent_them(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAME", "kappa-kappa-operator-5f7c-x2")
    assert api_client(server).user_agent == "kappa-operator/kappa-kappa-operator-5f7c-x2"


def test_a_fenced_client_sends_no_write_once_its_process_may_not_lead(
    server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 62: a leader frozen past its renew deadline wakes with its writes refused at the
    API edge (``kube.api.fence``), before the server sees them; reads still go, and the
    election's own client (the Lease) is not fenced."""
    monkeypatch.setattr(kube_api, "fence", lambda: "replica-a has not renewed the Lease for 21 s")
    Refusing.refusals, Refusing.then = 0, 201
    fenced = Cluster(api_client(server))
    refused = r"POST http://127\.0\.0\.1:\d+/api/v1/namespaces/ns/configmaps not sent: replica-a"
    with pytest.raises(NotLeadingError, match=refused):
        fenced.core.create_namespaced_config_map("ns", CONFIG_MAP)
    assert Refusing.seen == []
    Refusing.then = 200
    fenced.core.read_namespaced_config_map("a", "ns")
    Cluster(api_client(server, fenced=False)).core.create_namespaced_config_map("ns", CONFIG_MAP)
    assert Refusing.seen == ["GET /api/v1/namespaces/ns/configmaps/a", "POST /api/v1/namespaces/ns/configmaps"]


def test_the_watchs_copy_of_an_application_keeps_what_decisions_read_and_not_its_spec() -> None:
    """Issue 62: the applications' index holds one copy per object; decisions read an
    application's owner, annotations and state, never the spec the operator rendered."""
    app = {
        "apiVersion": "sparkoperator.k8s.io/v1beta2",
        "kind": "SparkApplication",
        "metadata": {
            "name": "rmi",
            "uid": "u",
            "ownerReferences": [{"kind": "StreamingJob", "uid": "o"}],
            "annotations": {"kappa.dev/config-hash": "h"},
            "managedFields": [{"manager": "kappa-operator", "fieldsV1": {"f:spec": {}}}],
        },
        "spec": {"driver": {"cores": 1}, "sparkConf": {"a": "b"}},
        "status": {"applicationState": {"state": "RUNNING"}},
    }
    kept = observed(app)
    assert "spec" not in kept and "managedFields" not in kept["metadata"]
    assert kept["metadata"]["ownerReferences"] == app["metadata"]["ownerReferences"]
    assert app_state(kept) == "RUNNING" and kept["metadata"]["annotations"] == {"kappa.dev/config-hash": "h"}
    assert "spec" in app and "managedFields" in app["metadata"], "the event's own body is left as it is"


class Applications(BaseHTTPRequestHandler):
    """One SparkApplication ``a`` of uid ``uid``: GET returns it, DELETE honours the uid precondition (409)."""

    uid = "u2"
    seen: list[str] = []

    def _app(self) -> dict[str, object]:
        owner = {"kind": "StreamingJob", "name": "j", "uid": "o", "controller": True}
        return {"metadata": {"name": "a", "namespace": "ns", "uid": type(self).uid, "ownerReferences": [owner]}}

    def do_GET(self) -> None:
        type(self).seen.append("GET")
        send_json(self, 200, self._app(), {})

    def do_DELETE(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        wanted = (body.get("preconditions") or {}).get("uid")
        type(self).seen.append(f"DELETE {wanted}")
        if wanted not in (None, type(self).uid):
            send_json(self, 409, {"kind": "Status", "code": 409, "reason": "Conflict"}, {})
        else:
            send_json(self, 200, {"kind": "Status", "status": "Success"}, {})

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_an_application_is_deleted_on_the_watchs_copy_and_a_stale_copy_reads_the_server() -> None:
    """Issue 62: no read before the delete when the watch holds the application (its uid is the
    precondition); a copy of an older namesake gets 409, and the server's own is read and deleted."""
    from kappa_operator.kube.packed import packed
    from kappa_operator.render.spark_application import Owner

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Applications)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        cluster = Cluster(api_client(f"http://127.0.0.1:{httpd.server_address[1]}", fenced=False))
        owner = Owner("StreamingJob", "j", "ns", "o")
        Applications.seen = []
        copy = {
            "metadata": {
                "name": "a",
                "namespace": "ns",
                "uid": "u2",
                "ownerReferences": [{"kind": "StreamingJob", "name": "j", "uid": "o", "controller": True}],
            }
        }
        cluster.applications = {("ns", "a"): [packed(copy)]}
        assert cluster.delete_app("ns", "a", owner) and Applications.seen == ["DELETE u2"]
        Applications.seen = []
        cluster.applications = {("ns", "a"): [packed({**copy, "metadata": {**copy["metadata"], "uid": "u1"}})]}
        assert cluster.delete_app("ns", "a", owner) and Applications.seen == ["DELETE u1", "GET", "DELETE u2"]
        Applications.seen = []
        cluster.applications = {}
        assert cluster.delete_app("ns", "a", owner) and Applications.seen == ["GET", "DELETE u2"], "no copy: read"
    finally:
        httpd.shutdown()
