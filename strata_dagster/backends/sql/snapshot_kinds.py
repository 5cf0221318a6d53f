"""What each snapshot name is (a table or a view), as a session keeps it: both backends cache it."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlglot import exp


@dataclass
class SnapshotKinds(ABC):
    """Snapshot name -> 'table' or 'view', read from the catalog when first needed and kept up to
    date by the session's own writes (only the writer changes the snapshot schema)."""

    # Where snapshots are written as files of strata's own (DuckDB's snapshot_files.py); None:
    # every snapshot is a table of the backend's.
    folder: Path | None = None
    kinds: dict[str, str] | None = None

    @abstractmethod
    def kind_of(self, con: Any, name: str) -> str | None:
        """'table' or 'view' for the snapshot `name`, None when there is none (`con`: the
        session's connection, to ask the catalog with)."""

    def write_snapshot(self, con: Any, name: str, query: exp.Query, replaces: str | None) -> None:
        """Write snapshot `name` as a file in `folder` and a view over it (`replaces`: the kind of a
        leftover of that name, dropped first). Only a backend whose snapshots are files of strata's
        own has a folder, and implements this."""
        raise NotImplementedError(f"{type(self).__name__} writes no snapshot files")

    def set_kind(self, name: str, kind: str | None) -> None:
        """Record what the session just made of `name` (None: dropped)."""
        if self.kinds is not None:
            if kind is None:
                self.kinds.pop(name, None)
            else:
                self.kinds[name] = kind
