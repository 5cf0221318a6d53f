"""Model unit tests: each `test` block's model run over its fixture rows in an in-memory DuckDB.

An input's full column list (and types) comes from the source's table when the warehouse has it
(read read-only, never written), or from the upstream model's compiled statement over those; the
fixture gives the columns that matter and the rest are NULL. When an input's columns are not known
(no warehouse, or a source table not loaded yet), the fixture's columns are the input's columns,
typed as the values are written. An input without fixture rows is empty.

Each input is read as a build reads it (engine.commands.unit_test_inputs): a change feed's
current rows, a ledger source's committed rows when the test gives its ledger, a history model's
`from` source as its versions.

With `previous`, the case is one incremental step: the fixture rows are the input rows in the
window (a feed's events of the window), the model over them is the delta, and the expected rows
are the state after merging the delta into `previous` the way the engine does (append, upsert by
the keys of the raw rows in the window, append_new).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sqlglot import exp

from strata_dagster.backends.duckdb.fixtures import CASE_SCHEMA, TYPES_SCHEMA, FixtureDatabase, TypedColumns
from strata_dagster.backends.opening import read_source_schemas
from strata_dagster.compile import CompiledProject, compile_project
from strata_dagster.compile.compiler import CompiledModel, compile_model
from strata_dagster.compile.determinism import make_windows_deterministic
from strata_dagster.engine.commands.unit_test_inputs import (
    LEDGER,
    check_feed_step,
    check_history_test,
    feed_columns,
    ledger_columns,
    model_inputs,
)
from strata_dagster.errors import (
    E_TEST_COLUMN,
    E_TEST_DEFINITION,
    Location,
    StrataError,
)
from strata_dagster.language import load_project
from strata_dagster.language.definition import FixtureTable, Model, ModelTest, Project
from strata_dagster.language.fixtures import ledgers_read
from strata_dagster.language.selection import select
from strata_dagster.sql.render import table
from strata_dagster.sql.segments import keyed_rows

CaseKind = Literal["full", "incremental step"]
_PREVIOUS = "__previous"
_DELTA = "__delta"
_ACTUAL = "__actual"
_EXPECTED = "__expected"


@dataclass(frozen=True)
class DiffRow:
    """A row shown in a failed case's diff; expected rows carry the line they are written on."""

    values: tuple[str, ...]
    location: Location | None = None


@dataclass(frozen=True)
class UnitTestResult:
    model: str
    name: str
    location: Location
    kind: CaseKind
    columns: tuple[str, ...]
    missing: tuple[DiffRow, ...] = ()  # expected, not given by the model
    unexpected: tuple[DiffRow, ...] = ()  # given by the model, not expected
    # Same rows, another order (only for a model with `order_by`): the model's order.
    actual_order: tuple[DiffRow, ...] = ()

    @property
    def is_passed(self) -> bool:
        return not (self.missing or self.unexpected or self.actual_order)

    def as_json(self) -> dict[str, Any]:
        def rows(items: tuple[DiffRow, ...]) -> list[dict[str, Any]]:
            return [
                {"values": list(row.values), **({"location": str(row.location)} if row.location else {})}
                for row in items
            ]

        return {
            "model": self.model,
            "test": self.name,
            "location": str(self.location),
            "kind": self.kind,
            "passed": self.is_passed,
            "columns": list(self.columns),
            "missing": rows(self.missing),
            "unexpected": rows(self.unexpected),
            "actual_order": rows(self.actual_order),
        }


@dataclass(frozen=True)
class UnitTestReport:
    results: tuple[UnitTestResult, ...]

    @property
    def is_passed(self) -> bool:
        return all(result.is_passed for result in self.results)

    @property
    def failed(self) -> tuple[UnitTestResult, ...]:
        return tuple(result for result in self.results if not result.is_passed)

    def of_model(self, model: str) -> tuple[UnitTestResult, ...]:
        return tuple(result for result in self.results if result.model == model)

    def as_json(self) -> dict[str, Any]:
        return {
            "passed": sum(result.is_passed for result in self.results),
            "failed": len(self.failed),
            "tests": [result.as_json() for result in self.results],
        }


def run_unit_tests(project_path: Path, warehouse: Path, models: Sequence[str] = ()) -> UnitTestReport:
    """Run the unit tests of `models` (default: every model's). The warehouse is only read, for
    its sources' schemas; it need not exist."""
    project = load_project(project_path)
    schemas = read_source_schemas(warehouse, project)
    ledgers = {
        name: dataclasses.replace(source, table=source.ledger)
        for name, source in project.sources.items()
        if source.ledger_name is not None
    }
    ledger_schemas = (
        read_source_schemas(warehouse, dataclasses.replace(project, sources=ledgers)) if ledgers else {}
    )
    return run_compiled_tests(compile_project(project, schemas), schemas, models, ledger_schemas)


def run_compiled_tests(
    compiled: CompiledProject,
    source_schemas: dict[str, TypedColumns],
    models: Sequence[str] = (),
    ledger_schemas: dict[str, TypedColumns] | None = None,
) -> UnitTestReport:
    """`ledger_schemas`: the columns of each ledger source's transactions table (by the source's
    name) that the warehouse has."""
    project = compiled.project
    selected = set(select(project, models))
    tests = [test for test in project.tests if test.model in selected]
    if not tests:
        return UnitTestReport(())
    ledgers = ledger_schemas or {}
    moment = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    at = exp.cast(exp.Literal.string(moment.isoformat(sep=" ")), "TIMESTAMP")
    with FixtureDatabase() as db:
        _declare_relations(db, compiled, source_schemas, ledgers, at)
        names = {name: model.columns for name, model in compiled.models.items()}
        return UnitTestReport(
            tuple(
                _run_case(
                    db, project, _compiled_for(compiled, source_schemas, test), test, names, ledgers, at
                )
                for test in tests
            )
        )


def _compiled_for(
    compiled: CompiledProject, source_schemas: dict[str, TypedColumns], test: ModelTest
) -> CompiledModel:
    """The model as compiled for the project, or, when it reads a source whose columns the
    warehouse does not know, compiled against the fixture's columns for it: what the model's
    lineage (the keys an upsert replaces) needs to match the engine's build."""
    project = compiled.project
    unknown = {
        relation: fixture.columns
        for relation, fixture in test.given
        if relation in project.sources and relation not in source_schemas
    }
    if not unknown:
        return compiled.models[test.model]
    model = project.models[test.model]
    known = {name: found.columns for name, found in compiled.models.items()}
    known.update({name: tuple(column for column, _ in columns) for name, columns in source_schemas.items()})
    known.update(unknown)
    try:
        result = compile_model(model, lambda relation: known.get(relation))
    except StrataError as error:
        first = error.errors[0]
        names = ", ".join(f"`{name}`" for name in sorted(unknown))
        raise StrataError(
            E_TEST_COLUMN,
            f"test `{test.model}.{test.name}`: {first.message} ({names}: columns not known from the "
            "warehouse, so the fixture's columns are all it has)",
            dict(test.given)[sorted(unknown)[0]].location,
            hint="give every column the model reads in the fixture, or load the source into the warehouse",
        ) from None
    statement, _ = make_windows_deterministic(model, result.statement, result.base_columns)
    return dataclasses.replace(result, statement=statement)


def _declare_relations(
    db: FixtureDatabase,
    compiled: CompiledProject,
    source_schemas: dict[str, TypedColumns],
    ledger_schemas: dict[str, TypedColumns],
    at: exp.Expr,
) -> None:
    project = compiled.project
    for name, columns in source_schemas.items():
        db.declare_table(name, tuple(columns))
    ledgers = [source for source in project.sources.values() if source.ledger_name is not None]
    for source in ledgers:
        db.declare_table(LEDGER + source.name, ledger_columns(source, source_schemas, ledger_schemas))
    read = {source.name for source in ledgers}
    for name in project.order:
        model = compiled.models.get(name)
        if model is None:
            continue
        try:
            inputs = model_inputs(project, name, model, TYPES_SCHEMA, read, at)
        except StrataError:
            continue  # a history the engine refuses: its own test says why
        db.declare_view(name, model.bound(inputs))


def _run_case(
    db: FixtureDatabase,
    project: Project,
    compiled: CompiledModel,
    test: ModelTest,
    compiled_columns: dict[str, tuple[str, ...] | None],
    ledger_schemas: dict[str, TypedColumns],
    at: exp.Expr,
) -> UnitTestResult:
    db.reset()
    model = project.models[test.model]
    given = dict(test.given)
    check_history_test(project, model, compiled, test)
    check_feed_step(project, model, compiled, test)
    ledgers = _create_ledgers(db, project, model, test, ledger_schemas)
    for relation in model.references:
        schema = db.columns_of(relation)
        # A model whose types are not known (it reads a source the warehouse lacks) may still
        # know its column names.
        names = compiled_columns.get(relation) or () if schema is None else ()
        fixture = given.get(relation)
        if fixture is None:
            if schema is None and not names:
                raise StrataError(
                    E_TEST_DEFINITION,
                    f"test `{test.model}.{test.name}`: the columns of `{relation}` are not known "
                    "(its source table is not in the warehouse), so it needs fixture rows",
                    test.location,
                    hint=f"add `given {relation} [(col, ...)]`, with no rows for an empty input",
                )
            db.create_fixture(relation, schema, (), (), test.location, names)
            continue
        known = schema if schema is not None else tuple((name, "") for name in names) or None
        _check_columns(fixture, known, f"`{relation}`", test)
        source = project.sources.get(relation)
        if schema is None and source is not None and source.versioning.kind == "feed":
            names = tuple(dict.fromkeys((*names, *feed_columns(source))))
        db.create_fixture(relation, schema, fixture.columns, _rows(fixture), fixture.location, names)
    query = compiled.bound(model_inputs(project, test.model, compiled, CASE_SCHEMA, ledgers, at))
    if test.previous is None:
        output = db.create_result(_ACTUAL, query, test.location)
    else:
        delta = db.create_result(_DELTA, query, test.location)
        _check_columns(test.previous, delta, f"model `{test.model}`'s output", test)
        db.create_fixture(
            _PREVIOUS, delta, test.previous.columns, _rows(test.previous), test.previous.location
        )
        output = db.create_result(_ACTUAL, _merged_state(project, compiled, test), test.location)
    expect = test.expect
    _check_columns(expect, output, f"model `{test.model}`'s output", test)
    expected_types = dict(output)
    db.create_fixture(
        _EXPECTED,
        tuple((c, expected_types[c]) for c in expect.columns),
        expect.columns,
        _rows(expect),
        expect.location,
    )
    return _compare(db, model.properties.order_by, test)


def _create_ledgers(
    db: FixtureDatabase,
    project: Project,
    model: Model,
    test: ModelTest,
    ledger_schemas: dict[str, TypedColumns],
) -> set[str]:
    """The fixtures of the ledgers the test gives, of the ledger sources the model reads; returns
    those sources' names."""
    given = dict(test.given)
    created = set()
    for ledger_name, source_name in ledgers_read(model, project.sources).items():
        fixture = given.get(ledger_name)
        if fixture is None:
            continue
        source = project.sources[source_name]
        schema = ledger_schemas.get(source.name)
        versioning = source.versioning
        what = f"`{ledger_name}` (the ledger of `{source.name}`)"
        _check_columns(fixture, schema, what, test)
        names = (versioning.txn_column or "", versioning.committed_column or "", versioning.kind_column or "")
        db.create_fixture(
            LEDGER + source.name, schema, fixture.columns, _rows(fixture), fixture.location, names
        )
        created.add(source.name)
    return created


def _rows(fixture: FixtureTable) -> list[tuple[Sequence[exp.Expr], Location]]:
    return [(tuple(value.node for value in row.values), row.location) for row in fixture.rows]


def _check_columns(fixture: FixtureTable, schema: TypedColumns | None, what: str, test: ModelTest) -> None:
    if schema is None:
        return
    known = [name for name, _ in schema]
    unknown = [column for column in fixture.columns if column not in known]
    if unknown:
        raise StrataError(
            E_TEST_COLUMN,
            f"test `{test.model}.{test.name}`: {what} has no column `{unknown[0]}`",
            fixture.location,
            hint="its columns: " + ", ".join(known),
        )


def _merged_state(project: Project, compiled: CompiledModel, test: ModelTest) -> exp.Query:
    """`previous` with the delta merged in, as the engine's merge strategy does it."""
    properties = project.models[test.model].properties
    previous = table(_PREVIOUS, CASE_SCHEMA)
    delta = table(_DELTA, CASE_SCHEMA)
    keys = list(properties.merge_keys or ())
    if properties.merge_strategy == "append":
        kept: exp.Query = exp.select("*").from_(previous)
        added: exp.Query = exp.select("*").from_(delta)
    elif properties.merge_strategy == "upsert":
        traced = [compiled.base_column(key) for key in (*keys, properties.cdc_column or "")]
        if not all(traced):
            assert test.previous is not None
            raise StrataError(
                E_TEST_DEFINITION,
                f"test `{test.model}.{test.name}` gives a `previous` state, but the engine builds "
                f"`{test.model}` fully: its merge keys and cdc_column are not all columns of "
                f"`{compiled.base_relation}` passed through unchanged",
                test.previous.location,
                hint="drop `previous` and test the model as a full build",
            )
        # The engine replaces the keys of the raw rows in the window, before any filter: a row
        # updated out of a filter leaves the state too.
        changed = exp.select(
            *(compiled.base_expression(base or key).as_(key) for key, base in zip(keys, traced, strict=False))
        ).from_(table(compiled.base_relation, CASE_SCHEMA))
        kept = (
            exp.select("*")
            .from_(previous.as_("__prev"))
            .where(exp.not_(keyed_rows(keys, [exp.column(key, "__prev") for key in keys], source=changed)))
        )
        added = exp.select("*").from_(delta)
    else:
        kept = exp.select("*").from_(previous)
        earlier = exp.select(*keys).from_(previous.copy())
        added = (
            exp.select("*")
            .from_(delta.as_("__new"))
            .where(exp.not_(keyed_rows(keys, [exp.column(key, "__new") for key in keys], source=earlier)))
        )
    # by_name reaches the Union node at runtime; sqlglot types **opts as parser options only.
    return exp.union(kept, added, distinct=False, by_name=True)  # type: ignore[call-arg]  # see above


def _compare(db: FixtureDatabase, order_by: tuple[str, ...] | None, test: ModelTest) -> UnitTestResult:
    columns = test.expect.columns
    projection = [exp.column(column) for column in columns]
    actual_query = exp.select(*projection).from_(table(_ACTUAL, CASE_SCHEMA))
    if order_by:
        # Ties of `order_by` are broken by the compared columns, so the order is deterministic.
        actual_query = actual_query.order_by(*(exp.column(c) for c in (*order_by, *columns)))
    expected_query = (
        exp.select(*(c.copy() for c in projection)).from_(table(_EXPECTED, CASE_SCHEMA)).order_by("rowid")
    )
    actual = [_hashable(row) for row in db.rows(actual_query)]
    expected = [_hashable(row) for row in db.rows(expected_query)]
    locations = [row.location for row in test.expect.rows]
    missing_count = Counter(expected) - Counter(actual)
    unexpected_count = Counter(actual) - Counter(expected)
    missing = _take(zip(expected, locations, strict=True), missing_count)
    unexpected = _take(((row, None) for row in actual), unexpected_count)
    actual_order: tuple[DiffRow, ...] = ()
    if order_by and not missing and not unexpected and actual != expected:
        actual_order = tuple(DiffRow(_shown(row)) for row in actual)
    kind: CaseKind = "incremental step" if test.is_incremental_step else "full"
    return UnitTestResult(
        test.model, test.name, test.location, kind, columns, missing, unexpected, actual_order
    )


def _take(rows: Iterable[tuple[tuple[Any, ...], Location | None]], wanted: Counter) -> tuple[DiffRow, ...]:
    left = Counter(wanted)
    taken = []
    for row, location in rows:
        if left[row] > 0:
            left[row] -= 1
            taken.append(DiffRow(_shown(row), location))
    return tuple(taken)


def _hashable(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(item) for item in value)
    if isinstance(value, dict):
        return tuple((key, _hashable(item)) for key, item in value.items())
    return value


def _shown(row: tuple[Any, ...]) -> tuple[str, ...]:
    return tuple(fixture_literal(value) for value in row)


def fixture_literal(value: Any) -> str:
    """A value as a fixture literal (how diffs show it; a row can be copied into `expect`)."""
    if value is None:
        return "null"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(fixture_literal(item) for item in value) + "]"
    if isinstance(value, dt.datetime):
        return f"timestamp '{value.isoformat(sep=' ')}'"
    if isinstance(value, dt.date):
        return f"date '{value.isoformat()}'"
    return str(value)
