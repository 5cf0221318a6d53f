"""Property: random histories of source changes and corrections (a table read through `--source`,
edited without advancing the change column, as a correction usually is). After every run the
upsert equals a full rebuild over the relation the run read; append and append_new, whenever they
build fully, equal their full definitions over it; and a run reading a correction that replaces
the source's rows never takes a delta. Compared as row-hash multisets."""

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strata_dagster.engine.run import run_project
from strata_dagster_tests.engine.builds.test_incremental_properties import STATUSES, Source
from strata_dagster_tests.support.incremental_support import make_project, multiset

pytestmark = pytest.mark.usefixtures("detail_in_files")  # history details in files (conftest.py)

RAW, FIXES = "raw.events", "fixes.events"
ids = st.integers(min_value=0, max_value=12)
silent_edits = st.lists(st.tuples(ids, st.integers(-2, 5)), min_size=1, max_size=3)
change = st.one_of(
    st.tuples(
        st.just("insert"),
        st.lists(st.tuples(st.sampled_from(STATUSES), st.integers(-2, 5)), min_size=1, max_size=3),
    ),
    st.tuples(
        st.just("update"),
        st.lists(st.tuples(ids, st.sampled_from(STATUSES), st.integers(-2, 5)), min_size=1, max_size=3),
    ),
    st.tuples(st.just("delete"), st.lists(ids, min_size=1, max_size=2)),
)
# `correct`: fixes.events becomes the source's rows with silent edits; `edit`: fixes.events is
# edited in place the same way; `again`: the correction is read again unchanged.
correction = st.one_of(
    st.tuples(st.just("correct"), silent_edits),
    st.tuples(st.just("edit"), silent_edits),
    st.tuples(st.just("again"), st.just(None)),
)
steps = st.lists(st.one_of(change, correction), min_size=1, max_size=4)


def full_definitions(relation: str) -> dict[str, str]:
    """Each model computed fully by plain SQL from `relation` (a test constant)."""
    return {
        "up": f"SELECT *, CAST(ts AS DATE) AS day FROM {relation} WHERE status <> 'void'",
        "ap": f"SELECT id, status, v, ts FROM {relation}",
        "an": f"SELECT id, v, ts FROM {relation} WHERE v >= 0",
    }


def edit_silently(con, table: str, edits) -> None:
    for row_id, value in edits:
        con.execute(f"UPDATE {table} SET v = ? WHERE id = ?", [value, row_id])


def is_replacing(con) -> bool:
    """Whether fixes.events holds other rows than the source's own table."""
    return multiset(con, f"SELECT * FROM {FIXES}") != multiset(con, f"SELECT * FROM {RAW}")


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(history=steps, versioning=st.sampled_from(["cdc(ts)", "full"]))
def test_random_histories_with_corrections(tmp_path_factory, history, versioning):
    project, warehouse = make_project(tmp_path_factory.mktemp("corrections"), versioning=versioning)
    con = duckdb.connect(str(warehouse))
    source = Source(con)
    source.apply(("insert", [(STATUSES[index % 3], index) for index in range(10)]))
    con.execute(f"CREATE SCHEMA fixes; CREATE TABLE {FIXES} AS FROM {RAW}")
    con.close()
    run_project(project, warehouse)
    for kind, argument in history:
        con = duckdb.connect(str(warehouse))
        source.con = con
        if kind == "correct":
            con.execute(f"CREATE OR REPLACE TABLE {FIXES} AS FROM {RAW}")
            edit_silently(con, FIXES, argument)
        elif kind == "edit":
            edit_silently(con, FIXES, argument)
        elif kind != "again":
            source.apply((kind, argument))
        is_corrected = kind in ("correct", "edit", "again")
        replacing = is_corrected and is_replacing(con)
        con.close()
        overrides = {"events": FIXES} if is_corrected else {}
        result = run_project(project, warehouse, overrides=overrides, only_stale=True)
        relation = FIXES if is_corrected else RAW
        con = duckdb.connect(str(warehouse))
        try:
            for name, full in full_definitions(relation).items():
                outcome = result.outcome(name)
                if replacing:
                    assert outcome.path in ("full", "reused"), (kind, outcome)
                if name == "up" or outcome.path == "full":
                    assert multiset(con, f"SELECT * FROM main.v_{name}") == multiset(con, full), (
                        kind,
                        name,
                        outcome,
                    )
        finally:
            con.close()
