"""What the Spark rewrite rules share: the refusal error (E070) and small tree builders."""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from strata_dagster.errors import E_BACKEND_DIALECT, Location, StrataError

# A rewrite rule: the Spark form of a node, or None when the rule does not apply to it.
Rule = Callable[[exp.Expr], exp.Expr | None]

SOURCE_DIALECT = "duckdb"
# Node atoms that need no parentheses inside an operator.
_ATOMS = (
    exp.Column,
    exp.Literal,
    exp.Func,
    exp.Cast,
    exp.Paren,
    exp.Boolean,
    exp.Null,
    exp.Identifier,
    exp.Case,
)


class EngineDialectError(StrataError):
    """A construct the engine would compute differently from DuckDB, or cannot compute, and that is
    not rewritten (E070). `construct` names it, `node` is where it sits in the statement, and
    `needs_schema` says the refusal would go away with the input's columns known."""

    def __init__(
        self,
        construct: str,
        reason: str,
        hint: str,
        node: exp.Expr | None = None,
        *,
        engine: str = "spark",
        needs_schema: bool = False,
        location: Location | None = None,
        model: str | None = None,
    ) -> None:
        self.construct = construct
        self.reason = reason
        self.node = node
        self.engine = engine
        self.needs_schema = needs_schema
        self.model = model
        prefix = f"model `{model}`: " if model else ""
        super().__init__(
            E_BACKEND_DIALECT,
            f"{prefix}`{construct}` is refused on the {engine} engine: {reason}",
            location,
            hint=hint,
        )

    def located(self, model: str, location: Location) -> EngineDialectError:
        """The same refusal, naming the model and where in its module the construct is."""
        return EngineDialectError(
            self.construct,
            self.reason,
            self.hint or "",
            self.node,
            engine=self.engine,
            needs_schema=self.needs_schema,
            location=location,
            model=model,
        )


def refuse(
    construct: str, reason: str, hint: str, node: exp.Expr | None = None, *, needs_schema: bool = False
) -> EngineDialectError:
    return EngineDialectError(construct, reason, hint, node, needs_schema=needs_schema)


def call(name: str, *arguments: exp.Expr) -> exp.Expr:
    """A call of a Spark function by name, written as given."""
    return exp.Anonymous(this=name, expressions=list(arguments))


def atom(node: exp.Expr) -> exp.Expr:
    """`node`, parenthesised unless it is an atom, for use as an operand."""
    return node if isinstance(node, _ATOMS) else exp.Paren(this=node)


def known_type(node: exp.Expr | None) -> exp.DataType | None:
    """The DuckDB type sqlglot's annotator gave `node`, or None when it is not known."""
    if node is None:
        return None
    found = node.type
    if found is None or found.this in (exp.DataType.Type.UNKNOWN, exp.DataType.Type.NULL):
        return None
    return found


def is_kind(node: exp.Expr | None, *kinds: exp.DType) -> bool:
    found = known_type(node)
    return found is not None and found.this in kinds


def as_double(node: exp.Expr) -> exp.Expr:
    if is_kind(node, exp.DataType.Type.DOUBLE):
        return atom(node)
    return exp.cast(node, exp.DataType.Type.DOUBLE)


def integer_literal(node: exp.Expr | None) -> int | None:
    """The value of an integer constant (`3`, `-3`), else None."""
    if isinstance(node, exp.Neg):
        inner = integer_literal(node.this)
        return -inner if inner is not None else None
    if isinstance(node, exp.Paren):
        return integer_literal(node.this)
    if isinstance(node, exp.Literal) and not node.is_string:
        try:
            return int(node.this)
        except ValueError:
            return None
    return None


def literal_text(node: exp.Expr | None) -> str | None:
    """The value of a string constant, else None."""
    if isinstance(node, exp.Literal) and node.is_string:
        return str(node.this)
    return None


def lambda_of(parameter: str, body: exp.Expr) -> exp.Lambda:
    return exp.Lambda(this=body, expressions=[exp.to_identifier(parameter)])
