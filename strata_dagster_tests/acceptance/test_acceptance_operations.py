"""The accountable operations, the same on both engines (issue 15): verify against a full rebuild,
drift found and repaired, a backfill with its reason and correction, rollback to an earlier run,
gc keeping what readers may still read, and `strata show`."""

import datetime as dt

import pyarrow.parquet as pq
import pytest

from strata_dagster.backends.opening import open_session
from strata_dagster.compile.relations import DEFAULT_BRANCH, branch_schema
from strata_dagster.engine.commands.backfill import backfill
from strata_dagster.engine.commands.gc import gc
from strata_dagster.engine.commands.operations import create_branch, promote, retire_removed, rollback
from strata_dagster.engine.commands.verify import verify
from strata_dagster.engine.plan import plan
from strata_dagster.engine.reads.show import export_rows, show_rows
from strata_dagster.engine.run import RunRequest
from strata_dagster.errors import StrataError
from strata_dagster_tests.support.acceptance_support import EVENTS, MODELS, Sources, differences, make_project
from strata_dagster_tests.support.engines_support import engine_under_test, normalised, spark_params


def seeded(engine, root):
    project = make_project(root)
    sources = Sources()
    for cust, status, value in (
        (0, "open", 1),
        (1, "paid", 4),
        (2, "void", 2),
        (0, "paid", 5),
        (1, "open", 3),
    ):
        sources.insert(cust, status, value)
    sources.write(engine)
    return project, sources


def assert_all_equal_to_full(engine):
    for model in MODELS:
        assert differences(engine, model) == ({}, {}), model


@pytest.mark.parametrize("engine_name", spark_params())
def test_verify_backfill_rollback_and_show(engine_name, tmp_path):
    with engine_under_test(engine_name, tmp_path) as engine:
        project, sources = seeded(engine, tmp_path)
        first = engine.run(project)
        before = {model: normalised(engine.live(model)) for model in MODELS}
        sources.apply(("update", [(1, "paid", 7)]))
        sources.apply(("insert", [(2, "paid", 6, 1)]))
        sources.write(engine)
        second = engine.run(project, only_stale=True)
        assert {outcome.model: outcome.path for outcome in second.outcomes}["up"] == "delta"
        assert_all_equal_to_full(engine)
        with engine.chosen():
            assert verify(project, engine.warehouse).is_equal

            # Drift: a row edited in place without advancing `ts` is invisible to a cdc delta by
            # contract; verify finds it, and a full refresh of the model repairs it.
            drifted = dict(sources.events)
            row = drifted[0]
            drifted[0] = (row[0], row[1], row[2], row[3] + 100, row[4])
            engine.write_table("raw.events", EVENTS, sorted(drifted.values()))
            assert engine.run(project, only_stale=True).is_noop
            report = verify(project, engine.warehouse, models=["up"])
            assert not report.is_equal and report.model("up").figures.row_delta == 0
            engine.run(project, models=["up"], full_refresh=True)
            assert verify(project, engine.warehouse, models=["up"]).is_equal
            sources.events = drifted

            # A backfill reads a corrected table, needs a reason, and is recorded with both.
            corrected = dict(sources.events)
            corrected[1] = (1, 1, "void", 7, corrected[1][4])
            engine.write_table("raw.events_fixed", EVENTS, sorted(corrected.values()))
            with pytest.raises(StrataError) as refused:
                backfill(
                    project, engine.warehouse, second.run_id, None, sources={"events": "raw.events_fixed"}
                )
            assert refused.value.code == "E085"
            fixed = backfill(
                project,
                engine.warehouse,
                second.run_id,
                "order 1 was void",
                sources={"events": "raw.events_fixed"},
            )
            with open_session(engine.warehouse, read_only=True) as session:
                entry = session.history.entry(fixed.entry)
            assert (entry.kind, entry.backfill_of, entry.reason) == (
                "backfill",
                second.run_id,
                "order 1 was void",
            )
            assert all(row[0] != 1 for row in engine.live("up"))

            # Branches: a zero-copy branch, a run on it, and its promotion to main.
            after_backfill = {model: normalised(engine.live(model)) for model in MODELS}
            create_branch(engine.warehouse, "dev")
            assert {model: normalised(engine.live(model, "dev")) for model in MODELS} == after_backfill
            sources.apply(("insert", [(0, "paid", 8, 2)]))
            sources.write(engine)
            engine.run(project, branch="dev", only_stale=True)
            assert {
                model: normalised(engine.live(model)) for model in MODELS
            } == after_backfill  # main untouched
            on_dev = {model: normalised(engine.live(model, "dev")) for model in MODELS}
            promote(engine.warehouse, "dev", "main")
            assert {model: normalised(engine.live(model)) for model in MODELS} == on_dev

            # Rollback: every view shows what the first run published again.
            rollback(engine.warehouse, first.run_id)
            assert {model: normalised(engine.live(model)) for model in MODELS} == before

            # show: the live rows as readers see them, and every row to a file.
            shown = show_rows(project, engine.warehouse, "daily", limit=2)
            assert [name for name, _ in shown.columns] == ["day", "total", "n"]
            assert len(shown.rows) == 2 and shown.is_truncated == (len(before["daily"]) > 2)
            written = export_rows(project, engine.warehouse, "up", tmp_path / "up.parquet")
            assert written == sum(before["up"].values()) == pq.read_table(tmp_path / "up.parquet").num_rows
            with pytest.raises(StrataError) as bad:
                export_rows(project, engine.warehouse, "up", tmp_path / "up.txt")
            assert bad.value.code == "E073"
            with pytest.raises(StrataError) as unknown:
                show_rows(project, engine.warehouse, "upp")
            assert unknown.value.code == "E025"


@pytest.mark.parametrize("engine_name", spark_params())
def test_gc_keeps_snapshots_readers_may_still_read(engine_name, tmp_path):
    with engine_under_test(engine_name, tmp_path) as engine:
        project, sources = seeded(engine, tmp_path)
        engine.run(project)
        sources.apply(("insert", [(0, "paid", 2, 0)]))
        sources.write(engine)
        engine.run(project, only_stale=True)
        sources.apply(("update", [(0, "open", 9)]))
        sources.write(engine)
        engine.run(project, only_stale=True)
        with engine.chosen():
            kept = gc(engine.warehouse, keep=0, grace=dt.timedelta(hours=1))
            assert kept.dropped == ()  # every state was live less than an hour ago
            dropped = gc(engine.warehouse, keep=0, grace=dt.timedelta(0))
            assert dropped.dropped  # superseded states go once the grace is over
            assert_all_equal_to_full(engine)
            assert verify(project, engine.warehouse).is_equal


@pytest.mark.parametrize("engine_name", spark_params())
def test_a_removed_models_view_is_named_retired_and_brought_back(engine_name, tmp_path):
    """A model deleted from the project keeps its last view: runs and plans name it (W004), retire
    drops it (an entry of its own), and rollback is exact both ways."""
    with engine_under_test(engine_name, tmp_path) as engine:
        project, sources = seeded(engine, tmp_path)
        first = engine.run(project)
        at_first = normalised(engine.live("by_region"))
        module = project / "models.strata"
        module.write_text(module.read_text().split("model by_region {")[0])
        sources.apply(("insert", [(1, "paid", 2, 0)]))
        sources.write(engine)
        assert engine.run(project, only_stale=True).removed == ("by_region",)
        with engine.chosen():
            planned = plan(RunRequest(project_dir=project, warehouse=engine.warehouse))
            assert planned.removed == ("by_region",)
            retired = retire_removed(project, engine.warehouse)
            assert [(change.model, change.after) for change in retired.changes] == [("by_region", ())]
            with open_session(engine.warehouse, read_only=True) as session:
                entry = session.history.entry(retired.entry)
                assert (entry.kind, entry.detail) == ("retire", {"retired": ["by_region"]})
            assert not has_view(engine, "by_region")
            assert retire_removed(project, engine.warehouse).changes == ()  # nothing left to retire
            assert engine.run(project, only_stale=True).removed == ()

            # Rollback to the first run shows its view again; to the retirement, drops it again.
            rollback(engine.warehouse, first.run_id)
            assert normalised(engine.live("by_region")) == at_first
            rollback(engine.warehouse, retired.run_id)
            assert not has_view(engine, "by_region")
            for model in MODELS[:-1]:
                assert differences(engine, model) == ({}, {}), model


def has_view(engine, model):
    with open_session(engine.warehouse, read_only=True) as session:
        return session.view_tables(branch_schema(DEFAULT_BRANCH), model) is not None
