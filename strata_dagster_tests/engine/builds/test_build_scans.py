"""What a build reads of the snapshot it has just written: an upsert's content and its key-and-cdc
figures come from one scan of the new file, on a full build and on a delta, and equal the figures
two separate scans give. DuckDB's query log (shared by every connection to the held warehouse)
shows the statements the run sent."""

import datetime as dt
import json

import duckdb

from strata_dagster.backends.duckdb.connection import connect, held_open
from strata_dagster.engine.builds.segment import KEY_SUM
from strata_dagster.engine.run import run_project
from strata_dagster_tests.support.engine_support import execute
from strata_dagster_tests.support.incremental_support import make_project

T0 = dt.datetime(2024, 1, 1)


def logged_run(warehouse, run):
    """Run `run()` with the warehouse held open and DuckDB's query log on; return its result and
    the statements it sent."""
    with held_open(warehouse):
        with connect(warehouse) as con:
            con.execute("CALL enable_logging('QueryLog')")
        result = run()
        with connect(warehouse) as con:
            statements = [
                row[0]
                for row in con.execute("SELECT message FROM duckdb_logs WHERE type = 'QueryLog'").fetchall()
            ]
            con.execute("CALL disable_logging()")
    return result, statements


def hash_scans_of(statements, snapshot_id):
    """The statements that hash the rows of snapshot `snapshot_id` of model `up` (its content or
    key sums), not those of the tables named after it (its keys)."""
    relation = f"strata_snapshots.snap_{snapshot_id}_up AS __strata_row"
    return [s for s in statements if relation in s and "HASH(" in s.upper()]


def recorded_key_sum(warehouse, snapshot_id):
    detail = execute(
        warehouse, "SELECT detail FROM strata.snapshots WHERE snapshot_id = ?", params=[snapshot_id]
    )
    return json.loads(detail[0][0])[KEY_SUM]


def test_a_full_build_of_an_upsert_reads_its_new_snapshot_once(tmp_path):
    project, warehouse = make_project(tmp_path)
    execute(
        warehouse,
        "INSERT INTO raw.events SELECT range, 'open', range % 7, ? + to_hours(range) FROM range(100)",
        params=[T0],
    )
    run_project(project, warehouse, models=["ap"])  # the warehouse exists: it can be held
    result, statements = logged_run(warehouse, lambda: run_project(project, warehouse, models=["up"]))
    up = result.outcome("up")
    assert up.path == "full"
    assert len(hash_scans_of(statements, up.snapshot_id)) == 1, hash_scans_of(statements, up.snapshot_id)
    # What one scan recorded is what the key sum alone gives.
    con = duckdb.connect(str(warehouse), read_only=True)
    count, total = con.execute("SELECT count(*), sum(hash(id, ts)::HUGEINT) FROM main.v_up").fetchone()
    con.close()
    assert recorded_key_sum(warehouse, up.snapshot_id) == [count, str(total)]


def test_a_delta_of_an_upsert_reads_its_new_segment_once(tmp_path):
    project, warehouse = make_project(tmp_path)
    execute(
        warehouse,
        "INSERT INTO raw.events SELECT range, 'open', range % 7, ? + to_hours(range) FROM range(100)",
        params=[T0],
    )
    run_project(project, warehouse, models=["up"])
    execute(
        warehouse, "UPDATE raw.events SET v = v + 1, ts = ? + INTERVAL 1000 HOUR WHERE id = 3", params=[T0]
    )
    result, statements = logged_run(
        warehouse, lambda: run_project(project, warehouse, models=["up"], only_stale=True)
    )
    up = result.outcome("up")
    assert up.path == "delta"
    assert len(hash_scans_of(statements, up.snapshot_id)) == 1, hash_scans_of(statements, up.snapshot_id)
