"""Iceberg catalogs by name, cached per process (SQLite engines and REST sessions are not free),
and a missing table explained: which catalog was asked, what it holds, what to change."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from functools import cache

from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.table import Table

from spark_app.contract.errors import ConfigError

_SECRET_WORDS = ("password", "secret", "token", "credential", "key")
_URL_PASSWORD = re.compile(r"(?<=://)([^:/@\s]+):[^@/\s]+@")
_SHOWN = 10
"""At most this many namespaces, tables or catalog names in a message."""


@cache
def _catalog(name: str, props_json: str) -> Catalog:
    return load_catalog(name, **json.loads(props_json))


def catalog_for(name: str, props: dict[str, str]) -> Catalog:
    return _catalog(name, json.dumps(props, sort_keys=True))


def load_table(catalog_name: str, props: dict[str, str], identifier: str) -> Table:
    catalog = catalog_for(catalog_name, props)
    try:
        return catalog.load_table(identifier)
    except Exception as exc:
        if type(exc).__name__ in ("NoSuchTableError", "NoSuchNamespaceError"):
            raise ConfigError(missing_table_message(catalog, identifier, props)) from None
        raise


def redacted(props: Mapping[str, object]) -> dict[str, str]:
    """Properties safe to print: values of secret-looking keys and passwords in URLs hidden."""
    return {
        k: "***" if any(w in k.lower() for w in _SECRET_WORDS) else _URL_PASSWORD.sub(r"\1:***@", str(v))
        for k, v in props.items()
    }


def _listed(items: list[str]) -> str:
    more = f" (+{len(items) - _SHOWN} more)" if len(items) > _SHOWN else ""
    return ", ".join(items[:_SHOWN]) + more


def _split(identifier: str) -> tuple[str, str]:
    namespace, _, name = identifier.rpartition(".")
    return namespace, name


def sql_catalog_names(catalog: Catalog, identifier: str) -> tuple[dict[str, int], list[str]] | None:
    """For a SQL catalog: tables per catalog name in its database, and the names under which
    ``identifier`` exists there. A SqlCatalog keys every row by its own name, so the same
    database opened under another name shows none of them. None for other catalogs."""
    try:
        from pyiceberg.catalog.sql import IcebergTables, SqlCatalog
        from sqlalchemy import func, select
        from sqlalchemy.orm import Session
    except ImportError:  # pyiceberg without the sql extra: no SqlCatalog can exist either
        return None
    if not isinstance(catalog, SqlCatalog):
        return None
    namespace, name = _split(identifier)
    with Session(catalog.engine) as session:
        counts = session.execute(
            select(IcebergTables.catalog_name, func.count()).group_by(IcebergTables.catalog_name)
        ).all()
        holding = session.execute(
            select(IcebergTables.catalog_name)
            .where(IcebergTables.table_namespace == namespace, IcebergTables.table_name == name)
            .distinct()
        ).scalars()
        return {str(c): int(n) for c, n in counts}, sorted(str(c) for c in holding)


def _contents(catalog: Catalog, identifier: str) -> str:
    """What the catalog holds, bounded: its namespaces, and the tables of the identifier's
    namespace (or of its first namespaces when that one does not exist)."""
    try:
        namespaces = sorted(".".join(ns) for ns in catalog.list_namespaces())
        if not namespaces:
            return f"catalog {catalog.name!r} has no namespace"
        wanted, _ = _split(identifier)
        tables: list[str] = []
        for ns in [wanted] if wanted in namespaces else namespaces:
            tables += sorted(".".join(t) for t in catalog.list_tables(ns))
            if len(tables) > _SHOWN:
                break
        where = f"in {wanted!r}" if wanted in namespaces else f"(there is no namespace {wanted!r})"
        return (
            f"catalog {catalog.name!r} has namespace(s) {_listed(namespaces)}; "
            f"tables {where}: {_listed(tables) or 'none'}"
        )
    except Exception as exc:  # listing is a courtesy: the message must still be raised
        return f"could not list catalog {catalog.name!r} ({type(exc).__name__}: {exc})"


def missing_table_message(catalog: Catalog, identifier: str, props: Mapping[str, object] | None = None) -> str:
    """``identifier`` is not in ``catalog``: which catalog was asked with which properties
    (redacted), what it does hold, and what to change. With a SQL catalog, names the catalog
    name(s) under which this database does hold the table (the usual cause: a renamed catalog)."""
    shown = redacted(catalog.properties if props is None else props)
    head = f"table {identifier} does not exist in catalog {catalog.name!r} (looked up with properties {shown})"
    try:
        names = sql_catalog_names(catalog, identifier)
    except Exception:  # the hint is a courtesy, as the listing
        names = None
    if names is not None:
        counts, holding = names
        others = {n: c for n, c in counts.items() if n != catalog.name}
        hint = (
            "with a SQL catalog the catalog's name is part of every table's key, so the name in "
            "`catalogs` must be the name the tables were created under: "
        )
        if holding:
            return (
                f"{head}. {_contents(catalog, identifier)}. This database holds {identifier} under catalog "
                f"name(s) {_listed([repr(n) for n in holding])}: {hint}rename catalogs.{catalog.name} to "
                f"{holding[0]!r} (and every source's or sink's `catalog` that refers to it)"
            )
        if others:
            found = _listed([f"{n!r} ({c} tables)" for n, c in sorted(others.items())])
            return (
                f"{head}. {_contents(catalog, identifier)}. This database has no {identifier} under any "
                f"catalog name, but holds tables under {found}: {hint}if the table you mean was created under "
                f"one of those, rename catalogs.{catalog.name} to it; else check the identifier (`namespace.table`)"
            )
    return (
        f"{head}. {_contents(catalog, identifier)}. Check the identifier (`namespace.table`) and that "
        f"catalogs.{catalog.name} points at the catalog that holds it (uri, warehouse, credentials)"
    )
