"""The stale status strata reads through Dagster's public event records (sensors.stale_status) is
the one Dagster's own resolver computes (what the UI shows), over random observations,
materializations and code-version changes of plain Dagster assets, partitioned and not. The test
asks Dagster's private resolver as the reference; the package itself never imports it."""

import random

import dagster as dg
import pytest
from dagster._core.definitions.data_version import CachingStaleStatusResolver, StaleStatus
from dagster._core.loader import LoadingContext

from strata_dagster.orchestration.sensors.stale_status import StaleStatusReader

DAYS = dg.DailyPartitionsDefinition(start_date="2025-01-01", end_date="2025-01-04")


class _Loading(LoadingContext):
    def __init__(self, instance: dg.DagsterInstance) -> None:
        self._instance = instance
        self._loaders: dict = {}

    @property
    def instance(self) -> dg.DagsterInstance:
        return self._instance

    @property
    def loaders(self) -> dict:
        return self._loaders


def _definitions(code: dict[str, str | None], values: dict[str, str]) -> dg.Definitions:
    @dg.observable_source_asset(name="src")
    def src() -> dg.DataVersion:
        return dg.DataVersion(values["src"])

    @dg.asset(deps=[src], code_version=code["a"])
    def a() -> dg.Output[None]:
        return dg.Output(None, data_version=dg.DataVersion(values["a"]))

    @dg.asset(deps=[a], code_version=code["b"])
    def b() -> None:
        return None

    @dg.asset(deps=[a], partitions_def=DAYS, code_version=code["p"])
    def p(context: dg.AssetExecutionContext) -> dg.Output[None]:
        return dg.Output(None, data_version=dg.DataVersion(values[f"p/{context.partition_key}"]))

    @dg.asset(deps=[p], partitions_def=DAYS, code_version="1")
    def q() -> None:
        return None

    @dg.asset(deps=[p], code_version="1")
    def total() -> None:
        return None

    return dg.Definitions(assets=[src, a, b, p, q, total])


def _agree(instance: dg.DagsterInstance, defs: dg.Definitions, step: str) -> int:
    graph = defs.resolve_asset_graph()
    dagster = CachingStaleStatusResolver(instance, graph, _Loading(instance))
    ours = StaleStatusReader(instance, graph)
    stale = 0
    for name in ("a", "b", "p", "q", "total"):
        key = dg.AssetKey(name)
        for partition in DAYS.get_partition_keys() if graph.get(key).partitions_def else [None]:
            expected = dagster.get_status(key, partition) == StaleStatus.STALE
            assert ours.is_stale(key, partition) == expected, (step, name, partition)
            if expected:
                stale += 1
                assert ours.why(key, [partition]) != "stale", (step, name, partition)
    return stale


@pytest.mark.parametrize("seed", range(4))
def test_the_public_reading_agrees_with_dagsters_stale_status(seed: int) -> None:
    rng = random.Random(seed)
    instance = dg.DagsterInstance.ephemeral()
    code: dict[str, str | None] = {"a": "1", "b": None, "p": "1"}
    values = {"src": "s0", "a": "a0", **{f"p/{day}": "p0" for day in DAYS.get_partition_keys()}}
    defs = _definitions(code, values)
    assert dg.materialize(list(defs.assets or ()), instance=instance, selection=["a", "b", "total"]).success
    for day in DAYS.get_partition_keys():
        assert dg.materialize(
            list(defs.assets or ()), instance=instance, selection=["p", "q"], partition_key=day
        ).success
    seen_stale = 0
    for step in range(10):
        action = rng.choice(["observe", "a", "b", "p", "q", "total", "code"])
        if action == "observe":
            values["src"] = rng.choice(["s0", "s1", "s2"])
            defs = _definitions(code, values)
            job = defs.get_implicit_global_asset_job_def()
            assert job.execute_in_process(instance=instance, asset_selection=[dg.AssetKey("src")]).success
        elif action == "code":
            code[rng.choice(["a", "p"])] = str(rng.randint(1, 3))
            defs = _definitions(code, values)
        elif action in ("p", "q"):
            day = rng.choice(DAYS.get_partition_keys())
            values[f"p/{day}"] = rng.choice(["p0", "p1"])
            defs = _definitions(code, values)
            assert dg.materialize(
                defs.assets, instance=instance, selection=[action], partition_key=day
            ).success
        else:
            values["a"] = rng.choice(["a0", "a1"])
            defs = _definitions(code, values)
            assert dg.materialize(list(defs.assets or ()), instance=instance, selection=[action]).success
        seen_stale += _agree(instance, defs, f"{step}: {action}")
    assert seen_stale > 0  # the walk made something stale: the comparison was not of fresh assets only
