"""Figures a Spark delta reads in fewer jobs than DuckDB's statements (backends/spark/session.py) are the
figures those statements give: the window's with MAX(cdc), a new segment's content with its key
figures, a keys table's range with its counts; and a delta that reads with the range, or checks
its kept rows in one anti-join scan, gives the source's rows; a delta whose keys all lie outside
the state's recorded key bounds replaces none of its rows and does not read it."""

from __future__ import annotations

import pytest
from sqlglot import exp

from strata_dagster.backends.opening import open_session
from strata_dagster.backends.spark.connection import ECHO_ENV
from strata_dagster.backends.sql.session import SqlSession
from strata_dagster.engine.builds.incremental import KEY_BOUNDS
from strata_dagster.sql.content import WHOLE_ROW
from strata_dagster.sql.segments import typed_literal
from strata_dagster_tests.support.engines_support import engine_under_test
from strata_dagster_tests.support.spark_support import UPSERT_PROJECT as PROJECT

pytestmark = pytest.mark.spark


def _orders(spark, rows: str) -> None:
    spark.sql("CREATE DATABASE IF NOT EXISTS raw")
    spark.sql("DROP TABLE IF EXISTS raw.orders")
    spark.sql(
        "CREATE TABLE raw.orders USING parquet AS SELECT order_id, status, CAST(updated_at AS TIMESTAMP_NTZ) "
        f"AS updated_at FROM VALUES {rows} AS t(order_id, status, updated_at)"
    )


def _ts(text: str) -> exp.Expression:
    return typed_literal(text, "timestamp_ntz")


def test_the_window_read_with_max_cdc_in_one_job_is_what_the_separate_queries_give(
    tmp_path, monkeypatch, capsys
):
    with engine_under_test("spark", tmp_path) as engine:
        _orders(
            engine.spark,
            "(1, 'a', '2025-01-01'), (2, 'b', '2025-01-02'), (3, 'c', NULL), (4, 'd', '2025-01-04'), "
            "(5, 'e', '2025-01-04')",
        )
        relation = exp.table_("orders", db="raw")
        cdc = exp.column("updated_at")
        lateness = exp.cast(exp.Literal.string("1 day"), "INTERVAL")
        with engine.chosen(), open_session(engine.warehouse) as session:
            cases = [
                (WHOLE_ROW, "2025-01-02", None),
                (WHOLE_ROW, "2024-12-31", lateness),
                (("updated_at",), "2025-01-02", lateness),
                (("updated_at",), "2025-02-01", None),  # no row above low: read as on DuckDB
            ]
            for basis, low, late in cases:
                content = session.content(relation, basis)
                totals = (content.row_count, content.row_hash_sum)
                session.con.forget_answers()  # each case's statements are sent, none remembered
                monkeypatch.setenv(ECHO_ENV, "1")
                capsys.readouterr()
                merged = session.window_stats(relation, cdc, _ts(low), late, totals, basis)
                jobs = [line for line in capsys.readouterr().err.splitlines() if "TYPEOF(MAX(" in line]
                monkeypatch.delenv(ECHO_ENV)
                separate = SqlSession.window_stats(session, relation, cdc, _ts(low), late, totals, basis)
                assert merged == separate, (basis, low, late)
                assert len(jobs) == (1 if low != "2025-02-01" else 2), jobs
            session.rollback()


def test_a_segments_content_and_key_figures_in_one_job_are_the_two_queries(tmp_path):
    with engine_under_test("spark", tmp_path) as engine:
        _orders(engine.spark, "(1, 'a', '2025-01-01'), (NULL, 'b', NULL), (3, NULL, '2025-01-03')")
        table = exp.table_("orders", db="raw")
        with engine.chosen(), open_session(engine.warehouse) as session:
            content, key_figures = session.content_and_key_sum(table, ["order_id", "updated_at"])
            assert content == session.content(table)
            assert key_figures == session.key_sum(table, ["order_id", "updated_at"])
            session.rollback()


def test_a_keys_tables_range_is_read_with_its_counts_for_types_that_order_like_equality(tmp_path):
    with engine_under_test("spark", tmp_path) as engine:
        spark = engine.spark
        spark.sql("CREATE DATABASE IF NOT EXISTS raw")
        spark.sql(
            "CREATE TABLE raw.keyed USING parquet AS SELECT * FROM VALUES (5, 'k5', 1.5D, 1), (-2, 'k-2', 2.5D, 2), "
            "(NULL, NULL, NULL, 3) AS t(n, s, d, ts)"
        )
        relation = exp.table_("keyed", db="raw")
        everything = exp.GT(this=exp.column("ts"), expression=exp.Literal.number(0))
        with engine.chosen(), open_session(engine.warehouse) as session:

            def keys_of(column: str) -> None:
                session.create_keys_table(
                    "snap_k", relation, [(column, exp.column(column))], everything, None, [column]
                )

            def range_of(column: str) -> list:
                """The keys table's range of `column`, its literals evaluated by Spark."""
                keys_of(column)
                ranged = session.key_range("snap_k", [column])
                assert ranged is not None
                return list(
                    spark.sql(f"SELECT {ranged.low.sql('spark')}, {ranged.high.sql('spark')}").first()
                )

            assert range_of("n") == [-2, 5]
            assert range_of("s") == ["k-2", "k5"]
            keys_of("d")
            assert session.key_range("snap_k", ["d"]) is None  # a double's text need not cast back
            session.drop_snapshot("snap_k")
            assert session.key_range("snap_k", ["d"]) is None
            session.rollback()


def test_deltas_read_by_the_keys_range_and_check_kept_rows_in_one_scan_equal_the_source(tmp_path):
    with engine_under_test("spark", tmp_path) as engine:
        project = tmp_path / "project"
        project.mkdir()
        (project / "models.strata").write_text(PROJECT)
        rows = {
            1: ("a", "2025-01-01"),
            2: ("b", "2025-01-02"),
            3: ("c", "2025-01-03"),
            4: ("d", "2025-01-04"),
        }

        def write() -> None:
            _orders(
                engine.spark, ", ".join(f"({key}, '{status}', '{ts}')" for key, (status, ts) in rows.items())
            )

        def latest() -> None:
            expected = sorted((key, status) for key, (status, _) in rows.items() if status != "cancelled")
            assert sorted((row[0], row[1]) for row in engine.live("latest")) == expected

        write()
        engine.run(project)
        # A new key above every old one (read by the keys' range) and an old row re-stamped and
        # filtered out: rows left the old region, and the one scan proves them updated.
        rows.update({2: ("cancelled", "2025-01-07"), 5: ("e", "2025-01-05")})
        write()
        outcome = engine.run(project, only_stale=True).outcome("latest")
        assert outcome.path == "delta" and outcome.detail["changed_keys"] == 2
        assert outcome.detail["kept_rows_checked"] is True and outcome.detail["deleted_keys_checked"] is False
        latest()
        rows[3] = ("c2", "2025-01-08")
        del rows[1]  # an update and a delete: the one scan's figures differ, the anti-join runs
        write()
        outcome = engine.run(project, only_stale=True).outcome("latest")
        assert outcome.detail["kept_rows_checked"] is True and outcome.detail["deleted_keys_checked"] is True
        latest()


def test_keys_beyond_the_states_bounds_replace_nothing_without_a_scan_of_the_state(
    tmp_path, monkeypatch, capsys
):
    with engine_under_test("spark", tmp_path) as engine:
        project = tmp_path / "project"
        project.mkdir()
        (project / "models.strata").write_text(PROJECT)
        rows = {1: ("a", "2025-01-01"), 2: ("b", "2025-01-02"), 3: ("cancelled", "2025-01-03")}

        def recorded_bounds(snapshot_id: str) -> list[str]:
            with engine.chosen(), open_session(engine.warehouse) as session:
                record = session.history.snapshot(snapshot_id)
                assert record is not None
                return record.detail[KEY_BOUNDS]

        def run_delta(*, scans_state: bool, bounds: list[str]) -> None:
            _orders(engine.spark, ", ".join(f"({key}, '{s}', '{ts}')" for key, (s, ts) in rows.items()))
            monkeypatch.setenv(ECHO_ENV, "1")
            capsys.readouterr()
            outcome = engine.run(project, only_stale=True).outcome("latest")
            sent = capsys.readouterr().err.splitlines()
            monkeypatch.delenv(ECHO_ENV)
            reads = [line for line in sent if line.startswith("spark> SELECT") and base.table_name in line]
            assert outcome.path == "delta" and bool(reads) == scans_state, reads
            assert recorded_bounds(outcome.snapshot_id) == bounds
            expected = sorted((key, status) for key, (status, _) in rows.items() if status != "cancelled")
            assert sorted((row[0], row[1]) for row in engine.live("latest")) == expected

        _orders(engine.spark, ", ".join(f"({key}, '{s}', '{ts}')" for key, (s, ts) in rows.items()))
        base = engine.run(project).outcome("latest")
        # The cancelled order 3 is not in the state.
        assert recorded_bounds(base.snapshot_id) == ["1", "2", "int"]
        # Order 3 un-cancelled and a new order 5: both keys above the state's, which is not read.
        rows.update({3: ("c", "2025-01-06"), 5: ("e", "2025-01-05")})
        run_delta(scans_state=False, bounds=["1", "5", "int"])
        # Order 2 changed and a new order 0: the keys' range meets the state's, whose rows are read.
        rows.update({2: ("b2", "2025-01-07"), 0: ("z", "2025-01-07")})
        run_delta(scans_state=True, bounds=["0", "5", "int"])
        # A new order below every key: apart from the bounds again.
        rows.update({-4: ("y", "2025-01-08")})
        run_delta(scans_state=False, bounds=["-4", "5", "int"])
