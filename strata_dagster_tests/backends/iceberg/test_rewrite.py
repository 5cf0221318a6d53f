"""Upserts published as file-level overwrites: the files holding replaced keys are rewritten by
DuckDB without them, one overwrite per segment; the table then holds the live view's rows."""

import itertools
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("pyiceberg")

import duckdb  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from pyiceberg.catalog import load_catalog  # noqa: E402

from strata_dagster.backends.iceberg.publisher import IcebergTarget  # noqa: E402
from strata_dagster.backends.iceberg.rewrite import REWRITTEN_PREFIX, rewrite_without  # noqa: E402
from strata_dagster.backends.iceberg.states import ModelState, StateSegment  # noqa: E402
from strata_dagster.sql.render import SNAPSHOT_SCHEMA, render  # noqa: E402
from strata_dagster.sql.segments import Segment, composite_query  # noqa: E402

SCHEMA = pa.schema([("k1", pa.int64()), ("k2", pa.string()), ("v", pa.int32())])
NAMESPACE = "main"


def _rows(rows: list[tuple]) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(SCHEMA.names, row, strict=True)) for row in rows], schema=SCHEMA)


def _target(root: Path, *, local_rewrites: bool = True) -> IcebergTarget:
    catalog = load_catalog(
        "strata", type="sql", uri=f"sqlite:///{root / 'catalog.db'}", warehouse=(root / "tables").as_uri()
    )
    return IcebergTarget(catalog, local_rewrites=local_rewrites)


class History:
    """Segments as strata writes them: each an immutable Parquet file, each later one with the
    keys it replaces in the earlier ones (its rows' keys and the keys it deletes)."""

    def __init__(self, root: Path, merge_keys: tuple[str, ...]) -> None:
        self.root, self.merge_keys = root, merge_keys
        self.segments: list[StateSegment] = []
        self.tables: list[tuple[pa.Table, pa.Table | None]] = []

    def add(self, rows: list[tuple], deleted: list[tuple] = ()) -> None:
        index = len(self.segments)
        table = _rows(rows)
        path = self.root / f"segment_{index}.parquet"
        pq.write_table(table, path)
        keys = None
        if index:
            key_rows = [tuple(row[SCHEMA.names.index(key)] for key in self.merge_keys) for row in rows]
            keys = pa.Table.from_pylist(
                [dict(zip(self.merge_keys, key, strict=True)) for key in key_rows + list(deleted)],
                schema=pa.schema([SCHEMA.field(key) for key in self.merge_keys]),
            )
        self.tables.append((table, keys))
        self.segments.append(
            StateSegment(
                f"s{index}",
                path,
                lambda table=table: table,
                None if keys is None else (lambda keys=keys: keys),
            )
        )

    def state(self, **layout) -> ModelState:
        return ModelState(
            "up",
            tuple(self.segments),
            self.merge_keys,
            summary={"strata.entry": str(len(self.segments)), "strata.run-id": f"r{len(self.segments)}"},
            **layout,
        )

    def live_rows(self) -> Counter:
        """The warehouse's live view over these segments: strata's composite query, in DuckDB."""
        con = duckdb.connect()
        try:
            con.execute(f"CREATE SCHEMA {SNAPSHOT_SCHEMA}")
            segments = []
            for index, (rows, keys) in enumerate(self.tables):
                con.register("rows_in", rows)
                con.execute(f"CREATE TABLE {SNAPSHOT_SCHEMA}.seg_{index} AS SELECT * FROM rows_in")
                if keys is not None:
                    con.register("keys_in", keys)
                    con.execute(f"CREATE TABLE {SNAPSHOT_SCHEMA}.keys_{index} AS SELECT * FROM keys_in")
                segments.append(Segment(f"seg_{index}", f"keys_{index}" if keys is not None else None))
            query = composite_query(segments, self.merge_keys)
            return Counter(con.execute(f"SELECT k1, k2, v FROM ({render(query)})").fetchall())
        finally:
            con.close()


def _table_rows(target: IcebergTarget) -> Counter:
    table = target.table(NAMESPACE, "up")
    frame = table.scan().to_arrow().select(SCHEMA.names)
    return Counter(tuple(row.values()) for row in frame.to_pylist())


keys_1 = st.one_of(st.none(), st.integers(0, 12))
keys_2 = st.sampled_from([None, "a", "b"])
values = st.integers(-5, 5)
row = st.tuples(keys_1, keys_2, values)
segment = st.tuples(st.lists(row, max_size=6), st.lists(st.tuples(keys_1, keys_2), max_size=3), st.booleans())
upsert_histories = {
    "base": st.lists(row, min_size=1, max_size=20),
    "later": st.lists(segment, min_size=1, max_size=5),
    "layout": st.sampled_from(["one key", "two keys", "partitioned by key"]),
}


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(**upsert_histories)
def test_random_upsert_histories_published_hold_the_live_rows(tmp_path_factory, base, later, layout):
    """Inserts, updates and deletes of NULL and non-NULL keys, one- and two-column keys, over files
    of several segments; published after some segments (`publish`), or several at once."""
    _check_upserts(tmp_path_factory.mktemp("upserts"), base, later, layout, local_rewrites=True)


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(**upsert_histories)
def test_random_upsert_histories_published_by_filter_deletes_hold_the_live_rows(
    tmp_path_factory, base, later, layout
):
    """What a table in object storage gets (no local files for DuckDB to rewrite): pyiceberg's
    delete by a filter on the replaced keys, NULL keys and two-column keys included."""
    _check_upserts(tmp_path_factory.mktemp("filtered"), base, later, layout, local_rewrites=False)


def _check_upserts(root: Path, base, later, layout: str, *, local_rewrites: bool) -> None:
    merge_keys = ("k1", "k2") if layout == "two keys" else ("k1",)
    extra = {"grain": "key", "partition": ("key", "k1")} if layout == "partitioned by key" else {}
    history = History(root, merge_keys)
    target = _target(root, local_rewrites=local_rewrites)
    history.add(base)
    target.publish(NAMESPACE, history.state(**extra))
    for rows, deleted, publish in later:
        history.add(rows, [key[: len(merge_keys)] for key in deleted])
        if publish:
            target.publish(NAMESPACE, history.state(**extra))
            assert _table_rows(target) == history.live_rows()
    published = target.publish(NAMESPACE, history.state(**extra))
    assert published.how in ("current", "incremental")
    assert _table_rows(target) == history.live_rows()
    if not local_rewrites:  # no file DuckDB rewrote
        assert not [path for path in _files(target) if Path(path).name.startswith(REWRITTEN_PREFIX)]


def _keyed(keys: range, value: int = 0) -> list[tuple]:
    return [(key, "a", value) for key in keys]


def _files(target: IcebergTarget) -> set[str]:
    return {task.file.file_path for task in target.table(NAMESPACE, "up").scan().plan_files()}


def test_a_file_holding_no_replaced_key_is_not_rewritten(tmp_path):
    history = History(tmp_path, ("k1",))
    target = _target(tmp_path)
    history.add(_keyed(range(0, 10)))
    history.add(_keyed(range(10, 20)))
    target.publish(NAMESPACE, history.state())
    first, second = (str(segment.file) for segment in history.segments)
    assert _files(target) == {first, second}
    # New keys only: no file holds one, nothing is rewritten.
    history.add(_keyed(range(20, 25)))
    target.publish(NAMESPACE, history.state())
    table = target.table(NAMESPACE, "up")
    assert [snapshot.summary.operation.value for snapshot in table.snapshots()][-2:] == ["append", "append"]
    # One key of the second file: that file alone is rewritten, in one overwrite.
    history.add(_keyed(range(15, 16), value=1))
    target.publish(NAMESPACE, history.state())
    table = target.table(NAMESPACE, "up")
    overwrite = next(
        snapshot
        for snapshot in reversed(table.snapshots())
        if snapshot.summary.operation.value == "overwrite"
    )
    assert overwrite.summary["deleted-data-files"] == "1"
    assert overwrite.summary["deleted-records"] == "10"
    assert overwrite.summary["added-records"] == "9"
    assert overwrite.summary["strata.run-id"] == "r4"
    files = _files(target)
    assert first in files and second not in files
    assert str(history.segments[-1].file) in files
    assert table.current_snapshot().summary["strata.segments"] == "s0,s1,s2,s3"
    assert _table_rows(target) == history.live_rows()


def test_rewritten_files_no_commit_references_are_removed_by_gc(tmp_path):
    """A kill after the rewrite, before the commit: the table is as it was, and `strata gc`'s
    cleanup removes the files written."""
    history = History(tmp_path, ("k1",))
    target = _target(tmp_path)
    history.add(_keyed(range(0, 10)))
    target.publish(NAMESPACE, history.state())
    table = target.table(NAMESPACE, "up")
    before = table.current_snapshot().snapshot_id
    folder = Path(table.location().removeprefix("file://")) / "data"
    keys = pa.table({"k1": pa.array([3, 4], pa.int64())})
    written = rewrite_without(
        {name: Path(name) for name in _files(target)}, keys, ("k1",), None, folder
    ).written
    assert written and all(path.exists() for path in written)
    assert target.table(NAMESPACE, "up").current_snapshot().snapshot_id == before
    assert _table_rows(target) == history.live_rows()
    target.expire(NAMESPACE, "up", set())
    assert not any(path.exists() for path in written)
    assert _table_rows(target) == history.live_rows()


def test_files_holding_keys_are_found_null_safe_with_several_key_columns(tmp_path):
    paths = {}
    for name, rows in (("x", [(1, "a", 0), (None, "b", 0)]), ("y", [(1, None, 0), (2, "a", 0)])):
        path = tmp_path / f"{name}.parquet"
        pq.write_table(_rows(rows), path)
        paths[name] = path
    cases = {
        ((None, "b"),): {"x"},  # NULL equals NULL
        ((1, None),): {"y"},
        ((1, "b"),): set(),  # no row has both
        ((2, "a"), (1, "a")): {"x", "y"},
    }
    for keys, holding in cases.items():
        table = pa.Table.from_pylist(
            [{"k1": k1, "k2": k2} for k1, k2 in keys],
            schema=pa.schema([SCHEMA.field("k1"), SCHEMA.field("k2")]),
        )
        rewrite = rewrite_without(paths, table, ("k1", "k2"), None, tmp_path / "out")
        assert set(rewrite.replaced) == holding, keys
        kept = Counter(
            itertools.chain.from_iterable(
                (tuple(row.values()) for row in pq.read_table(path).to_pylist()) for path in rewrite.written
            )
        )
        expected = Counter(
            tuple(row)
            for name in holding
            for row in (tuple(item.values()) for item in pq.read_table(paths[name]).to_pylist())
            if row[:2] not in keys
        )
        assert kept == expected, keys
