"""A snapshot record's detail read from history (warehouse.history.StoredDetail) is its JSON, parsed
when first read: it answers as the parsed dict does, an absent plain key is told without parsing,
and it is written back as the dict it holds."""

import json

import pytest

from strata_dagster.warehouse.history import StoredDetail, _as_json

DETAIL = {
    "strategy": "partition",
    "partition_fingerprints": {"2026-03-01": "abc", "2026-03-02": "def"},
    "columns": [["dt", "DATE"], ["segments", "BIGINT"]],  # "segments" as a value, not a key
    "notes": "upstream_segments moved",
    "odd key": 1,
}
TEXT = json.dumps(DETAIL, sort_keys=True)


def test_a_stored_detail_answers_as_its_parsed_dict():
    stored = StoredDetail(TEXT)
    assert stored == DETAIL and DETAIL == stored
    assert dict(stored) == DETAIL and {**stored} == DETAIL
    assert sorted(stored) == sorted(DETAIL) and len(stored) == len(DETAIL)
    assert stored["columns"] == DETAIL["columns"] and stored.get("strategy") == "partition"
    assert "odd key" in stored and stored["odd key"] == 1
    assert stored.get("missing", 7) == 7 and "missing" not in stored
    with pytest.raises(KeyError):
        stored["missing"]
    assert dict(stored.items()) == DETAIL


@pytest.mark.parametrize("key", ["keys_table", "materialize", "window_state"])
def test_an_absent_plain_key_is_told_without_parsing(key):
    stored = StoredDetail(TEXT)
    assert stored.get(key) is None and key not in stored
    with pytest.raises(KeyError):
        stored[key]
    assert stored._parsed is None  # the text was never parsed
    assert stored.get("strategy") == "partition" and stored._parsed == DETAIL


def test_a_key_named_in_the_text_only_as_a_value_is_parsed_and_absent():
    stored = StoredDetail(json.dumps({"columns": [["segments", "x"]]}))
    assert stored.get("segments") is None  # `"segments"` is in the text: parsed to tell
    assert stored._parsed is not None


def test_a_stored_detail_is_written_back_as_its_dict():
    stored = StoredDetail(TEXT)
    assert json.dumps(stored, sort_keys=True, default=_as_json) == TEXT
    assert json.dumps({"kept": stored}, sort_keys=True, default=_as_json) == json.dumps(
        {"kept": DETAIL}, sort_keys=True
    )
