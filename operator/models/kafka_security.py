"""How a Kafka source or sink of a StreamingJob reaches a secured listener: SASL (PLAIN, SCRAM)
and TLS (a CA, a client certificate) from Kubernetes Secrets in the job's namespace. The operator
names the Secrets in the applications it renders (mounted as files in the driver and every
executor) and never reads their values."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from kappa_operator.models.common import CRModel

SECRET_NAME = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
KEY = r"^[-._a-zA-Z0-9]+$"
"""A Secret's key, as Kubernetes allows it (and a file name in its mount)."""
KEY_MAX = 63
"""Kubernetes allows 253; the keys credentials are kept under are short (`password`, `ca.crt`,
`user.key`), and the bound keeps a maximal spec within its annotations' budget."""


class SecretName(CRModel):
    name: str = Field(pattern=SECRET_NAME, max_length=253)


class SaslSpec(CRModel):
    """SASL credentials: a Secret with the username and the password, each exactly its value."""

    mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
    secret_ref: SecretName
    username_key: str = Field(default="username", pattern=KEY, max_length=KEY_MAX)
    password_key: str = Field(default="password", pattern=KEY, max_length=KEY_MAX)


class CaSpec(CRModel):
    """The CA (PEM) that signed the broker's certificate."""

    secret_ref: SecretName
    key: str = Field(default="ca.crt", pattern=KEY, max_length=KEY_MAX)


class ClientCertificateSpec(CRModel):
    """The client's certificate and key (PEM, the key unencrypted): a `kubernetes.io/tls` Secret."""

    secret_ref: SecretName
    cert_key: str = Field(default="tls.crt", pattern=KEY, max_length=KEY_MAX)
    key_key: str = Field(default="tls.key", pattern=KEY, max_length=KEY_MAX)


class TlsSpec(CRModel):
    ca: CaSpec | None = None
    """None: the CAs the Spark image trusts."""
    client: ClientCertificateSpec | None = None
    """For a listener that requires client certificates (mTLS)."""


class KafkaSecuritySpec(CRModel):
    """The listener's protocol and what it asks of the client."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "(self.protocol == 'SASL_SSL' || self.protocol == 'SASL_PLAINTEXT') == has(self.sasl)",
                    "message": "sasl is needed with protocol SASL_SSL or SASL_PLAINTEXT, and only then",
                },
                {
                    "rule": "!has(self.tls) || self.protocol == 'SSL' || self.protocol == 'SASL_SSL'",
                    "message": "tls needs protocol SSL or SASL_SSL",
                },
            ]
        }
    )
    protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl: SaslSpec | None = None
    tls: TlsSpec | None = None

    @model_validator(mode="after")
    def _consistent(self) -> KafkaSecuritySpec:
        if self.protocol.startswith("SASL_") != (self.sasl is not None):
            raise ValueError("sasl is needed with protocol SASL_SSL or SASL_PLAINTEXT, and only then")
        if self.tls is not None and not self.protocol.endswith("SSL"):
            raise ValueError("tls needs protocol SSL or SASL_SSL")
        return self

    @property
    def secrets(self) -> tuple[str, ...]:
        """The Secrets it names, each once, in a stable order."""
        names = [
            self.sasl.secret_ref.name if self.sasl else None,
            self.tls.ca.secret_ref.name if self.tls and self.tls.ca else None,
            self.tls.client.secret_ref.name if self.tls and self.tls.client else None,
        ]
        return tuple(dict.fromkeys(n for n in names if n is not None))
