"""A table's upkeep: which snapshots `strata gc` keeps, and the files no kept snapshot reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from pyiceberg.table import Table

from strata_dagster.backends.iceberg.states import ENTRY, SEGMENTS


def ends_kept_commit(summary: Any, kept_entries: set[int]) -> bool:
    """A snapshot gc keeps: the last of a commit that published a kept run's state."""
    if summary is None or summary.get(SEGMENTS) is None:
        return False
    entry = summary.get(ENTRY)
    return entry is not None and int(entry) in kept_entries


def local_path(uri: str) -> Path | None:
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        return Path(parsed.path)
    return None


def delete_unreferenced(table: Table) -> None:
    """Remove the table's own data files and manifests no kept snapshot references (local only)."""
    root = local_path(table.location())
    if root is None or not root.exists():
        return
    referenced: set[str] = set()
    io = table.io
    for snapshot in table.snapshots():
        referenced.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(io):
            referenced.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(io, discard_deleted=True):
                referenced.add(entry.data_file.file_path)
    kept = {str(local_path(path)) for path in referenced if local_path(path) is not None}
    for folder, pattern in ((root / "data", "*.parquet"), (root / "metadata", "*.avro")):
        if not folder.exists():
            continue
        for path in folder.rglob(pattern):
            if str(path) not in kept:
                path.unlink()
