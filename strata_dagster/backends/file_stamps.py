"""A DuckDB database file's stamp: what its file system says of it, so that a run can tell the
file has not been written since a scan it remembers, without reading a row.

A stamp covers the file and its write-ahead log (`<file>.wal`, where DuckDB appends commits before
a checkpoint): device, inode, size, modification and status-change times. Every write changes the
times, a file replaced by another changes the inode, and the status-change time cannot be set back
by `touch` or `cp -p`.

A write lands on the file's timestamp clock, whose ticks are coarse (a few milliseconds on Linux,
whole seconds on some file systems): a write right after a stat, in the same tick as the write
before it, could leave every time as it was. So a stamp is only *settled*, and a scan remembered
under it, when the file's last change is older than the tick by a wide margin when the stamp is
taken (`SETTLE_NS`): any later write then falls in a later tick. A file written less than that
before a run is scanned as usual, and remembered by the next run that finds it settled.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

# How old a file's last change must be for its stamp to be settled: far above the timestamp tick of
# a file system with sub-second times, and above two seconds (FAT's tick) where times are whole seconds.
SETTLE_NS = 1_000_000_000
SETTLE_WHOLE_SECONDS_NS = 3_000_000_000
_SECOND_NS = 1_000_000_000


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
    times = [t for s in stats for t in (s.st_mtime_ns, s.st_ctime_ns)]
    if min(times) <= 0:
        return None  # a file system that keeps no times: nothing tells a write
    parts = [f"{s.st_dev}:{s.st_ino}:{s.st_size}:{s.st_mtime_ns}:{s.st_ctime_ns}" for s in stats]
    changed_at = max(times)
    margin = SETTLE_WHOLE_SECONDS_NS if all(t % _SECOND_NS == 0 for t in times) else SETTLE_NS
    return FileStamp("/".join(parts) + ("" if len(stats) > 1 else "/-"), taken_at - changed_at > margin)
