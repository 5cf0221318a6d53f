"""An upsert state's key bounds (sql.key_bounds) compare keys by their values, not their text,
and are kept only for types whose text has a known order."""

from strata_dagster.sql.key_bounds import KeyBounds


def test_integer_decimal_and_temporal_bounds_compare_by_value():
    state = KeyBounds.of("9", "100", "bigint")
    assert state is not None
    assert state.is_apart_from(KeyBounds.of("101", "200", "bigint"))
    assert state.is_apart_from(KeyBounds.of("-5", "8", "bigint"))
    assert not state.is_apart_from(KeyBounds.of("50", "50", "bigint"))
    assert not state.is_apart_from(KeyBounds.of("100", "300", "bigint"))  # 100 may be a live key
    assert not state.is_apart_from(KeyBounds.of("101", "200", "int"))  # another type: not told
    assert state.widened(KeyBounds.of("10", "1000", "bigint")) == KeyBounds("9", "1000", "bigint")
    money = KeyBounds.of("9.50", "10.00", "decimal(12,2)")
    assert money is not None and money.is_apart_from(KeyBounds.of("10.01", "11.00", "decimal(12,2)"))
    stamps = KeyBounds.of("2025-12-31 23:58:22", "2025-12-31 23:58:22.32", "timestamp_ntz")
    assert stamps is not None
    assert stamps.is_apart_from(KeyBounds.of("2025-12-31 23:58:22.4", "2026-01-01 00:00:00", "timestamp_ntz"))
    assert not stamps.is_apart_from(
        KeyBounds.of("2025-12-31 23:58:22.3", "2026-01-01 00:00:00", "timestamp_ntz")
    )
    days = KeyBounds.of("2025-01-09", "2025-01-10", "date")
    assert (
        days is not None and days.widened(KeyBounds("2025-01-08", "2025-01-08", "date")).low == "2025-01-08"
    )
    assert KeyBounds.of("b", "c", "string").is_apart_from(KeyBounds.of("a", "a~", "string"))


def test_bounds_are_not_kept_without_both_ends_or_a_known_order():
    assert KeyBounds.of(None, "5", "int") is None
    assert KeyBounds.of("1.5", "2.5", "double") is None  # a double's text need not cast back
    assert KeyBounds.of("1", "2", "string collate utf8_lcase") is None
    assert KeyBounds.of("x", "a", "string") is None  # low above high: not the engine's min and max
    assert KeyBounds.of("-0001-01-01", "2025-01-01", "date") is None
    assert KeyBounds.from_detail(["1", "2"]) is None
    assert KeyBounds.from_detail(["1", "2", "int"]) == KeyBounds("1", "2", "int")
