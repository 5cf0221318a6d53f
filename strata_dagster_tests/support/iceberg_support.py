"""Reading a warehouse's Iceberg tables as engines other than strata do, to compare with its views."""

from __future__ import annotations

import datetime as dt
import decimal
from collections import Counter
from pathlib import Path

import duckdb
import polars as pl
from pyiceberg.catalog import Catalog, load_catalog

from strata_dagster.backends.iceberg.catalog import CATALOG_NAME, setting_for


def catalog_of(warehouse: Path) -> Catalog:
    setting = setting_for(warehouse, "sqlite")
    assert setting is not None
    return load_catalog(CATALOG_NAME, type=setting.kind, uri=setting.uri, warehouse=setting.location)


def _normal(value: object) -> object:
    """One Python value per SQL value, whichever reader gave it."""
    if isinstance(value, decimal.Decimal):
        return value.normalize()
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    if isinstance(value, (list, tuple)):
        return tuple(_normal(item) for item in value)
    if isinstance(value, dict):
        return tuple(sorted((key, _normal(item)) for key, item in value.items()))
    return value


def multiset(columns: list[str], rows: list[tuple]) -> Counter:
    order = sorted(range(len(columns)), key=lambda index: columns[index])
    return Counter(tuple((columns[index], _normal(row[index])) for index in order) for row in rows)


def live_views(warehouse: Path, branch: str = "main") -> dict[str, Counter]:
    """Every live view of the branch, as a multiset of rows."""
    con = duckdb.connect(str(warehouse), read_only=True)
    try:
        names = [
            row[0]
            for row in con.execute(
                "SELECT view_name FROM duckdb_views() WHERE schema_name = ? AND view_name LIKE 'v\\_%' ESCAPE '\\'",
                [branch],
            ).fetchall()
        ]
        found = {}
        for name in names:
            cursor = con.execute(f'SELECT * FROM "{branch}"."{name}"')
            columns = [item[0] for item in cursor.description]
            found[name.removeprefix("v_")] = multiset(columns, cursor.fetchall())
        return found
    finally:
        con.close()


def _arrow_tables(catalog: Catalog, branch: str) -> dict:
    return {
        identifier[-1]: catalog.load_table(identifier).scan().to_arrow()
        for identifier in catalog.list_tables(branch)
    }


def through_pyiceberg(tables: dict) -> dict[str, Counter]:
    return {
        model: multiset(frame.column_names, [tuple(row.values()) for row in frame.to_pylist()])
        for model, frame in tables.items()
    }


def at_snapshots(catalog: Catalog, snapshots: dict[str, int]) -> dict[str, Counter]:
    """Each table (`namespace.model`) as of the given snapshot: Iceberg's time travel."""
    found = {}
    for table, snapshot_id in snapshots.items():
        frame = catalog.load_table(table).scan(snapshot_id=snapshot_id).to_arrow()
        found[table.split(".")[-1]] = multiset(
            frame.column_names, [tuple(row.values()) for row in frame.to_pylist()]
        )
    return found


def through_polars(catalog: Catalog, branch: str = "main") -> dict[str, Counter]:
    found = {}
    for identifier in catalog.list_tables(branch):
        frame = pl.scan_iceberg(catalog.load_table(identifier)).collect()
        found[identifier[-1]] = multiset(frame.columns, frame.rows())
    return found


def through_duckdb(tables: dict) -> dict[str, Counter]:
    """DuckDB reading pyiceberg's Arrow output (a plain in-memory DuckDB, no strata)."""
    found = {}
    con = duckdb.connect()
    for model, arrow in tables.items():
        con.register("t", arrow)
        cursor = con.execute("SELECT * FROM t")
        found[model] = multiset([item[0] for item in cursor.description], cursor.fetchall())
        con.unregister("t")
    con.close()
    return found


def assert_readers_agree(
    warehouse: Path, branch: str = "main", *, every_reader: bool = True
) -> dict[str, Counter]:
    """Every live view equals its table as pyiceberg's scan reads it, and (`every_reader`) as
    polars' scan_iceberg and DuckDB over pyiceberg's Arrow output read it."""
    views = live_views(warehouse, branch)
    catalog = catalog_of(warehouse)
    arrow = _arrow_tables(catalog, branch)
    readers = {"pyiceberg": lambda: through_pyiceberg(arrow)}
    if every_reader:
        readers["polars"] = lambda: through_polars(catalog, branch)
        readers["duckdb"] = lambda: through_duckdb(arrow)
    for name, read in readers.items():
        tables = read()
        assert sorted(tables) == sorted(views), name
        for model, rows in views.items():
            assert tables[model] == rows, (name, model)
    return views
