"""Iceberg catalogs by name, cached per process (SQLite engines and REST sessions are not free)."""

from __future__ import annotations

import json
from functools import cache

from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.table import Table

from spark_app.errors import ConfigError


@cache
def _catalog(name: str, props_json: str) -> Catalog:
    return load_catalog(name, **json.loads(props_json))


def catalog_for(name: str, props: dict[str, str]) -> Catalog:
    return _catalog(name, json.dumps(props, sort_keys=True))


def load_table(catalog_name: str, props: dict[str, str], identifier: str) -> Table:
    try:
        return catalog_for(catalog_name, props).load_table(identifier)
    except Exception as exc:
        if type(exc).__name__ in ("NoSuchTableError", "NoSuchNamespaceError"):
            raise ConfigError(f"table {identifier} does not exist in catalog {catalog_name!r}") from None
        raise
