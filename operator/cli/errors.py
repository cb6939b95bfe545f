"""What a failed `kappa` command prints: the cause and the fix in a line or two, never a
traceback (``-v`` prints it).

A newcomer's first `kappa plan examples/rmi-backfill.yaml` used to end in 106 lines of
requests and urllib3 frames: the example names the cluster's REST catalog, which this machine
cannot reach. Each known failure is named by what the user can change (a flag, a field, a
command to run); anything else still gets one line (its type and message) and the hint to
rerun with ``-v``. Pure: exception in, lines out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pydantic import ValidationError
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

from spark_app.contract.errors import KappaError

VERBOSE_HINT = "run again with -v for the trace"
SPARK_EXTRA = ("pyspark", "pandas", "matplotlib", "sqlalchemy", "pyiceberg_core")
"""What the `spark` extra adds to the control plane's dependencies."""
LOCAL_HINT = (
    "to try the examples on this machine, map their catalogs to local ones: --local DIR "
    "(and `kappa example-data DIR` writes the example tables there)"
)


@dataclass(frozen=True)
class Explained:
    cause: str
    fix: str | None

    def lines(self) -> list[str]:
        return [f"error: {self.cause}", *([self.fix] if self.fix else [])]


def _first_line(text: object) -> str:
    return str(text).strip().splitlines()[0] if str(text).strip() else ""


def _unreachable(exc: BaseException) -> str | None:
    """The address of a service that could not be reached (a catalog, an object store)."""
    try:
        import requests
    except ImportError:  # pragma: no cover - pyiceberg depends on it
        return None
    if isinstance(exc, requests.exceptions.ConnectionError):
        request = getattr(exc, "request", None)
        url = getattr(request, "url", None) or ""
        return url.split("?", 1)[0] or "a catalog"
    return None


_STORE_UNREACHABLE = re.compile(
    r"(?:AWS Error NETWORK_CONNECTION|Could not resolve host|Could not connect|Connection refused|"
    r"Name or service not known|UnknownHostException)",
    re.I,
)
_BUCKET = re.compile(r"in bucket '([^']+)'")
_HOST = re.compile(r"(?:resolve host|connect to)[: ]+([\w.-]+(?::\d+)?)", re.I)
STORE_HINT = (
    "check the object store's endpoint and credentials (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...); "
    "to try the examples on this machine instead: --local DIR"
)


def _host(exc: BaseException) -> str:
    found = _HOST.search(str(exc))
    return f" at {found.group(1)}" if found else ""


def _store_unreachable(exc: BaseException) -> str | None:
    """The bucket (or "an object store") when an object store's client could not connect:
    pyarrow's S3 says it in an OSError's text, Hadoop's S3A in a Java exception's."""
    text = str(exc)
    if not isinstance(exc, OSError) and "S3" not in text and "s3a" not in text:
        return None
    if not _STORE_UNREACHABLE.search(text):
        return None
    bucket = _BUCKET.search(text)
    return f"bucket {bucket.group(1)!r}" if bucket else "an object store"


def explain(exc: BaseException) -> Explained:
    chain = [exc]
    while chain[-1].__cause__ is not None or chain[-1].__context__ is not None:
        nxt = chain[-1].__cause__ or chain[-1].__context__
        if nxt is None or nxt in chain:
            break
        chain.append(nxt)
    for e in chain:
        if (url := _unreachable(e)) is not None:
            return Explained(f"cannot reach {url} (a catalog the manifest names)", LOCAL_HINT)
        if (store := _store_unreachable(e)) is not None:
            return Explained(f"cannot reach {store}{_host(e)}", STORE_HINT)
    if isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] in SPARK_EXTRA:
        return Explained(
            f"this command runs Spark here, and {exc.name} is not installed (the operator's own set has no Spark)",
            "install the spark extra: pip install -e '.[spark]' (from a clone) or pip install 'kappa-operator[spark]'",
        )
    if isinstance(exc, NoSuchTableError | NoSuchNamespaceError):
        return Explained(
            f"{_first_line(exc)}",
            "create the tables first; for the examples: `kappa example-data DIR`, then pass --local DIR",
        )
    if isinstance(exc, FileNotFoundError):
        return Explained(f"no such file: {exc.filename or _first_line(exc)}", None)
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        return Explained(f"{where}: {first['msg']}{more}", None)
    if isinstance(exc, KappaError):  # ours: written to name the field and the fix already
        return Explained(str(exc).strip(), None)
    return Explained(f"{type(exc).__name__}: {_first_line(exc)}", VERBOSE_HINT)
