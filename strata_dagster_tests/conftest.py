import os
from collections import Counter

import pytest

from strata_dagster.state import detail_files
from strata_dagster.wording import counted
from strata_dagster_tests.support import browser_support, production_stack, spark_support
from strata_dagster_tests.support.spark_support import clean_spark, spark  # noqa: F401  (the Spark tier's fixtures)

# Nothing phones home: Dagster telemetry off for every test process.
os.environ.setdefault("DAGSTER_DISABLE_TELEMETRY", "1")

ORDERS_COLUMNS = (
    ("order_id", "BIGINT"),
    ("customer_id", "BIGINT"),
    ("order_ts", "TIMESTAMP"),
    ("updated_at", "TIMESTAMP"),
    ("status", "VARCHAR"),
    ("amount", "DECIMAL(12,2)"),
    ("channel", "VARCHAR"),
    ("tags", "VARCHAR[]"),
)
CUSTOMERS_COLUMNS = (
    ("customer_id", "BIGINT"),
    ("name", "VARCHAR"),
    ("region", "VARCHAR"),
    ("segment", "VARCHAR"),
    ("signup_date", "DATE"),
)
SOURCES_MODULE = """
source orders {
  table: raw.orders
  versioning: cdc(updated_at)
}
source customers {
  table: raw.customers
}
"""


@pytest.fixture(scope="module")
def detail_in_files():
    """Every value of every history record's detail moved to its detail file, whatever its size
    (state/detail_files.py): the random histories run over that path, the rest of the suite
    over the default limits (small details whole in their rows)."""
    saved = detail_files.INLINE_LIMIT, detail_files.VALUE_LIMIT
    detail_files.INLINE_LIMIT = detail_files.VALUE_LIMIT = 0
    yield
    detail_files.INLINE_LIMIT, detail_files.VALUE_LIMIT = saved


@pytest.fixture
def schemas():
    return {"orders": ORDERS_COLUMNS, "customers": CUSTOMERS_COLUMNS}


def pytest_collection_modifyitems(items):
    """A test that uses the Spark session is in the `spark` tier (`-m "not spark"` leaves it out)."""
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.spark)


def pytest_terminal_summary(terminalreporter):
    """One line for each tier skipped on this machine (no Chromium, no Java, no PostgreSQL), saying how to run it:
    `pytest -q` on a fresh machine passes, and says what it left out."""
    reasons: Counter[str] = Counter()
    for report in terminalreporter.stats.get("skipped", []):
        if isinstance(report.longrepr, tuple):
            reason = report.longrepr[2].removeprefix("Skipped: ")
            if reason.startswith((browser_support.SKIPPED, spark_support.SKIPPED, production_stack.SKIPPED)):
                reasons[reason] += 1
    for reason, count in reasons.items():
        terminalreporter.write_line(f"{reason} ({counted(count, 'test')} skipped)", yellow=True)
