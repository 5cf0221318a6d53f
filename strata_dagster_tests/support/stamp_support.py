"""What the source-stamp tests share: waiting for a stamp to settle, the records a run made, and
what a warehouse that never recorded a scan reads."""

import time
from pathlib import Path

from strata_dagster.backends.file_stamps import SETTLE_NS
from strata_dagster.engine.run import run_project
from strata_dagster.engine.sources.readings import observe_sources
from strata_dagster.engine.sources.source_verify import mismatch_error, verify_sources
from strata_dagster_tests.support.engine_support import execute

SETTLE_SECONDS = SETTLE_NS / 1e9 + 0.05


def settle() -> None:
    time.sleep(SETTLE_SECONDS)


def recorded(warehouse: Path) -> list:
    return execute(
        warehouse, "SELECT source, stamp, row_count, row_hash_sum FROM strata.source_stamps ORDER BY seen_at"
    )


def fresh_fingerprint(project: Path, tmp: Path, source: str = "orders") -> str:
    """What a warehouse that never recorded a scan reads from the source's files now."""
    fresh = tmp / f"fresh-{time.monotonic_ns()}.duckdb"
    return observe_sources(project, fresh, [source])[source].fingerprint


def assert_a_hidden_write_is_found_by_verify(project: Path, warehouse: Path, stamp: str) -> None:
    """A file system that kept the files' times through a write, simulated: the record of the old
    rows moved onto the stamp the files have now. Every run misses the write; `verify --sources`
    finds it (E054), and the record it leaves makes the next run rebuild."""
    execute(warehouse, "UPDATE strata.source_stamps SET stamp = ?", params=[stamp])
    assert run_project(project, warehouse, only_stale=True).run_id is None  # the write is hidden
    checks = verify_sources(project, warehouse)
    assert [(check.source, check.is_stamped, len(check.mismatched)) for check in checks] == [
        ("orders", True, 1)
    ]
    error = mismatch_error(checks)
    assert error is not None and (error.code, error.subject) == ("E054", "orders")
    assert run_project(project, warehouse, only_stale=True).run_id is not None
