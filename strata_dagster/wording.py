"""Counts in the words users read: `1 partition`, `2,000 rows`, never `1 partitions`."""

from __future__ import annotations


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """`count` with `noun`, plural unless it is one (`plural` for nouns that take more than an s)."""
    return f"{count:,} {noun if count == 1 else plural or noun + 's'}"
