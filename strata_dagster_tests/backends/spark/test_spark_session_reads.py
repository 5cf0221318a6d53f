"""What a Spark session reads once and keeps (backends/spark/session.py, backends/spark/catalog.py), and that each
answer it keeps is the one Spark would give now: the snapshot kinds, the keys tables' NULL
counts, a query's columns, whether the history log's tables exist. And what a run no longer
asks Spark at all, seen in the statements it sends (STRATA_SPARK_ECHO)."""

from __future__ import annotations

import pytest
from sqlglot import exp

from strata_dagster.backends.opening import open_session
from strata_dagster.backends.spark.connection import ECHO_ENV
from strata_dagster.backends.sql.figures import count_null_keys
from strata_dagster.sql.render import SNAPSHOT_SCHEMA
from strata_dagster.sql.segments import TypedTexts
from strata_dagster.state.migrations import HISTORY_SCHEMA
from strata_dagster_tests.support.engines_support import engine_under_test
from strata_dagster_tests.support.spark_support import UPSERT_PROJECT as PROJECT

pytestmark = pytest.mark.spark


def _orders(spark, rows: str) -> None:
    spark.sql("CREATE DATABASE IF NOT EXISTS raw")
    spark.sql("DROP TABLE IF EXISTS raw.orders")
    spark.sql(
        "CREATE TABLE raw.orders USING parquet AS SELECT * FROM VALUES "
        + rows
        + " AS t(order_id, status, updated_at)"
    )


def _project(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "models.strata").write_text(PROJECT)
    return project


def _statements(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("spark> ")]


def test_snapshot_kinds_are_the_catalogs_and_follow_the_sessions_writes(tmp_path, monkeypatch, capsys):
    with engine_under_test("spark", tmp_path) as engine:
        spark = engine.spark
        spark.sql(f"CREATE DATABASE {SNAPSHOT_SCHEMA}")
        spark.sql(f"CREATE TABLE {SNAPSHOT_SCHEMA}.snap_t USING parquet AS SELECT 1 AS x")
        spark.sql(f"CREATE VIEW {SNAPSHOT_SCHEMA}.snap_v AS SELECT 2 AS x")
        with engine.chosen(), open_session(engine.warehouse) as session:
            files = session.files
            monkeypatch.setenv(ECHO_ENV, "1")
            capsys.readouterr()
            assert files.kind_of(session.con, "snap_new") is None
            assert not any("SHOW VIEWS" in line for line in _statements(capsys))  # a new name: no call
            assert files.kind_of(session.con, "snap_t") == "table"
            assert files.kind_of(session.con, "snap_v") == "view"
            session.drop_snapshot("snap_v")  # DROP VIEW: DROP TABLE on a view fails on Spark
            assert files.kind_of(session.con, "snap_v") is None
            assert not spark.catalog.tableExists(f"{SNAPSHOT_SCHEMA}.snap_v")
            session.create_snapshot("snap_v", exp.select(exp.Literal.number(3).as_("x")))
            assert files.kind_of(session.con, "snap_v") == "table"
            session.create_snapshot("snap_t", exp.select(exp.Literal.number(4).as_("x")))  # replaced
            assert spark.sql(f"SELECT x FROM {SNAPSHOT_SCHEMA}.snap_t").collect()[0][0] == 4
            session.rollback()


def test_null_keys_counted_with_the_keys_table_are_what_a_fresh_count_gives(tmp_path):
    with engine_under_test("spark", tmp_path) as engine:
        _orders(engine.spark, "(1, 'a', 1), (NULL, 'b', 2), (NULL, 'c', 3), (4, 'd', 4)")
        relation = exp.table_("orders", db="raw")
        keys = [("order_id", exp.column("order_id"))]
        with engine.chosen(), open_session(engine.warehouse) as session:

            def build(low: int) -> int:
                window = exp.GT(this=exp.column("updated_at"), expression=exp.Literal.number(low))
                return session.create_keys_table("snap_k", relation, keys, window, None, ["order_id"])

            assert build(0) == 3  # 1, NULL, 4 (distinct)
            assert session.count_null_keys("snap_k", ["order_id"]) == 1
            assert count_null_keys(session.con, "snap_k", ["order_id"]) == 1
            assert build(3) == 1  # the same name built again: only 4
            assert session.count_null_keys("snap_k", ["order_id"]) == 0
            assert count_null_keys(session.con, "snap_k", ["order_id"]) == 0
            session.drop_snapshot("snap_k")
            session.create_snapshot("snap_k", exp.select(exp.null().as_("order_id")))
            assert session.count_null_keys("snap_k", ["order_id"]) == 1  # counted afresh
            session.rollback()


def test_a_values_tables_null_keys_are_counted_from_its_values(tmp_path, monkeypatch, capsys):
    """The partitions a segment replaces, written from literals: whether one is NULL is known
    without a Spark job, and it is what Spark counts."""
    with engine_under_test("spark", tmp_path) as engine:
        engine.spark.sql(f"CREATE DATABASE {SNAPSHOT_SCHEMA}")
        with engine.chosen(), open_session(engine.warehouse) as session:
            for texts, nulls in ((("2025-01-02",), 0), (("2025-01-02", None), 1)):
                session.create_values_table("snap_p", "day", TypedTexts("DATE", texts))
                monkeypatch.setenv(ECHO_ENV, "1")
                capsys.readouterr()
                assert session.count_null_keys("snap_p", ["day"]) == nulls
                assert _statements(capsys) == []
                monkeypatch.delenv(ECHO_ENV)
                assert count_null_keys(session.con, "snap_p", ["day"]) == nulls
                session.drop_snapshot("snap_p")
            session.rollback()


def test_a_querys_columns_are_what_spark_describes(tmp_path):
    with engine_under_test("spark", tmp_path) as engine:
        engine.spark.sql("CREATE DATABASE raw")
        engine.spark.sql(
            "CREATE TABLE raw.typed (a INT, b DECIMAL(12,2), c ARRAY<STRING>, d STRUCT<x: INT, `y z`: STRING>, "
            "e MAP<STRING, BIGINT>, f TIMESTAMP, g TIMESTAMP_NTZ, h VARCHAR(10), i CHAR(3), j DATE, k BINARY, "
            "l DOUBLE, m BOOLEAN, n SMALLINT COMMENT 'why') USING parquet"
        )
        query = exp.select("*").from_(exp.table_("typed", db="raw"))
        with engine.chosen(), open_session(engine.warehouse, read_only=True) as session:
            answered = session.con.run_statement(exp.Describe(this=query)).fetchall()
            described = session.con.sql(
                "DESCRIBE " + session.con.render(query), is_description=True
            ).fetchall()
        assert answered == described
        assert [row[1] for row in answered][:3] == ["INTEGER", "DECIMAL(12,2)", "VARCHAR[]"]


def test_runs_ask_spark_no_schema_listing_or_table_creation_they_do_not_need(tmp_path, monkeypatch, capsys):
    with engine_under_test("spark", tmp_path) as engine:
        project = _project(tmp_path)
        _orders(
            engine.spark,
            "(1, 'a', TIMESTAMP_NTZ'2025-01-01 00:00:00'), (2, 'b', TIMESTAMP_NTZ'2025-01-02 00:00:00')",
        )
        engine.run(project)
        monkeypatch.setenv(ECHO_ENV, "1")
        capsys.readouterr()
        assert engine.run(project, only_stale=True).is_noop  # nothing changed
        no_change = _statements(capsys)
        _orders(
            engine.spark,
            "(1, 'a', TIMESTAMP_NTZ'2025-01-01 00:00:00'), (2, 'c', TIMESTAMP_NTZ'2025-01-03 00:00:00')",
        )
        capsys.readouterr()
        engine.run(project, only_stale=True)
        delta = _statements(capsys)
        for asked in (no_change, delta):
            assert not any(
                marker in line
                for line in asked
                for marker in (
                    "CREATE DATABASE",
                    "CREATE TABLE IF NOT EXISTS",
                    "SHOW VIEWS",
                    f"EXTENDED IN {SNAPSHOT_SCHEMA}",
                )
            ), asked
            assert not any(
                line.startswith("spark> DESCRIBE") and "DESCRIBE SELECT" not in line for line in asked
            )
        assert len(no_change) <= 4, no_change  # the snapshot names, the views, the fingerprint, the schema
        assert sorted(row[1] for row in engine.live("latest")) == ["a", "c"]


def test_a_history_log_missing_its_commit_table_gets_it_created_again(tmp_path):
    """A first writer that died between creating the log's two tables: the log exists, its commit
    table does not, and the next writer must create it rather than trust that the log's does."""
    with engine_under_test("spark", tmp_path) as engine:
        project = _project(tmp_path)
        _orders(engine.spark, "(1, 'a', TIMESTAMP_NTZ'2025-01-01 00:00:00')")
        engine.spark.sql(f"CREATE DATABASE {HISTORY_SCHEMA}")
        engine.spark.sql(
            f"CREATE TABLE {HISTORY_SCHEMA}.history_log (commit_id STRING, seq BIGINT, tbl STRING, row STRING) USING parquet"
        )
        engine.run(project)
        assert engine.spark.catalog.tableExists(f"{HISTORY_SCHEMA}.history_commits")
        _orders(engine.spark, "(1, 'b', TIMESTAMP_NTZ'2025-01-02 00:00:00')")
        assert not engine.run(project, only_stale=True).is_noop
        assert [row[1] for row in engine.live("latest")] == ["b"]
