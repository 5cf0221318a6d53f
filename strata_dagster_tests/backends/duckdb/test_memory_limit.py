"""What `--memory-limit` bounds, measured: DuckDB's memory in every DuckDB database the process
opens. A build over the limit spills instead of failing, and the process's peak resident memory
stays within the same command's on a tiny project (the interpreter and the libraries) plus the
limit; without the limit the same build peaks well above that, so the bound is the limit's doing."""

import os
import subprocess
import sys

import pytest

from strata_dagster.backends.duckdb.limits import MEMORY_LIMIT_ENV, connect_in_memory, threads_within
from strata_dagster.backends.duckdb.serving import open_live
from strata_dagster_tests.support.engine_support import make_shop

STRATA = [sys.executable, "-m", "strata_dagster.cli.main"]
LIMIT_MB = 32
# DuckDB allocates a little outside its buffer manager; what the test allows beyond the limit.
SLACK_MB = LIMIT_MB // 4 + 8
# The command line, reporting its own peak resident memory as it exits. Read from /proc: a
# child's ru_maxrss also counts the parent it was forked from (Linux keeps the high-water mark
# across exec), and a pytest worker holds more than the command does.
MEASURED = """
import atexit, sys

def peak(path):
    with open("/proc/self/status") as status:
        kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    with open(path, "w") as out:
        out.write(str(kib))

atexit.register(peak, sys.argv[1])
sys.argv = ["strata", *sys.argv[2:]]
from strata_dagster.cli.main import main
main()
"""


def peak_rss_mb(*args, cwd) -> tuple[int, float, str]:
    """Exit status, peak resident memory (MB) and stderr of `strata ARGS` as its own process."""
    peak = cwd / "peak.txt"
    done = subprocess.run(
        [sys.executable, "-c", MEASURED, str(peak), *map(str, args)],
        cwd=cwd,
        env={key: value for key, value in os.environ.items() if not key.startswith("STRATA_")},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=600,
    )
    return done.returncode, int(peak.read_text()) / 1024, done.stderr


def test_a_full_refresh_under_a_small_limit_spills_and_stays_within_baseline_plus_limit(tmp_path):
    tiny_project, tiny_warehouse = make_shop(tmp_path / "tiny", rows=100)
    status, baseline, errors = peak_rss_mb(
        f"--memory-limit={LIMIT_MB}MB", "run", tiny_project, "--warehouse", tiny_warehouse, cwd=tmp_path
    )
    assert status == 0, errors
    project, warehouse = make_shop(tmp_path / "big", rows=300_000)
    status, bounded, errors = peak_rss_mb(
        f"--memory-limit={LIMIT_MB}MB", "run", project, "--warehouse", warehouse, cwd=tmp_path
    )
    assert status == 0, errors  # spilled (and ran on fewer threads) rather than failed
    bound = baseline + LIMIT_MB + SLACK_MB
    assert bounded <= bound, (
        f"peak {bounded:.0f} MB > {baseline:.0f} MB (tiny project) + {LIMIT_MB} MB + slack"
    )
    status, unbounded, errors = peak_rss_mb(
        "run", project, "--warehouse", warehouse, "--full-refresh", cwd=tmp_path
    )
    assert status == 0, errors
    assert unbounded > bound, f"without the limit the build peaks at {unbounded:.0f} MB: too small to tell"


def test_every_in_memory_duckdb_obeys_the_limit_too(tmp_path, monkeypatch):
    """Readers' connections (`strata show`, `connect`), unit tests and binding open in-memory
    databases: DuckDB's default for them is 80% of RAM, not the limit."""
    project, warehouse = make_shop(tmp_path, rows=100)
    assert (
        subprocess.run([*STRATA, "run", project, "--warehouse", warehouse], capture_output=True).returncode
        == 0
    )
    monkeypatch.setenv(MEMORY_LIMIT_ENV, "64MiB")
    settings = "SELECT current_setting('memory_limit'), current_setting('threads')"
    con = connect_in_memory()
    try:
        assert con.execute(settings).fetchone() == ("64.0 MiB", 1)
    finally:
        con.close()
    with open_live(warehouse) as live:
        assert live.execute(settings).fetchone() == ("64.0 MiB", 1)


@pytest.mark.parametrize(("limit", "threads"), [("64MiB", 1), ("100MB", 1), ("1TiB", None)])
def test_a_limit_under_64_mib_a_core_runs_fewer_threads(limit, threads):
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: DuckDB runs one thread anyway")
    assert threads_within(limit) == threads
