"""Shared set-up for Dagster tests: a small shop, runs of asset selections, stale sets."""

import datetime as dt
import shutil
from pathlib import Path

import dagster as dg
from dagster._core.definitions.data_version import CachingStaleStatusResolver, StaleStatus
from dagster._core.loader import LoadingContextForTest

from strata_dagster.warehouse.sample_data import write_sample_data
from strata_dagster_tests.engine_support import SHOP, execute

START = dt.date(2025, 1, 1)
DAYS = 40  # 2025-01-01 .. 2025-02-09: 40 daily partitions, 2 monthly ones
SOURCES = ("orders", "customers")
UNPARTITIONED_MODELS = (
    "stg_orders",
    "stg_customers",
    "order_status_log",
    "first_seen_orders",
    "orders_enriched",
    "order_tags",
    "order_timeline",
)


def make_small_shop(tmp_path: Path, rows: int = 2_000, days: int = DAYS) -> tuple[Path, Path]:
    project = tmp_path / "shop"
    shutil.copytree(SHOP, project, ignore=shutil.ignore_patterns("*.duckdb*", "*.md", "*.py", "__pycache__"))
    warehouse = tmp_path / "warehouse.duckdb"
    write_sample_data(warehouse, rows, days=days, start=START)
    return project, warehouse


def day_keys(days: int = DAYS) -> list[str]:
    return [(START + dt.timedelta(days=index)).isoformat() for index in range(days)]


def execute_assets(defs: dg.Definitions, instance: dg.DagsterInstance, names, *, partitions=None, tags=None):
    """Run (materialize or observe) the named assets in one in-process run; `partitions` is a key
    or a (first, last) range."""
    keys = [dg.AssetKey(name) for name in names]
    job = defs.resolve_implicit_job_def_def_for_assets(keys)
    run_tags = dict(tags or {})
    partition_key = None
    if isinstance(partitions, tuple):
        run_tags["dagster/asset_partition_range_start"] = partitions[0]
        run_tags["dagster/asset_partition_range_end"] = partitions[1]
    else:
        partition_key = partitions
    result = job.execute_in_process(
        instance=instance,
        asset_selection=keys,
        partition_key=partition_key,
        tags=run_tags,
        raise_on_error=False,
    )
    return result


def observe_sources(defs, instance, names=SOURCES):
    result = execute_assets(defs, instance, names)
    assert result.success
    return result


def resolver(defs: dg.Definitions, instance: dg.DagsterInstance) -> CachingStaleStatusResolver:
    return CachingStaleStatusResolver(instance, defs.resolve_asset_graph(), LoadingContextForTest(instance))


def stale_set(defs: dg.Definitions, instance: dg.DagsterInstance) -> set[str]:
    """Every stale asset (`name`) and stale partition (`name[key]`), as Dagster's UI would show them."""
    status = resolver(defs, instance)
    graph = defs.resolve_asset_graph()
    stale = set()
    for key in graph.materializable_asset_keys:
        node = graph.get(key)
        name = key.to_user_string()
        if node.partitions_def is None:
            if status.get_status(key) == StaleStatus.STALE:
                stale.add(name)
            continue
        for partition in node.partitions_def.get_partition_keys():
            if status.get_status(key, partition) == StaleStatus.STALE:
                stale.add(f"{name}[{partition}]")
    return stale


def status_of(defs, instance, name, partition=None) -> StaleStatus:
    return resolver(defs, instance).get_status(dg.AssetKey(name), partition)


def materialize_everything(defs: dg.Definitions, instance: dg.DagsterInstance) -> None:
    """Observe the sources, then materialize every model: each partitioned one in a ranged run."""
    observe_sources(defs, instance)
    assert execute_assets(defs, instance, UNPARTITIONED_MODELS).success
    daily, monthly = partition_ranges(defs)
    assert execute_assets(defs, instance, ["daily_revenue"], partitions=daily).success
    assert execute_assets(defs, instance, ["monthly_revenue"], partitions=monthly).success


def partition_ranges(defs):
    graph = defs.resolve_asset_graph()
    ranges = []
    for name in ("daily_revenue", "monthly_revenue"):
        keys = graph.get(dg.AssetKey(name)).partitions_def.get_partition_keys()
        ranges.append((keys[0], keys[-1]))
    return ranges


def change_order(warehouse: Path, order_id: int, amount: str = "12345.67") -> None:
    """An update of one order as its writer makes it: a new amount, stamped after every earlier change."""
    execute(
        warehouse,
        "UPDATE raw.orders SET amount = CAST(? AS DECIMAL(12,2)), "
        "updated_at = (SELECT max(updated_at) FROM raw.orders) + INTERVAL 1 SECOND WHERE order_id = ?",
        params=[amount, order_id],
    )


def order_day(warehouse: Path, order_id: int) -> str:
    return str(
        execute(
            warehouse, "SELECT CAST(order_ts AS DATE) FROM raw.orders WHERE order_id = ?", params=[order_id]
        )[0][0]
    )


def materializations(result, name):
    return [
        event.event_specific_data.materialization
        for event in result.get_asset_materialization_events()
        if event.event_specific_data.materialization.asset_key == dg.AssetKey(name)
    ]
