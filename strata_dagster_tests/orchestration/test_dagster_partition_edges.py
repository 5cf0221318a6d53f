"""Why a day-partitioned model reads its unpartitioned `from` model through a partitions companion
(`stg_orders -> stg_orders__by_day -> daily_revenue`) rather than by a direct edge: Dagster's own
staleness, on plain assets, for each shape the direct edge could take (docs/dagster.md, "Partitions
companions"). Should a Dagster release change either behaviour, these tests say the direct edge has
become possible."""

import dagster as dg

from strata_dagster_tests.support.dagster_support import stale_set

DAYS = dg.DailyPartitionsDefinition(start_date="2025-01-01", end_date="2025-01-08")  # 7 days
VERSION = {"value": "1"}


def _versioned(context: dg.AssetExecutionContext) -> dg.Output:
    return dg.Output(None, data_version=dg.DataVersion(VERSION["value"]))


@dg.asset(name="model")
def unpartitioned_model(context: dg.AssetExecutionContext) -> dg.Output:
    return _versioned(context)


@dg.asset(name="reader", partitions_def=DAYS, deps=[unpartitioned_model])
def day_reader(context: dg.AssetExecutionContext) -> dg.Output:
    return _versioned(context)


@dg.asset(name="model", partitions_def=DAYS)
def day_model(context: dg.AssetExecutionContext) -> dg.Output:
    return _versioned(context)


@dg.asset(name="whole_reader", deps=[day_model])
def whole_reader(context: dg.AssetExecutionContext) -> dg.Output:
    return _versioned(context)


def _materialize_days(assets, instance: dg.DagsterInstance, selection: str, days: list[str]) -> None:
    for day in days:
        assert dg.materialize(assets, instance=instance, selection=selection, partition_key=day).success


def test_a_direct_edge_from_an_unpartitioned_model_makes_every_day_stale_on_any_change():
    """The direct edge: one new data version of the model, and every day of its reader are stale,
    where the engine rebuilds only the days whose rows changed."""
    assets = [unpartitioned_model, day_reader]
    defs = dg.Definitions(assets=assets)
    days = DAYS.get_partition_keys()
    with dg.DagsterInstance.ephemeral() as instance:
        VERSION["value"] = "1"
        assert dg.materialize(assets, instance=instance, selection="model").success
        _materialize_days(assets, instance, "reader", days)
        assert stale_set(defs, instance) == set()
        VERSION["value"] = "2"  # one row of one day changed
        assert dg.materialize(assets, instance=instance, selection="model").success
        assert stale_set(defs, instance) == {f"reader[{day}]" for day in days}


def test_a_day_partitioned_model_hides_a_change_from_its_unpartitioned_readers():
    """The other shape: the model partitioned by day (a data version per day, as the companion has).
    Its unpartitioned readers (`orders_enriched`, `order_tags`) then never turn stale: Dagster skips
    a dependency on a time-window-partitioned asset through an all-partitions mapping."""
    assets = [day_model, whole_reader]
    defs = dg.Definitions(assets=assets)
    days = DAYS.get_partition_keys()
    with dg.DagsterInstance.ephemeral() as instance:
        VERSION["value"] = "1"
        _materialize_days(assets, instance, "model", days)
        assert dg.materialize(assets, instance=instance, selection="whole_reader").success
        VERSION["value"] = "2"  # one day of the model changed
        _materialize_days(assets, instance, "model", days[5:6])
        assert stale_set(defs, instance) == set()  # a change the reader should show is not shown
