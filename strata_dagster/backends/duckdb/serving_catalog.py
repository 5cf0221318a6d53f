"""What a serving catalog holds, and how the next one is planned from the previous one.

A catalog serves the warehouse's live views as the warehouse stores them: `<branch>.v_<model>`
with its stored SQL, run verbatim, over `strata_snapshots.<snapshot>` views, each with the
snapshot view's own stored SQL (`read_parquet` of its file). DuckDB binds a view's relations in
the view's own catalog, so readers who attach it under any name read the catalog's snapshot views.
What is not a file is served from an export in `data/`: a snapshot table (once), a view model's
rows (again when they changed: `SnapshotKeys`), and a live view edited to read anything but
snapshots (its rows at each history entry).

Each catalog's manifest records what it serves and from what (the stored SQL's digest of each view
and snapshot view), so the next catalog starts from a copy of the previous file and replaces only
what changed; a previous catalog without such a manifest (missing, or of an older format) makes the
next one be written whole.

A catalog names every file beside the warehouse (snapshot files, exports) by its path relative to
the warehouse's folder, which readers put on DuckDB's `file_search_path` (serving.reader_statement):
a project folder copied, moved or restored elsewhere is served its own files, with nothing rewritten.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
from sqlglot import exp

from strata_dagster.backends.duckdb.serving_names import CATALOG_FORMAT as CATALOG_FORMAT
from strata_dagster.backends.duckdb.snapshot_files import (
    file_of,
    problem_of,
    read_query,
    read_relation,
    stored_types,
    with_file,
    write_query,
)
from strata_dagster.backends.duckdb.view_reads import relations_read
from strata_dagster.backends.sql.figures import content_of
from strata_dagster.backends.sql.runner import describe
from strata_dagster.compile.relations import VIEW_PREFIX
from strata_dagster.sql.render import SNAPSHOT_SCHEMA, table

# Every DuckDB database has this schema and it cannot be dropped: a catalog whose `main` views are
# all gone keeps the empty schema.
DUCKDB_DEFAULT_SCHEMA = "main"


def digest_of(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:24]


@dataclass(frozen=True)
class ServedSnapshot:
    """A `strata_snapshots` view of the catalog."""

    key: str  # what it was written from: another key means another definition
    file: str | None = None  # the snapshot file it reads (a name in the snapshots folder)
    export: str | None = None  # or the export in data/ it reads


@dataclass(frozen=True)
class ServedView:
    """A live view of the catalog."""

    key: str  # the digest of the warehouse's stored SQL of the view
    reads: tuple[str, ...] = ()  # the snapshots it reads (served verbatim)
    export: str | None = None  # or: served as its rows, from this export in data/


@dataclass
class CatalogContents:
    views: dict[str, ServedView] = field(default_factory=dict)  # "schema.view"
    snapshots: dict[str, ServedSnapshot] = field(default_factory=dict)

    def manifest(self) -> dict[str, Any]:
        exports = {view.export for view in self.views.values()} | {
            snapshot.export for snapshot in self.snapshots.values()
        }
        return {
            "format": CATALOG_FORMAT,
            "files": sorted(name for name in exports if name is not None),
            "snapshot_files": sorted(s.file for s in self.snapshots.values() if s.file is not None),
            "views": {name: [view.key, list(view.reads), view.export] for name, view in self.views.items()},
            "snapshots": {
                name: [snapshot.key, snapshot.file, snapshot.export]
                for name, snapshot in self.snapshots.items()
            },
        }

    @classmethod
    def from_manifest(cls, listed: dict[str, Any]) -> CatalogContents | None:
        """None for a manifest of an older format (its catalog is not copied)."""
        if listed.get("format") != CATALOG_FORMAT:
            return None
        return cls(
            {
                name: ServedView(key, tuple(reads), export)
                for name, (key, reads, export) in listed["views"].items()
            },
            {
                name: ServedSnapshot(key, file, export)
                for name, (key, file, export) in listed["snapshots"].items()
            },
        )

    def schemas(self) -> set[str]:
        return {name.split(".", 1)[0] for name in self.views}


@dataclass(frozen=True)
class Kind:
    """What a snapshot is in the warehouse: 'table', 'view' (a `materialize: view` model's) or
    'file' (a view over its Parquet file); `sql` is a view's stored SQL."""

    kind: str
    sql: str = ""
    path: Path | None = None


@dataclass(frozen=True)
class WarehouseCatalog:
    """What the writer's database holds for serving, read in one query."""

    database: str  # the writer's default database and schema (restored after writing a catalog)
    default_schema: str
    live_views: list[tuple[str, str, str]]  # (branch schema, view, stored SQL), in a stable order
    kinds: dict[str, Kind]  # every snapshot


def read_warehouse(con: duckdb.DuckDBPyConnection) -> WarehouseCatalog:
    rows = con.execute(
        "SELECT 'view', schema_name, view_name, sql FROM duckdb_views() WHERE database_name = current_database() "
        "AND NOT internal AND (schema_name = ? OR starts_with(view_name, ?)) "
        "UNION ALL SELECT 'table', schema_name, table_name, NULL FROM duckdb_tables() "
        "WHERE database_name = current_database() AND schema_name = ? "
        "UNION ALL SELECT DISTINCT 'branch', branch, NULL, NULL FROM strata.publications "
        "UNION ALL SELECT 'default', current_database(), current_schema(), NULL",
        [SNAPSHOT_SCHEMA, VIEW_PREFIX, SNAPSHOT_SCHEMA],
    ).fetchall()
    branches = {str(schema) for kind, schema, _, _ in rows if kind == "branch"}
    database, default_schema = next((str(a), str(b)) for kind, a, b, _ in rows if kind == "default")
    kinds: dict[str, Kind] = {}
    live_views = []
    for kind, schema, name, sql in rows:
        if kind == "table" and schema == SNAPSHOT_SCHEMA:
            kinds[str(name)] = Kind("table")
        elif kind == "view" and schema == SNAPSHOT_SCHEMA:
            path = file_of(str(sql))
            kinds[str(name)] = (
                Kind("file", str(sql), Path(path)) if path is not None else Kind("view", str(sql))
            )
        elif kind == "view" and schema in branches:
            live_views.append((str(schema), str(name), str(sql)))
    return WarehouseCatalog(database, default_schema, sorted(live_views), kinds)


class Types:
    """(column, type) of a relation, described when first asked (one relation at a time:
    duckdb_columns() binds every view of the warehouse, each view over a file reading its footer)."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con
        self.known: dict[tuple[str, str], list[tuple[str, str]]] = {}

    def of(self, schema: str, name: str) -> list[tuple[str, str]]:
        if (schema, name) not in self.known:
            self.known[schema, name] = list(describe(self.con, table(name, schema)))
        return self.known[schema, name]

    def in_file(self, path: Path, columns: list[tuple[str, str]]) -> dict[str, str] | None:
        """How the file at `path`, written by any version (or None: not yet), holds `columns`."""
        return stored_types(self.con, path, columns) if path.exists() else None


@dataclass
class CatalogPlan:
    """The next catalog: its contents, and what to write into a copy of the previous catalog (or
    into an empty one) to get there. Statements are either the warehouse's stored SQL (`str`, run
    verbatim with the new catalog as the default database) or built trees."""

    contents: CatalogContents
    drop_views: list[tuple[str, str]] = field(default_factory=list)
    drop_snapshots: list[str] = field(default_factory=list)
    drop_schemas: list[str] = field(default_factory=list)
    create_schemas: list[str] = field(default_factory=list)
    create: list[str | exp.Expr] = field(default_factory=list)  # snapshot views first
    exports: dict[Path, exp.Query] = field(default_factory=dict)  # files to write in data/ first
    views_kept: int = 0  # live views kept from the previous catalog as they are
    # Live views not served, and why: a snapshot they read has a file that cannot be read (a view
    # over it cannot be created); readers get no such view until a run rebuilds the model.
    left_out: dict[str, str] = field(default_factory=dict)


def plan_catalog(
    con: duckdb.DuckDBPyConnection,
    warehouse: WarehouseCatalog,
    previous: CatalogContents | None,
    data: Path,
    entry: str,
    root: Path,
    sources: Callable[[], dict[str, str]] | None = None,
) -> CatalogPlan:
    """What the catalog serving the warehouse's live views at `entry` holds, and what changes
    from `previous` (None: an empty catalog). A view is kept when its stored SQL and every
    snapshot view it reads are unchanged (a view model's: its rows too, `SnapshotKeys`). `entry`
    names the history entry in the export of a view edited to read something else, served as its
    rows at each entry (serving.entry_stamp): its number and run id, since a warehouse restored
    from a backup reuses the numbers. Files in `root`
    (the warehouse's folder, absolute; `data` is in it) are named relative to it. `sources`: the
    fingerprints of the relations this session read whole (serving.observed_sources, read when
    first asked), or None."""
    before = previous or CatalogContents()
    kinds = warehouse.kinds
    types = Types(con)
    contents = CatalogContents()
    plan = CatalogPlan(contents)
    snapshot_keys = SnapshotKeys(con, kinds, types, sources)
    problems: dict[str, str | None] = {}

    def unbindable(snapshot: str) -> str | None:
        """Why a snapshot view to create cannot be: its file cannot be read (a kept one is not bound again)."""
        kind, old = kinds[snapshot], before.snapshots.get(snapshot)
        if (
            kind.kind != "file"
            or kind.path is None
            or (old is not None and old.key == snapshot_keys.of(snapshot))
        ):
            return None
        if snapshot not in problems:
            problem = problem_of(kind.path)
            problems[snapshot] = None if problem is None else f"the snapshot file `{kind.path}` is {problem}"
        return problems[snapshot]

    live_creates: list[str | exp.Expr] = []
    for schema, name, sql in warehouse.live_views:
        qualified = f"{schema}.{name}"
        key = digest_of(sql)
        kept = before.views.get(qualified)
        if (
            kept is not None
            and kept.export is None
            and kept.key == key
            and all(
                snapshot in before.snapshots and snapshot_keys.of(snapshot) == before.snapshots[snapshot].key
                for snapshot in kept.reads
            )
        ):
            contents.views[qualified] = kept
            plan.views_kept += 1
            continue
        reads = snapshot_reads(con, schema, name, sql, kinds)
        unreadable = [problem for snapshot in sorted(reads or ()) if (problem := unbindable(snapshot))]
        if unreadable:  # left out (dropped below if served before), not a catalog that fails to bind
            plan.left_out[qualified] = unreadable[0]
            continue
        if kept is not None:
            plan.drop_views.append((schema, name))
        if reads is None:  # edited to read something else: served as its rows at this entry
            path = data / f"{schema}.{name}@{entry}.parquet"
            columns = types.of(schema, name)
            stored = types.in_file(path, columns)
            plan.exports.setdefault(path, write_query(table(name, schema), columns))
            contents.views[qualified] = ServedView(key, (), path.name)
            view = exp.select("*").from_(read_relation(_named(path, root), name, columns, stored))
            live_creates.append(exp.Create(this=table(name, schema), kind="VIEW", expression=view))
            continue
        contents.views[qualified] = ServedView(key, tuple(sorted(reads)))
        live_creates.append(sql)  # the warehouse's own statement
    for view_name in before.views.keys() - contents.views.keys():
        schema, name = view_name.split(".", 1)
        plan.drop_views.append((schema, name))
    wanted = sorted({snapshot for view in contents.views.values() for snapshot in view.reads})
    snapshot_creates: list[str | exp.Expr] = []
    for snapshot in wanted:
        served_key = snapshot_keys.of(snapshot)
        assert served_key is not None  # a live view reads only snapshots of the warehouse
        old = before.snapshots.get(snapshot)
        if old is not None and old.key == served_key:
            contents.snapshots[snapshot] = old
            continue
        if old is not None:
            plan.drop_snapshots.append(snapshot)
        contents.snapshots[snapshot], statement = _serve_snapshot(
            snapshot, kinds[snapshot], served_key, types, data, plan, root
        )
        snapshot_creates.append(statement)
    plan.drop_snapshots.extend(sorted(before.snapshots.keys() - contents.snapshots.keys()))
    # Created in order: snapshot views, then live views (a view is bound when it is created).
    plan.create = snapshot_creates + live_creates
    plan.create_schemas = sorted(contents.schemas() - before.schemas())
    if contents.snapshots and not before.snapshots:
        plan.create_schemas.append(SNAPSHOT_SCHEMA)
    plan.drop_schemas = sorted(before.schemas() - contents.schemas() - {DUCKDB_DEFAULT_SCHEMA})
    return plan


def _named(path: Path, root: Path) -> Path:
    """`path` as a catalog names it: relative to `root` when in it (found through the readers'
    `file_search_path`), else as it is (a warehouse copied without its folder reads another's)."""
    return path.relative_to(root) if path.is_relative_to(root) else path


def _served_sql(kind: Kind, root: Path) -> str:
    """A file snapshot's statement as the catalog runs it: the warehouse's own, verbatim but for
    the file's path, relative to the warehouse's folder."""
    if kind.kind != "file" or kind.path is None:
        return kind.sql
    return with_file(kind.sql, str(_named(kind.path, root)))


class SnapshotKeys:
    """What each snapshot view is served from, worked out when first asked. A file's key is its
    stored statement; a table never changes (exported once). A view model reads its inputs live,
    so its key is its statement with what decides its rows now: when every relation it reads is
    an immutable snapshot or a source this session fingerprinted whole (`sources`), those
    fingerprints; else its rows' figures (count and row-hash sum: one scan of what it reads, where
    an export writes every row). A publication whose key is the same as at the last export serves
    that export again instead of writing the rows once more."""

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        kinds: dict[str, Kind],
        types: Types,
        sources: Callable[[], dict[str, str]] | None = None,
    ) -> None:
        self.con, self.kinds, self.types, self.sources = con, kinds, types, sources
        self.known: dict[str, str] = {}

    def of(self, snapshot: str) -> str | None:
        kind = self.kinds.get(snapshot)
        if kind is None:
            return None
        if snapshot not in self.known:
            self.known[snapshot] = self._key(snapshot, kind)
        return self.known[snapshot]

    def _key(self, snapshot: str, kind: Kind) -> str:
        if kind.kind == "file":
            return digest_of(kind.sql)
        if kind.kind == "table":
            return "table"
        read = self._fingerprints_read(snapshot, kind.sql)
        if read is not None:
            return "view:sources:" + digest_of(json.dumps([kind.sql, read]))
        columns = self.types.of(SNAPSHOT_SCHEMA, snapshot)
        rows = content_of(self.con, table(snapshot, SNAPSHOT_SCHEMA), columns=tuple(columns))
        return "view:rows:" + digest_of(json.dumps([kind.sql, columns, rows.row_count, rows.row_hash_sum]))

    def _fingerprints_read(self, snapshot: str, sql: str) -> list[list[str]] | None:
        """The fingerprint of each source relation the view reads, None when one is not known
        whole, or it reads another view model (live too) or a table function (a file)."""
        if self.sources is None:
            return None
        body = _body(sql, SNAPSHOT_SCHEMA, snapshot, qualified_only=True)
        read = None if body is None else relations_read(self.con, body)
        if read is None or read.calls_table_function:
            return None
        found = []
        for catalog, schema, name in sorted(read.tables):
            if not catalog and not schema and name in read.ctes:
                continue
            if not catalog and schema == SNAPSHOT_SCHEMA:
                if self.kinds.get(name, Kind("view")).kind == "view":
                    return None
                continue
            relation = ".".join(part for part in (catalog, schema, name) if part)
            fingerprint = self.sources().get(relation)
            if fingerprint is None:
                return None
            found.append([relation, fingerprint])
        return found


def _serve_snapshot(
    name: str,
    kind: Kind,
    key: str,
    types: Types,
    data: Path,
    plan: CatalogPlan,
    root: Path,
) -> tuple[ServedSnapshot, str | exp.Expr]:
    if kind.kind == "file" and _body(kind.sql, SNAPSHOT_SCHEMA, name, qualified_only=True) is not None:
        assert kind.path is not None
        return ServedSnapshot(key, file=kind.path.name), _served_sql(kind, root)
    columns = types.of(SNAPSHOT_SCHEMA, name)
    if kind.kind == "file":  # stored otherwise than DuckDB writes it: read its file as written
        assert kind.path is not None
        query = read_query(_named(kind.path, root), columns, types.in_file(kind.path, columns))
        return ServedSnapshot(key, file=kind.path.name), _create_view(name, query)
    # A table is exported once; a view model's rows once for each key (the same key, the same
    # rows), perhaps by an earlier publication or an older version.
    suffix = "" if kind.kind == "table" else "@" + digest_of(key)[:16]
    path = data / f"{name}{suffix}.parquet"
    stored = types.in_file(path, columns)
    plan.exports.setdefault(path, write_query(table(name, SNAPSHOT_SCHEMA), columns))
    query = read_query(_named(path, root), columns, stored)
    return ServedSnapshot(key, export=path.name), _create_view(name, query)


def _create_view(name: str, query: exp.Query) -> exp.Create:
    return exp.Create(this=table(name, SNAPSHOT_SCHEMA), kind="VIEW", expression=query)


def _quoted(name: str) -> tuple[str, ...]:
    return (name, '"' + name.replace('"', '""') + '"')


def _body(sql: str, schema: str, name: str, *, qualified_only: bool = False) -> str | None:
    """The query of a view's stored SQL, when it is stored the way DuckDB writes a plain view
    (`CREATE VIEW [schema.]name AS query;`), else None."""
    heads = [f"{s}.{n}" for s in _quoted(schema) for n in _quoted(name)]
    if not qualified_only:
        heads += list(_quoted(name))
    for head in heads:
        prefix = f"CREATE VIEW {head} AS "
        if sql.startswith(prefix):
            return sql[len(prefix) :].rstrip().rstrip(";")
    return None


def snapshot_reads(
    con: duckdb.DuckDBPyConnection, schema: str, name: str, sql: str, kinds: dict[str, Kind]
) -> set[str] | None:
    """The snapshots a live view reads, from DuckDB's own parse of its query; None when it reads
    anything else (a table, a file, another view, a CTE), or is not stored as a plain view: such a
    view is served as its rows."""
    body = _body(sql, schema, name)
    read = None if body is None else relations_read(con, body)
    snapshots = None if read is None else read.snapshots()
    if snapshots is None or not snapshots <= kinds.keys():
        return None
    return set(snapshots)
