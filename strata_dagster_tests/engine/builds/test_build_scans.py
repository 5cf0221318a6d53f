"""What a build reads, counted: an upsert's content and its key-and-cdc figures come from one scan
of the new file, on a full build and on a delta, and equal the figures two separate scans give; a
source sliced by key blocks is hash-scanned once a run (its fingerprint and its blocks' figures);
the rows of a row-wise model's earlier state that its new segment replaces are scanned once, for
it and the models following it, within spans of the key; a model read by a day-partitioned model
is hashed once by its days, for its content and the reader's figures. DuckDB's query log (shared by every
connection to the held warehouse) shows the statements the run sent."""

import datetime as dt
import json

import duckdb

from strata_dagster.backends.duckdb.connection import connect, held_open
from strata_dagster.backends.opening import open_session
from strata_dagster.engine.builds.segment import KEY_SUM
from strata_dagster.engine.run import run_project
from strata_dagster.engine.sources.readings import observe_sources
from strata_dagster.sql.render import snapshot_table
from strata_dagster_tests.support import key_buckets_support
from strata_dagster_tests.support.engine_support import execute, make_module_project
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


def whole_row_hashes_of(statements, relation):
    """The statements that hash every row of `relation` (its content figures, whole or per
    bucket), not a window of it nor a key-and-cdc sum."""
    return [
        s
        for s in statements
        if f"{relation} AS __strata_row" in s and "HASH(__strata_row)" in s and " WHERE " not in s
    ]


def reads_of_replaced_rows(statements, table):
    """The statements that hold the rows of a model's earlier state (snapshot `table`) that a
    new segment replaces: each one a scan of that state."""
    return [s for s in statements if s.startswith("CREATE TEMPORARY TABLE") and f"{table} AS __seg" in s]


def test_a_key_bucketed_model_and_the_fingerprint_of_its_source_share_one_scan(tmp_path):
    """The source's fingerprint and the figures per key block the row-wise models compare come
    from one hash scan of the source, whatever the number of models sliced so (`stg` and
    `orders_region`); both equal what scans of their own give."""
    project, warehouse = key_buckets_support.make_project(tmp_path)
    run_project(project, warehouse)
    execute(warehouse, "UPDATE raw.orders SET amount = amount + 3 WHERE order_id = 100")
    result, statements = logged_run(warehouse, lambda: run_project(project, warehouse, only_stale=True))
    sliced = [result.outcome(name) for name in ("stg", "orders_region")]
    assert [(outcome.path, outcome.detail["partitions"]) for outcome in sliced] == [("partitions", ["1"])] * 2
    assert len(whole_row_hashes_of(statements, "raw.orders")) == 1, whole_row_hashes_of(
        statements, "raw.orders"
    )
    con = duckdb.connect(str(warehouse), read_only=True)
    try:
        figures = [
            con.execute(
                f"SELECT * FROM strata_snapshots.snap_{outcome.snapshot_id}_{outcome.model}__buckets ORDER BY __bucket"
            ).fetchall()
            for outcome in sliced
        ]
        own = con.execute(
            "SELECT order_id // 64, count(*), sum(hash(o)::HUGEINT) FROM raw.orders AS o GROUP BY 1 ORDER BY 1"
        ).fetchall()
    finally:
        con.close()
    assert figures == [own, own]
    # The fingerprint summed from the figures is the one the source's own scan gives.
    recorded = execute(
        warehouse,
        "SELECT fingerprint FROM strata.entry_sources WHERE source = 'orders' ORDER BY entry DESC LIMIT 1",
    )
    assert recorded[0][0] == observe_sources(project, warehouse, ["orders"])["orders"].fingerprint
    assert key_buckets_support.compare(duckdb.connect(str(warehouse)), "stg") == {"rows": 0, "groups": 0}


def test_a_narrowed_key_bucket_segment_is_followed_without_a_new_scan_of_the_earlier_state(tmp_path):
    """Two blocks recomputed, one of them equal to its live rows (a filtered-out row changed): the
    segment and its keys narrow to the other, and the day model following it reads the rows they
    replace from the rows the first read held, narrowed too, not from a second scan of the state."""
    project, warehouse = key_buckets_support.make_project(tmp_path)
    first = run_project(project, warehouse)
    base = first.outcome("stg").table_name
    execute(warehouse, "UPDATE raw.orders SET amount = amount + 3 WHERE order_id IN (7, 100)")  # 7: cancelled
    result, statements = logged_run(warehouse, lambda: run_project(project, warehouse, only_stale=True))
    stg, daily = result.outcome("stg"), result.outcome("daily")
    assert (stg.path, stg.detail["partitions_unchanged"]) == ("partitions", 1)
    assert daily.path == "partitions"
    assert len(reads_of_replaced_rows(statements, base)) == 1, reads_of_replaced_rows(statements, base)
    con = duckdb.connect(str(warehouse))
    try:
        for model in ("stg", "daily"):
            assert key_buckets_support.compare(con, model) == {"rows": 0, "groups": 0}, model
    finally:
        con.close()


def test_the_rows_a_new_key_block_replaces_are_read_within_spans_of_the_key(tmp_path):
    """New keys above the old ones: the earlier state's rows they replace are looked for only in
    the span of their blocks, which lets the scan skip the row groups of every other key."""
    project, warehouse = key_buckets_support.make_project(tmp_path)
    first = run_project(project, warehouse)
    base = first.outcome("stg").table_name
    execute(
        warehouse,
        "INSERT INTO raw.orders SELECT 200 + range, 1, ?, ?, 'paid', 5 FROM range(3)",
        params=[T0, T0],
    )
    result, statements = logged_run(warehouse, lambda: run_project(project, warehouse, only_stale=True))
    assert result.outcome("stg").detail["partitions"] == ["3"]
    (read,) = reads_of_replaced_rows(statements, base)
    assert "__before.order_id BETWEEN CAST('192' AS BIGINT) AND CAST('255' AS BIGINT)" in read, read


STAGED = """
source orders {
  table: raw.orders
}

model stg_orders {
  from orders
  filter status <> 'void'
  let order_date = cast(order_ts as date)
  select id, status, amount, order_ts, order_date
}

model daily {
  from stg_orders
  group order_date
  aggregate orders = count(*), amount = sum(amount)
  partitioned_by: day(order_date)
}
"""


def test_a_model_read_by_a_day_partitioned_model_is_hashed_once_for_both(tmp_path):
    """stg_orders' full build counts and hashes its rows by daily's days: their sum is its
    content, and daily records those figures without reading the rows again. Both equal what
    separate scans give."""
    project, warehouse = make_module_project(
        tmp_path,
        "shop.strata",
        STAGED,
        "CREATE TABLE raw.orders AS SELECT range AS id, CASE WHEN range % 9 = 0 THEN 'void' ELSE 'paid' END "
        "AS status, range % 97 AS amount, TIMESTAMP '2024-01-01' + to_hours(range * 5) AS order_ts FROM range(500)",
    )
    result, statements = logged_run(warehouse, lambda: run_project(project, warehouse))
    stg = result.outcome("stg_orders")
    assert stg.path == "full"
    relation = f"strata_snapshots.snap_{stg.snapshot_id}_stg_orders AS __strata_row"
    scans = [s for s in statements if relation in s and "HASH(" in s.upper()]
    assert len(scans) == 1, scans
    with open_session(warehouse, read_only=True) as session:
        recorded = session.history.snapshot(stg.snapshot_id)
        daily = session.history.snapshot(result.outcome("daily").snapshot_id)
        whole = session.content(snapshot_table(recorded.table_name))
    assert (recorded.row_count, recorded.row_hash_sum) == (whole.row_count, whole.row_hash_sum)
    assert recorded.content_hash == whole.fingerprint
    by_day = execute(
        warehouse,
        "SELECT CAST(order_date AS TEXT), count(*), sum(hash(r)::HUGEINT)::TEXT FROM main.v_stg_orders AS r GROUP BY 1",
    )
    assert daily.detail["partition_fingerprints"] == {day: [count, total] for day, count, total in by_day}
