"""The listing cache's whole-root path (backends.duckdb.listing `_trusted`): when the root and every
folder have the stat they were listed with, all listed outside the racy window, the cached names are
taken for the whole root at once, with every file's size stat'ed now. Each of those conditions is
checked here by forging one cached value under cached names that are not the folder's: the listing
must then read the folder again and give what an uncached listing gives."""

import marshal
import os
import time
from array import array

import pytest

from strata_dagster.backends.duckdb import listing


def _layout(root):
    """Folders of no matching file, one file, several files with a marker, and a hidden file."""
    for path, size in (
        ("dt=2026-03-01/part-0.parquet", 3),
        ("dt=2026-03-02/part-0.parquet", 5),
        ("dt=2026-03-02/part-1.parquet", 7),
        ("dt=2026-03-02/_SUCCESS", 0),
        ("dt=2026-03-03/notes.txt", 1),
        ("dt=2026-03-04/part-0.parquet", 11),
        ("dt=2026-03-04/.part-1.parquet", 2),
    ):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(b"x" * size)


@pytest.fixture(scope="module")
def settled(tmp_path_factory):
    """A root listed long enough after its last change that its cache is trusted whole (made once:
    waiting out the racy window costs seconds), and the cache file's bytes as listed."""
    tmp_path = tmp_path_factory.mktemp("settled")
    root = tmp_path / "events"
    _layout(root)
    cache_dir = tmp_path / "cache"
    listing.scan_folders(str(root), "*.parquet", "_SUCCESS", cache_dir)
    time.sleep(listing.RACY_SECONDS + 0.2)
    listing.scan_folders(str(root), "*.parquet", "_SUCCESS", cache_dir)  # listed late: settled
    (cache,) = cache_dir.iterdir()
    return root, cache_dir, cache, cache.read_bytes()


def _settled_cache(settled):
    """The settled root with its cache as first listed (a test before may have forged it)."""
    root, cache_dir, cache, listed = settled
    cache.write_bytes(listed)
    return root, cache_dir, cache


def _columns(cache):
    version, root, fields = marshal.loads(cache.read_bytes())
    return version, root, listing._Columns(*fields)


def _write(cache, version, root, columns):
    cache.write_bytes(marshal.dumps((version, root, tuple(columns))))


def _uncached(root):
    return listing.scan_folders(str(root), "*.parquet", "_SUCCESS", None)


def test_a_settled_root_is_listed_whole_from_the_cache_as_an_uncached_listing_lists_it(settled):
    root, cache_dir, cache = _settled_cache(settled)
    written = cache.stat().st_mtime_ns
    found = listing.scan_folders(str(root), "*.parquet", "_SUCCESS", cache_dir)
    assert found == _uncached(root)
    assert found.folders == ["dt=2026-03-01", "dt=2026-03-02", "dt=2026-03-04"]
    assert found.names[1] == ("part-0.parquet", "part-1.parquet")
    assert found.sizes == [(3,), (5, 7), (11,)]
    assert found.markers == [False, True, False]
    assert cache.stat().st_mtime_ns == written  # trusted whole: nothing listed anew, nothing stored
    # A rewrite in place changes no folder's stat: the size is the file's now.
    with open(root / "dt=2026-03-02" / "part-1.parquet", "ab") as file:
        file.write(b"tail")
    found = listing.scan_folders(str(root), "*.parquet", "_SUCCESS", cache_dir)
    assert found.sizes == [(3,), (5, 11), (11,)]
    assert found == _uncached(root)
    os.truncate(root / "dt=2026-03-02" / "part-1.parquet", 7)  # as listed again, for the next tests


def test_the_usual_root_of_one_file_per_folder_is_listed_whole(tmp_path):
    root = tmp_path / "events"
    for day in range(1, 6):
        (root / f"dt=2026-03-0{day}").mkdir(parents=True)
        (root / f"dt=2026-03-0{day}" / "part-0.parquet").write_bytes(b"x" * day)
    cache_dir = tmp_path / "cache"
    listing.scan_folders(str(root), "*.parquet", None, cache_dir)
    time.sleep(listing.RACY_SECONDS + 0.2)
    listing.scan_folders(str(root), "*.parquet", None, cache_dir)
    found = listing.scan_folders(str(root), "*.parquet", None, cache_dir)
    assert found == listing.scan_folders(str(root), "*.parquet", None, None)
    assert found.sizes == [(1,), (2,), (3,), (4,), (5,)]


def _forge_names(columns):
    """The cache claiming `dt=2026-03-02` holds `part-0.parquet` alone (it holds part-1 too)."""
    assert columns.names.split("\0") == [
        "part-0.parquet",
        "part-0.parquet",
        "part-1.parquet",
        "part-0.parquet",
    ]
    counts = array("I", columns.counts)
    counts[1] = 1
    return columns._replace(
        names="\0".join(["part-0.parquet"] * 3),
        paths="\0".join(f"dt=2026-03-0{day}/part-0.parquet" for day in (1, 2, 4)),
        counts=counts.tobytes(),
        sizes=b"",  # the sizes as listed go with the names as listed
    )


def _moved(packed, code, index):
    """One folder's value in a packed column, moved by one."""
    values = array(code, packed)
    values[index] += 1
    return values.tobytes()


def test_forged_names_under_the_folders_real_stat_are_trusted(settled):
    """The control for the forgeries below: with every stat as listed, the cache is the folder."""
    root, cache_dir, cache = _settled_cache(settled)
    version, listed_root, columns = _columns(cache)
    _write(cache, version, listed_root, _forge_names(columns))
    found = listing.scan_folders(str(root), "*.parquet", "_SUCCESS", cache_dir)
    assert found.names[1] == ("part-0.parquet",)


@pytest.mark.parametrize(
    "forgery",
    [
        lambda c: c._replace(ctimes=_moved(c.ctimes, "q", 1)),
        lambda c: c._replace(mtimes=_moved(c.mtimes, "q", 1)),
        lambda c: c._replace(inodes=_moved(c.inodes, "Q", 1)),
        lambda c: c._replace(devices=_moved(c.devices, "Q", 1)),
        lambda c: c._replace(settled=b"\x01\x00\x01\x01"),
    ],
    ids=["ctime", "mtime", "inode", "device", "racy"],
)
def test_a_folder_whose_stat_or_trust_differs_from_the_cache_is_read_again(settled, forgery):
    root, cache_dir, cache = _settled_cache(settled)
    version, listed_root, columns = _columns(cache)
    _write(cache, version, listed_root, forgery(_forge_names(columns)))
    found = listing.scan_folders(str(root), "*.parquet", "_SUCCESS", cache_dir)
    assert found.names[1] == ("part-0.parquet", "part-1.parquet")
    assert found == _uncached(root)


def test_a_file_gone_since_its_folder_was_listed_is_left_out_as_the_folder_by_folder_listing_does(settled):
    """A cached name that no longer stats (forged here: removing a file moves its folder's stat)
    falls back to the folder-by-folder listing, which skips it."""
    root, cache_dir, cache = _settled_cache(settled)
    version, listed_root, columns = _columns(cache)
    forged = columns._replace(
        names=columns.names.replace("part-1.parquet", "part-9.parquet"),
        paths=columns.paths.replace("dt=2026-03-02/part-1.parquet", "dt=2026-03-02/part-9.parquet"),
    )
    _write(cache, version, listed_root, forged)
    found = listing.scan_folders(str(root), "*.parquet", "_SUCCESS", cache_dir)
    assert found.names[1] == ("part-0.parquet",)
    assert found.sizes[1] == (5,)


def test_a_cache_whose_columns_disagree_is_not_read(settled):
    root, cache_dir, cache = _settled_cache(settled)
    version, listed_root, columns = _columns(cache)
    _write(cache, version, listed_root, _forge_names(columns)._replace(markers=b"\x00"))
    assert listing._read(cache) is None
    assert listing.scan_folders(str(root), "*.parquet", "_SUCCESS", cache_dir) == _uncached(root)
    assert listing._read(cache) is not None  # rewritten by the listing above


def _without_last_folder(columns):
    """The cache claiming the root holds its first three folders only (it holds `dt=2026-03-04` too)."""
    assert columns.folders.split("\0")[-1] == "dt=2026-03-04"
    names, paths = columns.names.split("\0"), columns.paths.split("\0")
    return columns._replace(
        folders=columns.folders.rsplit("\0", 1)[0],
        devices=columns.devices[:-8],
        inodes=columns.inodes[:-8],
        mtimes=columns.mtimes[:-8],
        ctimes=columns.ctimes[:-8],
        settled=columns.settled[:-1],
        markers=columns.markers[:-1],
        counts=columns.counts[:-4],
        names="\0".join(names[:-1]),
        paths="\0".join(paths[:-1]),
        sizes=columns.sizes[:-8],
    )


@pytest.mark.parametrize(
    "forgery",
    [
        lambda c: c,
        lambda c: c._replace(is_root_settled=False),
        lambda c: c._replace(root_signature=(*c.root_signature[:3], c.root_signature[3] + 1)),
    ],
    ids=["control", "racy", "stat"],
)
def test_a_root_whose_stat_or_trust_differs_from_the_cache_is_read_again(settled, forgery):
    root, cache_dir, cache = _settled_cache(settled)
    version, listed_root, columns = _columns(cache)
    _write(cache, version, listed_root, forgery(_without_last_folder(columns)))
    found = listing.scan_folders(str(root), "*.parquet", "_SUCCESS", cache_dir)
    if forgery(columns) is columns:  # the control: the root's stat as listed, the cache is the root
        assert found.folders == ["dt=2026-03-01", "dt=2026-03-02"]
    else:
        assert found == _uncached(root)


def test_a_file_added_with_the_folders_mtime_set_back_is_seen_on_the_whole_root_path(tmp_path):
    """On a real folder, not a forged cache: a file added to a settled folder, its mtime set back as
    `rsync -t` would, leaves every mtime as cached; the folder's ctime moved, so it is read again."""
    root = tmp_path / "events"
    _layout(root)
    cache_dir = tmp_path / "cache"
    listing.scan_folders(str(root), "*.parquet", "_SUCCESS", cache_dir)
    time.sleep(listing.RACY_SECONDS + 0.2)
    listing.scan_folders(str(root), "*.parquet", "_SUCCESS", cache_dir)
    (cache,) = cache_dir.iterdir()
    written = cache.stat().st_mtime_ns
    assert listing.scan_folders(str(root), "*.parquet", "_SUCCESS", cache_dir) == _uncached(root)
    assert cache.stat().st_mtime_ns == written  # trusted whole
    folder = root / "dt=2026-03-01"
    before = os.stat(folder)
    (folder / "part-1.parquet").write_bytes(b"y" * 4)
    os.utime(folder, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.stat(folder).st_mtime_ns == before.st_mtime_ns
    found = listing.scan_folders(str(root), "*.parquet", "_SUCCESS", cache_dir)
    assert found.names[0] == ("part-0.parquet", "part-1.parquet")
    assert found == _uncached(root)


def _summarizer(name, calls):
    """A summary of a listing's names and sizes, counting its calls."""

    def summarize(found):
        calls.append(name)
        return f"{name}:{found.names}:{found.sizes}"

    return (name, summarize)


def test_the_summary_of_an_unchanged_listing_is_kept_and_a_changed_size_is_summarized_again(tmp_path):
    root = tmp_path / "events"
    _layout(root)
    cache_dir = tmp_path / "cache"
    calls = []
    summarize = _summarizer("sizes", calls)
    first = listing.scan_folders(str(root), "*.parquet", "_SUCCESS", cache_dir, summarize)
    assert first.summary == f"sizes:{first.names}:{first.sizes}" and calls == ["sizes"]
    time.sleep(listing.RACY_SECONDS + 0.2)
    listing.scan_folders(str(root), "*.parquet", "_SUCCESS", cache_dir, summarize)  # stored settled
    calls.clear()
    again = listing.scan_folders(str(root), "*.parquet", "_SUCCESS", cache_dir, summarize)
    assert again.summary == first.summary and calls == []  # the listing it summarized: kept
    # Another question about the same listing is answered anew.
    other = listing.scan_folders(str(root), "*.parquet", "_SUCCESS", cache_dir, _summarizer("other", calls))
    assert other.summary.startswith("other:") and calls == ["other"]
    # A rewrite in place: the folder's stat as cached, a size moved, so the listing is summarized again.
    with open(root / "dt=2026-03-04" / "part-0.parquet", "ab") as file:
        file.write(b"tail")
    calls.clear()
    changed = listing.scan_folders(str(root), "*.parquet", "_SUCCESS", cache_dir, summarize)
    assert changed.sizes[-1] == (15,)
    assert changed.summary == f"sizes:{changed.names}:{changed.sizes}" and calls == ["sizes"]
