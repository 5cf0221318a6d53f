"""Every statement strata runs is evaluated in UTC (backends.duckdb.sql.EVALUATION_TIME_ZONE), as on
Spark: a TIMESTAMPTZ cut into days gives the same rows whatever the zone of the process that runs
it (a Dagster worker, a laptop's CLI). Each command runs in its own process, under its own TZ."""

import os
import subprocess
import sys

import duckdb

MODULE = """
source events {
  table: raw.events
  versioning: cdc(updated_at)
}
model daily {
  from events
  let day = cast(ts as date)
  group day
  aggregate n = count(*)
  partitioned_by: day(day)
}
test daily cut_in_utc {
  given events [
    (id, ts,                                     updated_at)
    (1,  timestamptz '2026-01-01 03:00:00+00',   timestamp '2026-01-01 00:00:00')
    (2,  timestamptz '2026-01-01 23:30:00+00',   timestamp '2026-01-01 00:00:00')
  ]
  expect [
    (day,               n)
    (date '2026-01-01', 2)
  ]
}
"""
UTC_DAYS = [("2026-01-01", 24), ("2026-01-02", 24)]


def strata(zone: str, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "strata_dagster.cli.main", *map(str, args)],
        env={**os.environ, "TZ": zone},
        capture_output=True,
        text=True,
    )


def test_days_of_a_timestamptz_are_utc_days_in_every_zone(tmp_path):
    project, warehouse = tmp_path / "project", tmp_path / "w.duckdb"
    project.mkdir()
    (project / "events.strata").write_text(MODULE)
    con = duckdb.connect(str(warehouse))
    con.execute("CREATE SCHEMA raw")
    con.execute(  # two UTC days of hourly events; in New York the first 5 hours are Dec 31
        "CREATE TABLE raw.events AS SELECT i AS id, TIMESTAMPTZ '2026-01-01 00:00:00+00' + i * "
        "INTERVAL 1 HOUR AS ts, TIMESTAMP '2026-01-01' AS updated_at FROM range(48) t(i)"
    )
    con.close()

    built = strata("America/New_York", "run", project, "--warehouse", warehouse)
    assert built.returncode == 0, built.stdout + built.stderr
    con = duckdb.connect(str(warehouse), read_only=True)
    days = con.execute("SELECT day::VARCHAR, n FROM main.v_daily ORDER BY day").fetchall()
    con.close()
    assert days == UTC_DAYS

    for zone in ("Asia/Tokyo", "UTC"):
        checked = strata(zone, "verify", project, "--warehouse", warehouse)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        again = strata(zone, "run", project, "--warehouse", warehouse, "--only-stale")
        assert "nothing to do" in again.stdout, again.stdout + again.stderr
    tested = strata("America/Los_Angeles", "test", project, "--warehouse", warehouse)
    assert tested.returncode == 0, tested.stdout + tested.stderr
