"""Sample data, source schemas and the shop example, against real DuckDB files."""

from datetime import date, datetime, timedelta
from pathlib import Path

import duckdb
import pytest
from sqlglot import exp

from strata_dagster.backends.duckdb.sample_data import write_sample_data
from strata_dagster.backends.opening import read_source_schemas
from strata_dagster.compile import compile_project
from strata_dagster.language import load_project, load_text
from strata_dagster.language.definition import (
    AggregateStep,
    DeriveStep,
    ExpandStep,
    FilterStep,
    FromStep,
    GroupStep,
    JoinStep,
    LetStep,
    SelectStep,
    SetOperationStep,
)
from strata_dagster.language.loader import link_project
from strata_dagster.language.parser import parse_module
from strata_dagster_tests.conftest import CUSTOMERS_COLUMNS, ORDERS_COLUMNS
from strata_dagster_tests.support.engine_support import SHOP, SHOP_MODELS

SOURCES = """
source orders {
  table: raw.orders
}
source customers {
  table: raw.customers
}
"""


def query(warehouse: Path, sql: str) -> list[tuple]:
    connection = duckdb.connect(str(warehouse), read_only=True)
    try:
        return connection.execute(sql).fetchall()
    finally:
        connection.close()


def row_hashes(warehouse: Path, table: str) -> list[tuple]:
    return query(warehouse, f"SELECT hash(t), count(*) FROM {table} AS t GROUP BY 1 ORDER BY 1")


def tables(warehouse: Path) -> list[tuple]:
    return query(warehouse, "SELECT table_schema, table_name FROM information_schema.tables ORDER BY ALL")


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> Path:
    warehouse = tmp_path_factory.mktemp("sample") / "warehouse.duckdb"
    write_sample_data(warehouse, 5_000)
    return warehouse


# --- write_sample_data -------------------------------------------------------------------------


def test_same_seed_gives_identical_tables(tmp_path):
    first, second = tmp_path / "a.duckdb", tmp_path / "b.duckdb"
    write_sample_data(first, 3_000, seed=11)
    write_sample_data(second, 3_000, seed=11)
    for table in ("raw.customers", "raw.orders"):
        assert row_hashes(first, table) == row_hashes(second, table)
        # Same rows in the same physical order, too.
        ordered = f"SELECT list(hash(t) ORDER BY rowid) FROM {table} AS t"
        assert query(first, ordered) == query(second, ordered)


def test_another_seed_gives_other_rows(tmp_path):
    first, second = tmp_path / "a.duckdb", tmp_path / "b.duckdb"
    write_sample_data(first, 3_000, seed=1)
    write_sample_data(second, 3_000, seed=2)
    assert row_hashes(first, "raw.orders") != row_hashes(second, "raw.orders")
    assert row_hashes(first, "raw.customers") != row_hashes(second, "raw.customers")


def test_row_counts_and_summary(tmp_path):
    warehouse = tmp_path / "w.duckdb"
    summary = write_sample_data(warehouse, 2_500)
    assert (summary.customers, summary.orders) == (50, 2_500)
    assert summary.rows == {"raw.customers": 50, "raw.orders": 2_500}
    assert query(warehouse, "SELECT count(*) FROM raw.orders") == [(2_500,)]
    assert query(warehouse, "SELECT count(*), count(DISTINCT customer_id) FROM raw.customers") == [(50, 50)]
    assert query(warehouse, "SELECT count(DISTINCT order_id) FROM raw.orders") == [(2_500,)]


def test_few_rows_still_get_ten_customers(tmp_path):
    summary = write_sample_data(tmp_path / "w.duckdb", 30)
    assert (summary.customers, summary.orders) == (10, 30)


def test_column_types(sample):
    assert read_source_schemas(sample, load_text(SOURCES)) == {
        "orders": ORDERS_COLUMNS,
        "customers": CUSTOMERS_COLUMNS,
    }


def test_orders_are_plausible(sample):
    [(earliest, latest, days, statuses, max_tags, min_amount, not_null)] = query(
        sample,
        """
        SELECT min(order_ts), max(order_ts), count(DISTINCT CAST(order_ts AS DATE)),
               list(DISTINCT status ORDER BY status), max(len(tags)), min(amount),
               count(*) FILTER (WHERE order_id IS NOT NULL AND customer_id IS NOT NULL
                                AND order_ts IS NOT NULL AND updated_at IS NOT NULL AND amount IS NOT NULL
                                AND status IS NOT NULL AND channel IS NOT NULL AND tags IS NOT NULL)
        FROM raw.orders
        """,
    )
    assert earliest >= datetime(2025, 1, 1)
    assert latest < datetime(2025, 1, 1) + timedelta(days=365)
    assert days == 365
    assert statuses == ["cancelled", "paid", "placed", "returned", "shipped"]
    assert max_tags == 3
    assert min_amount > 0
    assert not_null == 5_000
    assert query(sample, "SELECT count(*) FROM raw.orders WHERE updated_at < order_ts") == [(0,)]
    # Some orders were changed after they were placed: updated_at is a real change column.
    assert query(sample, "SELECT count(*) > 0 FROM raw.orders WHERE updated_at > order_ts") == [(True,)]
    assert query(sample, "SELECT count(DISTINCT len(tags)) FROM raw.orders") == [(4,)]


def test_days_and_start_are_honoured(tmp_path):
    warehouse = tmp_path / "w.duckdb"
    write_sample_data(warehouse, 1_000, days=31, start=date(2026, 3, 1))
    assert query(warehouse, "SELECT min(order_ts)::DATE, max(order_ts)::DATE FROM raw.orders") == [
        (date(2026, 3, 1), date(2026, 3, 31))
    ]


def test_some_orders_have_no_customer(sample):
    [(orphans, orders)] = query(
        sample,
        """
        SELECT count(*) FILTER (WHERE c.customer_id IS NULL), count(*)
        FROM raw.orders AS o LEFT JOIN raw.customers AS c ON o.customer_id = c.customer_id
        """,
    )
    assert 0 < orphans < orders * 0.05


def test_rewrite_replaces_the_tables(tmp_path):
    warehouse = tmp_path / "w.duckdb"
    write_sample_data(warehouse, 2_000)
    summary = write_sample_data(warehouse, 700, seed=3)
    assert (summary.customers, summary.orders) == (14, 700)
    assert query(warehouse, "SELECT count(*) FROM raw.orders") == [(700,)]
    assert tables(warehouse) == [("raw", "customers"), ("raw", "orders")]


def test_failed_write_leaves_the_previous_tables(tmp_path):
    warehouse = tmp_path / "w.duckdb"
    write_sample_data(warehouse, 500)
    before = row_hashes(warehouse, "raw.customers")
    connection = duckdb.connect(str(warehouse))
    # raw.orders becomes a view: the swap cannot drop it as a table, and fails mid-transaction.
    connection.execute("ALTER TABLE raw.orders RENAME TO orders_table")
    connection.execute("CREATE VIEW raw.orders AS SELECT * FROM raw.orders_table")
    connection.close()
    with pytest.raises(duckdb.Error):
        write_sample_data(warehouse, 2_000, seed=99)
    assert row_hashes(warehouse, "raw.customers") == before
    assert ("raw", "orders__staging") not in tables(warehouse)
    assert ("raw", "customers__staging") not in tables(warehouse)


def test_rejects_empty_sample(tmp_path):
    with pytest.raises(ValueError, match="rows"):
        write_sample_data(tmp_path / "w.duckdb", 0)
    assert not (tmp_path / "w.duckdb").exists()


# --- read_source_schemas -----------------------------------------------------------------------


def test_missing_warehouse_is_not_created(tmp_path):
    warehouse = tmp_path / "nothing.duckdb"
    assert read_source_schemas(warehouse, load_text(SOURCES)) == {}
    assert not warehouse.exists()


def test_missing_sources_are_absent(sample):
    sources = load_text(
        SOURCES
        + """
source gone {
  table: raw.gone
}
source no_schema {
  table: nowhere.orders
}
source unqualified {
}
"""
    )
    assert set(read_source_schemas(sample, sources)) == {"orders", "customers"}


def test_file_and_attached_database_sources(sample, tmp_path):
    root = tmp_path / "project"
    (root / "data").mkdir(parents=True)
    write_sample_data(root / "ingest.duckdb", 100)
    connection = duckdb.connect()
    connection.execute(f"COPY (SELECT 1::BIGINT AS id, 'a' AS label) TO '{root / 'data' / 'part1.parquet'}'")
    connection.execute(
        f"COPY (SELECT 1::BIGINT AS id, 2.5::DOUBLE AS score) TO '{root / 'data' / 'scores.csv'}'"
    )
    connection.close()
    sources = link_project(
        root,
        [
            parse_module(
                """
source parquet_files {
  path: 'data/*.parquet'
}
source csv_file {
  path: 'data/scores.csv'
}
source no_files {
  path: 'data/none/*.parquet'
}
source ingest_orders {
  table: raw.orders
  database: 'ingest.duckdb'
}
source ingest_missing {
  table: raw.orders
  database: 'missing.duckdb'
}
""",
                "m.strata",
            )
        ],
    )
    schemas = read_source_schemas(sample, sources)
    assert schemas == {
        "parquet_files": (("id", "BIGINT"), ("label", "VARCHAR")),
        "csv_file": (("id", "BIGINT"), ("score", "DOUBLE")),
        "ingest_orders": ORDERS_COLUMNS,
    }
    assert not (root / "missing.duckdb").exists()


# --- the shop example --------------------------------------------------------------------------


def test_shop_example_loads():
    project = load_project(SHOP)
    assert set(project.sources) == {"orders", "customers"}
    assert set(project.models) == SHOP_MODELS
    assert project.sources["orders"].versioning.column == "updated_at"
    assert project.models["stg_orders"].properties.merge_strategy == "upsert"
    assert project.models["daily_revenue"].properties.partitioned_by.grain == "day"
    assert project.models["monthly_revenue"].properties.partitioned_by.grain == "month"


def test_shop_example_uses_every_step_and_property():
    models = load_project(SHOP).models.values()
    steps = {type(step) for model in models for step in model.steps}
    assert steps == {
        FromStep,
        JoinStep,
        FilterStep,
        LetStep,
        DeriveStep,
        GroupStep,
        AggregateStep,
        SelectStep,
        SetOperationStep,
        ExpandStep,
    }
    joins = [step for model in models for step in model.steps if isinstance(step, JoinStep)]
    assert any(join.on is not None for join in joins) and any(join.using for join in joins)
    written = {name for model in models for name, _ in model.properties.locations}
    assert written == {
        "incremental",
        "merge_strategy",
        "merge_keys",
        "cdc_column",
        "lateness",
        "partitioned_by",
        "unique",
        "contract",
        "order_by",
        "description",
        "tags",
        "owners",
    }
    strategies = {model.properties.merge_strategy for model in models}
    assert strategies == {"replace", "append", "upsert", "append_new"}


def test_shop_example_runs_on_sample_data(tmp_path):
    """Every model compiles and runs on the sample data, and its pins and contract hold."""
    warehouse = tmp_path / "shop.duckdb"
    write_sample_data(warehouse, 5_000)
    project = load_project(SHOP)
    compiled = compile_project(project, read_source_schemas(warehouse, project))

    def relation(name: str) -> exp.Table:
        if name in project.sources:
            return exp.to_table(project.sources[name].table_name)
        return exp.table_(name, db="built")

    connection = duckdb.connect(str(warehouse))
    try:
        connection.execute("CREATE SCHEMA built")
        for name in project.order:
            connection.execute(f"CREATE TABLE built.{name} AS {compiled.sql(name, relation, pretty=False)}")
            properties = project.models[name].properties
            count = connection.execute(f"SELECT count(*) FROM built.{name}").fetchone()[0]
            assert count > 0, name
            if properties.unique:
                keys = ", ".join(properties.unique)
                distinct = connection.execute(
                    f"SELECT count(*) FROM (SELECT DISTINCT {keys} FROM built.{name})"
                )
                assert distinct.fetchone()[0] == count, name
            if properties.contract:
                described = connection.execute(f"DESCRIBE built.{name}").fetchall()
                assert [(row[0], row[1]) for row in described] == [
                    (column.name, column.type) for column in properties.contract
                ], name
                for column in properties.contract:
                    if column.is_not_null:
                        nulls = connection.execute(
                            f"SELECT count(*) FROM built.{name} WHERE {column.name} IS NULL"
                        )
                        assert nulls.fetchone()[0] == 0, (name, column.name)
        # The left joins keep orders whose customer is missing.
        assert connection.execute(
            "SELECT count(*) FROM built.daily_revenue WHERE region = 'unknown'"
        ).fetchone()[0]
        assert connection.execute(
            "SELECT count(*) FROM built.orders_enriched WHERE region = 'unknown'"
        ).fetchone()[0]
    finally:
        connection.close()
