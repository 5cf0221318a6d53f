"""Deterministic sample data for the example projects: `raw.customers` and `raw.orders`.

Every value is drawn inside DuckDB from `hash(row number, seed, salt)`, so the same
(rows, seed, days, start) always gives the same rows in the same order, and ten million orders take
seconds. The tables are written in one transaction, into staging tables that then replace the live
ones: a crash leaves the previous tables (or none) in place, never half-written ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Final

import duckdb
import sqlglot
from sqlglot import exp

from strata_dagster.backends.duckdb.connection import connect
from strata_dagster.errors import E_WAREHOUSE, StrataError
from strata_dagster.names import MAX_SAMPLE_ROWS as MAX_ROWS
from strata_dagster.wording import counted

DIALECT: Final = "duckdb"
RAW_SCHEMA: Final = "raw"
CUSTOMERS_TABLE: Final = "customers"
ORDERS_TABLE: Final = "orders"
_STAGING_SUFFIX: Final = "__staging"

ORDERS_PER_CUSTOMER: Final = 50
MIN_CUSTOMERS: Final = 10
# Orders whose customer_id is missing from raw.customers, so that left joins matter: one in a
# hundred (order 1 is always one), pointing at a handful of ids past the last customer.
ORPHAN_EVERY: Final = 100
ORPHAN_IDS: Final = 5

_SECONDS_PER_DAY: Final = 86_400
# A library call prints nothing: no progress bar on long writes.
_QUIET: Final = sqlglot.parse_one("SET enable_progress_bar = false", read=DIALECT).sql(dialect=DIALECT)

# Each draw is `hash(id, :seed, 'salt') % n`: one independent stream per salt.
_CUSTOMERS_SQL: Final = """
WITH draws AS (
  SELECT
    c.id AS customer_id,
    CAST(hash(c.id, :seed, 'first_name') % 12 AS BIGINT) AS first_name_draw,
    CAST(hash(c.id, :seed, 'last_name') % 12 AS BIGINT) AS last_name_draw,
    CAST(hash(c.id, :seed, 'region') % 4 AS BIGINT) AS region_draw,
    CAST(hash(c.id, :seed, 'segment') % 100 AS BIGINT) AS segment_draw,
    CAST(hash(c.id, :seed, 'signup') % 730 AS BIGINT) AS signup_days_before
  FROM range(1, :customers + 1) AS c(id)
)
SELECT
  CAST(customer_id AS BIGINT) AS customer_id,
  CAST(
    ['Ada', 'Grace', 'Alan', 'Edsger', 'Barbara', 'Donald',
     'Margaret', 'Ken', 'Frances', 'John', 'Radia', 'Tim'][1 + first_name_draw]
    || ' '
    || ['Lovelace', 'Hopper', 'Turing', 'Dijkstra', 'Liskov', 'Knuth',
        'Hamilton', 'Thompson', 'Allen', 'Backus', 'Perlman', 'Berners-Lee'][1 + last_name_draw]
    AS VARCHAR
  ) AS name,
  CAST(['north', 'south', 'east', 'west'][1 + region_draw] AS VARCHAR) AS region,
  CAST(
    CASE WHEN segment_draw < 70 THEN 'consumer' WHEN segment_draw < 92 THEN 'small_business' ELSE 'enterprise' END
    AS VARCHAR
  ) AS segment,
  CAST(CAST(:start AS DATE) - CAST(signup_days_before AS INTEGER) AS DATE) AS signup_date
FROM draws
"""

# Orders are spread evenly over the period in order_id order, with jitter; updated_at is later
# the further the order went (never before order_ts); tags hold 0 to 3 labels.
# Three hashes per order are enough: each is split into independent uniform digits
# (`h % a`, `h // a % b`, ...), which costs far less than one hash per attribute at 10M rows.
_ORDERS_SQL: Final = """
WITH hashes AS (
  SELECT
    o.id AS order_id,
    hash(o.id, :seed, 'customer') AS customer_hash,
    hash(o.id, :seed, 'time') AS time_hash,
    hash(o.id, :seed, 'order') AS order_hash
  FROM range(1, :rows + 1) AS o(id)
),
draws AS (
  SELECT
    order_id,
    CAST(customer_hash % :customers AS BIGINT) AS customer_draw,
    CAST(customer_hash // :customers % :orphan_ids AS BIGINT) AS orphan_draw,
    CAST(time_hash % :spacing AS BIGINT) AS jitter_seconds,
    CAST(time_hash // :spacing % 2419200 AS BIGINT) AS lag_draw,
    CAST(order_hash % 100 AS BIGINT) AS status_draw,
    CAST(order_hash // 100 % 50000 AS BIGINT) AS amount_draw,
    CAST(order_hash // 5000000 % 4 AS BIGINT) AS channel_draw,
    CAST(order_hash // 20000000 % 4 AS BIGINT) AS tag_count,
    CAST(order_hash // 80000000 % 4 AS BIGINT) AS tag_offset
  FROM hashes
),
placed AS (
  SELECT
    *,
    CAST(:start AS TIMESTAMP)
      + to_seconds(CAST((order_id - 1) * :period_seconds // :rows + jitter_seconds AS BIGINT)) AS placed_at,
    CASE
      WHEN status_draw < 10 THEN 'placed'
      WHEN status_draw < 45 THEN 'paid'
      WHEN status_draw < 85 THEN 'shipped'
      WHEN status_draw < 93 THEN 'cancelled'
      ELSE 'returned'
    END AS order_status
  FROM draws
)
SELECT
  CAST(order_id AS BIGINT) AS order_id,
  CAST(
    CASE WHEN order_id % :orphan_every = 1 THEN :customers + 1 + orphan_draw ELSE 1 + customer_draw END
    AS BIGINT
  ) AS customer_id,
  CAST(placed_at AS TIMESTAMP) AS order_ts,
  CAST(
    placed_at + to_seconds(CAST(
      CASE order_status
        WHEN 'placed' THEN 0
        WHEN 'paid' THEN lag_draw % 3600
        WHEN 'cancelled' THEN lag_draw % 86400
        WHEN 'shipped' THEN 86400 + lag_draw % 172800
        ELSE 604800 + lag_draw % 1209600
      END
      AS BIGINT
    ))
    AS TIMESTAMP
  ) AS updated_at,
  CAST(order_status AS VARCHAR) AS status,
  CAST(CAST(500 + amount_draw AS DECIMAL(14, 0)) * 0.01 AS DECIMAL(12, 2)) AS amount,
  CAST(['web', 'app', 'store', 'phone'][1 + channel_draw] AS VARCHAR) AS channel,
  CAST(
    list_slice(
      ['gift', 'promo', 'express', 'bulk', 'first_order', 'subscription'], tag_offset + 1, tag_offset + tag_count
    )
    AS VARCHAR[]
  ) AS tags
FROM placed
"""


@dataclass(frozen=True)
class SampleSummary:
    """What `write_sample_data` wrote: rows per table."""

    warehouse: Path
    customers: int
    orders: int

    @property
    def rows(self) -> dict[str, int]:
        return {
            f"{RAW_SCHEMA}.{CUSTOMERS_TABLE}": self.customers,
            f"{RAW_SCHEMA}.{ORDERS_TABLE}": self.orders,
        }

    def __str__(self) -> str:
        return ", ".join(f"{table}: {counted(count, 'row')}" for table, count in self.rows.items())


def customer_count(rows: int) -> int:
    """How many customers `rows` orders are spread over."""
    return max(MIN_CUSTOMERS, rows // ORDERS_PER_CUSTOMER)


def write_sample_data(
    warehouse: Path,
    rows: int,
    *,
    seed: int = 7,
    days: int = 365,
    start: date = date(2025, 1, 1),
) -> SampleSummary:
    """Create or replace `raw.customers` and `raw.orders` in the DuckDB file `warehouse`.

    `rows` orders over `days` days from `start`, about rows/50 customers (at least 10), a few
    orders from customers that do not exist. Same arguments, same tables.
    """
    if not 1 <= rows <= MAX_ROWS:
        raise ValueError(f"rows must be between 1 and {MAX_ROWS:,}, got {rows}")
    if days < 1:
        raise ValueError(f"days must be at least 1, got {days}")
    if warehouse.stem.lower() == RAW_SCHEMA:
        # DuckDB names the database after the file: `raw.orders` would be ambiguous.
        raise StrataError(
            E_WAREHOUSE,
            f"sample data cannot go into a warehouse file named `{warehouse.name}`",
            hint=f"use another file name; the sample tables live in schema `{RAW_SCHEMA}`",
        )
    statements = build_sample_statements(rows, seed=seed, days=days, start=start)
    with connect(warehouse) as connection:
        connection.execute(_QUIET)
        connection.begin()
        try:
            for statement in statements:
                connection.execute(statement)
            counts = {name: _count(connection, name) for name in (CUSTOMERS_TABLE, ORDERS_TABLE)}
            connection.commit()
        except BaseException:
            connection.rollback()
            raise
    return SampleSummary(warehouse, customers=counts[CUSTOMERS_TABLE], orders=counts[ORDERS_TABLE])


def build_sample_statements(rows: int, *, seed: int, days: int, start: date) -> list[str]:
    """The statements `write_sample_data` runs, in one transaction, rendered for DuckDB."""
    customers = customer_count(rows)
    period_seconds = days * _SECONDS_PER_DAY
    values: dict[str, exp.Expr] = {
        "seed": exp.Literal.number(seed),
        "rows": exp.Literal.number(rows),
        "customers": exp.Literal.number(customers),
        "start": exp.Literal.string(start.isoformat()),
        "period_seconds": exp.Literal.number(period_seconds),
        "spacing": exp.Literal.number(max(1, period_seconds // rows)),
        "orphan_every": exp.Literal.number(ORPHAN_EVERY),
        "orphan_ids": exp.Literal.number(ORPHAN_IDS),
    }
    queries = {
        CUSTOMERS_TABLE: exp.replace_placeholders(sqlglot.parse_one(_CUSTOMERS_SQL, read=DIALECT), **values),
        ORDERS_TABLE: exp.replace_placeholders(sqlglot.parse_one(_ORDERS_SQL, read=DIALECT), **values),
    }
    statements: list[exp.Expr] = [exp.Create(this=exp.to_identifier(RAW_SCHEMA), kind="SCHEMA", exists=True)]
    for name, query in queries.items():
        statements.append(exp.Create(this=_staging(name), kind="TABLE", replace=True, expression=query))
    # The swap: still inside the transaction, so readers see the old tables or the new ones.
    for name in queries:
        statements.append(exp.Drop(tables=[_raw(name)], kind="TABLE", exists=True))
        statements.append(
            exp.Alter(this=_staging(name), kind="TABLE", actions=[exp.AlterRename(this=exp.to_table(name))])
        )
    return [statement.sql(dialect=DIALECT) for statement in statements]


def _raw(name: str) -> exp.Table:
    return exp.table_(exp.to_identifier(name), db=exp.to_identifier(RAW_SCHEMA))


def _staging(name: str) -> exp.Table:
    return exp.table_(exp.to_identifier(name + _STAGING_SUFFIX), db=exp.to_identifier(RAW_SCHEMA))


def _count(connection: duckdb.DuckDBPyConnection, name: str) -> int:
    query = exp.select(exp.Count(this=exp.Star())).from_(_raw(name))
    row = connection.execute(query.sql(dialect=DIALECT)).fetchone()
    assert row is not None
    return int(row[0])
