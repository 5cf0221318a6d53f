"""Renderings of SQL trees remembered beside the warehouse, so that a run that finds nothing to do
renders nothing and imports no sqlglot dialect (its generator is most of a no-change run's SQL cost).

While a memo is open (`remembered`), `rendered` looks a tree up by a digest of everything sqlglot
renders it from: the tree as sqlglot's own serializer writes it (every node's class, arguments,
comments and metadata), the dialect, the generator's options, and the Python and sqlglot versions.
A tree holding anything the digest cannot spell exactly (a class not sqlglot's, a value that is not
plain data) is rendered, never looked up. `keep` writes the renderings asked for since the memo
opened, and only those (the file holds one run's statements, not every statement ever rendered),
to `<warehouse>.parsed/renderings.memo`, under a temporary name renamed into place. The file is
used only when it is the current user's and nobody else may write it or its folder, and its format
and versions match; anything else (damaged, foreign, stale) is ignored, and rewritten by the next
`keep`. A memo is never wrong, at worst unused.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import marshal
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strata_dagster.language.parse_cache import KEPT_BESIDE, SUFFIX, is_private

if TYPE_CHECKING:
    from sqlglot import exp

FILE_NAME = KEPT_BESIDE
_FORMAT = 1


class _Memo:
    def __init__(self, cache_dir: Path, known: dict[str, str]) -> None:
        self.cache_dir = cache_dir
        self.known = known
        self.used: dict[str, str] = {}
        self.is_forgotten = False


_open: list[_Memo] = []


def rendered(tree: exp.Expr, dialect: str, **options: Any) -> str:
    """`tree.sql(dialect=dialect, **options)`, from the open memo when it holds it."""
    memo = _open[-1] if _open and not _open[-1].is_forgotten else None
    key = _key(tree, dialect, options) if memo is not None else None
    if memo is None or key is None:
        return tree.sql(dialect=dialect, **options)
    sql = memo.known.get(key)
    if sql is None:
        sql = tree.sql(dialect=dialect, **options)
    memo.used[key] = sql
    return sql


@contextlib.contextmanager
def remembered(cache_dir: Path | None) -> Iterator[_Memo | None]:
    """A memo open for the block, read from `cache_dir` (None: no memo, everything is rendered)."""
    if cache_dir is None:
        yield None
        return
    memo = _Memo(cache_dir, _read(cache_dir))
    _open.append(memo)
    try:
        yield memo
    finally:
        _open.remove(memo)


def forget() -> None:
    """Stop looking renderings up in the innermost open memo, and never keep it: a run that builds
    renders statements no later run renders again (their digests would cost it for nothing)."""
    if _open:
        _open[-1].is_forgotten = True


def keep(memo: _Memo | None) -> None:
    """Write the renderings `memo` was asked for so far, when they are not what it read."""
    if memo is None or memo.is_forgotten or memo.used == memo.known:
        return
    cache_dir = memo.cache_dir
    if not cache_dir.with_name(cache_dir.name.removesuffix(SUFFIX)).is_file():
        return  # beside a warehouse file that does not exist: nothing
    path = cache_dir / FILE_NAME
    temporary = path.with_name(f"{FILE_NAME}.{os.getpid()}.tmp")
    try:
        cache_dir.mkdir(mode=0o755, exist_ok=True)
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        with os.fdopen(fd, "wb") as file:
            file.write(marshal.dumps((_FORMAT, _versions(), dict(memo.used))))
        os.replace(temporary, path)
    except (OSError, ValueError):
        with contextlib.suppress(OSError):
            temporary.unlink()


def _read(cache_dir: Path) -> dict[str, str]:
    try:
        with open(cache_dir / FILE_NAME, "rb") as file:
            if not is_private(os.fstat(file.fileno())) or not is_private(os.stat(cache_dir)):
                return {}
            content = marshal.loads(file.read())
    except (OSError, EOFError, ValueError, TypeError):
        return {}
    if not (isinstance(content, tuple) and len(content) == 3 and content[:2] == (_FORMAT, _versions())):
        return {}
    known = content[2]
    if not isinstance(known, dict) or not all(
        type(key) is str and type(sql) is str for key, sql in known.items()
    ):
        return {}
    return known


def _versions() -> str:
    from sqlglot import __version__

    return f"{sys.version}\0{__version__}"


def _key(tree: exp.Expr, dialect: str, options: dict[str, Any]) -> str | None:
    """The digest of what sqlglot renders `tree` from, or None when the tree holds what it cannot spell."""
    from sqlglot.serde import dump

    options = {name: value for name, value in options.items() if name != "copy"}  # same text either way
    payloads = dump(tree)
    for payload in payloads:
        name = payload.get("c")
        if name is not None and not (
            name == "DataType.Type" or "." not in name or name.startswith("sqlglot.")
        ):
            return None
    try:
        text = json.dumps(
            [dialect, sorted(options.items()), payloads], separators=(",", ":"), allow_nan=False
        )
    except (TypeError, ValueError):  # a value that is not plain data
        return None
    return hashlib.sha256(text.encode()).hexdigest()
