"""What the Spark catalog holds: snapshot tables, live views and the SQL each view reads."""

from __future__ import annotations

import re

from sqlglot import exp

from strata_dagster.backends.spark.connection import SparkConnection, SparkError
from strata_dagster.sql.render import SNAPSHOT_SCHEMA

_VIEW_TEXT = re.compile(r"^View Original Text: (.*)$", re.MULTILINE)
_TYPE = re.compile(r"^Type: (\w+)$", re.MULTILINE)


def _identifier(name: str) -> str:
    return exp.to_identifier(name).sql(dialect="spark")


def _pattern(text: str) -> str:
    return exp.Literal.string(text).sql(dialect="spark")


def ensure_schema(con: SparkConnection, schema: str) -> None:
    if schema not in con.schemas:
        con.sql("CREATE DATABASE IF NOT EXISTS " + _identifier(schema))
        con.schemas.add(schema)


def relations(con: SparkConnection, schema: str, like: str = "*") -> dict[str, tuple[str, str | None]]:
    """Every table and view of `schema` (not the session's temporary views): name -> (type, the
    SQL a view was created with, else None). One catalog call for the whole schema (a schema that
    does not exist answers SCHEMA_NOT_FOUND: no call to ask first)."""
    try:
        rows = con.sql(f"SHOW TABLE EXTENDED IN {_identifier(schema)} LIKE {_pattern(like)}").fetchall()
    except SparkError as error:
        if error.is_missing_relation:
            return {}
        raise
    con.schemas.add(schema)  # it exists: ensure_schema need not ask again
    found: dict[str, tuple[str, str | None]] = {}
    for _namespace, name, is_temporary, information in rows:
        if is_temporary:
            continue
        kind = _TYPE.search(information or "")
        text = _VIEW_TEXT.search(information or "")
        found[str(name)] = (kind.group(1).upper() if kind else "MANAGED", text.group(1) if text else None)
    return found


def names(con: SparkConnection, schema: str, kind: str = "TABLES") -> set[str]:
    """The names of `schema`'s tables and views (`TABLES`) or of its views only (`VIEWS`), not the
    session's temporary views: one catalog call that reads no table's metadata (SHOW TABLE
    EXTENDED reads every table's, tens of ms per table)."""
    try:
        rows = con.sql(f"SHOW {kind} IN {_identifier(schema)}").fetchall()
    except SparkError as error:
        if error.is_missing_relation:
            return set()
        raise
    con.schemas.add(schema)
    return {str(name) for _namespace, name, is_temporary in rows if not is_temporary}


def snapshot_names(con: SparkConnection) -> set[str]:
    """Every snapshot: Parquet tables, and the views of `materialize: view` models (read once per
    connection, then kept up to date by the connection as it creates and drops them)."""
    if con.snapshots is None:
        con.snapshots = names(con, SNAPSHOT_SCHEMA)
    return con.snapshots


def view_texts(con: SparkConnection, schema: str) -> dict[str, str]:
    """Every view of a branch schema: view name -> the SQL it was last pointed with."""
    return {name: text for name, (kind, text) in relations(con, schema).items() if kind == "VIEW" and text}
