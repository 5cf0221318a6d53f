"""A history record's bulky detail kept in a file beside the warehouse, not in the record's row.

A partitioned model's state carries each partition's and slice's figures (tens of KB a record), and
an entry's record of it the partitions it rebuilt and its SQL. In the history tables that bulk
grows with every run, and DuckDB rewrites a table's last row group, old rows and all, at each
checkpoint: after 100 runs of the shop at 1M orders, closing the warehouse took 0.1 s more than
after two. So a detail longer than INLINE_LIMIT keeps its small values in the row and moves each
value longer than VALUE_LIMIT to a file of `<warehouse>.snapshots/history/`, one per write of
records (a publication's snapshots, its entry's models): one line per record, written once and
never changed, named by the record's marker (STORED, below). The writer's transaction publishes the
file with the rows naming it: written and made durable before the COMMIT (a crash before it leaves
a file no row names, which `strata gc` removes), removed again when the transaction rolls back.

A file that is gone or cannot be read leaves the record with its inline values only: its moved
values are absent, as in a state recorded before they existed; the engine checks the file of each
state it would build on first, and builds that model in full (engine/decisions/decider.py).
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from strata_dagster.paths import fsync

# The folder of a warehouse's snapshot files (backends/duckdb/snapshot_files.py), and this one in it.
SNAPSHOTS_SUFFIX = ".snapshots"
FOLDER = "history"
# The inline marker: {"file": name, "line": n, "keys": [moved keys], "sql": whether the SQL moved}.
STORED = "stored_detail"
# A detail up to this long stays whole in its row; beyond it, values this long move to the file.
INLINE_LIMIT = 2048
VALUE_LIMIT = 256
SQL_KEY = "sql"
_SUFFIX = ".jsonl"


def _as_json(value: object) -> object:
    """json.dumps' `default`: a stored detail is written as its dict; anything else as its text."""
    return dict(value) if isinstance(value, Mapping) else str(value)


def dumps(value: object) -> str:
    return json.dumps(value, sort_keys=True, default=_as_json)


@dataclass
class DetailFiles:
    """The detail files of one warehouse: those it reads, and those this session wrote."""

    folder: Path
    # Whether new records move their bulk here (a warehouse kept as one file, storage `table`, does not).
    writes: bool = False
    # The other folders holding snapshot files the warehouse's views read (asked only when a file
    # is not here).
    elsewhere: Callable[[], Iterable[Path]] = field(default=lambda: ())
    _lines: dict[str, list[str] | None] = field(default_factory=dict)
    unsynced: list[Path] = field(default_factory=list)
    written: list[Path] = field(default_factory=list)

    @classmethod
    def of(cls, database_path: str | None, *, writes: bool = False) -> DetailFiles | None:
        """The detail files of the warehouse in file `database_path` (None: in memory), in the
        folder of its snapshot files; `writes`: whether new records move their bulk there."""
        if not database_path:
            return None
        warehouse = Path(database_path).absolute()
        return cls(warehouse.with_name(warehouse.name + SNAPSHOTS_SUFFIX) / FOLDER, writes=writes)

    @classmethod
    def of_connection(cls, con: duckdb.DuckDBPyConnection) -> DetailFiles | None:
        """The detail files of the warehouse `con` has open (None: an in-memory database)."""
        row = con.execute(
            "SELECT path FROM duckdb_databases() WHERE database_name = current_database()"
        ).fetchone()
        return cls.of(str(row[0]) if row and row[0] else None)

    # -- writing ----------------------------------------------------------------------------------
    def store(
        self, details: Sequence[Mapping[str, Any]], sqls: Sequence[str] | None = None
    ) -> list[tuple[str, str]]:
        """Each detail's text for its row and the SQL its row keeps (from `sqls`, else ''), the
        bulk of each moved to one new file: values longer than VALUE_LIMIT of a detail longer than
        INLINE_LIMIT, and SQL longer than INLINE_LIMIT (its row then keeps ''). Only for files
        that take new records (`writes`: HistoryWriter asks)."""
        rows: list[tuple[str, str]] = []
        lines: list[str] = []
        name = f"{secrets.token_hex(8)}{_SUFFIX}"
        for index, detail in enumerate(details):
            whole = {key: value for key, value in detail.items() if key != STORED}
            text = dumps(whole)
            sql = sqls[index] if sqls is not None else ""
            moves_sql = len(sql) > INLINE_LIMIT
            if len(text) <= INLINE_LIMIT and not moves_sql:
                rows.append((text, sql))
                continue
            moved = (
                {key: value for key, value in whole.items() if len(dumps(value)) > VALUE_LIMIT}
                if len(text) > INLINE_LIMIT
                else {}
            )
            inline = {key: value for key, value in whole.items() if key not in moved}
            inline[STORED] = {"file": name, "line": len(lines), "keys": sorted(moved), SQL_KEY: moves_sql}
            lines.append(dumps({"detail": moved, SQL_KEY: sql if moves_sql else None}))
            rows.append((dumps(inline), "" if moves_sql else sql))
        if lines:
            self._write(name, lines)
        return rows

    def _write(self, name: str, lines: list[str]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / name
        staging = path.with_name(f".{name}.{os.getpid()}")
        staging.write_text("\n".join(lines) + "\n", encoding="utf-8")
        os.replace(staging, path)
        self.written.append(path)
        self.unsynced.append(path)
        self._lines[name] = lines

    def sync(self) -> None:
        """Make the files written since the last call durable, and their names (before the COMMIT
        that publishes rows naming them)."""
        if not self.unsynced:
            return
        paths, self.unsynced = self.unsynced, []
        for path in paths:
            fsync(path)
        fsync(self.folder)

    def committed(self) -> None:
        self.written.clear()

    def discard(self) -> None:
        """Remove the files written since the last commit: no committed row names them."""
        for path in self.written:
            path.unlink(missing_ok=True)
            self._lines.pop(path.name, None)
        self.written.clear()
        self.unsynced.clear()

    # -- reading ----------------------------------------------------------------------------------
    def line(self, marker: Mapping[str, Any]) -> dict[str, Any] | None:
        """The moved values `marker` names, parsed anew (None: its file is gone or unreadable).
        Each reader parses its own: a caller may change what it was given."""
        name, number = str(marker.get("file")), int(marker.get("line", -1))
        lines = self._read(name)
        if lines is None or not 0 <= number < len(lines):
            return None
        return _parsed_line(lines[number])

    def _read(self, name: str) -> list[str] | None:
        if name not in self._lines:
            path = self._find(name)
            try:
                text = path.read_text(encoding="utf-8") if path is not None else None
            except (OSError, UnicodeDecodeError):
                text = None
            self._lines[name] = text.splitlines() if text is not None else None
        return self._lines[name]

    def _find(self, name: str) -> Path | None:
        """Where detail file `name` is: here, else beside the snapshot files the warehouse's views
        read from another folder (a warehouse file copied without its `.snapshots` folder reads
        the original's files, as its views do)."""
        for folder in (self.folder, *(other / FOLDER for other in self.elsewhere())):
            if (folder / name).exists():
                return folder / name
        return None

    def problem(self, marker: Mapping[str, Any]) -> str | None:
        """What is wrong with the file `marker` names (None: its line reads)."""
        if self.line(marker) is not None:
            return None
        found = self._find(str(marker.get("file")))
        return "missing" if found is None else "not a whole detail file (cut short or overwritten)"

    def whole_file_problem(self, name: str) -> str | None:
        """What is wrong with detail file `name` (None: every line of it reads)."""
        lines = self._read(name)
        if lines is None:
            return "missing" if self._find(name) is None else "unreadable"
        if any(_parsed_line(text) is None for text in lines):
            return "not a whole detail file (cut short or overwritten)"
        return None

    def path(self, marker: Mapping[str, Any]) -> Path:
        name = str(marker.get("file"))
        return self._find(name) or self.folder / name

    # -- garbage --------------------------------------------------------------------------------
    def names(self) -> list[str]:
        if not self.folder.is_dir():
            return []
        return [entry.name for entry in os.scandir(self.folder) if entry.is_file()]

    def remove_unnamed(self, named: Iterable[str]) -> tuple[int, int]:
        """Remove the files (and staging leftovers) no record names: (count, bytes)."""
        keep = set(named)
        count = size = 0
        for name in self.names():
            if name in keep:
                continue
            path = self.folder / name
            size += path.stat().st_size
            path.unlink()
            count += 1
        return count, size


def _parsed_line(text: str) -> dict[str, Any] | None:
    """One record's line of a detail file, parsed (None: cut short, overwritten, not one)."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) and isinstance(value.get("detail"), dict) else None
