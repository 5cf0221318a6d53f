"""Asset metadata as dagster-dbt gives it, on the shop example: column schema, column lineage, code
references, kinds, owners and table names at definition time; the model's SQL and published column
schema on materializations; Dagster's column schema change checks on models with a contract."""

import dagster as dg
import polars as pl
import pytest

from strata_dagster import StrataDagsterTranslator, build_definitions, strata_python_model
from strata_dagster.engine.reads.explain import history as read_history
from strata_dagster.orchestration.checks.model_checks import SCHEMA_CHANGE_CHECK
from strata_dagster_tests.support.dagster_support import (
    dagster_dev,
    example_workspace,
    execute_assets,
    make_small_shop,
    materializations,
    observe_sources,
)
from strata_dagster_tests.support.engine_support import edit_module, execute

SCHEMA_KEY = "dagster/column_schema"
LINEAGE_KEY = "dagster/column_lineage"
REFERENCES_KEY = "dagster/code_references"
TABLE_KEY = "dagster/table_name"


@strata_python_model(code_version="1", owners=["team:analytics"])
def region_orders(orders_enriched: pl.DataFrame) -> pl.DataFrame:
    return orders_enriched.group_by("region").agg(orders=pl.len()).sort("region")


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    return make_small_shop(tmp_path_factory.mktemp("metadata"), rows=400, days=5)


@pytest.fixture(scope="module")
def graph(shop):
    project, warehouse = shop
    return build_definitions(
        project, warehouse=warehouse, python_assets=[region_orders]
    ).resolve_asset_graph()


def node(graph, name):
    return graph.get(dg.AssetKey(name))


def columns(schema: dg.TableSchema) -> dict[str, tuple[str, bool, bool]]:
    return {
        column.name: (column.type, column.constraints.nullable, column.constraints.unique)
        for column in schema.columns
    }


def lineage(graph, name) -> dict[str, set[tuple[str, str]]]:
    value = node(graph, name).metadata[LINEAGE_KEY]
    return {
        column: {(dep.asset_key.to_user_string(), dep.column_name) for dep in deps}
        for column, deps in value.deps_by_column.items()
    }


def test_column_schema_has_contract_types_not_null_and_unique_pins(graph):
    daily = node(graph, "daily_revenue").metadata[SCHEMA_KEY]
    assert columns(daily) == {
        "order_day": ("DATE", False, False),
        "region": ("VARCHAR", False, False),
        "revenue": ("DECIMAL(38,2)", True, False),
        "order_count": ("BIGINT", False, False),
        "customer_count": ("BIGINT", False, False),
    }
    # A two-column unique pin is a table constraint; a one-column one marks its column.
    assert daily.constraints.other == ["unique (order_day, region)"]
    assert columns(node(graph, "stg_customers").metadata[SCHEMA_KEY])["customer_id"] == (
        "BIGINT",
        False,
        True,
    )


def test_column_schema_types_without_a_contract_are_what_duckdb_binds_the_query_to(graph):
    # No contract and never built: the types DuckDB gives the model's query over the sources now.
    enriched = columns(node(graph, "orders_enriched").metadata[SCHEMA_KEY])
    assert list(enriched) == [
        "order_id",
        "customer_id",
        "order_ts",
        "order_day",
        "status",
        "amount",
        "channel",
        "region",
        "segment",
        "customer_order_number",
    ]
    assert enriched["order_id"] == ("BIGINT", True, True)
    assert enriched["order_day"][0] == "DATE"
    assert enriched["amount"][0] == "DECIMAL(12,2)"
    assert enriched["customer_order_number"][0] == "BIGINT"
    assert columns(node(graph, "monthly_revenue").metadata[SCHEMA_KEY])["order_count"][0] == "HUGEINT"
    orders = columns(node(graph, "orders").metadata[SCHEMA_KEY])
    assert orders["tags"] == ("VARCHAR[]", True, False)
    assert len(orders) == 8


def test_column_lineage_of_a_join_and_aggregate_model(graph):
    assert lineage(graph, "daily_revenue") == {
        "order_day": {("stg_orders", "order_day")},
        "region": {("stg_customers", "region")},
        "revenue": {("stg_orders", "amount")},
        "order_count": set(),  # count(*) reads no column
        # `using (customer_id)`: the column comes from both sides of the join.
        "customer_count": {("stg_orders", "customer_id"), ("stg_customers", "customer_id")},
    }


def test_column_lineage_through_let_derive_select_window_union_and_expand(graph):
    stg_orders = lineage(graph, "stg_orders")
    assert stg_orders["order_day"] == {("orders", "order_ts")}  # let
    assert stg_orders["amount"] == {("orders", "amount")}  # passthrough of `*`
    stg_customers = lineage(graph, "stg_customers")
    assert stg_customers["signup_month"] == {("customers", "signup_date")}  # derive
    assert stg_customers["is_business"] == {("customers", "segment")}
    enriched = lineage(graph, "orders_enriched")
    assert enriched["region"] == {("stg_customers", "region")}  # select over a join
    assert enriched["customer_order_number"] == {
        ("stg_orders", "customer_id"),
        ("stg_orders", "order_ts"),
        ("stg_orders", "order_id"),
    }
    timeline = lineage(graph, "order_timeline")  # union all: by position
    assert timeline["happened_at"] == {("first_seen_orders", "order_ts"), ("order_status_log", "updated_at")}
    assert timeline["status"] == {("order_status_log", "status")}  # 'placed' is a literal
    assert lineage(graph, "order_tags")["tag"] == {("stg_orders", "tags")}  # expand
    assert lineage(graph, "monthly_revenue")["order_month"] == {("daily_revenue", "order_day")}


def test_code_references_point_at_the_declaring_line(shop, graph):
    project, _ = shop
    for name, module, declaration in (
        ("daily_revenue", "marts.strata", "model daily_revenue {"),
        ("stg_orders", "staging.strata", "model stg_orders {"),
        ("orders", "sources.strata", "source orders {"),
    ):
        (reference,) = node(graph, name).metadata[REFERENCES_KEY].code_references
        assert reference.file_path == str((project / module).resolve())
        lines = (project / module).read_text().splitlines()
        assert lines[reference.line_number - 1] == declaration
    (reference,) = node(graph, "region_orders").metadata[REFERENCES_KEY].code_references
    assert reference.file_path == __file__
    assert "def region_orders" in open(__file__).read().splitlines()[reference.line_number]


def test_kinds_owners_and_table_names(graph):
    assert node(graph, "orders").kinds == {"duckdb"}
    assert node(graph, "daily_revenue").kinds == {"duckdb", "sql"}
    assert node(graph, "region_orders").kinds == {"python", "duckdb"}
    assert node(graph, "daily_revenue").owners == ["team:finance"]
    assert node(graph, "monthly_revenue").owners == []
    assert node(graph, "region_orders").owners == ["team:analytics"]
    assert node(graph, "orders").metadata[TABLE_KEY] == "raw.orders"
    assert node(graph, "daily_revenue").metadata[TABLE_KEY] == "main.v_daily_revenue"
    # The Python model, never run: the view it will be published as.
    assert node(graph, "region_orders").metadata[TABLE_KEY] == "main.v_region_orders"


def test_file_sources_have_their_format_as_kind_and_their_columns(tmp_path):
    project = tmp_path / "files"
    project.mkdir()
    warehouse = tmp_path / "warehouse.duckdb"
    execute(
        warehouse,
        f"COPY (SELECT 1::BIGINT AS id, 'a' AS label) TO '{project / 'events.parquet'}' (FORMAT parquet)",
        f"COPY (SELECT 2::BIGINT AS id, 'b' AS label) TO '{project / 'events.csv'}' (FORMAT csv, HEADER)",
    )
    (project / "m.strata").write_text(
        "source events { path: 'events.parquet' }\n"
        "source more_events { path: 'events.csv' }\n"
        "model labels {\n  from events\n  union all more_events\n}\n"
    )
    graph = build_definitions(project, warehouse=warehouse).resolve_asset_graph()
    assert node(graph, "events").kinds == {"parquet"}
    assert node(graph, "more_events").kinds == {"csv"}
    assert columns(node(graph, "events").metadata[SCHEMA_KEY])["id"][0] == "BIGINT"
    assert lineage(graph, "labels")["label"] == {("events", "label"), ("more_events", "label")}


def test_a_source_that_cannot_be_read_yet_leaves_names_only_and_the_definitions_load(tmp_path):
    project = tmp_path / "later"
    project.mkdir()
    warehouse = tmp_path / "warehouse.duckdb"
    execute(warehouse, "SELECT 1")  # a warehouse without the source's table
    (project / "m.strata").write_text(
        "source later { table: raw.later }\nmodel picked {\n  from later\n  select a, b as c\n}\n"
    )
    graph = build_definitions(project, warehouse=warehouse).resolve_asset_graph()
    assert SCHEMA_KEY not in node(graph, "later").metadata
    assert columns(node(graph, "picked").metadata[SCHEMA_KEY]) == {
        "a": ("unknown", True, False),
        "c": ("unknown", True, False),
    }
    assert LINEAGE_KEY not in node(graph, "picked").metadata  # `later`'s columns are unknown


def test_a_translator_subclass_overrides_schema_lineage_and_owners(shop):
    project, warehouse = shop

    class Quiet(StrataDagsterTranslator):
        def get_column_schema(self, props):
            return None

        def get_column_lineage(self, props, upstream_keys):
            return None

        def get_owners(self, props):
            return ["team:platform"]

    graph = build_definitions(project, warehouse=warehouse, translator=Quiet()).resolve_asset_graph()
    daily = node(graph, "daily_revenue")
    assert SCHEMA_KEY not in daily.metadata and LINEAGE_KEY not in daily.metadata
    assert daily.owners == ["team:platform"]


# -- materializations -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def materialized(shop):
    project, warehouse = shop
    defs = build_definitions(project, warehouse=warehouse)
    instance = dg.DagsterInstance.ephemeral()
    observe_sources(defs, instance)
    assert execute_assets(defs, instance, ["stg_orders", "stg_customers"]).success
    keys = defs.resolve_asset_graph().get(dg.AssetKey("daily_revenue")).partitions_def.get_partition_keys()
    result = execute_assets(defs, instance, ["daily_revenue"], partitions=(keys[0], keys[-1]))
    assert result.success
    return defs, instance, result, keys


def test_the_sql_is_pretty_over_the_live_views_and_shown_once_per_run(materialized):
    defs, instance, result, keys = materialized
    events = materializations(result, "daily_revenue")
    assert [event.partition for event in events] == keys
    with_sql = [event for event in events if "strata/sql" in event.metadata]
    assert [event.partition for event in with_sql] == [keys[-1]]
    sql = with_sql[0].metadata["strata/sql"].value
    assert "main.v_stg_orders" in sql and "main.v_stg_customers" in sql
    assert "snap_" not in sql and "strata_snapshots" not in sql
    assert "\n  SUM(amount) AS revenue," in sql  # pretty-printed


def test_every_materialization_says_why_in_historys_words(shop, materialized):
    """`strata/why`: the engine's explanation of the path the build took, the line `strata history`
    shows for it (and `strata plan` words the same way before a run)."""
    _, warehouse = shop
    defs, instance, result, keys = materialized
    explained = {
        (item.entry.run_id, build.model): build.text()
        for item in read_history(warehouse)
        for build in item.builds
    }

    def history_says(event, model):
        return explained[(event.metadata["strata/run_id"].value, model)]

    daily = materializations(result, "daily_revenue")
    assert {event.metadata["strata/why"].value for event in daily} == {"full: first build"}
    assert all(event.metadata["strata/why"].value == history_says(event, "daily_revenue") for event in daily)
    stg = instance.get_latest_materialization_event(dg.AssetKey("stg_orders")).asset_materialization
    assert stg.metadata["strata/why"].value == history_says(stg, "stg_orders")


def test_every_materialization_carries_the_published_column_schema(materialized):
    defs, instance, result, keys = materialized
    for event in materializations(result, "daily_revenue"):
        schema = event.metadata[SCHEMA_KEY].schema
        assert [(column.name, column.type) for column in schema.columns] == [
            ("order_day", "DATE"),
            ("region", "VARCHAR"),
            ("revenue", "DECIMAL(38,2)"),
            ("order_count", "BIGINT"),
            ("customer_count", "BIGINT"),
        ]
        assert schema.columns[0].constraints.nullable is False


def test_a_python_models_materialization_carries_its_published_column_schema(shop):
    project, warehouse = shop
    defs = build_definitions(project, warehouse=warehouse, python_assets=[region_orders])
    instance = dg.DagsterInstance.ephemeral()
    observe_sources(defs, instance)
    assert execute_assets(defs, instance, ["stg_orders", "stg_customers", "orders_enriched"]).success
    result = execute_assets(defs, instance, ["region_orders"])
    assert result.success
    (event,) = materializations(result, "region_orders")
    schema = event.metadata[SCHEMA_KEY].schema
    assert [(column.name, column.type) for column in schema.columns] == [
        ("region", "VARCHAR"),
        ("orders", "UINTEGER"),
    ]
    assert event.metadata[TABLE_KEY].value == "main.v_region_orders"


def test_models_with_a_contract_get_dagsters_column_schema_change_check(tmp_path):
    project, warehouse = make_small_shop(tmp_path, rows=300, days=3)
    defs = build_definitions(project, warehouse=warehouse)
    graph = defs.resolve_asset_graph()
    checked = {
        key.asset_key.to_user_string() for key in graph.asset_check_keys if key.name == SCHEMA_CHANGE_CHECK
    }
    assert checked == {"stg_customers", "daily_revenue"}
    instance = dg.DagsterInstance.ephemeral()
    observe_sources(defs, instance)
    assert execute_assets(defs, instance, ["stg_customers"]).success
    unchanged = execute_assets(defs, instance, ["stg_customers"])
    (evaluation,) = [
        e for e in unchanged.get_asset_check_evaluations() if e.check_name == SCHEMA_CHANGE_CHECK
    ]
    assert evaluation.passed
    # A new column, declared in the contract too: the build publishes, the check warns.
    edit_module(
        project / "staging.strata",
        "is_business = segment <> 'consumer'\n",
        "is_business = segment <> 'consumer',\n    name_length = length(name)\n",
    )
    edit_module(
        project / "staging.strata",
        "    is_business: BOOLEAN\n",
        "    is_business: BOOLEAN,\n    name_length: BIGINT\n",
    )
    defs = build_definitions(project, warehouse=warehouse)
    changed = execute_assets(defs, instance, ["stg_customers"])
    assert changed.success
    (evaluation,) = [e for e in changed.get_asset_check_evaluations() if e.check_name == SCHEMA_CHANGE_CHECK]
    assert not evaluation.passed
    assert evaluation.severity == dg.AssetCheckSeverity.WARN
    assert "Added columns: name_length" in evaluation.description


# -- the webserver ----------------------------------------------------------------------------------

ASSET_METADATA = """
query($keys: [AssetKeyInput!]) { assetNodes(assetKeys: $keys) {
  assetKey { path } kinds owners { ... on TeamAssetOwner { team } ... on UserAssetOwner { email } }
  metadataEntries { label
    ... on TableSchemaMetadataEntry { schema { columns { name type constraints { nullable unique } } } }
    ... on TableColumnLineageMetadataEntry { lineage { columnName columnDeps { assetKey { path } columnName } } }
    ... on CodeReferencesMetadataEntry { codeReferences { ... on LocalFileCodeReference { filePath lineNumber } } }
    ... on TextMetadataEntry { text } } } }
"""


def test_the_ui_shows_schema_lineage_code_references_owners_and_kinds(tmp_path):
    """What the asset page of `dagster dev` reads (GraphQL), for the example's definitions.py."""
    project, _, home = example_workspace(tmp_path)
    names = ["daily_revenue", "orders", "region_summary"]
    with dagster_dev(tmp_path, home) as (graphql, _):
        found = graphql(ASSET_METADATA, keys=[{"path": [name]} for name in names])["assetNodes"]
    nodes = {item["assetKey"]["path"][0]: item for item in found}
    entries = {name: {entry["label"]: entry for entry in nodes[name]["metadataEntries"]} for name in names}
    daily = entries["daily_revenue"]
    assert nodes["daily_revenue"]["owners"] == [{"team": "finance"}]
    assert set(nodes["daily_revenue"]["kinds"]) == {"duckdb", "sql"}
    assert [(c["name"], c["type"]) for c in daily[SCHEMA_KEY]["schema"]["columns"]][:2] == [
        ("order_day", "DATE"),
        ("region", "VARCHAR"),
    ]
    revenue = {item["columnName"]: item["columnDeps"] for item in daily[LINEAGE_KEY]["lineage"]}["revenue"]
    assert revenue == [{"assetKey": {"path": ["stg_orders"]}, "columnName": "amount"}]
    (reference,) = daily[REFERENCES_KEY]["codeReferences"]
    assert reference["filePath"] == str((project / "marts.strata").resolve())
    assert daily[TABLE_KEY]["text"] == "main.v_daily_revenue"
    assert nodes["orders"]["kinds"] == ["duckdb"]
    assert entries["orders"][TABLE_KEY]["text"] == "raw.orders"
    assert entries["region_summary"][TABLE_KEY]["text"] == "main.v_region_summary"
    (reference,) = entries["region_summary"][REFERENCES_KEY]["codeReferences"]
    assert reference["filePath"] == str(project / "definitions.py")


def test_column_lineage_is_on_the_materializations_too(materialized):
    """Each run's latest materialization carries the model's column lineage (the definition's), as
    the SQL: on every unpartitioned model's event, on a partitioned run's last partition."""
    defs, instance, result, keys = materialized
    graph = defs.resolve_asset_graph()

    def deps(value) -> dict[str, set]:
        lineage = value.value if isinstance(value, dg.MetadataValue) else value
        return {column: set(found) for column, found in lineage.deps_by_column.items()}

    for name in ("stg_orders", "daily_revenue"):
        event = instance.get_latest_materialization_event(dg.AssetKey(name)).asset_materialization
        declared = deps(graph.get(dg.AssetKey(name)).metadata[LINEAGE_KEY])
        assert declared and deps(event.metadata[LINEAGE_KEY]) == declared, name
    events = materializations(result, "daily_revenue")
    assert [event.partition for event in events if LINEAGE_KEY in event.metadata] == [keys[-1]]
