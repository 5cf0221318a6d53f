import os

import pytest

from strata_dagster_tests.spark_support import clean_spark, spark  # noqa: F401  (the Spark tier's fixtures)

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


@pytest.fixture
def schemas():
    return {"orders": ORDERS_COLUMNS, "customers": CUSTOMERS_COLUMNS}


def pytest_collection_modifyitems(items):
    """A test that uses the Spark session is in the `spark` tier (`-m "not spark"` leaves it out)."""
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.spark)
