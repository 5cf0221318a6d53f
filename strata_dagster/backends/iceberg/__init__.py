"""Iceberg publication: each live model on a branch is the current snapshot of an Iceberg table.

A publication target beside the backends, not a backend: strata builds on DuckDB as ever, and
after a run (or a rollback, branch or promotion) commits, `publisher.py` brings each table of the
branch's namespace to the state its live view shows, registering strata's immutable Parquet
snapshot files where it can (`add_files`). Only this package imports pyiceberg (lint-imports).
"""
