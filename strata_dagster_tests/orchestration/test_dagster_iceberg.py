"""Dagster with publication to Iceberg: model assets name their Iceberg table and kind, and the
docs' example of a user's asset reading a strata model with a plain pyiceberg call works."""

import re

import dagster as dg
import duckdb
import polars as pl
import pytest

pytest.importorskip("pyiceberg")

from strata_dagster import build_definitions, strata_python_model  # noqa: E402
from strata_dagster.backends.iceberg.catalog import folder_of  # noqa: E402
from strata_dagster_tests.support.dagster_support import execute_assets, make_small_shop, materializations  # noqa: E402
from strata_dagster_tests.support.paths import DOCS  # noqa: E402


@strata_python_model(code_version="1")
def region_orders(orders_enriched: pl.DataFrame) -> pl.DataFrame:
    return orders_enriched.group_by("region").agg(orders=pl.len()).sort("region")


ICEBERG_DOC = DOCS / "iceberg.md"


def _docs_example(catalog_uri: str) -> dict:
    text = ICEBERG_DOC.read_text()
    block = re.search(r"<!-- iceberg-dagster-example -->\n```python\n(.*?)```", text, re.DOTALL)
    assert block is not None
    code = block.group(1).replace('"sqlite:///warehouse.duckdb.iceberg/catalog.db"', repr(catalog_uri))
    namespace: dict = {}
    exec(compile(code, str(ICEBERG_DOC), "exec"), namespace)
    return namespace


def test_model_assets_name_their_iceberg_table_and_a_user_asset_reads_one(tmp_path, monkeypatch):
    monkeypatch.setenv("STRATA_ICEBERG_CATALOG", "sqlite")
    project, warehouse = make_small_shop(tmp_path, rows=300, days=3)
    defs = build_definitions(project, warehouse=warehouse, python_assets=[region_orders])
    graph = defs.resolve_asset_graph()
    for model in ("stg_orders", "region_orders"):  # a strata model, a Python model
        spec = graph.get(dg.AssetKey(model))
        assert spec.metadata["dagster/table_name"] == f"main.{model}"
        assert "iceberg" in spec.kinds

    user = _docs_example(f"sqlite:///{folder_of(warehouse.resolve()) / 'catalog.db'}")["orders_per_status"]
    both = dg.Definitions.merge(defs, dg.Definitions(assets=[user]))
    instance = dg.DagsterInstance.ephemeral()
    result = execute_assets(both, instance, ["stg_orders", "orders_per_status"])
    assert result.success
    built = materializations(result, "stg_orders")[-1]
    assert int(built.metadata["strata/iceberg_snapshot_id"].value) > 0
    counted = materializations(result, "orders_per_status")[-1].metadata
    con = duckdb.connect(str(warehouse), read_only=True)
    try:
        expected = dict(con.execute("SELECT status, count(*) FROM main.v_stg_orders GROUP BY 1").fetchall())
    finally:
        con.close()
    assert {status: value.value for status, value in counted.items()} == expected


def test_without_publication_assets_keep_their_duckdb_view(tmp_path, monkeypatch):
    monkeypatch.delenv("STRATA_ICEBERG_CATALOG", raising=False)
    project, warehouse = make_small_shop(tmp_path, rows=100, days=2)
    spec = (
        build_definitions(project, warehouse=warehouse).resolve_asset_graph().get(dg.AssetKey("stg_orders"))
    )
    assert spec.metadata["dagster/table_name"] == "main.v_stg_orders"
    assert "iceberg" not in spec.kinds
