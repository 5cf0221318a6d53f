"""Spark's type names as DuckDB spells them, so the engine reads one vocabulary on every engine."""

from __future__ import annotations

import re

_SIMPLE = {
    "boolean": "BOOLEAN",
    "tinyint": "TINYINT",
    "byte": "TINYINT",
    "smallint": "SMALLINT",
    "short": "SMALLINT",
    "int": "INTEGER",
    "integer": "INTEGER",
    "bigint": "BIGINT",
    "long": "BIGINT",
    "float": "FLOAT",
    "real": "FLOAT",
    "double": "DOUBLE",
    "string": "VARCHAR",
    "binary": "BLOB",
    "date": "DATE",
    # DuckDB's TIMESTAMP has no time zone, like Spark's TIMESTAMP_NTZ (strata's sessions default to it).
    "timestamp_ntz": "TIMESTAMP",
    "timestamp": "TIMESTAMP WITH TIME ZONE",
    "timestamp_ltz": "TIMESTAMP WITH TIME ZONE",
    "void": '"NULL"',
}
_DECIMAL = re.compile(r"^decimal\((\d+),\s*(\d+)\)$")
_VARCHAR = re.compile(r"^(var)?char\(\d+\)$")


def duckdb_type_name(spark_type: str) -> str:
    """`bigint` -> BIGINT, `decimal(12,2)` -> DECIMAL(12,2), `array<string>` -> VARCHAR[], ..."""
    text = str(spark_type).strip()
    lowered = text.lower()
    if lowered in _SIMPLE:
        return _SIMPLE[lowered]
    decimal = _DECIMAL.match(lowered)
    if decimal:
        return f"DECIMAL({decimal.group(1)},{decimal.group(2)})"
    if _VARCHAR.match(lowered):
        return "VARCHAR"
    if lowered.startswith("array<") and lowered.endswith(">"):
        return f"{duckdb_type_name(text[6:-1])}[]"
    if lowered.startswith("struct<") and lowered.endswith(">"):
        fields = [_field(part) for part in _split_top_level(text[7:-1])]
        return "STRUCT(" + ", ".join(fields) + ")"
    if lowered.startswith("map<") and lowered.endswith(">"):
        key, value = _split_top_level(text[4:-1])
        return f"MAP({duckdb_type_name(key)}, {duckdb_type_name(value)})"
    return text.upper()


def _field(part: str) -> str:
    name, _, field_type = part.partition(":")
    return f"{name.strip()} {duckdb_type_name(field_type)}"


def _split_top_level(text: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char in "<(":
            depth += 1
        elif char in ">)":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    parts.append("".join(current))
    return [part.strip() for part in parts if part.strip()]
