"""Repairing a publication a crash cut short: every live view back to what the history says.

A Spark publication logs its history rows, repoints the views one by one, then marks the commit
(backends/spark/history_log.py). When a writer opens a warehouse whose log holds a commit without its
marker, some views may show snapshots the history never recorded: each view of each branch is
compared with the recorded pointer and repointed where it differs (a view the lost run created for
a model never published is dropped), then the commit is marked abandoned. The views then show the
last committed state, whole, and the next run builds again what the lost one would have.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from strata_dagster.backends.spark import catalog, history_log
from strata_dagster.backends.spark.session import SparkWarehouseSession
from strata_dagster.compile.relations import VIEW_PREFIX, branch_schema
from strata_dagster.sql.views import view_table
from strata_dagster.state.states import state_query, state_tables


@dataclass(frozen=True)
class Repair:
    commit_ids: tuple[str, ...]
    repointed: tuple[str, ...]  # `branch.model` of every view put back
    dropped: tuple[str, ...]


def repair_interrupted(session: SparkWarehouseSession) -> Repair:
    repointed: list[str] = []
    dropped: list[str] = []
    for branch in session.history.branches():
        schema = branch_schema(branch)
        pointers = session.history.pointers(branch)
        for model, snapshot_ids in pointers.items():
            record = session.history.snapshot(snapshot_ids[-1])
            if record is None:
                continue
            if session.view_tables(schema, model) != state_tables(session.history, record):
                session.point_now(schema, model, state_query(session.history, record))
                repointed.append(f"{branch}.{model}")
        recorded = {view_table(schema, model).name for model in pointers}
        for name in sorted(catalog.view_texts(session.con, schema)):
            if name.startswith(VIEW_PREFIX) and name not in recorded:
                session.con.sql(
                    exp.Drop(tables=[exp.table_(name, db=schema)], kind="VIEW", exists=True).sql("spark")
                )
                dropped.append(f"{branch}.{name}")
    for commit in session.interrupted:
        history_log.mark(session.con, commit.commit_id, commit.row_count, history_log.ABANDONED)
    repair = Repair(
        tuple(commit.commit_id for commit in session.interrupted), tuple(repointed), tuple(dropped)
    )
    session.interrupted = []
    return repair
