"""Projects over a transaction ledger and over a change feed, with the plain SQL a full rebuild
of each model gives: what every incremental build must equal."""

import datetime as dt
from pathlib import Path

from strata_dagster_tests.support.engine_support import make_module_project

T0 = dt.datetime(2025, 1, 1)

LEDGER_MODULE = """
source orders {
  table: raw.orders
  versioning: ledger(txn_id, committed_at, kind)
  ledger: raw.order_txns
}

model up {
  from orders
  filter status <> 'void'
  select id, status, v, txn_id
  merge_strategy: snapshot_replace
  merge_keys: [id]
  cdc_column: txn_id
}

model ap {
  from orders
  select id, v, txn_id
  merge_strategy: append_always
  cdc_column: txn_id
}

model an {
  from orders
  filter v >= 0
  select id, v, txn_id
  merge_strategy: append_new
  merge_keys: [id]
  cdc_column: txn_id
}
"""
LEDGER_TABLES = (
    "CREATE TABLE raw.orders (id BIGINT, status VARCHAR, v INTEGER, txn_id BIGINT)",
    "CREATE TABLE raw.order_txns (txn_id BIGINT, committed_at TIMESTAMP, kind VARCHAR)",
)
COMMITTED = "SELECT * FROM raw.orders WHERE txn_id IN (SELECT txn_id FROM raw.order_txns)"
FULL_LEDGER = {
    "up": f"SELECT id, status, v, txn_id FROM ({COMMITTED}) WHERE status <> 'void'",
    "ap": f"SELECT id, v, txn_id FROM ({COMMITTED})",
    "an": f"SELECT id, v, txn_id FROM ({COMMITTED}) WHERE v >= 0",
}


def make_ledger_project(root: Path, module: str = LEDGER_MODULE) -> tuple[Path, Path]:
    return make_module_project(root, "orders.strata", module, *LEDGER_TABLES)


FEED_MODULE = """
source customer_changes {
  table: raw.customer_changes
  versioning: feed(lsn)
  feed_keys: [id]
  deletes: debezium(op)
}

model customers {
  from customer_changes
  filter region <> 'nowhere'
  select id, name, region, lsn
  merge_strategy: upsert
  merge_keys: [id]
  cdc_column: lsn
}
"""
# One event table holding every vendor's delete column, so one project can declare any of them.
FEED_TABLES = (
    "CREATE TABLE raw.customer_changes (id BIGINT, name VARCHAR, region VARCHAR, lsn BIGINT, "
    "synced_at TIMESTAMP, op VARCHAR, _fivetran_deleted BOOLEAN, _ab_cdc_deleted_at TIMESTAMP, "
    "is_deleted BOOLEAN)",
)
# Each `deletes:` form, and how the plain SQL below tells a deleting event.
DELETE_FORMS = {
    "debezium(op)": "coalesce(op = 'd', false)",
    "fivetran": "coalesce(_fivetran_deleted, false)",
    "airbyte": "_ab_cdc_deleted_at IS NOT NULL",
    "flag(is_deleted)": "coalesce(is_deleted, false)",
}


def full_customers(deletes: str = "debezium(op)", arrival: bool = False) -> str:
    """The model recomputed from all the feed's events: each key's latest event by position (then
    arrival, then the row's hash), unless it deletes the key."""
    order = "lsn DESC, synced_at DESC" if arrival else "lsn DESC"
    current = (
        f"SELECT * EXCLUDE (rank) FROM (SELECT *, row_number() OVER (PARTITION BY id ORDER BY {order}, "
        f"hash(e) DESC) AS rank FROM raw.customer_changes e) WHERE rank = 1 AND NOT {DELETE_FORMS[deletes]}"
    )
    return f"SELECT id, name, region, lsn FROM ({current}) WHERE region <> 'nowhere'"


def feed_module(deletes: str = "debezium(op)", arrival: bool = False) -> str:
    module = FEED_MODULE.replace("deletes: debezium(op)", f"deletes: {deletes}")
    return module.replace("feed(lsn)", "feed(lsn, synced_at)") if arrival else module


def make_feed_project(root: Path, module: str = FEED_MODULE) -> tuple[Path, Path]:
    return make_module_project(root, "customers.strata", module, *FEED_TABLES)


HISTORY_MODEL = """
model customer_history {
  from customer_changes
  select id, name, region, lsn, valid_from, valid_to, is_current
  merge_strategy: history
  merge_keys: [id]
  cdc_column: lsn
}
"""


def with_history_options(model: str, checked: str | None = None, flag: str | None = None) -> str:
    """A history model's text with `check_columns` and a `deleted_flag` it selects."""
    if checked is not None:
        model = model.replace("  merge_keys: [id]\n", f"  merge_keys: [id]\n  check_columns: [{checked}]\n")
    if flag is not None:
        model = model.replace("valid_to, is_current\n", f"valid_to, is_current, {flag}\n")
        model = model.replace("  merge_keys: [id]\n", f"  merge_keys: [id]\n  deleted_flag: {flag}\n")
    return model


def history_module(
    deletes: str = "debezium(op)", arrival: bool = False, checked: str | None = None, flag: str | None = None
) -> str:
    """The feed project with a history model beside its upsert (versioned by `checked` columns,
    with a deleted `flag` column)."""
    return feed_module(deletes, arrival) + with_history_options(HISTORY_MODEL, checked, flag)


def full_history(
    deletes: str = "debezium(op)", arrival: bool = False, checked: str | None = None, flag: str | None = None
) -> str:
    """The history model recomputed from all the feed's events: the event at each (key, position),
    valid until the key's next position, without the deleting events; with a `checked` column,
    only the events that change it (or follow a delete, or come first) open versions; the `flag`
    says whether the key's next event deletes it."""
    order = "synced_at DESC, " if arrival else ""
    at_position = (
        f"SELECT *, {DELETE_FORMS[deletes]} AS gone FROM (SELECT *, row_number() OVER (PARTITION BY id, lsn "
        f"ORDER BY {order}hash(e) DESC) AS rank FROM raw.customer_changes e) WHERE rank = 1"
    )
    if checked is not None:
        at_position = (
            f"SELECT * FROM (SELECT *, lag(lsn) OVER w IS NULL OR coalesce(lag(gone) OVER w, false) "
            f"OR ({checked}) IS DISTINCT FROM lag(({checked})) OVER w AS opens FROM ({at_position}) "
            "WINDOW w AS (PARTITION BY id ORDER BY lsn)) WHERE opens OR gone"
        )
    versions = (
        "SELECT *, lsn AS valid_from, lead(lsn) OVER (PARTITION BY id ORDER BY lsn) AS valid_to, "
        f"coalesce(lead(gone) OVER (PARTITION BY id ORDER BY lsn), false) AS closed_by_delete FROM ({at_position})"
    )
    flagged = f", closed_by_delete AS {flag}" if flag else ""
    return (
        f"SELECT id, name, region, lsn, valid_from, valid_to, valid_to IS NULL AS is_current{flagged} "
        f"FROM ({versions}) WHERE NOT gone"
    )


LEDGER_HISTORY_MODEL = """
model order_history {
  from orders
  select id, status, v, txn_id, valid_from, valid_to, is_current
  merge_strategy: history
  merge_keys: [id]
  cdc_column: txn_id
}
"""


def ledger_history_module(checked: str | None = None) -> str:
    """The ledger project with a history of its orders by commit (by `checked` columns)."""
    return LEDGER_MODULE + with_history_options(LEDGER_HISTORY_MODEL, checked)


def full_ledger_history(checked: str | None = None) -> str:
    """The ledger history recomputed from the committed rows: each key's row at each commit (of
    the greatest transaction id, then the row's hash), valid until the key's next commit; with a
    `checked` column, only rows that change it (or come first) open versions."""
    stamped = (
        "SELECT r.*, t.committed_at AS __strata_committed FROM raw.orders r "
        "JOIN raw.order_txns t ON r.txn_id = t.txn_id"
    )
    at_commit = (
        "SELECT * EXCLUDE (rank) FROM (SELECT *, row_number() OVER (PARTITION BY id, __strata_committed "
        f"ORDER BY txn_id DESC, hash(e) DESC) AS rank FROM ({stamped}) e) WHERE rank = 1"
    )
    if checked is not None:
        at_commit = (
            f"SELECT * FROM ({at_commit}) WINDOW w AS (PARTITION BY id ORDER BY __strata_committed) "
            f"QUALIFY lag(__strata_committed) OVER w IS NULL OR ({checked}) IS DISTINCT FROM lag(({checked})) OVER w"
        )
    return (
        "SELECT id, status, v, txn_id, __strata_committed AS valid_from, lead(__strata_committed) OVER w "
        "AS valid_to, lead(__strata_committed) OVER w IS NULL AS is_current "
        f"FROM ({at_commit}) WINDOW w AS (PARTITION BY id ORDER BY __strata_committed)"
    )


# A history of a plain table (no ledger, no feed): versions stamped with the time builds ran.
TABLE_HISTORY_MODULE = """
source customers {
  table: raw.customers
}

model customer_history {
  from customers
  filter region <> 'nowhere'
  select id, name, region, valid_from, valid_to, is_current, was_deleted
  merge_strategy: history
  merge_keys: [id]
  deleted_flag: was_deleted
  cdc_column: valid_from
}
"""
