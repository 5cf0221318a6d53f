"""`backends.duckdb.connection.held_open`: inside the block, every connection to the warehouse is a new
connection to one open database (its own transactions), and the file's lock is this process's
until the block ends. The Dagster IO manager holds the warehouse this way for a model's output."""

import subprocess
import sys

import duckdb

from strata_dagster.backends.duckdb.connection import connect, held_open

OTHER_PROCESS_OPENS = (
    "import sys, duckdb\n"
    "try:\n"
    "    duckdb.connect(sys.argv[1], read_only=True).close()\n"
    "except duckdb.IOException as error:\n"
    "    sys.exit('lock' in str(error) and 3 or 4)\n"
)


def other_process_can_open(path) -> bool:
    result = subprocess.run([sys.executable, "-c", OTHER_PROCESS_OPENS, str(path)], timeout=60)
    assert result.returncode in (0, 3), result  # 3: refused for the lock
    return result.returncode == 0


def test_connections_inside_a_hold_share_one_open_file_and_keep_their_own_transactions(tmp_path):
    path = tmp_path / "warehouse.duckdb"
    duckdb.connect(str(path)).close()
    with held_open(path):
        with connect(path) as writer:
            writer.execute("CREATE TABLE t AS SELECT 1 AS v")
        with connect(path, read_only=True) as reader:  # a read-only caller shares the open database
            assert reader.execute("SELECT v FROM t").fetchall() == [(1,)]
        with connect(path) as first, connect(path) as second:
            first.execute("BEGIN")
            first.execute("INSERT INTO t VALUES (2)")
            assert second.execute("SELECT count(*) FROM t").fetchall() == [(1,)]  # not committed
            first.execute("ROLLBACK")
        with held_open(path):  # nested: joins the outer hold, which outlives it
            pass
        with connect(path) as after:
            assert after.execute("SELECT count(*) FROM t").fetchall() == [(1,)]
        assert not other_process_can_open(path)  # the file stays open for the whole block
    assert other_process_can_open(path)
    with connect(path, read_only=True) as reader:
        assert reader.execute("SELECT v FROM t").fetchall() == [(1,)]


def test_a_missing_warehouse_is_not_held_nor_created(tmp_path):
    path = tmp_path / "missing.duckdb"
    with held_open(path):
        assert not path.exists()
