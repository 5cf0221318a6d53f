"""Parse one strata module (lark for the structure, sqlglot for the expressions)."""

from __future__ import annotations

import difflib
import re
from functools import cache
from importlib import resources
from pathlib import Path

from lark import Lark, Token, Tree
from lark.exceptions import LarkError, UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from strata_dagster.errors import E_SYNTAX, Location, StrataError
from strata_dagster.language.definition import (
    AggregateStep,
    Assignment,
    DeriveStep,
    ExpandStep,
    Expr,
    FilterStep,
    FromStep,
    GroupStep,
    JoinStep,
    LetStep,
    Model,
    Module,
    SelectStep,
    SetOperationStep,
    Source,
    Step,
)
from strata_dagster.language.expressions import parse_item
from strata_dagster.language.fixtures import build_model_test
from strata_dagster.language.properties import RawProperty, RawValue, build_model_properties, build_source

_TERMINAL_NAMES = {
    "NAME": "a name",
    "_NL": "end of line",
    "LBRACE": "`{`",
    "RBRACE": "`}`",
    "LPAR": "`(`",
    "RPAR": "`)`",
    "COLON": "`:`",
    "EQUAL": "`=`",
    "TOKEN": "an expression",
    "STRING": "a string",
    "_SOURCE": "`source`",
    "_MODEL": "`model`",
    "_TEST": "`test`",
    "$END": "end of file",
    "LSQB": "`[`",
    "RSQB": "`]`",
}


@cache
def _grammar() -> Lark:
    text = resources.files("strata_dagster.language").joinpath("strata.lark").read_text()
    # cache=True keeps the built parser in the temp folder: start-up of every `strata` process.
    return Lark(text, parser="lalr", propagate_positions=True, maybe_placeholders=False, cache=True)


def build_grammar() -> None:
    """Build the grammar's parser now rather than at the first parse (a process that forks
    workers builds it once for all of them)."""
    _grammar()


def parse_module(text: str, path: Path | str) -> Module:
    """Parse a module's text. Raises StrataError (never anything else) on bad input."""
    file = str(path)
    try:
        tree = _grammar().parse(text)
    except UnexpectedInput as error:
        raise _unknown_word_error(error, text, file) or _syntax_error(error, file) from None
    except LarkError as error:
        raise StrataError(E_SYNTAX, f"cannot parse module: {error}", Location(file, 1, 1)) from None
    except RecursionError:
        raise StrataError(E_SYNTAX, "the module nests brackets too deeply", Location(file, 1, 1)) from None
    builder = _ModuleBuilder(text, file)
    try:
        nodes = [node for node in tree.children if isinstance(node, Tree)]  # a module's items
        sources = tuple(builder.source(node) for node in nodes if node.data == "source")
        models = tuple(builder.model(node) for node in nodes if node.data == "model")
        tests = tuple(build_model_test(node, text, file) for node in nodes if node.data == "test")
    except RecursionError:
        raise StrataError(E_SYNTAX, "the module nests brackets too deeply", Location(file, 1, 1)) from None
    return Module(Path(path), sources, models, tests)


STEP_KEYWORDS = (
    "from",
    "join",
    "filter",
    "let",
    "derive",
    "group",
    "aggregate",
    "select",
    "union",
    "except",
    "intersect",
    "expand",
)
PROPERTY_NAMES = (
    "incremental",
    "merge_strategy",
    "merge_keys",
    "cdc_column",
    "check_columns",
    "deleted_flag",
    "lateness",
    "partitioned_by",
    "unique",
    "contract",
    "order_by",
    "description",
    "table",
    "database",
    "path",
    "start",
    "versioning",
    "ledger",
    "feed_keys",
    "deletes",
)


def _unknown_word_error(error: UnexpectedInput, text: str, file: str) -> StrataError | None:
    """`filer x > 1`: a line that starts with a word that is neither a step nor a property."""
    if not isinstance(error, UnexpectedToken) or "COLON" not in error.expected:
        return None
    lines = text.splitlines()
    if not 1 <= error.line <= len(lines):
        return None
    match = re.match(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s+[^\s:]", lines[error.line - 1])
    if not match or match.group(1) in STEP_KEYWORDS:
        return None
    word = match.group(1)
    close = difflib.get_close_matches(word, STEP_KEYWORDS + PROPERTY_NAMES, n=1)
    return StrataError(
        E_SYNTAX,
        f"`{word}` is neither a step nor a property",
        Location(file, error.line, match.start(1) + 1),
        hint=(f"did you mean `{close[0]}`? " if close else "")
        + "steps: "
        + ", ".join(STEP_KEYWORDS)
        + "; properties are written `name: value`",
    )


def _syntax_error(error: UnexpectedInput, file: str) -> StrataError:
    location = Location(file, max(error.line, 1), max(error.column, 1))
    if isinstance(error, UnexpectedCharacters):
        char = error.char if hasattr(error, "char") else "?"
        return StrataError(
            E_SYNTAX,
            f"unexpected character {char!r}",
            location,
            hint="steps and properties go one per line inside `model NAME { ... }` or `source NAME { ... }`",
        )
    if isinstance(error, UnexpectedEOF):
        return StrataError(E_SYNTAX, "the module ends inside a definition", location, hint="close every `{`")
    if isinstance(error, UnexpectedToken):
        if error.token.type == "$END":
            return StrataError(
                E_SYNTAX, "the module ends before a `{` is closed", location, hint="close every `{` with `}`"
            )
        got = f"`{error.token}`"
        expected = sorted({_TERMINAL_NAMES.get(name, f"`{name.lower()}`") for name in error.expected})
        shown = ", ".join(expected[:8]) + (", ..." if len(expected) > 8 else "")
        return StrataError(
            E_SYNTAX,
            f"unexpected {got}; expected {shown}",
            location,
            hint=_hint_for(error),
        )
    return StrataError(E_SYNTAX, str(error).splitlines()[0], location)


def _hint_for(error: UnexpectedToken) -> str:
    glued = (
        _glued_keyword(str(error.token), error.expected) if error.token.type in ("NAME", "TOKEN") else None
    )
    if glued is not None:
        keyword, rest = glued
        return f"did you mean `{keyword} {rest}`? a keyword and the name after it need a space between them"
    if {"GIVEN", "EXPECT"} <= set(error.expected) or error.expected == {"LSQB"}:
        return (
            "a test block holds `given RELATION [...]`, `previous [...]` and `expect [...]`, each a "
            "bracket of rows: `[(col_a, col_b) (1, 'x')]`"
        )
    if error.token.type == "NAME" and {"FROM", "FILTER"} & set(error.expected):
        return (
            f"`{error.token}` is not a step; steps are from, join, filter, let, derive, group, "
            "aggregate, select, union, except, intersect, expand; properties are written `name: value`"
        )
    if error.token.type in ("TOKEN", "STRING") and "COLON" in error.expected:
        return "properties are written `name: value`"
    return "see docs/language.md for the grammar"


def _glued_keyword(word: str, expected: set[str]) -> tuple[str, str] | None:
    """`sourceorders` -> (`source`, `orders`): a keyword the parser expected, written without its space."""
    for keyword in ("source", "model", "test", *STEP_KEYWORDS):
        terminal = f"_{keyword.upper()}" if keyword in ("source", "model", "test") else keyword.upper()
        if keyword in ("union", "except", "intersect"):
            terminal = "SET_OPERATOR"
        if terminal in expected and word.startswith(keyword) and len(word) > len(keyword):
            return keyword, word[len(keyword) :]
    return None


class _ModuleBuilder:
    def __init__(self, text: str, file: str) -> None:
        self.text = text
        self.file = file

    def location(self, node: Tree | Token) -> Location:
        if isinstance(node, Token):
            return Location(self.file, node.line or 1, node.column or 1)
        return Location(self.file, node.meta.line, node.meta.column)

    def span(self, node: Tree | Token) -> str:
        if isinstance(node, Token):
            return str(node)
        return self.text[node.meta.start_pos : node.meta.end_pos]

    def expr(self, node: Tree, *, allow_alias: bool = False) -> Expr:
        text = self.span(node)
        location = self.location(node)
        return Expr(text, location, parse_item(text, location, allow_alias=allow_alias))

    def assignment(self, node: Tree) -> Assignment:
        name, value = node.children
        return Assignment(str(name), self.expr(value), self.location(name))

    def source(self, node: Tree) -> Source:
        name, *props = node.children
        return build_source(str(name), self.location(name), [self.raw_property(p) for p in props])

    def model(self, node: Tree) -> Model:
        name, *items = node.children
        steps: list[Step] = []
        raw: list[RawProperty] = []
        for item in items:
            if item.data in ("property", "flag"):
                raw.append(self.raw_property(item))
            else:
                steps.append(self.step(item))
        location = self.location(name)
        properties = build_model_properties(str(name), raw)
        return Model(str(name), tuple(steps), properties, location)

    def step(self, node: Tree) -> Step:
        location = self.location(node)
        kind = node.data
        children = node.children
        if kind == "from_step":
            return FromStep(str(children[1]), location)
        if kind == "join_step":
            join_kind = str(children[1]) if len(children) == 4 else "inner"
            relation = children[-2]
            condition = children[-1]
            if condition.data == "join_on":
                return JoinStep(join_kind, str(relation), self.expr(condition.children[0]), (), location)  # type: ignore[arg-type]  # the grammar's join words
            using = tuple(str(token) for token in condition.children)
            return JoinStep(join_kind, str(relation), None, using, location)  # type: ignore[arg-type]  # the grammar's join words
        if kind == "filter_step":
            return FilterStep(self.expr(children[1]), location)
        if kind == "let_step":
            return LetStep(self.assignment(children[1]), location)
        if kind == "derive_step":
            return DeriveStep(tuple(self.assignment(child) for child in children[1:]), location)
        if kind == "group_step":
            return GroupStep(tuple(self.expr(child, allow_alias=True) for child in children[1:]), location)
        if kind == "aggregate_step":
            return AggregateStep(tuple(self.assignment(child) for child in children[1:]), location)
        if kind == "select_step":
            return SelectStep(tuple(self.expr(child, allow_alias=True) for child in children[1:]), location)
        if kind == "set_step":
            operator = str(children[0])
            if len(children) == 3:
                operator += " all"
            return SetOperationStep(operator, str(children[-1]), location)  # type: ignore[arg-type]  # the grammar's set words
        if kind == "expand_step":
            return ExpandStep(self.expr(children[1], allow_alias=True), location)
        raise AssertionError(f"grammar rule without a step: {kind}")

    def raw_property(self, node: Tree) -> RawProperty:
        name = node.children[0]
        location = self.location(name)
        if node.data == "flag":
            return RawProperty(str(name), location, None)
        return RawProperty(str(name), location, self.raw_value(node.children[1]))

    def raw_value(self, node: Tree) -> RawValue:
        location = self.location(node)
        if node.data == "mapping":
            entries = tuple(
                (str(entry.children[0]), self.raw_value(entry.children[1])) for entry in node.children
            )
            return RawValue(self.span(node), location, entries=entries)
        items = None
        if (
            len(node.children) == 1
            and isinstance(node.children[0], Tree)
            and node.children[0].data == "bracket"
        ):
            items = tuple(self._list_items(node.children[0]))
        return RawValue(self.span(node), location, items=items)

    def _list_items(self, bracket: Tree) -> list[RawValue]:
        items: list[RawValue] = []
        current: list[Tree | Token] = []
        for child in [*bracket.children, None]:
            if child is None or (isinstance(child, Token) and child.type == "COMMA"):
                if current:
                    start, end = current[0], current[-1]
                    text = self.text[_start(start) : _end(end)]
                    items.append(RawValue(text, self.location(start)))
                current = []
            else:
                current.append(child)
        return items


def _start(node: Tree | Token) -> int:
    return node.start_pos if isinstance(node, Token) else node.meta.start_pos  # type: ignore[return-value]  # positions are propagated


def _end(node: Tree | Token) -> int:
    return node.end_pos if isinstance(node, Token) else node.meta.end_pos  # type: ignore[return-value]  # positions are propagated
