"""Numbered migrations of the history tables in the internal schema (append-only tables)."""

from __future__ import annotations

import duckdb

HISTORY_SCHEMA = "strata"


# Each migration is a list of constant statements (no values are ever spliced into them).
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        "CREATE SCHEMA IF NOT EXISTS strata",
        "CREATE SCHEMA IF NOT EXISTS strata_snapshots",
        "CREATE TABLE strata.schema_version (version INTEGER NOT NULL, applied_at TIMESTAMP NOT NULL)",
        # One row per history entry: a run, a backfill, a rollback, a branch or a promotion.
        """CREATE TABLE strata.entries (
            entry BIGINT NOT NULL,
            run_id VARCHAR NOT NULL,
            kind VARCHAR NOT NULL,
            branch VARCHAR NOT NULL,
            started_at TIMESTAMP NOT NULL,
            finished_at TIMESTAMP NOT NULL,
            models VARCHAR[] NOT NULL,
            overrides JSON NOT NULL,
            backfill_of VARCHAR,
            reason VARCHAR,
            target_entry BIGINT,
            engine VARCHAR NOT NULL,
            detail JSON
        )""",
        # Source fingerprints each entry consumed (per partition when partitioned; '' otherwise).
        """CREATE TABLE strata.entry_sources (
            entry BIGINT NOT NULL,
            source VARCHAR NOT NULL,
            partition_key VARCHAR NOT NULL,
            relation VARCHAR NOT NULL,
            fingerprint VARCHAR NOT NULL,
            row_count BIGINT NOT NULL
        )""",
        # Every snapshot ever registered. Immutable tables in strata_snapshots.
        """CREATE TABLE strata.snapshots (
            snapshot_id VARCHAR NOT NULL,
            model VARCHAR NOT NULL,
            table_name VARCHAR NOT NULL,
            partition_key VARCHAR NOT NULL,
            model_fingerprint VARCHAR NOT NULL,
            content_hash VARCHAR NOT NULL,
            row_count BIGINT NOT NULL,
            watermark VARCHAR,
            created_entry BIGINT NOT NULL,
            created_at TIMESTAMP NOT NULL
        )""",
        # Build key -> snapshot: several keys can share a snapshot (early cutoff, identical inputs).
        "CREATE TABLE strata.build_keys (build_key VARCHAR NOT NULL, snapshot_id VARCHAR NOT NULL, entry BIGINT NOT NULL)",
        # What each entry did per model: the path taken and its figures.
        """CREATE TABLE strata.entry_models (
            entry BIGINT NOT NULL,
            model VARCHAR NOT NULL,
            partition_key VARCHAR NOT NULL,
            snapshot_id VARCHAR NOT NULL,
            build_key VARCHAR NOT NULL,
            path VARCHAR NOT NULL,
            rows_out BIGINT NOT NULL,
            duration_ms DOUBLE NOT NULL,
            sql VARCHAR NOT NULL,
            detail JSON
        )""",
        # View pointers: the latest row per (branch, model) is what the live view exposes.
        """CREATE TABLE strata.publications (
            entry BIGINT NOT NULL,
            branch VARCHAR NOT NULL,
            model VARCHAR NOT NULL,
            snapshot_ids VARCHAR[] NOT NULL
        )""",
        "CREATE TABLE strata.dropped_snapshots (snapshot_id VARCHAR NOT NULL, entry BIGINT NOT NULL, dropped_at TIMESTAMP NOT NULL)",
        """CREATE VIEW strata.snapshot_states AS
            SELECT s.snapshot_id, s.model, s.table_name, s.partition_key, s.model_fingerprint, s.content_hash,
                   s.row_count, s.watermark, s.created_entry, d.snapshot_id IS NOT NULL AS is_dropped
            FROM strata.snapshots s
            LEFT JOIN (SELECT DISTINCT snapshot_id FROM strata.dropped_snapshots) d USING (snapshot_id)""",
    ),
    (
        # Incremental states: a snapshot can be the head of a list of segments (see segments.py).
        "ALTER TABLE strata.snapshots ADD COLUMN row_hash_sum VARCHAR",
        "ALTER TABLE strata.snapshots ADD COLUMN detail JSON",
        """CREATE OR REPLACE VIEW strata.snapshot_states AS
            SELECT s.snapshot_id, s.model, s.table_name, s.partition_key, s.model_fingerprint, s.content_hash,
                   s.row_count, s.watermark, s.created_entry, s.row_hash_sum, s.detail,
                   d.snapshot_id IS NOT NULL AS is_dropped
            FROM strata.snapshots s
            LEFT JOIN (SELECT DISTINCT snapshot_id FROM strata.dropped_snapshots) d USING (snapshot_id)""",
    ),
    (
        # What a source's rows were hashed over: NULL for whole rows, else the columns (its cdc column).
        "ALTER TABLE strata.entry_sources ADD COLUMN row_basis VARCHAR[]",
    ),
    (
        # Partition ledgers of business-versioned sources (state.ledger): each consumed
        # partition with the evidence of its content; a reset row (evidence: why) starts a new one.
        """CREATE TABLE strata.source_ledger (
            entry BIGINT NOT NULL,
            source VARCHAR NOT NULL,
            partition_key VARCHAR,
            row_count BIGINT,
            evidence VARCHAR,
            is_reset BOOLEAN NOT NULL,
            -- hash of the partition's rows when consumed, for `strata verify --sources`
            row_hash_sum VARCHAR
        )""",
    ),
    (
        # The whole of a ledger in one row (state.ledger.LedgerDigest): one digest of the
        # partitions it holds and their row counts in order, so a run whose listing starts with
        # exactly those partitions compares one digest instead of every partition's row.
        """CREATE TABLE strata.source_ledger_digest (
            entry BIGINT NOT NULL,
            source VARCHAR NOT NULL,
            digest VARCHAR NOT NULL,
            row_counts BIGINT[] NOT NULL
        )""",
    ),
    (
        # The Iceberg snapshot each publication to Iceberg left current per table
        # (engine/iceberg_publication.py): `entry` is the history entry whose state it holds.
        """CREATE TABLE strata.iceberg_commits (
            entry BIGINT NOT NULL,
            branch VARCHAR NOT NULL,
            model VARCHAR NOT NULL,
            snapshot_id BIGINT NOT NULL,
            committed_at TIMESTAMP NOT NULL
        )""",
    ),
    (
        # A publication to Iceberg that left every table of a branch at `entry`'s state, with the
        # embedded catalog file's size and modification time right after it
        # (engine/iceberg_publication.py): a later run whose branch and catalog file are unchanged
        # since needs no look at the catalog.
        """CREATE TABLE strata.iceberg_catalog_seen (
            entry BIGINT NOT NULL,
            branch VARCHAR NOT NULL,
            catalog VARCHAR NOT NULL,
            stamp VARCHAR NOT NULL,
            seen_at TIMESTAMP NOT NULL
        )""",
    ),
    (
        # A source's whole-row figures as a scan read them, under the stamp its files (a DuckDB
        # database file, or a `path:` pattern's files and folders) had before the scan
        # (backends/file_stamps.py): a later read that finds the same settled stamp takes these
        # figures instead of scanning again. `engine` names what computed them (strata's and the
        # backend's versions): another hashes anew.
        """CREATE TABLE strata.source_stamps (
            source VARCHAR NOT NULL,
            relation VARCHAR NOT NULL,
            engine VARCHAR NOT NULL,
            stamp VARCHAR NOT NULL,
            row_count BIGINT NOT NULL,
            row_hash_sum VARCHAR NOT NULL,
            seen_at TIMESTAMP NOT NULL
        )""",
    ),
)


# The oldest schema version a read-only session can read without migrating: the tables of later
# migrations are asked for where they are read (`has_history_table`), but these columns are not.
READABLE_WITHOUT_MIGRATING = 3


def has_history_table(con: duckdb.DuckDBPyConnection, table: str) -> bool:
    """Whether the history schema holds `table`. A warehouse opened read-only is not migrated, so
    an older one lacks the tables of later migrations. Asked of the catalog rather than tried:
    inside a transaction (a run's, `strata plan`'s reading) a failed statement aborts it."""
    # duckdb_tables() over information_schema: the same answer, without the views of every catalog.
    found = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database() "
        "AND schema_name = ? AND table_name = ?",
        [HISTORY_SCHEMA, table],
    ).fetchone()
    return bool(found and found[0])


def current_version(con: duckdb.DuckDBPyConnection) -> int:
    """The schema version; safe inside a transaction."""
    return _recorded_version(con) if has_history_table(con, "schema_version") else 0


def _recorded_version(con: duckdb.DuckDBPyConnection) -> int:
    row = con.execute("SELECT coalesce(max(version), 0) FROM strata.schema_version").fetchone()
    return int(row[0]) if row else 0


def migrate(con: duckdb.DuckDBPyConnection) -> int:
    """Apply pending migrations, each in its own transaction. Returns the schema version."""
    try:
        # Outside any transaction, asking the table itself is one lookup; information_schema
        # would list every snapshot table first.
        version = _recorded_version(con)
    except duckdb.CatalogException:
        version = 0
    for number, statements in enumerate(MIGRATIONS, start=1):
        if number <= version:
            continue
        con.execute("BEGIN TRANSACTION")
        try:
            for statement in statements:
                con.execute(statement)
            con.execute("INSERT INTO strata.schema_version VALUES (?, now())", [number])
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        version = number
    return version
