"""Partitioned aggregates maintained from their input's delta (engine.builds.aggregate_delta): which shapes
it takes, what history says of such a build, and the partitions it leaves to a recomputation."""

import datetime as dt

import duckdb
import pytest

from strata_dagster.engine.builds.aggregate_delta import (
    MAINTAINED,
    AggregateShape,
    exactness_problem,
    shape_of,
)
from strata_dagster.engine.reads.explain import build_why
from strata_dagster.engine.run import run_project
from strata_dagster_tests.support.aggregate_delta_support import START, compare, make_project
from strata_dagster_tests.support.helpers import compile_text

pytestmark = pytest.mark.compat  # also run at the lowest versions pyproject.toml admits (.ci/run)

STG = """
model stg {
  from orders
  filter status <> 'cancelled'
  let order_day = cast(order_ts as date)
  incremental
  merge_strategy: upsert
  merge_keys: [order_id]
  cdc_column: updated_at
}
"""


def _shape(body: str):
    text = STG + "model m {\n  from stg\n" + body + "\n  partitioned_by: day(order_day)\n}\n"
    compiled = compile_text(text)
    return shape_of(compiled.project.models["m"], compiled.models["m"])


def test_the_shapes_the_delta_maintains():
    shape = _shape(
        "join left customers using (customer_id)\n  filter amount > 0\n  derive big = amount > 100\n"
        "  group order_day, region\n"
        "  aggregate n = count(*), c = count(amount), s = sum(amount), d = count(distinct customer_id), "
        "lo = min(amount), hi = max(order_ts)"
    )
    assert isinstance(shape, AggregateShape)
    assert shape.key_names == ("order_day", "region")
    assert [(item.name, item.kind) for item in shape.aggregates] == [
        ("n", "count_star"),
        ("c", "count"),
        ("s", "sum"),
        ("d", "count_distinct"),
        ("lo", "min"),
        ("hi", "max"),
    ]
    assert shape.count_star is not None and [item.name for item in shape.distinct] == ["d"]


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ("group order_day\n  aggregate a = avg(amount)", "`a` is not count, sum"),
        ("group order_day\n  aggregate a = sum(amount) * 2", "`a` is not count, sum"),
        ("group order_day\n  aggregate a = count(distinct customer_id, channel)", "`a` is not count, sum"),
        ("group order_day\n  aggregate a = sum(amount)\n  derive b = a + 1", "does not end with `group`"),
        ("group order_day\n  aggregate a = sum(amount)\n  filter a > 0", "does not end with `group`"),
        ("expand tags as tag\n  group order_day\n  aggregate a = count(*)", "not row-wise"),
    ],
)
def test_the_shapes_it_leaves_to_a_recomputation(body, why):
    shape = _shape(body)
    assert isinstance(shape, str) and why in shape, shape


def test_a_float_sum_is_not_maintained():
    shape = _shape("group order_day\n  aggregate a = sum(amount), n = count(*)")
    assert isinstance(shape, AggregateShape)
    exact = [["order_day", "DATE"], ["a", "DECIMAL(38,2)"], ["n", "BIGINT"]]
    assert exactness_problem(shape, exact) is None
    floating = [["order_day", "DATE"], ["a", "DOUBLE"], ["n", "BIGINT"]]
    assert "DOUBLE" in (exactness_problem(shape, floating) or "")


def _run(warehouse, project, statement, params=()):
    con = duckdb.connect(str(warehouse))
    try:
        con.execute(statement, list(params))
    finally:
        con.close()
    result = run_project(project, warehouse, only_stale=True)
    con = duckdb.connect(str(warehouse))
    try:
        for model in ("daily_all", "daily_sums", "daily_float"):
            assert compare(con, model) == {"rows": 0, "groups": 0}, model
    finally:
        con.close()
    return {outcome.model: outcome for outcome in result.outcomes}


def test_a_change_is_maintained_and_history_says_so(tmp_path):
    project, warehouse = make_project(tmp_path)
    run_project(project, warehouse)
    stamp = START + dt.timedelta(days=400)
    built = _run(
        warehouse,
        project,
        "UPDATE raw.orders SET qty = coalesce(qty, 0) + 1, updated_at = ? WHERE order_id IN (1, 2, 30)",
        [stamp],
    )
    daily = built["daily_all"]
    assert daily.path == "partitions"
    maintained = daily.detail[MAINTAINED]
    assert maintained["groups"] >= 1 and maintained["partitions_recomputed"] == []
    why = build_why("daily_all", daily.path, daily.detail, daily.rows, "day")
    assert "maintained from the input's delta" in why, why
    assert MAINTAINED not in built["daily_float"].detail  # a float sum is recomputed


def test_a_sum_that_may_have_lost_its_last_value_recomputes_its_partition(tmp_path):
    project, warehouse = make_project(tmp_path)
    run_project(project, warehouse)
    con = duckdb.connect(str(warehouse))
    day, region = con.execute(
        "SELECT CAST(o.order_ts AS DATE), c.region FROM raw.orders o LEFT JOIN raw.customers c USING (customer_id) "
        "WHERE o.order_id = 3"
    ).fetchone()
    # Every order of that group but one gets no quantity; the last one's quantity becomes NULL too.
    others = con.execute(
        "SELECT list(o.order_id) FROM raw.orders o LEFT JOIN raw.customers c USING (customer_id) "
        "WHERE CAST(o.order_ts AS DATE) = ? AND c.region IS NOT DISTINCT FROM ? AND o.order_id <> 3",
        [day, region],
    ).fetchone()[0]
    stamp = START + dt.timedelta(days=400)
    con.execute(
        "UPDATE raw.orders SET qty = NULL, updated_at = ? WHERE list_contains(?, order_id)",
        [stamp, others or []],
    )
    con.execute(
        "UPDATE raw.orders SET qty = 2, status = 'paid', amount = 4, updated_at = ? WHERE order_id = 3",
        [stamp],
    )
    con.close()
    run_project(project, warehouse, only_stale=True)
    stamp = START + dt.timedelta(days=401)
    built = _run(
        warehouse, project, "UPDATE raw.orders SET qty = NULL, updated_at = ? WHERE order_id = 3", [stamp]
    )
    daily = built["daily_all"]
    assert daily.path == "partitions"
    assert daily.detail[MAINTAINED]["partitions_recomputed"] == [str(day)], daily.detail
