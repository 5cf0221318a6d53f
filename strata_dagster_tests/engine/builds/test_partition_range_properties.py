"""Property: after random appends, late updates, status changes, moves and deletes, a `--partitions`
run over a random range gives the requested partitions exactly a full rebuild's rows and leaves
every other partition as it was; the next ordinary build then brings every model to a full
rebuild's rows (row-hash multisets, counts, totals)."""

import datetime as dt

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strata_dagster.engine.run import run_project
from strata_dagster_tests.engine.builds.test_partition_properties import (
    append,
    apply,
    delete,
    late_update,
    move,
    status,
)
from strata_dagster_tests.support.partition_range_support import partition_rows
from strata_dagster_tests.support.partition_support import (
    EQUAL,
    START,
    compare,
    full_query,
    make_seeded_project,
)

pytestmark = pytest.mark.usefixtures("detail_in_files")  # history details in files (conftest.py)

NOW = START + dt.timedelta(days=80)
change = st.one_of(append, late_update, status, move, delete)
request = st.tuples(st.sampled_from(["daily", "daily+", "monthly"]), st.integers(0, 80), st.integers(0, 12))
steps = st.lists(st.tuples(change, request), min_size=1, max_size=3)


def bounds(con, query: str, column: str) -> tuple[dt.date, dt.date]:
    return con.execute(f"SELECT min({column}), max({column}) FROM ({query})").fetchone()


def month(first: dt.date, index: int) -> dt.date:
    return dt.date(first.year + (first.month - 1 + index) // 12, (first.month - 1 + index) % 12 + 1, 1)


def texts(target: str, first: dt.date, last: dt.date, offset: int, length: int) -> tuple[str, list[str]]:
    """A range inside [first, last] (the model's partitions) as `--partitions` text, and its keys."""
    if target == "monthly":
        months = (last.year - first.year) * 12 + last.month - first.month + 1
        start = offset % months
        keys = [month(first, i).isoformat() for i in range(start, min(months - 1, start + length % 3) + 1)]
        return f"{keys[0][:7]}..{keys[-1][:7]}", keys
    days = (last - first).days + 1
    start = offset % days
    keys = [
        (first + dt.timedelta(days=i)).isoformat() for i in range(start, min(days - 1, start + length) + 1)
    ]
    return f"{keys[0]}..{keys[-1]}", keys


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(history=steps, versioning=st.sampled_from(["cdc(updated_at)", "full"]))
def test_a_partition_range_rebuilds_exactly_its_partitions(tmp_path_factory, history, versioning):
    project, warehouse = make_seeded_project(tmp_path_factory.mktemp("ranges"), versioning)
    run_project(project, warehouse, now=NOW)
    for clock, (step, (target, offset, length)) in enumerate(history, start=1):
        con = duckdb.connect(str(warehouse))
        try:
            apply(con, step, clock)
            model = "monthly" if target == "monthly" else "daily"
            column = "order_month" if model == "monthly" else "order_day"
            first, last = bounds(con, full_query(model), column)
        finally:
            con.close()
        text, keys = texts(target, first, last, offset, length)
        live = f"SELECT * FROM main.v_{model}"
        before = partition_rows(warehouse, live, column)

        result = run_project(project, warehouse, models=[target], partitions=[text], now=NOW)

        assert result.outcome(model).detail["requested_partitions"] == keys
        after, full = (
            partition_rows(warehouse, live, column),
            partition_rows(warehouse, full_query(model), column),
        )
        for key in keys:
            assert after.get(key) == full.get(key), (key, step, text)
        assert {k: v for k, v in after.items() if k not in keys} == {
            k: v for k, v in before.items() if k not in keys
        }, (step, text)

        run_project(project, warehouse, only_stale=True, now=NOW)
        con = duckdb.connect(str(warehouse))
        try:
            for name in ("daily", "monthly", "by_ts"):
                assert compare(con, name) == EQUAL, (name, step, text)
        finally:
            con.close()
