"""A schema registry's Confluent-compatible API, as the driver asks it (an edge: HTTP, nothing
else): the schemas registered under a subject, one by its id, and registering one.

Why the standard library and not confluent-kafka's client: the driver needs four GETs and a
POST, and the client's extra (httpx, attrs, authlib, cachetools) would go into every Spark image
for them. The answers are what Confluent's API documents, which Apicurio's ``ccompat`` API
and Karapace serve too.

Credentials (HTTP basic) and a private CA come as files, where the pods mount the Secrets
(``SchemaRegistryAccess``): read when a request is made, so a rotated Secret's new files are
what the next query start uses; never logged, never in an error.

A registry that does not answer is asked again (``ATTEMPTS``, backing off), then the run
fails with ``RegistryUnavailableError`` naming the URL and the fix; it is restartable: the
operator's backoff tries again later, so a registry down for minutes delays the job without
losing a record (the checkpoint did not move)."""

from __future__ import annotations

import base64
import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from spark_app.contract.base import KappaModel
from spark_app.contract.errors import ConfigError, KappaError

ATTEMPTS = 4
"""Tries of one request before the registry counts as down (1 + 2 + 4 s apart)."""
TIMEOUT_S = 10.0
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class RegistryUnavailableError(KappaError):
    """The registry did not answer (refused, timed out, a 5xx)."""

    restartable = True


class SchemaRegistryAccess(KappaModel):
    """How the driver reaches a registry (Confluent's API): its URL, and the files of its
    credentials and CA, if it asks for them."""

    url: str = Field(min_length=1, pattern=r"^https?://")
    """The API's base, e.g. ``http://registry:8080/apis/ccompat/v7`` (Apicurio's) or
    ``http://schema-registry:8081`` (Confluent's, Karapace's)."""
    username_file: str | None = None
    password_file: str | None = None
    """HTTP basic authentication: files holding exactly the username and the password."""
    ca_file: str | None = None
    """PEM of the CA that signed an https registry's certificate (None: the system's CAs)."""

    def headers(self) -> dict[str, str]:
        """The Authorization header, read from the files now (none without credentials)."""
        if self.username_file is None or self.password_file is None:
            return {}
        with open(self.username_file) as user, open(self.password_file) as password:
            pair = f"{user.read().strip()}:{password.read().strip()}"
        return {"Authorization": "Basic " + base64.b64encode(pair.encode()).decode()}

    def context(self) -> ssl.SSLContext | None:
        return None if self.ca_file is None else ssl.create_default_context(cafile=self.ca_file)


@dataclass(frozen=True)
class RegisteredSchema:
    """One version of a subject: the id a record's wire format names, and the Avro schema (JSON)."""

    subject: str
    version: int
    id: int
    schema: str


def subject_url(url: str, subject: str, *rest: str) -> str:
    return "/".join([url.rstrip("/"), "subjects", urllib.parse.quote(subject, safe=""), *rest])


def subject_schemas(access: SchemaRegistryAccess, subject: str, where: str) -> list[RegisteredSchema]:
    """Every version registered under ``subject``, oldest first (none: the subject has none yet)."""
    url = access.url
    versions = _request(access, subject_url(url, subject, "versions"), where, missing_ok=True)
    out = []
    for version in versions or []:
        got = _request(access, subject_url(url, subject, "versions", str(version)), where)
        out.append(RegisteredSchema(subject, int(got["version"]), int(got["id"]), str(got["schema"])))
    return out


def schema_by_id(access: SchemaRegistryAccess, schema_id: int, where: str) -> str | None:
    """The Avro schema (JSON) registered with ``schema_id``; None: the registry has no such id."""
    got = _request(access, f"{access.url.rstrip('/')}/schemas/ids/{schema_id}", where, missing_ok=True)
    return None if got is None else str(got["schema"])


def register(access: SchemaRegistryAccess, subject: str, schema: str, where: str) -> int:
    """Register ``schema`` under ``subject`` (the same schema again: its id, as registries do);
    a schema the subject's compatibility refuses is a ConfigError naming the subject."""
    body = json.dumps({"schema": schema, "schemaType": "AVRO"}).encode()
    got = _request(access, subject_url(access.url, subject, "versions"), where, body=body)
    return int(got["id"])


def _request(
    access: SchemaRegistryAccess, target: str, where: str, body: bytes | None = None, missing_ok: bool = False
) -> Any:
    url = access.url
    headers = {"Accept": CONTENT_TYPE, **({"Content-Type": CONTENT_TYPE} if body is not None else {})}
    try:
        headers |= access.headers()
        context = access.context()
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            f"{where}: the schema registry's credentials or CA cannot be read ({type(exc).__name__}: "
            f"{getattr(exc, 'strerror', None) or exc}); check the Secrets spec.schemaRegistries names and that "
            "they hold those keys"
        ) from None
    request = urllib.request.Request(target, data=body, headers=headers, method="POST" if body else "GET")
    last = ""
    for attempt in range(ATTEMPTS):
        if attempt:
            time.sleep(2 ** (attempt - 1))
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S, context=context) as answer:
                return json.loads(answer.read())
        except urllib.error.HTTPError as exc:
            said = _said(exc)
            if exc.code == 404 and missing_ok:
                return None
            if exc.code == 409:
                raise ConfigError(
                    f"{where}: the schema registry at {url} refused the schema as incompatible with the subject's "
                    f"earlier versions ({said}); change the schema compatibly (add fields with a default), or the "
                    "subject's compatibility setting"
                ) from None
            if exc.code in (401, 403):
                given = "the credentials given" if "Authorization" in headers else "no credentials"
                raise ConfigError(
                    f"{where}: the schema registry at {url} refused {given} ({exc.code} {said}); set or correct "
                    "the registry's basicAuth in spec.schemaRegistries (the Secret's username and password)"
                ) from None
            if exc.code < 500 and exc.code != 429:
                raise ConfigError(f"{where}: the schema registry at {url} answered {exc.code}: {said}") from None
            last = f"{exc.code} {said}"
        except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as exc:
            last = str(getattr(exc, "reason", exc))
    raise RegistryUnavailableError(
        f"{where}: the schema registry at {url} did not answer after {ATTEMPTS} tries ({last}); check "
        f"{where}.schemaRegistry.url and that the registry runs. The job tries again after its backoff; "
        "nothing was read past its checkpoint"
    )


def _said(exc: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(exc.read()).get("message") or exc.reason)
    except Exception:
        return str(exc.reason)
