"""A user's mistake met in a Dagster step ends it as a `dg.Failure` whose description is strata's
message (code, file:line:col, hint) and whose metadata holds them: never an IO manager's or op's
exception with the engine's stack trace under it; and a mistake found while Dagster loads the
definitions shows strata's message with no strata frame below `build_definitions`."""

import traceback

import dagster as dg
import duckdb
import pytest

from strata_dagster import build_definitions
from strata_dagster.errors import StrataError
from strata_dagster_tests.support.dagster_support import execute_assets, make_small_shop, observe_sources


def failure_of(result) -> dg.DagsterEvent:
    failures = [event for event in result.all_events if event.event_type == dg.DagsterEventType.STEP_FAILURE]
    assert len(failures) == 1, [event.message for event in failures]
    return failures[0]


def test_a_model_duckdb_refuses_fails_its_step_with_the_strata_message(tmp_path):
    project, warehouse = make_small_shop(tmp_path, rows=200)
    staging = project / "staging.strata"
    staging.write_text(
        staging.read_text().replace(
            "let order_day = cast(order_ts as date)", "let order_day = cast(sume(order_ts) as date)"
        )
    )
    defs = build_definitions(project, warehouse=warehouse)
    instance = dg.DagsterInstance.ephemeral()
    observe_sources(defs, instance)
    result = execute_assets(defs, instance, ["stg_orders"])
    assert not result.success
    failure = failure_of(result).step_failure_data
    assert failure.error.cls_name == "Failure" and failure.error.cause is None
    data = failure.user_failure_data
    assert data.description.startswith("error[E032]: DuckDB rejected model `stg_orders`")
    assert "staging.strata:9:7" in data.description and "= help:" in data.description
    metadata = {key: value.value for key, value in data.metadata.items()}
    assert metadata["strata/error_code"] == "E032" and metadata["strata/location"].endswith(
        "staging.strata:9:7"
    )


def test_a_source_that_cannot_be_read_fails_its_observation_with_the_strata_message(tmp_path):
    project, warehouse = make_small_shop(tmp_path, rows=200)
    defs = build_definitions(project, warehouse=warehouse)
    with duckdb.connect(str(warehouse)) as con:
        con.execute("DROP TABLE raw.customers")
    result = execute_assets(defs, dg.DagsterInstance.ephemeral(), ["customers"])
    assert not result.success
    data = failure_of(result).step_failure_data.user_failure_data
    assert data is not None and data.description.startswith("error[E012]: source `customers` cannot be read")
    assert {key: value.value for key, value in data.metadata.items()}["strata/error_code"] == "E012"


def test_a_typo_in_a_strata_file_reaches_the_load_error_without_the_parsers_frames(tmp_path):
    project, warehouse = make_small_shop(tmp_path, rows=200)
    marts = project / "marts.strata"
    marts.write_text(
        marts.read_text().replace("  from stg_orders\n  join left", "  frm stg_orders\n  join left", 1)
    )
    with pytest.raises(StrataError) as raised:
        build_definitions(project, warehouse=warehouse)
    error = raised.value
    assert (
        error.code == "E001"
        and "marts.strata:9:3" in error.render()
        and "did you mean `from`" in error.render()
    )
    # What Dagster shows under "Error occurred during the loading of Dagster definitions": the
    # exception's own stack and the errors it was raised from.
    ours = [
        frame.filename
        for frame in traceback.extract_tb(error.__traceback__)
        if "/strata_dagster/" in frame.filename
    ]
    assert all(name.endswith("orchestration/failures.py") for name in ours), ours
    assert error.__cause__ is None and error.__suppress_context__
