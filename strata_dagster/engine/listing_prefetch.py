"""Business-versioned file sources listed while the warehouse opens.

A run that finds such a source unchanged has spent its time on the listing (a stat of every
partition folder and every file: 7,300 at ten years of daily folders) and on opening the
warehouse (DuckDB's file and catalog, not Python's work). The two do not depend on each other, so
`run` and `plan` start each listing in a thread before they open the warehouse: at 3,650 folders,
28 ms for both against 47 one after the other (bench/README.md, business-versioning benchmark).

A listing made before the warehouse's lock was taken is trusted only to say "unchanged": when it
is exactly the ledger's digest (read under the lock), it is a listing an earlier run could have
made with the same result. Anything else (a new folder, a violation, another writer's run that
consumed partitions in between) is decided from a listing made under the lock
(`engine.sources.business.read_business_source`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from strata_dagster.backends.choice import current_backend
from strata_dagster.backends.duckdb.listing import FolderListing
from strata_dagster.backends.duckdb.sources import file_pattern
from strata_dagster.language import Project
from strata_dagster.language.definition import Source

if TYPE_CHECKING:
    from concurrent.futures import Future


class ListingRequest(NamedTuple):
    """What `partition_evidence.file_listing` is asked for a source (its arguments, in order)."""

    pattern: str
    marker: str | None
    cache_dir: Path | None
    column: str

    def key(self) -> tuple[str, str | None, str | None, str]:
        """The request with its cache folder as a real path: the warehouse's path as the run was
        given it and as DuckDB reports it may be spelled differently."""
        folder = None if self.cache_dir is None else os.path.realpath(self.cache_dir)
        return (self.pattern, self.marker, folder, self.column)


def listing_request(source: Source, project: Project, database_path: str | None) -> ListingRequest:
    """The listing a business-versioned `path:` source needs (its `root/*/<name>` pattern, marker
    and partition column), cached beside the warehouse file `database_path`."""
    from strata_dagster.backends.duckdb import partition_evidence

    spec = source.partitioned_by
    assert source.path is not None and spec is not None
    return ListingRequest(
        file_pattern(source, project),
        source.complete_when,
        partition_evidence.listing_cache_dir(database_path),
        spec.column,
    )


class Listings:
    """Listings started before the warehouse opened, by request; each is taken at most once."""

    def __init__(self, started: dict[tuple, Future[FolderListing | None]] | None = None) -> None:
        self._started = started or {}

    def take(self, request: ListingRequest) -> FolderListing | None:
        """The listing started for `request` (None: none was, or it gave none)."""
        future = self._started.pop(request.key(), None)
        return None if future is None else future.result()


@contextmanager
def listed_while_opening(
    project: Project, warehouse: Path, overrides: Mapping[str, str], *, is_full_refresh: bool
) -> Iterator[Listings]:
    """Start listing every business-versioned `path:` source of `project` (not overridden) in a
    thread; the listings not taken when the block ends are cancelled or waited for. None for a full
    refresh (it reads every partition, from a listing made under the lock), nor for another backend
    than DuckDB (its sources' listings are not cached beside a warehouse file)."""
    if is_full_refresh or not current_backend().capabilities.lists_sources_while_opening:
        yield Listings()
        return
    requests = {
        request.key(): request
        for source in project.sources.values()
        if source.is_business_versioned
        and source.path is not None
        and source.partitioned_by is not None
        and source.name not in overrides
        for request in [listing_request(source, project, os.path.abspath(warehouse))]
    }
    if not requests:
        yield Listings()
        return
    from concurrent.futures import ThreadPoolExecutor  # only for a project with such sources

    from strata_dagster.backends.duckdb import partition_evidence

    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="strata-listing")
    try:
        yield Listings(
            {key: pool.submit(partition_evidence.file_listing, *request) for key, request in requests.items()}
        )
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
