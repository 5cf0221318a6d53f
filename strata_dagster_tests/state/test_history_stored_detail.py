"""A snapshot record's detail read from history (state.history.StoredDetail) is its JSON, parsed
when first read: it answers as the parsed dict does, an absent plain key is told without parsing,
and it is written back as the dict it holds."""

import datetime as dt
import json

import duckdb
import pytest

from strata_dagster.state.detail_files import dumps
from strata_dagster.state.history import (
    KEPT_FACTS,
    EntryModel,
    HistoryReader,
    HistoryWriter,
    SnapshotRecord,
    StoredDetail,
)
from strata_dagster.state.migrations import migrate
from strata_dagster.state.states import state_tables

NOW = dt.datetime(2026, 3, 2, 12, 0)

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
    assert dumps(stored) == TEXT
    assert dumps({"kept": stored}) == json.dumps({"kept": DETAIL}, sort_keys=True)


# -- what a run reads of history without parsing a stored detail --------------------------------

BIG = {"merge_keys": ["dt"], "partition_fingerprints": {"2026-03-01": [1, "a"]}, "strategy": "partitions"}


def _history():
    con = duckdb.connect()
    migrate(con)
    return con, HistoryReader(con), HistoryWriter(con)


def _record(snapshot_id, entry, detail=None, model="m"):
    return SnapshotRecord(
        snapshot_id, model, f"snap_{snapshot_id}_{model}", "", "f", "c", 1, None, entry, detail=detail or {}
    )


@pytest.mark.parametrize("remembered", [False, True])
def test_a_build_key_names_its_latest_snapshot_that_is_kept(remembered):
    con, reader, writer = _history()
    for entry, snapshot_id in ((1, "s1"), (2, "s2"), (3, "s3")):
        writer.add_snapshot(_record(snapshot_id, entry))
    writer.add_build_keys([("k", "s1"), ("k", "s2")], 1)
    writer.add_build_key("k", "s3", 3)
    writer.add_build_key("k", "gone", 4)  # a key of a snapshot with no record: never named
    writer.add_build_key("other", "s2", 5)
    reader.remember_snapshots(remembered)
    reader.prefetch_snapshots(["s1", "s2", "s3"])
    assert reader.snapshot_for_build_key("k").snapshot_id == "s3"
    writer.add_dropped("s3", 6)
    reader.remember_snapshots(remembered)  # a new run: records read anew
    assert reader.snapshot_for_build_key("k").snapshot_id in ("s1", "s2")  # both at entry 1
    writer.add_dropped("s1", 7)
    writer.add_dropped("s2", 7)
    reader.remember_snapshots(remembered)
    assert reader.snapshot_for_build_key("k") is None
    assert reader.snapshot_for_build_key("missing") is None


def test_kept_facts_parse_a_stored_detail_only_when_an_early_cutoff_kept_figures():
    con, reader, writer = _history()
    writer.add_snapshot(_record("s1", 1, BIG))
    writer.add_entry(
        entry=1, run_id="r1", kind="run", branch="main", started_at=NOW, models=["m"], overrides={}
    )
    record = reader.snapshot("s1")
    assert reader.with_kept_facts(record, "main") is record
    assert record.detail._parsed is None  # no cutoff kept figures: the detail was never parsed
    kept = {"partition_fingerprints": {"2026-03-01": [2, "b"]}}
    writer.add_entry(
        entry=2, run_id="r2", kind="run", branch="main", started_at=NOW, models=["m"], overrides={}
    )
    writer.add_entry_model(2, EntryModel("m", "", "s1", "k", "cutoff", 1, 1.0, "", {KEPT_FACTS: kept}))
    assert reader.with_kept_facts(reader.snapshot("s1"), "other").detail == BIG  # another branch's cutoff
    assert reader.with_kept_facts(reader.snapshot("s1"), "main").detail == {**BIG, **kept}
    # A detail that names no moving fact at its top level keeps its own, cutoff or not.
    writer.add_snapshot(_record("s2", 1, {"notes": "partition_fingerprints"}))
    writer.add_entry_model(2, EntryModel("m", "", "s2", "k", "cutoff", 1, 1.0, "", {KEPT_FACTS: kept}))
    assert reader.with_kept_facts(reader.snapshot("s2"), "main").detail == {"notes": "partition_fingerprints"}


def test_the_tables_of_a_one_segment_state_are_told_without_parsing_its_detail():
    con, reader, writer = _history()
    writer.add_snapshot(_record("s1", 1, BIG))
    record = reader.snapshot("s1")
    assert state_tables(reader, record) == ("snap_s1_m",)
    assert record.detail._parsed is None
    # Several segments: the merge keys name the later segments' keys tables.
    writer.add_snapshot(_record("s2", 2, {**BIG, "keys_table": "keys_s2", "segments": ["s1", "s2"]}))
    assert state_tables(reader, reader.snapshot("s2")) == ("keys_s2", "snap_s1_m", "snap_s2_m")


def test_a_stored_detail_searches_its_text_once_per_key():
    stored = StoredDetail(TEXT)
    assert stored.is_absent("keys_table") and stored.is_absent("keys_table")
    assert stored._named == {"keys_table": False}
    assert not stored.is_absent("strategy") and stored._named["strategy"] is True
    assert not stored.is_absent("odd key")  # not a plain key: never told absent unparsed
    assert stored._parsed is None
