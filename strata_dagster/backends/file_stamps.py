"""What the file system says of a source's files, so that a run can tell they have not been
written since a scan it remembers, without reading a row.

A DuckDB database file's stamp covers the file and its write-ahead log (`<file>.wal`, where DuckDB
appends commits before a checkpoint); a file pattern's (`events/*/*.parquet`) covers every file and
folder the pattern can reach. Each entry gives device, inode, size, modification and status-change
times. Every write changes the times, a file replaced by another changes the inode, a file added,
removed or renamed changes its folder's times, and the status-change time cannot be set back by
`touch` or `cp -p`.

A write lands on the file's timestamp clock, whose ticks are coarse (a few milliseconds on Linux,
whole seconds on some file systems): a write right after a stat, in the same tick as the write
before it, could leave every time as it was. So a stamp is only *settled*, and a scan remembered
under it, when the file's last change is older than the tick by a wide margin when the stamp is
taken (`SETTLE_NS`): any later write then falls in a later tick. A file written less than that
before a run is scanned as usual, and remembered by the next run that finds it settled.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

# How old a file's last change must be for its stamp to be settled: far above the timestamp tick of
# a file system with sub-second times, and above two seconds (FAT's tick) where times are whole seconds.
SETTLE_NS = 1_000_000_000
SETTLE_WHOLE_SECONDS_NS = 3_000_000_000
_SECOND_NS = 1_000_000_000
# A pattern reaching more files and folders than this is scanned every run: listing them all
# would cost more than it spares.
MAX_ENTRIES = 100_000
_WILDCARD = re.compile(r"[*?\[{]")


@dataclass(frozen=True)
class FileStamp:
    text: str  # compared for equality only
    is_settled: bool


def database_stamp(path: Path) -> FileStamp | None:
    """The stamp of DuckDB database `path` and its write-ahead log; None if the file cannot be
    looked at (a read then fails with its own clear error)."""
    taken_at = time.time_ns()
    try:
        stats = [os.stat(path)]
    except OSError:
        return None
    try:
        stats.append(os.stat(path.with_name(path.name + ".wal")))
    except FileNotFoundError:
        pass
    except OSError:
        return None
    return _stamp("/".join(map(_said, stats)) + ("" if len(stats) > 1 else "/-"), stats, taken_at)


def files_stamp(pattern: str) -> FileStamp | None:
    """The stamp of every file and folder a local file pattern can read: the folder before its
    first wildcard and each entry below it, as many levels down as the pattern reaches (every
    level for `**`); a pattern without a wildcard is its one file. None for a remote path (a URL),
    a path that cannot be looked at, or past MAX_ENTRIES entries."""
    if "://" in pattern:
        return None
    taken_at = time.time_ns()
    parts = PurePosixPath(pattern).parts
    fixed = next((index for index, part in enumerate(parts) if _WILDCARD.search(part)), len(parts))
    levels = None if any("**" in part for part in parts[fixed:]) else len(parts) - fixed
    try:
        entries = _entries(Path(*parts[:fixed]), levels)
    except OSError:
        return None
    if entries is None:
        return None
    lines = "\n".join(f"{name}:{_said(s)}" for name, s in entries)
    digest = hashlib.sha256(lines.encode()).hexdigest()
    return _stamp(f"files:{len(entries)}:{digest}", [s for _, s in entries], taken_at)


def _entries(base: Path, levels: int | None) -> list[tuple[str, os.stat_result]] | None:
    """(path below `base`, stat) of `base` and of every entry `levels` levels down (None: all),
    in a fixed order. Each folder is looked at before it is listed, so an entry added while the
    folder is listed moves the folder's times past the ones kept."""
    found = [(".", os.stat(base))]
    folders = [base] if stat.S_ISDIR(found[0][1].st_mode) else []
    while folders and (levels is None or levels > 0):
        below: list[Path] = []
        for folder in folders:
            with os.scandir(folder) as listing:
                for entry in sorted(listing, key=lambda item: item.name):
                    found.append((str(Path(entry.path).relative_to(base)), entry.stat()))
                    if entry.is_dir():
                        below.append(Path(entry.path))
            if len(found) > MAX_ENTRIES:
                return None
        folders = below
        levels = None if levels is None else levels - 1
    return found


def _said(s: os.stat_result) -> str:
    """What a stamp keeps of one entry: device, inode, size, modification and status-change times."""
    return f"{s.st_dev}:{s.st_ino}:{s.st_size}:{s.st_mtime_ns}:{s.st_ctime_ns}"


def _stamp(text: str, stats: list[os.stat_result], taken_at: int) -> FileStamp | None:
    """A stamp of `stats`, settled when their last change is older than the margin at `taken_at`."""
    times = [t for s in stats for t in (s.st_mtime_ns, s.st_ctime_ns)]
    if min(times) <= 0:
        return None  # a file system that keeps no times: nothing tells a write
    changed_at = max(times)
    margin = SETTLE_WHOLE_SECONDS_NS if all(t % _SECOND_NS == 0 for t in times) else SETTLE_NS
    return FileStamp(text, taken_at - changed_at > margin)
