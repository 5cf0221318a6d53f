"""What a model's unit test reads each input from, as a build does (engine.commands.unit_tests).

A change feed is read as its keys' current rows, as every build reads it (engine.sources.feed).
With `previous` its fixture rows are one window's events, each after its key's events before the
window (a build recomputes a key from all of its events, a test has the window's alone); only an
upsert by the feed's keys takes a window, any other step over a feed is E061 (the engine builds
that model in full).

A ledger source is read as the rows of committed transactions when the test gives the ledger's
rows (by the `ledger:` table's name, `Source.ledger_name`), else as all its rows. A history model
reads its `from` source as a build over all of it does: a change feed's or a ledger's rows as
their versions (engine.sources.versions; a ledger's rows are needed, E061 without them), a plain
table's rows as current versions opened at the time the tests run, which `expect` cannot state
(`valid_from` there is E061). A history the engine refuses is refused alike (E092).
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from sqlglot import exp

from strata_dagster.backends.duckdb.fixtures import TypedColumns
from strata_dagster.compile.compiler import CompiledModel
from strata_dagster.engine.sources.feed import Feed
from strata_dagster.engine.sources.ledger import Ledger
from strata_dagster.engine.sources.logs import LogSource, history_keys, table_history_error
from strata_dagster.engine.sources.versions import VALID_FROM, stamped_rows
from strata_dagster.errors import E_TEST_DEFINITION, StrataError
from strata_dagster.language.definition import Model, ModelTest, Project, Source
from strata_dagster.sql.render import table

LEDGER = "__ledger_"  # + a ledger source's name: the fixture of its transactions


def ledger_columns(
    source: Source, source_schemas: dict[str, TypedColumns], ledger_schemas: dict[str, TypedColumns]
) -> TypedColumns:
    """A ledger's columns and types: the warehouse's, else its declared columns as they usually are."""
    known = ledger_schemas.get(source.name)
    if known is not None:
        return tuple(known)
    versioning = source.versioning
    txn_type = dict(source_schemas.get(source.name, ())).get(versioning.txn_column or "", "BIGINT")
    return (
        (versioning.txn_column or "", txn_type),
        (versioning.committed_column or "", "TIMESTAMP"),
        (versioning.kind_column or "", "VARCHAR"),
    )


def feed_columns(source: Source) -> tuple[str, ...]:
    """The columns a change feed's reading needs (keys, position, arrival, delete column): NULL
    when a fixture whose columns are the input's leaves them out."""
    versioning, deletes = source.versioning, source.deletes
    named = (*(source.feed_keys or ()), versioning.column, versioning.arrival_column)
    return tuple(dict.fromkeys(name for name in (*named, deletes and deletes.column) if name))


def _ledger(source: Source, schema: str) -> Ledger:
    return Ledger(source, table(source.name, schema), table(LEDGER + source.name, schema))


def model_inputs(
    project: Project,
    name: str,
    compiled: CompiledModel,
    schema: str,
    ledgers: Collection[str],
    at: exp.Expr,
) -> Callable[[str], exp.Table | exp.Query]:
    """What model `name` reads each input from in `schema`, as a build does: a change feed its
    keys' current rows, a ledger source the rows of committed transactions (of the sources in
    `ledgers`, whose ledger is in `schema`), a history model its `from` source's versions (plain
    table rows opened at `at`)."""
    model = project.models[name]
    reads: dict[str, exp.Table | exp.Query] = {}
    for relation in model.references:
        source = project.sources.get(relation)
        if source is not None and source.versioning.kind == "feed":
            reads[relation] = Feed(source, table(relation, schema)).relation()
        elif source is not None and source.name in ledgers:
            reads[relation] = _ledger(source, schema).relation()
    if model.properties.merge_strategy == "history":
        reads[compiled.base_relation] = _versions(project, model, compiled, schema, at)
    return lambda relation: reads[relation] if relation in reads else table(relation, schema)


def _versions(
    project: Project, model: Model, compiled: CompiledModel, schema: str, at: exp.Expr
) -> exp.Query:
    """History model `model`'s `from` source read as its versions, refused (E092) as the engine
    refuses it."""
    base = compiled.base_relation
    source = project.sources.get(base)
    log: LogSource | None = None
    if source is not None and source.versioning.kind == "feed":
        log = Feed(source, table(base, schema))
    elif source is not None and source.ledger_name is not None:
        log = _ledger(source, schema)
    traced = tuple(compiled.base_column(key) for key in model.properties.merge_keys or ())
    keys = history_keys(model, base, traced, log, is_source=source is not None)
    props = model.properties
    if log is not None:
        return log.versions(keys, props.check_columns or (), props.deleted_flag)
    columns = {column: compiled.base_column(column) for column in compiled.columns or ()}
    error = table_history_error(model, base, columns, "duckdb")
    if error is not None:
        raise error
    return stamped_rows(table(base, schema), at, props.deleted_flag)


def check_history_test(project: Project, model: Model, compiled: CompiledModel, test: ModelTest) -> None:
    """A history over a ledger needs the ledger's rows (its versions open at their commits); one
    over a plain table opens its versions at the time the tests run, which `expect` cannot state."""
    if model.properties.merge_strategy != "history":
        return
    source = project.sources.get(compiled.base_relation)
    if source is None or source.versioning.kind == "feed":
        return
    if source.ledger_name is not None:
        if source.ledger_name not in dict(test.given):
            versioning = source.versioning
            raise StrataError(
                E_TEST_DEFINITION,
                f"test `{test.model}.{test.name}`: `{test.model}` keeps the versions of ledger source "
                f"`{source.name}` by commit, so the test needs the ledger's transactions",
                test.location,
                hint=f"add `given {source.ledger_name} [({versioning.txn_column}, {versioning.committed_column}) "
                "...]`: the source's rows of a transaction it does not list are not committed",
            )
        return
    if VALID_FROM in test.expect.columns:
        raise StrataError(
            E_TEST_DEFINITION,
            f"test `{test.model}.{test.name}` expects `{VALID_FROM}`, but `{test.model}` keeps the "
            f"history of plain table `{source.name}`: its versions open at the time of the build, "
            "which a test does not fix",
            test.expect.location,
            hint=f"leave `{VALID_FROM}` out of `expect`; the other columns (`valid_to`, `is_current`, "
            "a deleted flag) are compared",
        )


def check_feed_step(project: Project, model: Model, compiled: CompiledModel, test: ModelTest) -> None:
    """`previous` over a change feed is one window of an upsert by the feed's keys: the engine
    builds any other model over a feed in full over its current rows, which no step expresses."""
    source = project.sources.get(compiled.base_relation)
    if test.previous is None or source is None or source.versioning.kind != "feed":
        return
    props = model.properties
    keys = source.feed_keys or ()
    if props.merge_strategy != "upsert":
        why = "only an upsert by the feed's keys is maintained from a window"
    elif {compiled.base_column(key) for key in props.merge_keys or ()} != set(keys):
        why = f"its merge keys are not the feed's keys ({', '.join(keys)}) passed through unchanged"
    else:
        return
    raise StrataError(
        E_TEST_DEFINITION,
        f"test `{test.model}.{test.name}` gives a `previous` state, but the engine builds `{test.model}` "
        f"in full over the current rows of change feed `{source.name}`: {why}",
        test.previous.location,
        hint=f"drop `previous`: give all of `{source.name}`'s events and expect the model's rows",
    )
