"""How the job's Kafka clients authenticate and encrypt: SASL (PLAIN, SCRAM) and TLS (a CA, a
client certificate), from files: Kubernetes Secrets mounted in the driver and every executor, or
local files under ``kappa run``.

The JobConfig carries only the files' paths. Spark's Kafka options built here carry references
that Kafka's own client resolves when it starts (``${dir:<directory>:<file>}``, Kafka's
``DirectoryConfigProvider``, which reads a mounted Secret's key as a file), so no secret value is
ever in Spark's conf, its plan, its event log or its UI. The driver's own calls (confluent-kafka:
topics, offsets, the pre-flight) read the SASL credentials into memory and nowhere else."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import model_validator

from spark_app.contract.base import KappaModel

Protocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
Mechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]

LOGIN_MODULES: dict[str, str] = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
DIRECTORY_PROVIDER = "org.apache.kafka.common.config.provider.DirectoryConfigProvider"
PROVIDER = "kappadir"
"""The config provider's name in the client's config (``config.providers``)."""

SECURITY_OPTIONS = ("kafka.security.protocol", "kafka.sasl.", "kafka.ssl.", "kafka.config.providers")
"""Options the ``security`` block sets: given in ``options`` too, they would fight it."""


class SaslFiles(KappaModel):
    """SASL credentials as files, one value each, exactly (a trailing newline is part of it)."""

    mechanism: Mechanism
    username_file: str
    password_file: str


class TlsFiles(KappaModel):
    """PEM files: the CAs that sign the broker's certificate, and (mTLS) the client's own."""

    ca_file: str | None = None
    """None: the JVM's and the system's trusted CAs."""
    cert_file: str | None = None
    """The client certificate (with its chain), for a listener that requires one."""
    key_file: str | None = None
    """Its private key, PKCS#8, unencrypted (as a Kubernetes TLS Secret holds it)."""

    @model_validator(mode="after")
    def _pair(self) -> TlsFiles:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("a client certificate needs both certFile and keyFile")
        return self


class KafkaSecurity(KappaModel):
    """What a Kafka client of the job needs to reach a secured listener."""

    protocol: Protocol = "PLAINTEXT"
    sasl: SaslFiles | None = None
    tls: TlsFiles | None = None

    @model_validator(mode="after")
    def _consistent(self) -> KafkaSecurity:
        uses_sasl = self.protocol.startswith("SASL_")
        if uses_sasl != (self.sasl is not None):
            need = "needs sasl" if uses_sasl else "takes no sasl (use SASL_SSL or SASL_PLAINTEXT)"
            raise ValueError(f"protocol {self.protocol} {need}")
        if self.tls is not None and not self.protocol.endswith("SSL"):
            raise ValueError(f"protocol {self.protocol} does not use TLS: tls needs SSL or SASL_SSL")
        return self

    @property
    def client_certificate(self) -> bool:
        return self.tls is not None and self.tls.cert_file is not None


def _ref(path: str) -> str:
    """``${kappadir:<directory>:<file>}``: the file's content, read by the Kafka client."""
    p = Path(path)
    return "${" + f"{PROVIDER}:{p.parent}:{p.name}" + "}"


def spark_options(security: KafkaSecurity | None) -> dict[str, str]:
    """Spark's Kafka source and sink options (``kafka.``-prefixed) for ``security``: only
    paths and references, never a value read from a file."""
    if security is None or security.protocol == "PLAINTEXT":
        return {}
    options = {"kafka.security.protocol": security.protocol}
    refs = False
    if security.sasl is not None:
        sasl = security.sasl
        options["kafka.sasl.mechanism"] = sasl.mechanism
        options["kafka.sasl.jaas.config"] = (
            f'{LOGIN_MODULES[sasl.mechanism]} required username="{_ref(sasl.username_file)}" '
            f'password="{_ref(sasl.password_file)}";'
        )
        refs = True
    tls = security.tls
    if tls is not None and tls.ca_file is not None:
        options["kafka.ssl.truststore.type"] = "PEM"
        options["kafka.ssl.truststore.location"] = tls.ca_file
    if tls is not None and tls.cert_file is not None and tls.key_file is not None:
        options["kafka.ssl.keystore.type"] = "PEM"
        options["kafka.ssl.keystore.certificate.chain"] = _ref(tls.cert_file)
        options["kafka.ssl.keystore.key"] = _ref(tls.key_file)
        refs = True
    if refs:
        options["kafka.config.providers"] = PROVIDER
        options[f"kafka.config.providers.{PROVIDER}.class"] = DIRECTORY_PROVIDER
    return options


def client_config(
    security: KafkaSecurity | None, read: Callable[[str], str] | None = None, inline: bool = False
) -> dict[str, str]:
    """librdkafka's settings (confluent-kafka) for the driver's own calls. The SASL username and
    password are read from their files (``read``, for tests) into this dict only. ``inline``:
    the PEMs too, as values (``ssl.*.pem``), for a caller without the files: the operator,
    whose ``read`` gives a Secret's value it read into memory."""
    if security is None or security.protocol == "PLAINTEXT":
        return {}
    read = read or (lambda path: Path(path).read_text())
    config = {"security.protocol": security.protocol.lower()}
    if security.sasl is not None:
        config["sasl.mechanisms"] = security.sasl.mechanism
        config["sasl.username"] = read(security.sasl.username_file)
        config["sasl.password"] = read(security.sasl.password_file)
    tls = security.tls
    files = {} if tls is None else {"ca": tls.ca_file, "certificate": tls.cert_file, "key": tls.key_file}
    for what, path in files.items():
        if path is not None:
            config.update({f"ssl.{what}.pem": read(path)} if inline else {f"ssl.{what}.location": path})
    return config


def clashing_options(options: dict[str, str]) -> list[str]:
    """The keys of a source's or sink's ``options`` that its ``security`` block sets."""
    return sorted(k for k in options if k.startswith(SECURITY_OPTIONS))


def jaas_unsafe(value: str) -> str | None:
    """Why a SASL username or password cannot pass through Kafka's JAAS config (which quotes it
    with ``"`` and has no escape for it or for a backslash), or None."""
    if '"' in value or "\\" in value:
        return "contains \" or \\, which Kafka's JAAS config cannot quote"
    if value.endswith("\n"):
        return "ends with a newline, which Kafka's client would send as part of it (create the Secret from a literal)"
    return None
