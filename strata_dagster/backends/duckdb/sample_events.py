"""Deterministic sample daily drops for business-versioned file sources: a hive-partitioned
Parquet folder `<column>=YYYY-MM-DD/part-0.parquet` per day, each with its `_SUCCESS` marker, the
way an upstream batch job writes them (`strata sample-data examples/events`)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path, PurePosixPath

from sqlglot import exp

from strata_dagster.backends.duckdb.limits import connect_in_memory
from strata_dagster.backends.sql.runner import run

MARKER = "_SUCCESS"
KINDS = ("view", "click", "cart", "purchase")


def drop_folder(path_glob: str, root: Path) -> Path:
    """The folder a `path:` glob such as 'events/*/*.parquet' reads partition folders from."""
    parts = []
    for part in PurePosixPath(path_glob).parts:
        if "*" in part or "=" in part:
            break
        parts.append(part)
    folder = Path(*parts) if parts else Path(".")
    return folder if folder.is_absolute() else root / folder


def write_sample_events(
    folder: Path, column: str, *, days: int, rows_per_day: int, start: dt.date, seed: int
) -> int:
    """Write `days` daily folders of `rows_per_day` events each (skipping folders that exist, so a
    later call with more days adds the next drops); returns the folders written."""
    con = connect_in_memory()
    written = 0
    try:
        for index in range(days):
            day = start + dt.timedelta(days=index)
            target = folder / f"{column}={day.isoformat()}"
            if target.exists():
                continue
            target.mkdir(parents=True)
            number = exp.column("range")
            base = index * rows_per_day
            rows = exp.select(
                exp.Add(this=number, expression=exp.Literal.number(base)).as_("event_id"),
                exp.cast(
                    exp.Mod(
                        this=exp.func("hash", number.copy(), exp.Literal.number(seed + index)),
                        expression=exp.Literal.number(500),
                    ),
                    "BIGINT",
                ).as_("user_id"),
                exp.Anonymous(
                    this="list_extract",
                    expressions=[
                        exp.Array(expressions=[exp.Literal.string(kind) for kind in KINDS]),
                        exp.Add(
                            this=exp.cast(
                                exp.Mod(
                                    this=exp.func("hash", exp.Literal.number(seed), number.copy()),
                                    expression=exp.Literal.number(len(KINDS)),
                                ),
                                "BIGINT",
                            ),
                            expression=exp.Literal.number(1),
                        ),
                    ],
                ).as_("kind"),
                exp.Div(
                    this=exp.cast(
                        exp.Mod(
                            this=exp.func("hash", number.copy(), exp.Literal.number(seed)),
                            expression=exp.Literal.number(10000),
                        ),
                        "DOUBLE",
                    ),
                    expression=exp.Literal.number(100),
                ).as_("amount"),
            ).from_(exp.Anonymous(this="range", expressions=[exp.Literal.number(rows_per_day)]))
            copy = exp.Copy(
                this=rows.subquery(),
                kind=False,
                files=[exp.Literal.string(str(target / "part-0.parquet"))],
                params=[exp.CopyParameter(this=exp.var("FORMAT"), expression=exp.var("parquet"))],
            )
            run(con, copy)
            (target / MARKER).write_text("")
            written += 1
    finally:
        con.close()
    return written
