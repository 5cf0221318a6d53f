"""The serving copy: what readers open, so that no reader ever holds the writer's file.

DuckDB lets one process write a file and then no other process may open it, not even read-only;
a reader's shared lock in turn blocks the writer. So readers never open the warehouse. After each
write session that published a history entry, the writer writes a small catalog file holding the
same views, `<branch>.v_<model>`, as the warehouse stores them, over the snapshot views they read
(`read_parquet` of the snapshots' own files, snapshot_files.py; a snapshot still stored as a
table, or a view model's rows, is exported to Parquet once), then switches a symlink to it with
one rename. The catalog starts as a copy of the previous one and replaces only what changed
(serving_catalog.py). Readers ATTACH the symlink's path
read-only (`reader_statement`): they see one whole published state, the one that was live when
they attached, and never block or wait for the writer.

    <warehouse>.serving/live.duckdb -> catalog-<digest>.duckdb   (switched by os.replace)
    <warehouse>.serving/catalog-<digest>.duckdb, catalog-<digest>.json (the files it reads)
    <warehouse>.serving/data/<snapshot table>.parquet              (exports of tables and view models)

Every step leaves the previous catalog live until the rename: a crash before it leaves readers at
the previous whole state, and the next write session finds the catalog stale and writes it again.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
from sqlglot import exp

from strata_dagster.backends.base import ServingCollection
from strata_dagster.backends.duckdb.limits import connect_in_memory
from strata_dagster.backends.duckdb.serving_names import CATALOG_FORMAT
from strata_dagster.backends.duckdb.serving_names import GRACE_ENV as GRACE_ENV
from strata_dagster.backends.duckdb.serving_names import READER_CATALOG as READER_CATALOG
from strata_dagster.backends.duckdb.serving_names import STATE_SCHEMA as STATE_SCHEMA
from strata_dagster.backends.duckdb.serving_names import grace_seconds as grace_seconds
from strata_dagster.backends.duckdb.snapshot_files import copy_to_file
from strata_dagster.backends.duckdb.sql import set_option
from strata_dagster.backends.sql.runner import run
from strata_dagster.errors import E_SERVING_DAMAGED, StrataError, first_line
from strata_dagster.paths import fsync
from strata_dagster.sql.render import SNAPSHOT_SCHEMA, render, table

if TYPE_CHECKING:  # the catalog's planning is imported when a catalog is written, not to check one
    from strata_dagster.backends.duckdb.serving_catalog import CatalogContents, CatalogPlan, WarehouseCatalog

LIVE_NAME = "live.duckdb"
STATE_TABLE = "publication"  # one row: the history entry and digest the catalog serves
# Steps after which a crash leaves the previous catalog live (crash tests, strata_dagster.faults).
SERVING_STEPS = ("serving_exported", "serving_catalog_written", "serving_switched")
_NEW_CATALOG = "__strata_serving_new"
_CHECKED_CATALOG = "__strata_serving_check"
SEARCH_PATH = "file_search_path"
LEFT_OUT = "left_out"  # a manifest's key: the live views not served, and why


def serving_dir(warehouse: Path) -> Path:
    return warehouse.with_name(warehouse.name + ".serving")


def live_path(warehouse: Path) -> Path:
    """The stable path readers attach: a symlink to the current catalog file."""
    return serving_dir(warehouse) / LIVE_NAME


def _root(serving_folder: Path) -> Path:
    """The folder the catalog's relative file names start from: the warehouse's own."""
    return serving_folder.absolute().parent


def search_path_setting(root: Path) -> exp.Set:
    """`SET file_search_path` to the connection's own search path followed by `root`, where the
    catalog's relative file names are found (whatever the reader's working directory)."""
    # Anonymous calls: sqlglot would otherwise rewrite CONCAT_WS with its NULL rules, and an
    # empty search path (NULLIF: NULL) would then make the whole value NULL.
    current = exp.Anonymous(this="current_setting", expressions=[exp.Literal.string(SEARCH_PATH)])
    value = exp.Anonymous(
        this="concat_ws",
        expressions=[
            exp.Literal.string(","),
            exp.Anonymous(this="nullif", expressions=[current, exp.Literal.string("")]),
            exp.Literal.string(str(root)),
        ],
    )
    setting = exp.EQ(this=exp.column(SEARCH_PATH), expression=value)
    return exp.Set(expressions=[exp.SetItem(this=setting)])


def reader_statement(warehouse: Path) -> str:
    """The SQL a fresh DuckDB connection runs to read the live views under their usual names: the
    warehouse's folder on its file search path (the catalog names files relative to it, so a
    project folder moved or copied elsewhere reads its own files), then the catalog attached."""
    live = live_path(warehouse).absolute()
    attach = exp.Attach(
        this=exp.alias_(exp.Literal.string(str(live)), READER_CATALOG),
        expressions=[exp.AttachOption(this=exp.var("READ_ONLY"))],
    )
    use = exp.Use(this=exp.to_table(READER_CATALOG))
    return f"{render(search_path_setting(_root(live.parent)))}; {render(attach)}; {render(use)};"


def is_served(warehouse: Path) -> bool:
    return live_path(warehouse).exists()


def left_out(warehouse: Path) -> dict[str, str]:
    """The live views the live catalog does not serve, and why (serving_catalog.CatalogPlan)."""
    live = live_path(warehouse)
    if not live.is_symlink():
        return {}
    listed = _read_manifest(_manifest(live.with_name(os.readlink(live))))
    views = listed.get(LEFT_OUT) if listed is not None else None
    return {str(view): str(why) for view, why in views.items()} if isinstance(views, dict) else {}


def is_of_older_format(warehouse: Path) -> bool:
    """Whether the live catalog was written by an earlier version (one naming files by absolute
    path, which a moved or copied project would not find): the next write session replaces it."""
    live = live_path(warehouse)
    if not live.is_symlink():
        return False
    try:
        listed = json.loads(_manifest(live.with_name(os.readlink(live))).read_text())
    except (OSError, ValueError):
        return False  # damaged: reported where it is read
    return not isinstance(listed, dict) or listed.get("format") != CATALOG_FORMAT


def served_view_count(warehouse: Path) -> int:
    """How many live views readers see now (0 when the serving copy does not exist)."""
    if not is_served(warehouse):
        return 0
    with open_live(warehouse) as con:
        try:
            row = con.execute(
                "SELECT count(*) FROM duckdb_views() WHERE database_name = ? AND NOT internal AND schema_name NOT IN (?, ?)",
                [READER_CATALOG, STATE_SCHEMA, SNAPSHOT_SCHEMA],
            ).fetchone()
        except duckdb.Error as error:
            raise damaged_error(warehouse, first_line(error)) from None
    return int(row[0]) if row else 0


@dataclass(frozen=True)
class ServingState:
    entry: int
    digest: str
    catalog: Path
    is_new: bool  # False: the live catalog already served this state
    exported_files: int
    exported_seconds: float
    copied_from: str | None = None  # the previous catalog the new one started from (None: written whole)
    views_kept: int = 0  # live views kept from that copy as they were


def refresh(
    con: duckdb.DuckDBPyConnection,
    warehouse: Path,
    on_step: Callable[[str], None] = lambda step: None,
    published: Collection[int] = (),
) -> ServingState | None:
    """Make the serving catalog show what the warehouse's live views show now (the writer's
    connection, outside any transaction). None when nothing was ever published. `published`: the
    entries the caller's session wrote; when the latest is one of them, the source fingerprints it
    recorded were read in this session and still describe the sources (serving_catalog.SnapshotKeys).

    The new catalog starts as a copy of the live one (never modified: readers attached to it keep
    their whole state) and replaces only the views whose stored SQL, or a snapshot view they read,
    changed (serving_catalog.plan_catalog); without a live catalog of the current format it is
    written whole."""
    latest = _latest_entry(con)
    if latest is None:
        return None
    entry, identity = latest
    folder = serving_dir(warehouse)
    digest = _digest(folder, entry, identity)
    catalog = folder / f"catalog-{digest}.duckdb"
    live = live_path(warehouse)
    if live.is_symlink() and os.readlink(live) == catalog.name and _is_whole(con, catalog, live):
        return ServingState(entry, digest, catalog, False, 0, 0.0)
    from strata_dagster.backends.duckdb.serving_catalog import read_warehouse

    previous, contents = _previous_catalog(con, live)
    warehouse_catalog = read_warehouse(con)
    target = _Target(catalog, entry, digest, entry_stamp(entry, identity), entry in published)
    folder.mkdir(exist_ok=True)
    try:
        written, exported_seconds, plan = _write(con, target, previous, contents, warehouse_catalog, on_step)
    except duckdb.Error:
        if previous is None:
            raise
        # The live catalog could not be copied (damaged in a way its files' times did not show):
        # the next one is written whole, as without one.
        previous = None
        written, exported_seconds, plan = _write(con, target, None, None, warehouse_catalog, on_step)
    on_step("serving_catalog_written")
    previous_link = os.readlink(live) if live.is_symlink() else None
    link = folder / f".{LIVE_NAME}.{os.getpid()}"
    link.unlink(missing_ok=True)
    link.symlink_to(catalog.name)
    os.replace(link, live)
    fsync(folder)
    if previous_link is not None and previous_link != catalog.name:
        _retire(folder / previous_link)
    on_step("serving_switched")
    return ServingState(
        entry,
        digest,
        catalog,
        True,
        written,
        exported_seconds,
        previous.name if previous is not None else None,
        plan.views_kept,
    )


@dataclass(frozen=True)
class _Target:
    """The catalog a refresh writes: its file, and the history entry it serves."""

    catalog: Path
    entry: int
    digest: str
    stamp: str  # entry_stamp: the entry in the names of what is exported at it
    observed: bool  # written by this session: its recorded source fingerprints are current


def _write(
    con: duckdb.DuckDBPyConnection,
    target: _Target,
    previous: Path | None,
    contents: CatalogContents | None,
    warehouse_catalog: WarehouseCatalog,
    on_step: Callable[[str], None],
) -> tuple[int, float, CatalogPlan]:
    """Export what the catalog reads that is not a file, then write its manifest and the catalog
    (from a copy of `previous`, whose contents are `contents`, or whole)."""
    from strata_dagster.backends.duckdb.serving_catalog import plan_catalog

    catalog = target.catalog
    data = catalog.parent / "data"
    # Read when a view model's rows are keyed (most catalogs serve none).
    sources = functools.cache(lambda: observed_sources(con, target.entry)) if target.observed else None
    plan = plan_catalog(con, warehouse_catalog, contents, data, target.stamp, _root(catalog.parent), sources)
    started = time.perf_counter()
    written = 0
    if plan.exports:
        data.mkdir(exist_ok=True)
        written = sum(_export(con, path, query) for path, query in plan.exports.items())
        fsync(data)
    exported_seconds = time.perf_counter() - started
    on_step("serving_exported")
    # The manifest first: gc finds every catalog file through its manifest.
    _write_manifest(catalog, {**plan.contents.manifest(), LEFT_OUT: plan.left_out})
    _write_catalog(con, catalog, previous, plan, warehouse_catalog, target.entry, target.digest)
    return written, exported_seconds, plan


def _is_whole(con: duckdb.DuckDBPyConnection, catalog: Path, live: Path) -> bool:
    """Whether the catalog `live` links to can be read as written. A catalog and its manifest are
    never written after the link to them is made, so a later modification time on either (a
    truncation, bytes written over them) or a missing file calls for reading them (about 3 ms,
    which a session that publishes nothing does not pay otherwise); when they read well, the
    link's time is brought forward so the next session trusts them again."""
    try:
        linked = live.lstat().st_mtime_ns
        times = (catalog.stat().st_mtime_ns, _manifest(catalog).stat().st_mtime_ns)
    except OSError:
        return False
    if all(time_ns <= linked for time_ns in times):
        return True
    if not is_readable(con, catalog):
        return False
    os.utime(live, follow_symlinks=False)
    return True


def is_readable(con: duckdb.DuckDBPyConnection, catalog: Path) -> bool:
    """Whether `catalog` and its manifest read as the writer wrote them: the manifest parses, of
    the current format, and the catalog attaches and says which entry it serves."""
    if _read_manifest(_manifest(catalog)) is None:
        return False
    attach = exp.Attach(
        this=exp.alias_(exp.Literal.string(str(catalog)), _CHECKED_CATALOG),
        expressions=[exp.AttachOption(this=exp.var("READ_ONLY"))],
    )
    try:
        run(con, attach)
    except duckdb.Error:
        return False
    try:
        run(
            con, exp.select("entry").from_(exp.table_(STATE_TABLE, db=STATE_SCHEMA, catalog=_CHECKED_CATALOG))
        )
        return True
    except duckdb.Error:
        return False
    finally:
        run(con, exp.Detach(this=exp.to_identifier(_CHECKED_CATALOG)))


def _read_manifest(manifest: Path) -> dict[str, Any] | None:
    """A catalog's manifest, or None when it is missing, unreadable or of another format."""
    try:
        listed = json.loads(manifest.read_text())
    except (OSError, ValueError):
        return None
    return listed if isinstance(listed, dict) and listed.get("format") == CATALOG_FORMAT else None


def _previous_catalog(
    con: duckdb.DuckDBPyConnection, live: Path
) -> tuple[Path | None, CatalogContents | None]:
    """The live catalog and what it serves, when the next catalog can start as its copy: it
    exists, whole (no write-ahead log beside it, and it reads as written), with a manifest of the
    current format."""
    if not live.is_symlink():
        return None, None
    catalog = live.with_name(os.readlink(live))
    if catalog.with_name(catalog.name + ".wal").exists() or not _is_whole(con, catalog, live):
        return None, None
    from strata_dagster.backends.duckdb.serving_catalog import CatalogContents

    listed = _read_manifest(_manifest(catalog))
    try:
        contents = CatalogContents.from_manifest(listed) if listed is not None else None
    except (ValueError, KeyError, TypeError):
        return None, None
    return (catalog, contents) if contents is not None else (None, None)


def observed_sources(con: duckdb.DuckDBPyConnection, entry: int) -> dict[str, str]:
    """The relations `entry` fingerprinted whole (not by partition), by their content (every
    column of every row, not a change column's range), with that fingerprint."""
    rows = run(
        con,
        exp.select("relation", "fingerprint")
        .from_(exp.table_("entry_sources", db="strata"))
        .where(
            exp.and_(
                exp.column("entry").eq(exp.Literal.number(entry)),
                exp.column("partition_key").eq(exp.Literal.string("")),
                exp.func("coalesce", exp.func("len", exp.column("row_basis")), exp.Literal.number(0)).eq(
                    exp.Literal.number(0)
                ),
            )
        ),
    ).fetchall()
    return {str(relation): str(fingerprint) for relation, fingerprint in rows}


def _latest_entry(con: duckdb.DuckDBPyConnection) -> tuple[int, str] | None:
    """The latest history entry's number and what tells it apart from another entry of that number
    (its run id and when it started; 0 and '': none yet); None when the warehouse has no history
    tables, so nothing was ever published. One statement: a session that published nothing pays
    this and the catalog's name check only (outside any transaction, a failed statement aborts
    nothing)."""
    try:
        row = con.execute(
            "SELECT entry, run_id, CAST(started_at AS VARCHAR) FROM strata.entries ORDER BY entry DESC LIMIT 1"
        ).fetchone()
    except duckdb.CatalogException:
        return None
    return (int(row[0]), f"{row[1]} {row[2]}") if row else (0, "")


def entry_stamp(entry: int, written: str) -> str:
    """A history entry in the names of what is exported at it (a view model's rows, an edited
    view's): its number and a digest of when and by which run it was written, for the reason the
    catalog's name has them (`_digest`)."""
    return f"{entry}-{hashlib.sha256(written.encode()).hexdigest()[:12]}" if written else str(entry)


def _digest(folder: Path, entry: int, written: str) -> str:
    """Names the catalog by the history entry it serves: every change of a live view (a run, a
    rollback, a branch, a promotion, gc) is published together with a history entry, in one
    transaction, so the catalog is current exactly when it was written for the latest entry (of
    this warehouse's folder: a copied warehouse gets its own). An entry's number alone does not
    identify it: a warehouse restored from a backup numbers its next entries as the abandoned ones
    were, and a run id names contents, not an entry (two entries that consumed the same may
    share it, while a view model's live rows differ). `written` (the run id and the start time)
    tells them apart, so readers of a restored warehouse are served what it publishes. A session
    that published nothing finds the catalog current from two small queries; what is read live (a
    view model, an edited view) is served as its rows at that entry."""
    text = json.dumps([str(folder.absolute()), entry, written])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _export(con: duckdb.DuckDBPyConnection, path: Path, query: exp.Query) -> int:
    """Write `query`'s rows to `path` unless it exists; a crash leaves only a temporary name."""
    if path.exists():
        return 0
    copy_to_file(con, path, query)
    return 1


def _write_catalog(
    con: duckdb.DuckDBPyConnection,
    catalog: Path,
    previous: Path | None,
    plan: CatalogPlan,
    warehouse: WarehouseCatalog,
    entry: int,
    digest: str,
) -> None:
    """Write the catalog under a staging name (from a copy of `previous`, or empty), then rename
    it: a crash leaves only the staging file, and `previous` is never opened for writing."""
    staging = catalog.with_name(f".{catalog.name}.{os.getpid()}")
    for leftover in (staging, staging.with_name(staging.name + ".wal")):
        leftover.unlink(missing_ok=True)
    if previous is not None:
        shutil.copyfile(previous, staging)
    back = exp.Use(this=exp.table_(warehouse.default_schema, db=warehouse.database))
    # Views are bound when created: the catalog's relative file names must be found meanwhile.
    search_path = run(
        con, exp.select(exp.func("current_setting", exp.Literal.string(SEARCH_PATH)))
    ).fetchone()[0]
    try:
        run(con, exp.Attach(this=exp.alias_(exp.Literal.string(str(staging)), _NEW_CATALOG)))
        set_option(con, SEARCH_PATH, str(_root(catalog.parent)), scope="SESSION")
        # One script, in one transaction (each statement committed alone would write and sync
        # the log), with the new catalog as the default database: the warehouse's stored view
        # statements then create, and bind, their views and snapshot views in it.
        script = [
            render(exp.Use(this=exp.to_table(_NEW_CATALOG))),
            render(exp.Transaction()),
            *_statements(plan, entry, digest, previous),
            render(exp.Commit()),
            render(back),
        ]
        try:
            con.execute(";\n".join(statement.rstrip().rstrip(";") for statement in script))
        except BaseException:
            for cleanup in (exp.Rollback(), back):
                try:
                    run(con, cleanup)
                except duckdb.Error:
                    pass  # no transaction left open, or already back
            raise
        finally:
            set_option(con, SEARCH_PATH, str(search_path or ""), scope="SESSION")
    except BaseException as error:
        _detach(con)
        if isinstance(error, duckdb.Error):  # a crash instead leaves the staging copy to gc
            for leftover in (staging, staging.with_name(staging.name + ".wal")):
                leftover.unlink(missing_ok=True)
        raise
    run(con, exp.Detach(this=exp.to_identifier(_NEW_CATALOG)))
    fsync(staging)
    os.replace(staging, catalog)


def _detach(con: duckdb.DuckDBPyConnection) -> None:
    try:
        run(con, exp.Detach(this=exp.to_identifier(_NEW_CATALOG), exists=True))
    except duckdb.Error:
        pass  # never attached


def _statements(plan: CatalogPlan, entry: int, digest: str, previous: Path | None) -> list[str]:
    """What turns the previous catalog (or an empty one) into the planned one, in order."""
    trees: list[exp.Expr] = [
        *(
            exp.Drop(tables=[table(name, schema)], kind="VIEW", exists=True)
            for schema, name in plan.drop_views
        ),
        *(
            exp.Drop(tables=[table(name, SNAPSHOT_SCHEMA)], kind="VIEW", exists=True)
            for name in plan.drop_snapshots
        ),
        *(
            exp.Drop(tables=[exp.to_table(schema)], kind="SCHEMA", exists=True, cascade=True)
            for schema in plan.drop_schemas
        ),
        *(
            exp.Create(this=exp.to_table(schema), kind="SCHEMA", exists=True)
            for schema in [*plan.create_schemas, *([STATE_SCHEMA] if previous is None else [])]
        ),
    ]
    # The warehouse's own stored statements run verbatim; the rest are rendered trees.
    created = [statement if isinstance(statement, str) else render(statement) for statement in plan.create]
    state = exp.Create(
        this=table(STATE_TABLE, STATE_SCHEMA),
        kind="TABLE",
        replace=True,
        expression=exp.select(
            exp.cast(exp.Literal.number(entry), "BIGINT").as_("entry"),
            exp.Literal.string(digest).as_("digest"),
            exp.func("now").as_("published_at"),
            exp.cast(
                exp.Literal.string(previous.name) if previous is not None else exp.null(), "VARCHAR"
            ).as_("copied_from"),
        ),
    )
    return [*(render(tree) for tree in trees), *created, render(state)]


def _manifest(catalog: Path) -> Path:
    return catalog.with_suffix(".json")


def _write_manifest(catalog: Path, listed: dict[str, object]) -> None:
    """What the catalog serves: "files", the exports in data/ it reads; "snapshot_files", the
    snapshots' own files; and each view and snapshot view with the key it was written from."""
    manifest = _manifest(catalog)
    staging = manifest.with_name(f".{manifest.name}.{os.getpid()}")
    staging.write_text(json.dumps(listed))
    os.replace(staging, manifest)


def _retire(catalog: Path) -> None:
    """Stamp when a catalog stopped being live: gc keeps it readable for the grace period."""
    manifest = _manifest(catalog)
    if manifest.exists():
        os.utime(manifest)


def collect(warehouse: Path, grace: float | None = None) -> ServingCollection:
    """Remove the catalogs retired more than `grace` seconds ago and the files no kept catalog
    reads. A reader attached to a removed catalog keeps its open file, but not the Parquet files."""
    folder = serving_dir(warehouse)
    if not folder.is_dir():
        return ServingCollection(0, 0, 0)
    wait = grace_seconds() if grace is None else grace
    live = live_path(warehouse)
    current = os.readlink(live) if live.is_symlink() else None
    now = time.time()
    kept: set[str] = set()
    kept_snapshot_files: set[str] = set()
    catalogs_removed = 0
    keeps_every_file = False
    for manifest in sorted(folder.glob("catalog-*.json")):
        catalog = manifest.with_suffix(".duckdb")
        if catalog.name == current or now - manifest.stat().st_mtime < wait:
            listed = listed_files(manifest)
            if listed is None:
                keeps_every_file = True
                continue
            kept.update(listed[0])
            kept_snapshot_files.update(listed[1])
            continue
        catalog.unlink(missing_ok=True)
        manifest.unlink()
        catalogs_removed += 1
    if keeps_every_file:
        return ServingCollection(
            catalogs_removed, 0, 0, frozenset(kept_snapshot_files), keeps_every_file=True
        )
    files_removed = bytes_removed = 0
    for path in sorted((folder / "data").glob("*.parquet")):
        if path.name not in kept:
            bytes_removed += path.stat().st_size
            path.unlink()
            files_removed += 1
    # Staging files of a write a crash cut short (never read: they have no final name).
    for leftover in [*folder.glob(".*"), *(folder / "data").glob(".*")]:
        if now - leftover.lstat().st_mtime >= wait:
            leftover.unlink(missing_ok=True)
    return ServingCollection(catalogs_removed, files_removed, bytes_removed, frozenset(kept_snapshot_files))


def listed_files(manifest: Path) -> tuple[list[str], list[str]] | None:
    """The exports in data/ and the snapshot files a catalog's manifest lists (of any format), or
    None when it cannot be read (damaged, or removed meanwhile)."""
    try:
        listed = json.loads(manifest.read_text())
        files, snapshot_files = listed["files"], listed.get("snapshot_files", [])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not all(isinstance(names, list) for names in (files, snapshot_files)):
        return None
    return [str(name) for name in files], [str(name) for name in snapshot_files]


def snapshot_files_read_since(warehouse: Path, since: float) -> set[str] | None:
    """The snapshot files read by the catalogs written or retired at or after `since` (epoch
    seconds): those a session that started then may have made readers depend on. None when one
    of their manifests cannot be read (then any file may be read)."""
    names: set[str] = set()
    folder = serving_dir(warehouse)
    if not folder.is_dir():
        return names
    for manifest in folder.glob("catalog-*.json"):
        if manifest.stat().st_mtime >= since:
            listed = listed_files(manifest)
            if listed is None:
                return None
            names.update(listed[1])
    return names


@contextmanager
def open_live(warehouse: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    """An in-memory connection reading the live views through the serving catalog; E039 when
    the catalog cannot be attached."""
    con = connect_in_memory()
    try:
        try:
            con.execute(reader_statement(warehouse))
        except duckdb.Error as error:
            raise damaged_error(warehouse, first_line(error)) from None
        yield con
    finally:
        con.close()


def damaged_error(warehouse: Path, what: str) -> StrataError:
    return StrataError(
        E_SERVING_DAMAGED,
        f"the serving copy readers open, `{live_path(warehouse)}`, is damaged: {what}",
        hint="any writing command writes it again (e.g. `strata run PROJECT --only-stale`); "
        "`strata doctor PROJECT` checks every file the warehouse refers to",
    )
