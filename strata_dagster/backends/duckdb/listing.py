"""The listing of a partitioned Parquet folder (`root/*/<name>`), cached by the folders' stat.

A business-versioned source is listed on every run: every partition folder and every file in it,
with each file's size. Reading thousands of folders is most of that cost, so the names found in
each folder are kept in a cache file next to the warehouse (`<warehouse>.listing/`), with the
folder's inode, mtime and ctime. A folder's mtime and ctime change whenever an entry is added to it,
removed or renamed (POSIX), and its ctime cannot be set back by a writer (`touch -d` and `rsync -t`
set the mtime, which moves the ctime to now), so a folder whose stat is the cached one holds the
cached names. Every file is still stat'ed on every run: a file rewritten in place keeps its
folder's stat but shows its new size, exactly as an uncached listing shows it. What a run compares
with the ledger is therefore what an uncached listing gives.

Timestamps are coarse (a clock tick, a few milliseconds): a folder changed within the same tick
as it was listed could keep the same mtime. So a cached folder is trusted only when its mtime and
ctime are older than its last listing by `RACY_SECONDS`; a recent one is listed again, as git
re-reads an index entry as new as the index. Any error reading the cache lists everything.
`strata gc` removes the cache files of roots that are gone (`prune_cache`).
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import hashlib
import marshal
import operator
import os
import re
import time
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

CACHE_SUFFIX = ".listing"
RACY_SECONDS = 2.0
_RACY_NS = int(RACY_SECONDS * 1e9)
_FORMAT = 4

Signature = tuple[int, int, int, int]  # st_dev, st_ino, st_mtime_ns, st_ctime_ns


class ListedFolder(NamedTuple):
    """One folder under the root: its name and path, its matching files with their sizes (sorted
    by name), and whether it holds the completeness marker."""

    name: str
    path: str
    files: tuple[tuple[str, int], ...]
    has_marker: bool
    paths: tuple[str, ...] = ()  # each file's path, in the order of `files`


def split_pattern(pattern: str) -> tuple[str, str] | None:
    """(root, file name pattern) of `root/*/<name>` with no wildcard in root and a name not starting
    with a dot: the layout the folder-by-folder listing handles (None: glob it)."""
    if pattern.count("/") < 2:
        return None
    root, middle, name = pattern.rsplit("/", 2)
    if middle != "*" or not root or _has_magic(root) or name.startswith("."):
        return None
    return root, name


def _has_magic(text: str) -> bool:
    return re.search(r"[*?[]", text) is not None


def _signature(stat: os.stat_result) -> Signature:
    return (stat.st_dev, stat.st_ino, stat.st_mtime_ns, stat.st_ctime_ns)


def _is_settled(signature: Signature, listed_at: int) -> bool:
    """Whether a folder of this stat, listed at `listed_at` (ns), was listed after its last change
    by more than the racy window: then a folder with the same stat holds what was listed."""
    return max(signature[2], signature[3]) < listed_at - _RACY_NS


class FolderListing(NamedTuple):
    """Every folder of a root holding matching files, as parallel lists in the order of the folders'
    names (one list per field instead of one object per folder: a run lists thousands of them, and
    an unchanged source is told by a digest over these lists alone). Each folder's names are
    sorted, and its sizes are those names' sizes now."""

    root: str
    folders: list[str]
    names: list[tuple[str, ...]]
    sizes: list[tuple[int, ...]]
    markers: list[bool]
    # What the caller's `summarize` gives for this listing: kept in the cache with the listing it
    # summarized, and given back unchanged while the listing is that one (None: none asked).
    summary: str | None = None

    def paths(self, index: int) -> tuple[str, ...]:
        folder = f"{self.root}/{self.folders[index]}"
        return tuple(f"{folder}/{name}" for name in self.names[index])


def list_folders(
    root: str, name: str, marker: str | None, cache_dir: Path | None = None
) -> list[ListedFolder]:
    """Every folder of `root` holding files `<name>` matches (hidden folders and files left out:
    Python's glob and DuckDB's match the same), sorted by name, with each file's size now. A root
    that cannot be read lists nothing, as glob does."""
    found = scan_folders(root, name, marker, cache_dir)
    return [
        ListedFolder(
            folder,
            f"{root}/{folder}",
            tuple(zip(names, sizes, strict=True)),
            has_marker,
            found.paths(index),
        )
        for index, (folder, names, sizes, has_marker) in enumerate(
            zip(found.folders, found.names, found.sizes, found.markers, strict=True)
        )
    ]


# (what a summary is, so a cached one is given back only for the same question; the function)
Summarize = tuple[str, Callable[["FolderListing"], "str | None"]]


def scan_folders(
    root: str,
    name: str,
    marker: str | None,
    cache_dir: Path | None = None,
    summarize: Summarize | None = None,
) -> FolderListing:
    """`list_folders` as parallel lists, with `summarize`'s summary of them. Paths are stat'ed
    relative to the root's descriptor: the kernel resolves one or two names per stat instead of the
    root's whole path."""
    cache_file = None if cache_dir is None else cache_dir / _cache_name(root, name, marker)
    columns = _load(cache_file, root)
    found = FolderListing(root, [], [], [], [])
    try:
        descriptor = os.open(root, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return found
    try:
        try:
            root_signature = _signature(os.fstat(descriptor))
        except OSError:
            return found
        if columns is not None:
            trusted = _trusted(root, columns, descriptor, root_signature, summarize)
            if trusted is not None:
                return trusted
        cached = {} if columns is None else _entries(columns)
        is_match = re.compile(fnmatch.translate(name)).match
        folder_names = _scan_root(descriptor, root, root_signature, cached, is_match, marker, found)
    finally:
        os.close(descriptor)
    if summarize is not None:
        found = found._replace(summary=summarize[1](found))
    if folder_names is not None and cache_file is not None:
        _store(cache_file, root, _as_columns(cached, folder_names, found, summarize))
    return found


def _trusted(
    root: str, columns: _Columns, descriptor: int, root_signature: Signature, summarize: Summarize | None
) -> FolderListing | None:
    """The listing the cache holds, with every file's size now, when the root and every folder have
    the stat they were listed with, each listed outside the racy window; None otherwise (then the
    root is listed folder by folder). Each step runs over a whole column at C level (`map`, arrays
    compared as bytes): an unchanged root of thousands of folders costs its stats and little else."""
    if columns.root_signature != root_signature or not columns.is_root_settled or 0 in columns.settled:
        return None
    folders = _split(columns.folders)
    stat_at = functools.partial(os.stat, dir_fd=descriptor)
    try:
        infos = list(map(stat_at, folders))
    except OSError:
        return None  # gone since the root was listed
    try:
        if (
            _packed("q", _CTIME, infos) != columns.ctimes
            or _packed("q", _MTIME, infos) != columns.mtimes
            or _packed("Q", _INODE, infos) != columns.inodes
            or _packed("Q", _DEVICE, infos) != columns.devices
        ):
            return None
    except OverflowError:
        return None
    try:
        sizes = list(map(_SIZE, map(stat_at, _split(columns.paths))))
    except OSError:
        return None  # removed after its folder was listed: its folder is listed anew
    names = _split(columns.names)
    counts = array("I", columns.counts)
    summary = None
    if summarize is not None and summarize[0] == columns.summary_of and _packed_sizes(sizes) == columns.sizes:
        summary = columns.summary  # the very listing it summarized: the same names, sizes and markers
    if counts.count(1) == len(folders):  # the usual folders of one file each: no per-folder step
        found = FolderListing(
            root, folders, list(zip(names)), list(zip(sizes)), list(map(bool, columns.markers)), summary
        )
    else:
        found = FolderListing(root, [], [], [], [], summary)
        at = 0
        for folder, count, has_marker in zip(folders, counts, columns.markers, strict=True):
            if count:
                found.folders.append(folder)
                found.names.append(tuple(names[at : at + count]))
                found.sizes.append(tuple(sizes[at : at + count]))
                found.markers.append(bool(has_marker))
                at += count
    return found if summarize is None or summary is not None else found._replace(summary=summarize[1](found))


def _scan_root(
    descriptor: int,
    root: str,
    root_stat: Signature,
    cached: dict[str, _Folder],
    is_match: Callable[[str], re.Match[str] | None],
    marker: str | None,
    found: FolderListing,
) -> tuple[str, ...] | None:
    """Fill `found` with the root's folders, folder by folder, and update `cached`; the root's
    folder names when the cache changed (None: it holds what it held)."""
    now = time.time_ns()
    is_changed = False
    previous_root = cached.get("")
    if previous_root is not None and previous_root[0] == root_stat and previous_root[1]:
        folder_names = previous_root[2]
    else:
        try:
            with os.scandir(root) as entries:
                folder_names = tuple(
                    sorted(e.name for e in entries if not e.name.startswith(".") and e.is_dir())
                )
        except OSError:
            return None
        cached[""] = (root_stat, _is_settled(root_stat, now), folder_names, False)
        is_changed = True
    stat, get = os.stat, cached.get
    folders, all_names, all_sizes, markers = found.folders, found.names, found.sizes, found.markers
    for folder_name in folder_names:
        try:
            info = stat(folder_name, dir_fd=descriptor)
        except OSError:
            continue  # gone since the root was read
        signature = (info.st_dev, info.st_ino, info.st_mtime_ns, info.st_ctime_ns)
        entry = get(folder_name)
        if entry is None or not entry[1] or entry[0] != signature:
            entry = _scan(f"{root}/{folder_name}", signature, now, is_match, marker)
            if entry is None:
                continue
            cached[folder_name] = entry
            is_changed = True
        names = entry[2]
        if len(names) == 1:  # the usual folder of one file, without the lists below
            try:
                size = stat(f"{folder_name}/{names[0]}", dir_fd=descriptor).st_size
            except OSError:
                continue  # removed after its folder was read: the next run lists its folder anew
            folders.append(folder_name)
            all_names.append(names)
            all_sizes.append((size,))
            markers.append(entry[3])
            continue
        kept, sizes = [], []
        for file_name in names:
            try:
                sizes.append(stat(f"{folder_name}/{file_name}", dir_fd=descriptor).st_size)
            except OSError:
                continue  # removed after its folder was read: the next run lists its folder anew
            kept.append(file_name)
        if kept:
            folders.append(folder_name)
            all_names.append(tuple(kept))
            all_sizes.append(tuple(sizes))
            markers.append(entry[3])
    return folder_names if is_changed else None


def _scan(
    folder: str,
    signature: Signature,
    now: int,
    is_match: Callable[[str], re.Match[str] | None],
    marker: str | None,
) -> _Folder | None:
    try:
        with os.scandir(folder) as entries:
            names = [entry.name for entry in entries]
    except OSError:
        return None
    matching = tuple(sorted(n for n in names if not n.startswith(".") and is_match(n)))
    return (signature, _is_settled(signature, now), matching, marker is not None and marker in names)


def _cache_name(root: str, name: str, marker: str | None) -> str:
    key = hashlib.sha256(repr((_FORMAT, root, name, marker)).encode()).hexdigest()[:24]
    return f"{key}.marshal"


# A folder as the folder-by-folder listing keeps it: its signature, whether it was listed long
# enough after its last change to be trusted while its signature holds (`_is_settled`: fixed once
# listed), its matching names, whether it holds the marker.
_Folder = tuple[Signature, int, tuple[str, ...], bool]
_ABSENT: _Folder = ((0, 0, 0, 0), False, (), False)  # a folder not listed: never trusted

_DEVICE = operator.attrgetter("st_dev")
_INODE = operator.attrgetter("st_ino")
_MTIME = operator.attrgetter("st_mtime_ns")
_CTIME = operator.attrgetter("st_ctime_ns")
_SIZE = operator.attrgetter("st_size")


class _Columns(NamedTuple):
    """A root's listing as the cache file holds it: one column per field, over every folder of the
    root in name order, as a few strings and byte strings (loading it builds no object per folder)."""

    root_signature: Signature
    is_root_settled: bool
    folders: str  # the root's folder names, NUL-joined (no name holds a NUL)
    devices: bytes  # array("Q") of the folders' st_dev
    inodes: bytes  # array("Q") of st_ino
    mtimes: bytes  # array("q") of st_mtime_ns
    ctimes: bytes  # array("q") of st_ctime_ns
    settled: bytes  # a byte per folder: 1 when listed outside the racy window
    markers: bytes  # a byte per folder: 1 when it holds the marker
    counts: bytes  # array("I"): how many matching names each folder holds
    names: str  # every folder's matching names, folder after folder, NUL-joined
    paths: str  # the same names as `folder/name`, relative to the root
    sizes: bytes  # array("q"): their sizes when listed (b"": a name did not stat, none kept)
    summary: str  # the caller's summary of the listing as listed ("": none)
    summary_of: str  # what that summary is (`Summarize`'s name; "": none)


_COLUMN_TYPES: tuple[type, ...] = (
    tuple,
    bool,
    str,
    bytes,
    bytes,
    bytes,
    bytes,
    bytes,
    bytes,
    bytes,
    str,
    str,
    bytes,
    str,
    str,
)


def _split(joined: str) -> list[str]:
    return joined.split("\0") if joined else []


def _packed(code: str, field: operator.attrgetter, infos: list[os.stat_result]) -> bytes:
    return array(code, map(field, infos)).tobytes()


def _packed_sizes(sizes: list[int]) -> bytes:
    return array("q", sizes).tobytes()


def _entries(columns: _Columns) -> dict[str, _Folder]:
    """The cache as the folder-by-folder listing reads it: its entries by folder ("" the root)."""
    folders = _split(columns.folders)
    entries: dict[str, _Folder] = {
        "": (columns.root_signature, columns.is_root_settled, tuple(folders), False)
    }
    names = _split(columns.names)
    signatures = zip(
        array("Q", columns.devices),
        array("Q", columns.inodes),
        array("q", columns.mtimes),
        array("q", columns.ctimes),
        strict=True,
    )
    at = 0
    for folder, signature, is_settled, has_marker, count in zip(
        folders, signatures, columns.settled, columns.markers, array("I", columns.counts), strict=True
    ):
        entries[folder] = (signature, bool(is_settled), tuple(names[at : at + count]), bool(has_marker))
        at += count
    return entries


def _as_columns(
    cached: dict[str, _Folder],
    folder_names: tuple[str, ...],
    found: FolderListing,
    summarize: Summarize | None,
) -> _Columns | None:
    """The cache's entries for the root and its folders, as columns, with `found`'s sizes and
    summary when it lists every cached name (None: a value that does not fit the columns' arrays,
    then nothing is cached)."""
    root_signature, is_root_settled, _, _ = cached[""]
    entries = [cached.get(folder, _ABSENT) for folder in folder_names]
    names = [name for entry in entries for name in entry[2]]
    is_whole = [name for listed in found.names for name in listed] == names
    sizes = _packed_sizes([size for listed in found.sizes for size in listed]) if is_whole else b""
    summary = found.summary if is_whole and summarize is not None else None
    signatures = [entry[0] for entry in entries]
    try:
        devices, inodes, mtimes, ctimes = (
            array(code, [signature[index] for signature in signatures]).tobytes()
            for index, code in enumerate("QQqq")
        )
    except OverflowError:
        return None
    return _Columns(
        root_signature,
        bool(is_root_settled),
        "\0".join(folder_names),
        devices,
        inodes,
        mtimes,
        ctimes,
        bytes(bool(entry[1]) for entry in entries),
        bytes(bool(entry[3]) for entry in entries),
        array("I", [len(entry[2]) for entry in entries]).tobytes(),
        "\0".join(names),
        "\0".join(
            f"{folder}/{name}"
            for folder, entry in zip(folder_names, entries, strict=True)
            for name in entry[2]
        ),
        sizes,
        summary or "",
        summarize[0] if summarize is not None and summary is not None else "",
    )


def _read(cache_file: Path) -> tuple[str, _Columns] | None:
    """(the root listed, its listing) as a cache file holds them; None when it is unreadable, of
    another format, or its columns do not agree in length."""
    try:
        data = marshal.loads(cache_file.read_bytes())
    except (OSError, EOFError, ValueError, TypeError):
        return None
    if not isinstance(data, tuple) or len(data) != 3 or data[0] != _FORMAT:
        return None
    _, root, fields = data
    if not isinstance(root, str) or not isinstance(fields, tuple) or len(fields) != len(_COLUMN_TYPES):
        return None
    if not all(map(isinstance, fields, _COLUMN_TYPES)):
        return None
    columns = _Columns(*fields)
    count = len(_split(columns.folders))
    counts = columns.counts
    if len(counts) % 4 or len(counts) != 4 * count:
        return None
    if {len(columns.devices), len(columns.inodes), len(columns.mtimes), len(columns.ctimes)} != {8 * count}:
        return None
    if len(columns.settled) != count or len(columns.markers) != count or len(columns.root_signature) != 4:
        return None
    named = sum(array("I", counts))
    if len(_split(columns.names)) != named or len(_split(columns.paths)) != named:
        return None
    if columns.sizes and len(columns.sizes) != 8 * named:
        return None
    return root, columns


def _load(cache_file: Path | None, root: str) -> _Columns | None:
    if cache_file is None:
        return None
    found = _read(cache_file)
    return found[1] if found is not None and found[0] == root else None


def _store(cache_file: Path, root: str, columns: _Columns | None) -> None:
    """Write the cache under a temporary name, then rename it over the old one (readers see either)."""
    temporary = cache_file.with_name(f"{cache_file.name}.{os.getpid()}.tmp")
    try:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        if columns is None:
            cache_file.unlink(missing_ok=True)
            return
        temporary.write_bytes(marshal.dumps((_FORMAT, root, tuple(columns))))
        os.replace(temporary, cache_file)
    except OSError:
        with contextlib.suppress(OSError):
            temporary.unlink()  # a cache that cannot be written: the next run lists everything again


def prune_cache(cache_dir: Path) -> int:
    """Remove what no listing will read again: cache files whose root folder is gone, files of
    another format or unreadable, and temporary files a writer left (`strata gc`); then the cache
    folder itself once empty. A root that still exists keeps its file: which patterns a project
    still reads only the project knows, and a cache of a root no run lists costs its size only.
    Returns how many files were removed."""
    try:
        names = sorted(os.listdir(cache_dir))
    except OSError:
        return 0
    removed = 0
    for name in names:
        path = cache_dir / name
        if name.endswith(".marshal"):
            found = _read(path)
            if found is not None and os.path.isdir(found[0]):
                continue
        try:
            path.unlink()
            removed += 1
        except OSError:
            continue
    with contextlib.suppress(OSError):
        cache_dir.rmdir()  # only when empty
    return removed
