"""Ledger and change-feed sources, and history models, are built on DuckDB: on Spark a project
declaring one is refused with E072, naming the backend, before anything is written."""

import pytest

from strata_dagster.errors import E_BACKEND_UNSUPPORTED, StrataError
from strata_dagster_tests.support.engines_support import engine_under_test
from strata_dagster_tests.support.log_support import FEED_MODULE, LEDGER_MODULE, TABLE_HISTORY_MODULE


@pytest.mark.spark
def test_a_log_source_is_refused_on_spark_before_anything_is_written(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    with engine_under_test("spark", tmp_path) as engine:
        engine.write_table(
            "raw.orders",
            (("id", "BIGINT"), ("status", "VARCHAR"), ("v", "INTEGER"), ("txn_id", "BIGINT")),
            [(1, "open", 1, 1)],
        )
        engine.write_table(
            "raw.order_txns", (("txn_id", "BIGINT"), ("committed_at", "TIMESTAMP"), ("kind", "VARCHAR")), []
        )
        engine.write_table(
            "raw.customer_changes",
            (
                ("id", "BIGINT"),
                ("name", "VARCHAR"),
                ("region", "VARCHAR"),
                ("op", "VARCHAR"),
                ("lsn", "BIGINT"),
            ),
            [(1, "ann", "eu", "c", 1)],
        )
        engine.write_table(
            "raw.customers",
            (("id", "BIGINT"), ("name", "VARCHAR"), ("region", "VARCHAR")),
            [(1, "ann", "eu")],
        )
        for module in (LEDGER_MODULE, FEED_MODULE, TABLE_HISTORY_MODULE):
            (project / "m.strata").write_text(module)
            with pytest.raises(StrataError) as refused:
                engine.run(project)
            assert refused.value.code == E_BACKEND_UNSUPPORTED and "spark" in refused.value.message
        databases = {row[0] for row in engine.spark.sql("SHOW DATABASES").collect()}
        assert not databases & {"strata_snapshots", "strata", "main"}, databases
