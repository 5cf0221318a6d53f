"""How ledger and change-feed sources are declared: what parses, what is refused (E090, E007), and
the ledger systems' merge strategy names accepted as ours."""

import pytest

from strata_dagster.errors import E_LOG_SOURCE, E_PROPERTY_VALUE, StrataError
from strata_dagster.language.definition import FeedDeletes
from strata_dagster.language.parser import parse_module


def source_of(body: str):
    (source,) = parse_module(f"source s {{\n  table: raw.s\n{body}}}\n", "m.strata").sources
    return source


def test_a_ledger_source_names_its_columns_and_its_transactions():
    source = source_of("  versioning: ledger(txn_id, committed_at, kind)\n  ledger: raw.txns\n")
    versioning = source.versioning
    assert (versioning.kind, versioning.txn_column, versioning.committed_column, versioning.kind_column) == (
        "ledger",
        "txn_id",
        "committed_at",
        "kind",
    )
    assert source.ledger == "raw.txns" and source.is_log


@pytest.mark.parametrize(
    ("deletes", "expected"),
    [
        ("", None),
        ("  deletes: debezium(op)\n", FeedDeletes("debezium", "op")),
        ("  deletes: fivetran\n", FeedDeletes("fivetran", "_fivetran_deleted")),
        ("  deletes: airbyte\n", FeedDeletes("airbyte", "_ab_cdc_deleted_at")),
        ("  deletes: flag(is_deleted)\n", FeedDeletes("flag", "is_deleted")),
    ],
)
def test_a_feed_names_its_position_keys_and_deletes(deletes, expected):
    source = source_of(f"  versioning: feed(lsn, synced_at)\n  feed_keys: [id, region]\n{deletes}")
    assert (source.versioning.column, source.versioning.arrival_column) == ("lsn", "synced_at")
    assert source.feed_keys == ("id", "region") and source.deletes == expected


@pytest.mark.parametrize(
    ("body", "line"),
    [
        ("  versioning: ledger(txn_id, committed_at, kind)\n", 3),  # no `ledger:`
        ("  versioning: feed(lsn)\n", 3),  # no `feed_keys`
        ("  ledger: raw.txns\n", 3),  # on another versioning
        ("  versioning: cdc(ts)\n  feed_keys: [id]\n", 4),
        ("  versioning: cdc(ts)\n  deletes: fivetran\n", 4),
        ("  versioning: feed(lsn)\n  feed_keys: [id]\n  deletes: debezium\n", 5),  # no op column
        ("  versioning: feed(lsn)\n  feed_keys: [id]\n  deletes: soft(x)\n", 5),
        ("  versioning: feed(lsn)\n  feed_keys: [id]\n  partitioned_by: day(ts)\n  start: 2025-01-01\n", 3),
    ],
)
def test_incomplete_log_declarations_are_refused(body, line):
    with pytest.raises(StrataError) as error:
        source_of(body)
    codes = [item.code for item in getattr(error.value, "errors", (error.value,))]
    assert E_LOG_SOURCE in codes, codes
    assert any(item.location.line == line for item in getattr(error.value, "errors", (error.value,)))


@pytest.mark.parametrize(
    "text", ["ledger(txn_id, committed_at)", "feed()", "feed(a, b, c)", "ledger(a, b, c + 1)"]
)
def test_malformed_log_versionings_are_property_value_errors(text):
    with pytest.raises(StrataError) as error:
        source_of(f"  versioning: {text}\n")
    assert error.value.code == E_PROPERTY_VALUE


@pytest.mark.parametrize(("written", "ours"), [("snapshot_replace", "upsert"), ("append_always", "append")])
def test_the_ledger_systems_merge_strategy_names_are_ours(written, ours):
    module = parse_module(
        f"model m {{\n  from s\n  merge_strategy: {written}\n  merge_keys: [id]\n  cdc_column: t\n}}\n",
        "m.strata",
    )
    assert module.models[0].properties.merge_strategy == ours
