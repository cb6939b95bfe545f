"""Why a secured Kafka listener refused the job's client, in one line that names the source (or
sink), the listener and the fix (pure).

librdkafka reports the cause only through its error callback, as text (``list_topics`` raises a
bare "Broker transport failure"); the texts matched here are librdkafka 2.x's, verified against a
real broker (docs/design/kafka-security-research.md). TLS 1.3 tells a client its certificate was
refused only after the handshake, so those come as transport errors with the TLS alert's number."""

from __future__ import annotations

import re
from collections.abc import Iterable

#: (pattern in librdkafka's text, what it means, the fix): the first match wins.
CAUSES: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (
        re.compile(r"Unsupported SASL mechanism.*?supported mechanisms: (?P<offered>[\w,-]+)", re.I),
        "the listener does not offer this SASL mechanism (it offers {offered})",
        "set security.sasl.mechanism to one it offers",
    ),
    (
        re.compile(r"SASL authentication error|invalid credentials|Invalid username or password", re.I),
        "the listener refused the SASL username or password",
        "check the username and password keys of the Secret security.sasl names",
    ),
    (
        re.compile(r"broker certificate could not be verified|certificate verify failed", re.I),
        "the broker's certificate is not signed by the CA the job trusts",
        "name the CA that signed the broker's certificate in security.tls.ca",
    ),
    (
        re.compile(r"alert number 46|certificate unknown|certificate expired|alert number 45", re.I),
        "the listener refused the client certificate (expired, or not valid for it)",
        "renew the certificate in the Secret security.tls.client names",
    ),
    (
        re.compile(r"alert number 42|bad certificate|alert number 116|certificate required", re.I),
        "the listener requires a client certificate signed by its CA, and got none or another",
        "name a client certificate the broker's CA signed in security.tls.client",
    ),
    (
        re.compile(r"SSL handshake failed|wrong version number|packet length too long", re.I),
        "the TLS handshake failed: the listener may not speak the protocol the job uses",
        "check security.protocol against the listener (SSL, SASL_SSL, PLAINTEXT)",
    ),
    (
        re.compile(r"Disconnected.*in state APIVERSION_QUERY|incorrect security\.protocol", re.I),
        "the listener closed the connection at the client's first request: it expects TLS or SASL, and the job "
        "connects with another security.protocol",
        "name a security block whose protocol is the listener's (SSL or SASL_SSL)",
    ),
)


def explain(texts: Iterable[str], where: str, listener: str) -> str | None:
    """One line for the first cause (in ``CAUSES``' order, the most telling first) found in any of
    librdkafka's error texts, or None (no known cause: the caller says what it has). ``where``:
    e.g. ``sources.plays``."""
    seen = list(texts)
    for pattern, meaning, fix in CAUSES:
        for text in seen:
            match = pattern.search(text)
            if match is not None:
                return f"{where}: {listener}: {meaning.format(**match.groupdict())}; {fix}"
    return None
