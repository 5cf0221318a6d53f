"""Imported by `StrataRunLauncher`'s fork server only (the last of its default `preload_modules`):
builds what every run's first load of the definitions would otherwise build before anything else,
so that each forked run starts with it. Never imported by strata itself.

What it builds: the parser of the strata grammar (about 0.12 s, even from lark's cache in the temp
folder) and sqlglot's DuckDB dialect (its first parse and render). A run's load of the example's
definitions takes about 0.25 s instead of 0.4 (docs/dagster.md, "The Dagster path's cost").
Nothing here reads a project: a project's modules are loaded by each run, as before.

Last, it freezes what the server holds (`gc.freeze()`, as Python's documentation advises before
forking): Dagster's, strata's and their libraries' objects, about 200,000, live as long as each
run, and Python's cyclic collector would otherwise walk them again in every full collection of
every run (docs/dagster.md, "The Dagster path's cost").
"""

import gc

import sqlglot

from strata_dagster.language.parser import build_grammar

build_grammar()
sqlglot.parse_one("SELECT CAST(a AS DATE), sum(b) FROM t WHERE c = 'x' GROUP BY 1", read="duckdb").sql(
    dialect="duckdb"
)

gc.freeze()
