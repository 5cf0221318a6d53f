"""Property: after random source changes and rollbacks, `plan` then `run` (same arguments): every
model takes a path the plan allowed, the partitions the plan named exactly are the ones rebuilt,
and a plan with nothing to build or publish is a run that does nothing."""

import datetime as dt

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strata_dagster.engine.commands.operations import rollback
from strata_dagster.engine.plan import plan_project
from strata_dagster.engine.run import run_project
from strata_dagster_tests.engine.builds.test_incremental_properties import STATUSES, T0
from strata_dagster_tests.engine.builds.test_incremental_properties import Source as MinuteSource
from strata_dagster_tests.support.incremental_support import MODULE, make_project

pytestmark = pytest.mark.usefixtures("detail_in_files")  # history details in files (conftest.py)

# The incremental models (upsert, append, append_new), a day-partitioned aggregate, and `replace`
# models downstream of both.
PLAN_MODULE = (
    MODULE
    + """
model daily {
  from events
  let day = cast(ts as date)
  group day, status
  aggregate total = sum(v), n = count(*)
  partitioned_by: day(day)
}

model by_status {
  from up
  group status
  aggregate n = count(*), total = sum(v)
}

model busiest {
  from daily
  group status
  aggregate days = count(*), total = sum(total)
}

-- Maintained from their input models' new segments (engine.builds.model_slices): row-wise by the upsert's
-- key, a window by its PARTITION BY, a union all of two models that only gain rows.
model up_rows {
  from up
  derive v2 = v * 2
}

model up_ranked {
  from up
  derive nth = row_number() over (partition by status order by id)
}

model ap_short {
  from ap
  select id, v
}

model gained {
  from an
  select id, v
  union all ap_short
}
"""
)

ids = st.integers(min_value=0, max_value=20)
insert = st.tuples(
    st.just("insert"),
    st.lists(st.tuples(st.sampled_from(STATUSES), st.integers(-2, 5)), min_size=1, max_size=4),
)
update = st.tuples(
    st.just("update"),
    st.lists(st.tuples(ids, st.sampled_from(STATUSES), st.integers(-2, 5)), min_size=1, max_size=3),
)
delete = st.tuples(st.just("delete"), st.lists(ids, min_size=1, max_size=3))
late = st.tuples(
    st.just("late"),
    st.lists(
        st.tuples(st.sampled_from(STATUSES), st.integers(-2, 5), st.integers(0, 30)), min_size=1, max_size=2
    ),
)
# A row of an old day edited without advancing `ts`: only whole-row fingerprints see it.
edit = st.tuples(st.just("edit"), st.tuples(ids, st.integers(-2, 5)))
# The views pointed back at what an earlier run published (which one: index modulo the runs so far).
back = st.tuples(st.just("rollback"), st.integers(0, 5))
steps = st.lists(st.one_of(insert, update, delete, late, edit, back), min_size=1, max_size=3)


class Source(MinuteSource):
    """Stamps 5 hours apart, so rows spread over days (partitions)."""

    def tick(self) -> dt.datetime:
        self.clock += 60 * 5
        return T0 + dt.timedelta(minutes=self.clock)

    def apply(self, step) -> None:
        if step[0] == "edit":
            row_id, value = step[1]
            self.con.execute("UPDATE raw.events SET v = ? WHERE id = ?", [value, row_id])
            return
        super().apply(step)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(history=steps, versioning=st.sampled_from(["cdc(ts)", "full"]))
def test_run_does_what_the_plan_said(tmp_path_factory, history, versioning):
    project, warehouse = make_project(tmp_path_factory.mktemp("plan"), PLAN_MODULE, versioning=versioning)
    con = duckdb.connect(str(warehouse))
    source = Source(con)
    source.apply(("insert", [("open", 1), ("paid", 2), ("void", 3), ("open", -1), ("paid", 4)]))
    con.close()
    runs = [run_project(project, warehouse).run_id]
    for step in history:
        if step[0] == "rollback":
            rollback(warehouse, runs[step[1] % len(runs)])
        else:
            con = duckdb.connect(str(warehouse))
            source.con = con
            source.apply(step)
            con.close()
        planned = plan_project(project, warehouse, only_stale=True)
        result = run_project(project, warehouse, only_stale=True)
        if not result.is_noop:
            runs.append(result.run_id)
        assert planned.would_run == (not result.is_noop), (step, planned.as_dict())
        for model in planned.models:
            outcome = result.outcome(model.model)
            if model.path == "reused":
                assert outcome.is_published == model.publishes_again, (step, model, outcome)
        for outcome in result.outcomes:
            model = planned.model(outcome.model)
            assert outcome.path in model.allowed, (step, model, outcome.path, outcome.detail)
            if model.path == "full" and outcome.path == "full" and "full_reason" in outcome.detail:
                assert model.reason == f"full: {outcome.detail['full_reason']}", (step, model)
            if model.is_exact and outcome.path == "partitions":
                assert sorted(outcome.detail["partitions"]) == list(model.partition_keys), (step, model)
            if model.window is not None and outcome.path == "delta" and model.window[1] is not None:
                window = outcome.detail["window"]
                assert (window["low"], window["high"]) == model.window, (step, model)
