"""Model unit tests as written in a module: `test MODEL NAME { given R [...] expect [...] }`.

A fixture table is a bracket of parenthesised rows: the first names the columns, each later one
gives a value (a DuckDB SQL expression, usually a literal) per column.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from strata_dagster.errors import (
    E_TEST_DEFINITION,
    E_TEST_MODEL,
    E_TEST_TABLE,
    Location,
    StrataError,
    raise_collected,
)
from strata_dagster.language.definition import (
    INCREMENTAL_STRATEGIES,
    Expr,
    FixtureRow,
    FixtureTable,
    Model,
    ModelTest,
    Source,
)
from strata_dagster.language.expressions import parse_item

if TYPE_CHECKING:
    from lark import Token, Tree
    from typing_extensions import TypeIs

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TABLE_HINT = "write `[(col_a, col_b) (1, 'x') (2, 'y')]`: column names first, then one value per column"


def build_model_test(node: Tree, text: str, file: str) -> ModelTest:
    """The test a `test` block declares. Raises StrataError (E060, E061) on a malformed block."""
    model, name, *items = node.children
    location = Location(file, node.meta.line, node.meta.column)
    given: list[tuple[str, FixtureTable]] = []
    tables: dict[str, FixtureTable] = {}
    errors: list[StrataError] = []
    for item in items:
        try:
            table = _table(item.children[-1], text, file)
        except StrataError as error:
            errors.extend(error.errors)
            continue
        part = "given " + str(item.children[1]) if item.data == "test_given" else str(item.children[0])
        if part in tables:
            errors.append(
                StrataError(
                    E_TEST_DEFINITION,
                    f"test `{model}.{name}` has `{part}` twice",
                    _location(file, item.children[0]),
                    hint="give each input, the previous state and the expected rows once",
                )
            )
            continue
        tables[part] = table
        if item.data == "test_given":
            given.append((str(item.children[1]), table))
    expect = tables.get("expect")
    if expect is None and not errors:
        errors.append(
            StrataError(
                E_TEST_DEFINITION,
                f"test `{model}.{name}` has no `expect` rows",
                location,
                hint="add `expect [(col, ...) (value, ...)]` with the rows the model must give",
            )
        )
    raise_collected(errors)
    assert expect is not None
    return ModelTest(str(model), str(name), tuple(given), expect, location, tables.get("previous"))


def model_test_errors(
    tests: tuple[ModelTest, ...], sources: Mapping[str, Source], models: Mapping[str, Model]
) -> list[StrataError]:
    """Tests of models that do not exist, inputs the model does not read, repeated names, and
    incremental steps of models that are not incremental."""
    errors: list[StrataError] = []
    seen: dict[tuple[str, str], Location] = {}
    for test in tests:
        model = models.get(test.model)
        if model is None:
            errors.append(
                StrataError(
                    E_TEST_MODEL,
                    f"test `{test.name}` is for `{test.model}`, which is not a model",
                    test.location,
                    hint=_unknown_model_hint(test.model, sources, models),
                )
            )
            continue
        previous = seen.setdefault((test.model, test.name), test.location)
        if previous != test.location:
            errors.append(
                StrataError(
                    E_TEST_DEFINITION,
                    f"model `{test.model}` already has a test `{test.name}` at {previous}",
                    test.location,
                    hint="name each test of a model differently",
                )
            )
        ledgers = ledgers_read(model, sources)
        for relation, table in test.given:
            if relation not in model.references and relation not in ledgers:
                errors.append(
                    StrataError(
                        E_TEST_MODEL,
                        f"test `{test.model}.{test.name}` gives rows for `{relation}`, which the model does not read",
                        table.location,
                        hint="the model reads: " + ", ".join((*model.references, *ledgers)),
                    )
                )
        if test.previous is not None and model.properties.merge_strategy == "history":
            errors.append(
                StrataError(
                    E_TEST_DEFINITION,
                    f"test `{test.model}.{test.name}` gives a `previous` state, but `{test.model}` is a "
                    "history: its test is one build over all of its input's rows",
                    test.previous.location,
                    hint="drop `previous`: give the feed's events or the ledger's rows, or the table's "
                    "rows at one build, and expect their versions",
                )
            )
        elif test.previous is not None and model.properties.merge_strategy not in INCREMENTAL_STRATEGIES:
            errors.append(
                StrataError(
                    E_TEST_DEFINITION,
                    f"test `{test.model}.{test.name}` gives a `previous` state, but `{test.model}` is not "
                    "built incrementally",
                    test.previous.location,
                    hint="`previous` tests one incremental step of a model with merge_strategy "
                    "append, upsert or append_new; drop it to test a full build",
                )
            )
    return errors


def ledgers_read(model: Model, sources: Mapping[str, Source]) -> dict[str, str]:
    """The ledgers a test of `model` may give rows of (by `Source.ledger_name`): those of the
    ledger sources it reads, each with its source's name."""
    ledgers = {}
    for relation in model.references:
        source = sources.get(relation)
        name = None if source is None else source.ledger_name
        if name is not None:
            ledgers[name] = relation
    return ledgers


def _table(bracket: Tree, text: str, file: str) -> FixtureTable:
    location = _location(file, bracket)
    rows: list[Tree] = []
    for child in bracket.children:
        if _is_token(child) and child.type == "COMMA":
            continue
        if not _is_tree(child) or child.data != "paren":
            raise StrataError(
                E_TEST_TABLE,
                f"`{_span(child, text)}` is not a parenthesised row",
                _location(file, child),
                hint=_TABLE_HINT,
            )
        rows.append(child)
    if not rows:
        raise StrataError(
            E_TEST_TABLE, "a fixture table without a row of column names", location, hint=_TABLE_HINT
        )
    header, *values = rows
    columns = tuple(_column_name(cell, text, file, header) for cell in _cells(header))
    duplicates = sorted({column for column in columns if columns.count(column) > 1})
    if duplicates:
        raise StrataError(
            E_TEST_TABLE,
            f"column `{duplicates[0]}` is named twice in the fixture's header",
            _location(file, header),
            hint="name each column once",
        )
    built: list[FixtureRow] = []
    for row in values:
        cells = _cells(row)
        row_location = _location(file, row)
        if len(cells) != len(columns):
            raise StrataError(
                E_TEST_TABLE,
                f"a row of {len(cells)} value(s) under a header of {len(columns)} column(s)",
                row_location,
                hint=f"give one value per column ({', '.join(columns)}); write null for none",
            )
        exprs = []
        for cell in cells:
            cell_text = text[_start(cell[0]) : _end(cell[-1])]
            cell_location = _location(file, cell[0])
            exprs.append(
                Expr(cell_text, cell_location, parse_item(cell_text, cell_location, allow_alias=False))
            )
        built.append(FixtureRow(tuple(exprs), row_location))
    return FixtureTable(columns, tuple(built), location)


def _cells(row: Tree) -> list[list[Tree | Token]]:
    """The comma-separated items of a parenthesised row (each a run of atoms)."""
    cells: list[list[Tree | Token]] = []
    current: list[Tree | Token] = []
    for child in [*row.children, None]:
        if child is None or (_is_token(child) and child.type == "COMMA"):
            if current:
                cells.append(current)
            current = []
        else:
            current.append(child)
    return cells


def _column_name(cell: list[Tree | Token], text: str, file: str, header: Tree) -> str:
    if len(cell) == 1 and _is_token(cell[0]):
        token = cell[0]
        if token.type == "QUOTED":
            return str(token)[1:-1].replace('""', '"')
        if _IDENTIFIER.fullmatch(str(token)):
            return str(token)
    raise StrataError(
        E_TEST_TABLE,
        f"`{text[_start(cell[0]) : _end(cell[-1])]}` is not a column name; the first row names the columns",
        _location(file, cell[0]),
        hint=_TABLE_HINT,
    )


def _location(file: str, node: Tree | Token) -> Location:
    if _is_token(node):
        return Location(file, node.line or 1, node.column or 1)
    return Location(file, node.meta.line, node.meta.column)


def _span(node: Tree | Token, text: str) -> str:
    return text[_start(node) : _end(node)]


def _start(node: Tree | Token) -> int:
    return node.start_pos if _is_token(node) else node.meta.start_pos  # type: ignore[return-value]  # positions are propagated


def _end(node: Tree | Token) -> int:
    return node.end_pos if _is_token(node) else node.meta.end_pos  # type: ignore[return-value]  # positions are propagated


def _unknown_model_hint(name: str, sources: Mapping[str, Source], models: Mapping[str, Model]) -> str:
    if name in sources:
        return "sources are not tested: write `test MODEL_NAME TEST_NAME { ... }` for a model that reads it"
    close = difflib.get_close_matches(name, list(models), n=1)
    if close:
        return f"did you mean `{close[0]}`? (`test MODEL_NAME TEST_NAME {{ ... }}`)"
    return (
        "name a model of the project (`test MODEL_NAME TEST_NAME { ... }`), or remove the test with its model"
    )


def _is_token(node: object) -> TypeIs[Token]:
    from lark import Token  # imported by the parser already: fixtures are built while parsing

    return isinstance(node, Token)


def _is_tree(node: object) -> TypeIs[Tree]:
    from lark import Tree

    return isinstance(node, Tree)
