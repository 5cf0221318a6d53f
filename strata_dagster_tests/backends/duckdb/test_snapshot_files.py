"""Snapshots stored as Parquet files beside the warehouse (backends/duckdb/snapshot_files.py): written
once, published by the transaction that creates their view, read by readers where they are, and
removed only when nothing reads them."""

import os
import subprocess
import sys

import duckdb
import pytest
from sqlglot import exp

from strata_dagster.backends.duckdb.serving import GRACE_ENV, reader_statement, serving_dir
from strata_dagster.backends.duckdb.snapshot_files import (
    STORAGE_ENV,
    copy_to_file,
    file_of,
    folder_of,
    read_query,
    stored_types,
    write_query,
)
from strata_dagster.backends.opening import open_session
from strata_dagster.engine.commands.gc import gc
from strata_dagster.engine.run import run_project
from strata_dagster.errors import StrataError
from strata_dagster.sql.render import render
from strata_dagster_tests.support.engine_support import execute, make_module_project, make_shop, sql
from strata_dagster_tests.support.serving_support import (
    assert_served_as_published,
    served_state,
    unread_snapshot_files,
    warehouse_state,
)

STRATA = [sys.executable, "-m", "strata_dagster.cli.main"]
# Every column type a model can give, with values at the edges of what Parquet keeps.
TYPED_COLUMNS = (
    "170141183460469231731687303715884105727::HUGEINT AS big",
    "340282366920938463463374607431768211455::UHUGEINT AS ubig",
    "'-170141183460469231731687303715884105728'::HUGEINT AS big_min, -1::HUGEINT AS minus_one",
    "NULL::HUGEINT AS big_null, 18446744073709551616::UHUGEINT AS two_to_64, -12.5::DECIMAL(38,1) AS dec",
    "18446744073709551615::UBIGINT AS ubigint, -5::TINYINT AS tiny, 65000::USMALLINT AS usmall",
    "12345678901234567890.0123456789::DECIMAL(38,10) AS wide_decimal, 'nan'::DOUBLE AS not_a_number",
    "'2026-01-02 03:04:05'::TIMESTAMP_S AS ts_s, '2026-01-02 03:04:05.123'::TIMESTAMP_MS AS ts_ms",
    "'2026-01-02 03:04:05.123456789'::TIMESTAMP_NS AS ts_ns, '-infinity'::TIMESTAMP AS ts_inf",
    "'2026-01-02 03:04:05.123456+02'::TIMESTAMPTZ AS tstz, 'infinity'::DATE AS day_inf",
    "'01:02:03.123456+05:30'::TIMETZ AS time_tz, '01:02:03.123456'::TIME AS plain_time",
    "INTERVAL '1 month 2 days 3 hours 4 microseconds' AS span",
    "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::UUID AS id, '\\xAA\\x00'::BLOB AS bytes",
    "'0101'::BIT AS bits, 12345678901234567890123::BIGNUM AS bignum, 'happy'::mood AS feeling",
    "'{\"a\": 1}'::JSON AS doc, [1, 2, NULL] AS list, [1, 2, 3]::INTEGER[3] AS triple",
    "{'a': 1, 't': '2026-01-01 00:00:01'::TIMESTAMP_S} AS record, MAP {'k': 1} AS mapping",
    "['happy'::mood] AS moods, chr(0) AS nul, NULL::VARCHAR AS nothing",
)
# Nested values that would come back from a file through a text cast: stored as tables.
TABLE_COLUMNS = (
    "[1::HUGEINT, 2] AS big_list, {'span': INTERVAL 4 MICROSECONDS} AS nested_span",
    "union_value(num := 2)::UNION(num INTEGER, s VARCHAR) AS choice",
)


def snapshot_kinds(warehouse):
    """model -> 'file' or 'table', for the snapshots the live views of `main` read."""
    kinds = {}
    views = sql(warehouse, "SELECT view_name, sql FROM duckdb_views() WHERE schema_name = 'strata_snapshots'")
    stored_sql = dict(views)
    for (name,) in sql(
        warehouse, "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'strata_snapshots'"
    ):
        stored_sql.setdefault(name, None)
    for name, text in stored_sql.items():
        kinds[name.split("_", 2)[2]] = "table" if text is None else ("file" if file_of(text) else "view")
    return kinds


def rows_and_types(con, relation):
    rows = con.execute(f"SELECT hash(r), count(*) FROM {relation} AS r GROUP BY 1 ORDER BY 1").fetchall()
    types = con.execute(f"SELECT column_name, column_type FROM (DESCRIBE {relation})").fetchall()
    return rows, types


@pytest.mark.parametrize("columns, kind", [(TYPED_COLUMNS, "file"), (TABLE_COLUMNS, "table")])
def test_every_type_comes_back_exactly_from_a_snapshot_and_from_the_serving_copy(tmp_path, columns, kind):
    module = "source t { table: raw.t }\nmodel m { from t }\n"
    project, warehouse = make_module_project(
        tmp_path,
        "m.strata",
        module,
        "CREATE TYPE mood AS ENUM ('sad', 'happy')",
        f"CREATE TABLE raw.t AS SELECT {', '.join(columns)} UNION ALL SELECT {', '.join(columns)}",
    )
    run_project(project, warehouse)
    assert snapshot_kinds(warehouse) == {"m": kind}
    con = duckdb.connect(str(warehouse), read_only=True)
    try:
        source = rows_and_types(con, "raw.t")
        assert rows_and_types(con, "main.v_m") == source
    finally:
        con.close()
    assert_served_as_published(warehouse)
    reader = duckdb.connect()
    reader.execute(reader_statement(warehouse))
    assert rows_and_types(reader, "main.v_m") == source
    assert unread_snapshot_files(warehouse) == set()


def test_128_bit_integers_travel_as_halves_and_files_holding_them_as_text_are_still_read(tmp_path):
    con = duckdb.connect()
    rows = (
        ("-170141183460469231731687303715884105728", "340282366920938463463374607431768211455"),
        ("-1", "1"),
        ("0", "0"),
        ("18446744073709551616", "18446744073709551615"),
        (None, None),
    )

    def literal(text):
        return "NULL" if text is None else f"'{text}'"

    con.execute(
        "CREATE TABLE t AS SELECT b::HUGEINT AS big, u::UHUGEINT AS ubig FROM (VALUES "
        + ", ".join(f"({literal(big)}, {literal(ubig)})" for big, ubig in rows)
        + ") AS v(b, u)"
    )
    columns = [("big", "HUGEINT"), ("ubig", "UHUGEINT")]
    expected = sorted(con.execute("SELECT big, ubig FROM t").fetchall(), key=repr)
    halves, text = tmp_path / "halves.parquet", tmp_path / "text.parquet"
    copy_to_file(con, halves, write_query(exp.to_table("t"), columns))
    con.execute(f"COPY (SELECT big::VARCHAR AS big, ubig::VARCHAR AS ubig FROM t) TO '{text}'")  # as before
    assert stored_types(con, halves, columns) == {
        "big": "STRUCT(hi BIGINT, lo UBIGINT)",
        "ubig": "STRUCT(hi UBIGINT, lo UBIGINT)",
    }
    for path in (halves, text):
        query = render(read_query(path, columns, stored_types(con, path, columns)))
        assert sorted(con.execute(query).fetchall(), key=repr) == expected
        assert con.execute(f"SELECT column_type FROM (DESCRIBE {query})").fetchall() == [
            ("HUGEINT",),
            ("UHUGEINT",),
        ]
    assert stored_types(con, text, [("n", "BIGINT")]) is None  # no 128-bit column: nothing to look at


def test_a_snapshot_is_a_view_over_a_file_written_once_and_published_by_its_transaction(tmp_path):
    warehouse = tmp_path / "w.duckdb"
    query = exp.select(exp.alias_(exp.Literal.number(1), "x"))
    with open_session(warehouse) as session:
        session.create_snapshot("snap_a", query.copy())
        first = {path.name for path in folder_of(warehouse).iterdir()}
        with pytest.raises(ZeroDivisionError), session.transaction():
            session.create_snapshot("snap_a", query.copy())  # the same name again, then a failure
            raise ZeroDivisionError
        # The rolled-back view is gone; the first file is untouched and still read.
        assert {path.name for path in folder_of(warehouse).iterdir()} >= first
        assert session.con.execute("SELECT x FROM strata_snapshots.snap_a").fetchall() == [(1,)]
        session.create_snapshot("snap_a", query.copy())  # a leftover of that name is replaced
    after = {path.name for path in folder_of(warehouse).iterdir()}
    # Each write had a name of its own (never rewritten); on closing, the session removed the two
    # files no committed view reads.
    assert len(after) == 1 and after.isdisjoint(first)
    assert unread_snapshot_files(warehouse) == set()


def test_a_build_that_fails_its_pin_leaves_no_file(tmp_path):
    module = "source t { table: raw.t }\nmodel m {\n  unique: [k]\n  from t\n}\n"
    project, warehouse = make_module_project(
        tmp_path, "m.strata", module, "CREATE TABLE raw.t AS SELECT 1 AS k UNION ALL SELECT 1"
    )
    with pytest.raises(StrataError) as failed:
        run_project(project, warehouse)
    assert failed.value.code == "E030"
    assert not folder_of(warehouse).exists() or list(folder_of(warehouse).iterdir()) == []


def test_warehouses_of_table_snapshots_keep_working_and_new_snapshots_are_files(tmp_path, monkeypatch):
    monkeypatch.setenv(STORAGE_ENV, "table")
    project, warehouse = make_shop(tmp_path, rows=2_000)
    run_project(project, warehouse)
    assert set(snapshot_kinds(warehouse).values()) == {"table"}
    assert not folder_of(warehouse).exists()
    exported = {path.name for path in (serving_dir(warehouse) / "data").iterdir()}
    monkeypatch.delenv(STORAGE_ENV)
    execute(warehouse, "UPDATE raw.customers SET region = 'moved' WHERE customer_id = 1")
    execute(
        warehouse,
        "UPDATE raw.orders SET amount = amount + 1, updated_at = updated_at + INTERVAL 1 DAY WHERE order_id = 7",
    )
    run_project(project, warehouse)
    kinds = snapshot_kinds(warehouse)
    assert "file" in kinds.values() and "table" in kinds.values()
    assert_served_as_published(warehouse)
    # The serving copy exported no table twice and read the new snapshots where they are.
    assert exported <= {path.name for path in (serving_dir(warehouse) / "data").iterdir()}
    assert run_project(project, warehouse, only_stale=True).run_id is None


def test_gc_frees_the_files_of_dropped_snapshots_and_compaction_keeps_them_readable(tmp_path, monkeypatch):
    monkeypatch.setenv(GRACE_ENV, "0")
    project, warehouse = make_shop(tmp_path, rows=2_000)
    run_project(project, warehouse)
    execute(warehouse, "UPDATE raw.customers SET region = 'moved' WHERE customer_id = 1")
    run_project(project, warehouse)
    files = set(folder_of(warehouse).iterdir())
    size = sum(path.stat().st_size for path in files)
    result = gc(warehouse, keep=1, compact_file=True)
    left = set(folder_of(warehouse).iterdir())
    assert result.dropped and left < files
    assert result.serving.snapshot_files_removed == len(files - left)
    assert result.reclaimed_bytes >= size - sum(path.stat().st_size for path in left)
    assert unread_snapshot_files(warehouse) == set()
    assert served_state(warehouse) == warehouse_state(warehouse)
    assert sql(warehouse, "SELECT region FROM main.v_stg_customers WHERE customer_id = 1") == [("moved",)]


def test_a_snapshot_storage_that_does_not_exist_is_e037(tmp_path):
    project, warehouse = make_shop(tmp_path, rows=300)
    catalog = "SELECT schema_name, view_name FROM duckdb_views() WHERE NOT internal ORDER BY ALL"
    before = sql(warehouse, catalog)
    environment = {**os.environ, STORAGE_ENV: "s3"}
    failed = subprocess.run(
        [*STRATA, "run", str(project), "--warehouse", str(warehouse)],
        env=environment,
        capture_output=True,
        text=True,
    )
    assert failed.returncode == 1
    assert (
        "error[E037]" in failed.stderr and STORAGE_ENV in failed.stderr and "Traceback" not in failed.stderr
    )
    assert sql(warehouse, catalog) == before  # nothing written
    assert sql(warehouse, "SELECT count(*) FROM duckdb_schemas() WHERE schema_name = 'strata'") == [(0,)]
