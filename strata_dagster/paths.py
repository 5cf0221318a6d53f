"""Paths from the command line or the environment that the operating system cannot use (a name
too long, a loop of links, a NUL byte), found before anything uses them; and making a written
file durable."""

from __future__ import annotations

import os
from pathlib import Path

# Linux's limits (NAME_MAX, PATH_MAX): a longer name fails in whichever call meets it first.
NAME_MAX = 255
PATH_MAX = 4096


def path_problem(path: Path) -> str | None:
    """Why the operating system cannot use `path` (None: it can, whether or not it exists)."""
    text = os.fsencode(path)
    if b"\0" in text:
        return "it holds a NUL byte"
    if len(text) >= PATH_MAX:
        return f"it is {len(text):,} bytes long (at most {PATH_MAX - 1:,})"
    longest = max((len(os.fsencode(part)) for part in path.parts), default=0)
    if longest > NAME_MAX:
        return f"a name in it is {longest:,} bytes long (at most {NAME_MAX})"
    try:
        path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return None  # not there (yet): the command says what that means for it
    except OSError as error:
        return error.strerror or type(error).__name__
    return None


def shortened(path: Path, keep: int = 80) -> str:
    """`path` as a message shows it: a very long one cut in the middle."""
    text = str(path)
    return text if len(text) <= keep else f"{text[: keep // 2]}...{text[-keep // 2 :]}"


def fsync(path: Path) -> None:
    """Make `path` (a file, or a folder's names) durable."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
