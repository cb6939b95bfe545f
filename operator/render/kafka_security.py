"""A Kafka source's or sink's Secrets as files in the driver and every executor (pure): one
read-only volume per Secret, mounted at ``/etc/kappa/kafka/<secret>``, and the JobConfig's
security block naming those files. Only names and paths go into what the operator writes.

One read of the operator's own needs the values: a Rewind's retention check asks the job's
brokers for their earliest offsets before anything is stopped (``observe.restore_points``). For
it, ``operator_settings`` makes librdkafka's settings from the Secrets' values, read into
memory for that call only and never written anywhere."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from kappa_operator.models.kafka_security import KafkaSecuritySpec
from kappa_operator.models.sources import SchemaRegistrySpec
from spark_app.contract.errors import KappaError
from spark_app.contract.kafka_security import KafkaSecurity, SaslFiles, TlsFiles, client_config

MOUNT_ROOT = "/etc/kappa/kafka"
VOLUME_PREFIX = "kafka-"
VOLUME_NAME_MAX = 63


def mount_dir(secret: str) -> str:
    return f"{MOUNT_ROOT}/{secret}"


def volume_name(secret: str) -> str:
    """A DNS label for the Secret's volume: its name (dots become dashes), shortened with a
    digest when it would not fit, so two Secrets never share one."""
    name = VOLUME_PREFIX + secret.replace(".", "-")
    if len(name) <= VOLUME_NAME_MAX and secret == secret.replace(".", "-"):
        return name
    digest = hashlib.sha256(secret.encode()).hexdigest()[:8]
    return f"{name[: VOLUME_NAME_MAX - 9].rstrip('-')}-{digest}"


class NamesSecrets(Protocol):
    """A Kafka block or a schema registry: what names Secrets the pods mount."""

    @property
    def secrets(self) -> tuple[str, ...]: ...


def secret_volumes(specs: Iterable[NamesSecrets | None]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The pods' volumes and the containers' mounts for every Secret the blocks name, each once.
    ``optional: false``: a Secret that does not exist keeps the pod from starting, and the pod's
    events say which (``FailedMount``). Mode 0444: the files are root's, and Spark's containers
    run as another user (185) with no fsGroup; read-only for all in the pod, whose only user is
    the job (0440 was refused to the driver: tests/node)."""
    secrets = dict.fromkeys(name for spec in specs if spec is not None for name in spec.secrets)
    volumes = [
        {"name": volume_name(s), "secret": {"secretName": s, "defaultMode": 0o444, "optional": False}} for s in secrets
    ]
    mounts = [{"name": volume_name(s), "mountPath": mount_dir(s), "readOnly": True} for s in secrets]
    return volumes, mounts


def contract_security(spec: KafkaSecuritySpec | None) -> KafkaSecurity | None:
    """The JobConfig's block: the files where the pods find the Secrets' keys."""
    if spec is None:
        return None
    sasl = None
    if spec.sasl is not None:
        where = mount_dir(spec.sasl.secret_ref.name)
        sasl = SaslFiles(
            mechanism=spec.sasl.mechanism,
            username_file=f"{where}/{spec.sasl.username_key}",
            password_file=f"{where}/{spec.sasl.password_key}",
        )
    tls = None
    if spec.tls is not None:
        ca, client = spec.tls.ca, spec.tls.client
        tls = TlsFiles(
            ca_file=None if ca is None else f"{mount_dir(ca.secret_ref.name)}/{ca.key}",
            cert_file=None if client is None else f"{mount_dir(client.secret_ref.name)}/{client.cert_key}",
            key_file=None if client is None else f"{mount_dir(client.secret_ref.name)}/{client.key_key}",
        )
    return KafkaSecurity(protocol=spec.protocol, sasl=sasl, tls=tls)


def registry_files(spec: SchemaRegistrySpec) -> dict[str, str]:
    """The JobConfig's registry files: where the pods find its credentials and CA (nothing
    without them, so those configs and their hashes are what they were)."""
    out = {}
    if spec.basic_auth is not None:
        where = mount_dir(spec.basic_auth.secret_ref.name)
        out["usernameFile"] = f"{where}/{spec.basic_auth.username_key}"
        out["passwordFile"] = f"{where}/{spec.basic_auth.password_key}"
    if spec.ca is not None:
        out["caFile"] = f"{mount_dir(spec.ca.secret_ref.name)}/{spec.ca.key}"
    return out


def operator_settings(spec: KafkaSecuritySpec | None, values: Callable[[str], Mapping[str, str]]) -> dict[str, str]:
    """librdkafka's settings for the operator's own client: the block's files, each replaced by
    the value of the Secret key it is mounted from (``values``: a Secret's data, decoded)."""

    def read(path: str) -> str:
        secret, key = path.removeprefix(MOUNT_ROOT + "/").split("/", 1)
        data = values(secret)
        if key not in data:
            raise KappaError(
                f"Secret {secret} has no key {key!r}, which spec.kafkaSecurity names: add it to the Secret, or name "
                f"the key it has ({', '.join(sorted(data)) or 'it has none'})"
            )
        return data[key]

    return client_config(contract_security(spec), read, inline=True)
