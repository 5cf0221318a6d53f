"""DuckDB's own parse of a stored view (backends/duckdb/view_reads.py) names the same snapshot tables as
sqlglot's (sql/views.py tables_of_view), on the live views of real runs and on views edited by hand."""

import duckdb
import pytest

from strata_dagster.backends.duckdb.view_reads import snapshot_tables_read
from strata_dagster.engine.run import run_project
from strata_dagster.sql.views import tables_of_view
from strata_dagster_tests.support.engine_support import ADVANCE_UPDATED_AT, execute, make_shop


def stored_views(warehouse) -> dict[str, str]:
    """The live views of `main`: view name -> the SQL DuckDB stores."""
    with duckdb.connect(str(warehouse), read_only=True) as con:
        rows = con.execute(
            "SELECT view_name, sql FROM duckdb_views() WHERE NOT internal "
            "AND database_name = current_database() AND schema_name = 'main'"
        ).fetchall()
    return dict(rows)


def test_the_live_views_of_runs_with_many_segments_read_what_sqlglot_reads(tmp_path):
    project, warehouse = make_shop(tmp_path)
    run_project(project, warehouse)
    for step in range(3):  # each incremental run adds segments to the incremental models' states
        execute(
            warehouse,
            f"UPDATE raw.orders SET amount = amount + 1, {ADVANCE_UPDATED_AT} WHERE order_id % 97 = {step}",
        )
        run_project(project, warehouse)
    views = stored_views(warehouse)
    with duckdb.connect() as con:
        read = {name: snapshot_tables_read(con, sql) for name, sql in views.items()}
    assert read == {name: tables_of_view(sql) for name, sql in views.items()}
    assert any(len(tables) > 2 for tables in read.values())  # states of several segments were seen
    assert all(tables for tables in read.values())


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("SELECT * FROM strata_snapshots.snap_1_m", ("snap_1_m",)),
        (
            "SELECT * FROM strata_snapshots.snap_1_m AS s WHERE s.k NOT IN (SELECT k FROM strata_snapshots.snap_2_m__keys)",
            ("snap_1_m", "snap_2_m__keys"),
        ),
        ("SELECT * FROM strata_snapshots.snap_1_m UNION ALL SELECT * FROM raw.orders", ()),  # edited
        ("WITH c AS (SELECT * FROM strata_snapshots.snap_1_m) SELECT * FROM c", ()),
        ("SELECT * FROM read_parquet('/tmp/x.parquet')", ()),
        ("SELECT * FROM other.strata_snapshots.snap_1_m", ()),  # another database's
        ("SELECT 1 AS one", ()),
    ],
)
def test_a_view_edited_by_hand_reads_what_sqlglot_says_it_reads(tmp_path, query, expected):
    with duckdb.connect(str(tmp_path / "w.duckdb")) as con:
        con.execute("CREATE SCHEMA strata_snapshots")
        con.execute("CREATE TABLE strata_snapshots.snap_1_m (k INTEGER)")
        con.execute("CREATE TABLE strata_snapshots.snap_2_m__keys (k INTEGER)")
        con.execute("CREATE SCHEMA raw")
        con.execute("CREATE TABLE raw.orders (k INTEGER)")
        con.execute("COPY (SELECT 1 AS k) TO '/tmp/x.parquet'") if "read_parquet" in query else None
        con.execute("ATTACH ':memory:' AS other")
        con.execute("CREATE SCHEMA other.strata_snapshots")
        con.execute("CREATE TABLE other.strata_snapshots.snap_1_m (k INTEGER)")
        con.execute(f'CREATE VIEW main."v m" AS {query}')
        (sql,) = con.execute("SELECT sql FROM duckdb_views() WHERE view_name = 'v m'").fetchone()
        read = snapshot_tables_read(con, sql)
    assert read == expected
    if "other." not in query:  # sqlglot reads the database name as no part of the check
        assert read == tables_of_view(sql)


def test_sql_that_is_not_a_plain_view_is_left_to_sqlglot():
    with duckdb.connect() as con:
        assert snapshot_tables_read(con, "CREATE VIEW v(a) AS SELECT 1") is None
        assert snapshot_tables_read(con, "not sql at all") is None
        assert snapshot_tables_read(con, "CREATE VIEW v AS SELECT 1; SELECT 2") is None


def test_a_view_text_is_parsed_once_per_process():
    sql = "CREATE VIEW v_once AS SELECT * FROM strata_snapshots.snap_once_m"
    with duckdb.connect() as con:
        assert snapshot_tables_read(con, sql) == ("snap_once_m",)
    # The connection is closed: the answer is the one kept for that text, not asked again.
    assert snapshot_tables_read(con, sql) == ("snap_once_m",)
    with pytest.raises(duckdb.ConnectionException):
        snapshot_tables_read(con, sql.replace("snap_once_m", "snap_twice_m"))
