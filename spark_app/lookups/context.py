"""The running job's Iceberg catalogs, for pipeline code that reads a table beside its sources.

A pipeline is called as ``pipeline(sources, **pipelineArgs)``: it gets no config. A lookup of a
dimension table (``spark_app.lookups.history``) needs the catalog that holds the table, and the
job already declares it under ``catalogs``; the runtime makes those visible here for the
duration of the pipeline call, so a manifest names a catalog once and a pipeline refers to it by
name. Outside a run (a unit test calling a pipeline directly) there are none, and the helpers
take the properties as an argument instead.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar

from spark_app.contract.errors import ConfigError

_CATALOGS: ContextVar[Mapping[str, Mapping[str, str]] | None] = ContextVar("kappa_job_catalogs", default=None)


@contextmanager
def job_catalogs(catalogs: Mapping[str, Mapping[str, str]]) -> Iterator[None]:
    """While the pipeline is built: the job's catalogs, ``{name: pyiceberg properties}``."""
    token = _CATALOGS.set(dict(catalogs))
    try:
        yield
    finally:
        _CATALOGS.reset(token)


def catalog_properties(name: str, given: Mapping[str, str] | None = None) -> dict[str, str]:
    """``given`` when the caller passed properties, else the running job's catalog ``name``."""
    if given is not None:
        return dict(given)
    catalogs = _CATALOGS.get()
    if catalogs is None:
        raise ConfigError(
            f"catalog {name!r}: no job is running, so its catalogs are unknown; call the lookup from a pipeline "
            "run by kappa, or pass catalog_properties={...} (pyiceberg properties)"
        )
    if name not in catalogs:
        raise ConfigError(
            f"catalog {name!r} is not among the job's catalogs ({', '.join(sorted(catalogs)) or 'none'}); "
            "add it under spec.catalogs of the StreamingJob"
        )
    return dict(catalogs[name])
