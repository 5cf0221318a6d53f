"""A unit test's incremental step merges as the engine does: after random changes to the shop's
orders, a step written from the engine's own states (its live rows before, the source rows in the
window, its live rows after) passes, for the upsert, append and append_new models."""

import shutil

import duckdb
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from strata_dagster.engine.commands.unit_tests import fixture_literal, run_unit_tests
from strata_dagster.engine.run import run_project
from strata_dagster_tests.support.engine_support import execute, make_shop

STEP_MODELS = ("stg_orders", "order_status_log", "first_seen_orders")
ROWS = 40
CHANGES = {
    "cancel": "status = 'cancelled'",
    "ship": "status = 'shipped'",
    "reprice": "amount = amount + 1",
    "retag": "tags = ['changed']",
}


def rows(con, query):
    cursor = con.execute(query)
    return [d[0] for d in cursor.description], cursor.fetchall()


def table(columns, values) -> str:
    lines = ["(" + ", ".join(columns) + ")"]
    lines += ["(" + ", ".join(fixture_literal(value) for value in row) + ")" for row in values]
    return "[\n    " + "\n    ".join(lines) + "\n  ]"


def step_module(before, window, after) -> str:
    blocks = []
    for model in STEP_MODELS:
        blocks.append(
            f"test {model} engine_step {{\n"
            f"  previous {table(*before[model])}\n"
            f"  given orders {table(*window)}\n"
            f"  expect {table(*after[model])}\n}}\n"
        )
    return "\n".join(blocks)


def live(warehouse):
    con = duckdb.connect(str(warehouse), read_only=True)
    try:
        return {model: rows(con, f"SELECT * FROM main.v_{model}") for model in STEP_MODELS}
    finally:
        con.close()


def test_an_engine_step_written_as_a_unit_test_passes(tmp_path_factory):
    base = tmp_path_factory.mktemp("built")
    project, warehouse = make_shop(base, rows=ROWS)
    (project / "tests.strata").unlink()
    run_project(project, warehouse, models=STEP_MODELS)

    @settings(
        max_examples=6,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
        phases=[Phase.explicit, Phase.generate],  # shrinking engine runs takes minutes
    )
    @given(
        changes=st.lists(st.tuples(st.integers(1, ROWS), st.sampled_from(sorted(CHANGES))), max_size=6),
        new_orders=st.integers(0, 3),
    )
    def check(changes, new_orders):
        folder = tmp_path_factory.mktemp("case")
        case_project, case_warehouse = folder / "shop", folder / "warehouse.duckdb"
        shutil.copytree(project, case_project)
        shutil.copy(warehouse, case_warehouse)
        before = live(case_warehouse)
        (watermark,) = execute(case_warehouse, "SELECT max(updated_at) FROM raw.orders")[0]
        statements = []
        for index, (order_id, change) in enumerate(changes, start=1):
            statements.append(
                f"UPDATE raw.orders SET {CHANGES[change]}, updated_at = TIMESTAMP '{watermark}' "
                f"+ INTERVAL {index} MINUTE WHERE order_id = {order_id}"
            )
        for offset in range(new_orders):
            statements.append(
                f"INSERT INTO raw.orders SELECT order_id + {1000 + offset}, customer_id, order_ts, "
                f"TIMESTAMP '{watermark}' + INTERVAL {100 + offset} MINUTE, 'paid', amount, channel, tags "
                "FROM raw.orders WHERE order_id = 1"
            )
        if statements:
            execute(case_warehouse, *statements)
        result = run_project(case_project, case_warehouse, models=STEP_MODELS)
        assert "full" not in {outcome.path for outcome in result.outcomes}  # the engine took deltas
        con = duckdb.connect(str(case_warehouse), read_only=True)
        try:
            window = rows(con, f"SELECT * FROM raw.orders WHERE updated_at > TIMESTAMP '{watermark}'")
        finally:
            con.close()
        if not window[1]:
            return  # nothing changed: no step to write
        (case_project / "tests.strata").write_text(step_module(before, window, live(case_warehouse)))
        report = run_unit_tests(case_project, case_warehouse, STEP_MODELS)
        assert len(report.results) == 3
        assert report.is_passed, [result.as_json() for result in report.failed]

    check()
