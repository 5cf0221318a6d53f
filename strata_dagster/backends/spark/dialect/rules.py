"""The rewrite rules from DuckDB semantics to Spark SQL: one small function per construct, each
`node -> replacement | None`, looked up by the node's sqlglot class (`RULES`) or, for a function
sqlglot does not model, by its name (`NAMED_RULES`).

The rules read the DuckDB types sqlglot's annotator put on the tree; `rewrite` runs them children
first and keeps a replaced node's DuckDB type on its replacement, so a parent's rule still sees the
type its child has in DuckDB. Scalar and date rules live here, aggregates, windows and set
operations in `aggregates`.
"""

from __future__ import annotations

from sqlglot import exp

from strata_dagster.backends.spark.dialect.dates import (
    _date_add,
    _date_diff,
    _date_minus_date,
    _date_part_call,
    _date_sub,
    _date_trunc,
    _epoch,
    _epoch_ns,
    _epoch_scaled,
    _epoch_us,
    _extract,
    _month_name,
    _named_part,
    _part_function,
    _strftime,
)
from strata_dagster.backends.spark.dialect.support import (
    SOURCE_DIALECT,
    Rule,
    as_double,
    atom,
    call,
    integer_literal,
    is_kind,
    lambda_of,
    literal_text,
    refuse,
)

_INTEGERS = (
    exp.DataType.Type.TINYINT,
    exp.DataType.Type.SMALLINT,
    exp.DataType.Type.INT,
    exp.DataType.Type.BIGINT,
)
_UNSIGNED_OR_HUGE = (
    exp.DataType.Type.UTINYINT,
    exp.DataType.Type.USMALLINT,
    exp.DataType.Type.UINT,
    exp.DataType.Type.UBIGINT,
    exp.DataType.Type.INT128,
    exp.DataType.Type.UINT128,
    exp.DataType.Type.BIGDECIMAL,
)
_NO_SPARK_TYPE = (
    exp.DataType.Type.TIME,
    exp.DataType.Type.TIMETZ,
    exp.DataType.Type.UUID,
    exp.DataType.Type.JSON,
    exp.DataType.Type.BIT,
    exp.DataType.Type.ENUM,
    exp.DataType.Type.UNION,
)
_FLOATS = (exp.DataType.Type.DOUBLE, exp.DataType.Type.FLOAT)
_TEMPORAL = (
    exp.DataType.Type.DATE,
    exp.DataType.Type.TIMESTAMP,
    exp.DataType.Type.TIMESTAMPTZ,
    exp.DataType.Type.TIMESTAMPLTZ,
    exp.DataType.Type.TIMESTAMPNTZ,
    exp.DataType.Type.TIME,
)


def rewrite(tree: exp.Expr) -> exp.Expr:
    """Apply the rules to every node, children first; returns the (possibly replaced) root."""
    from strata_dagster.backends.spark.dialect.aggregates import AGGREGATE_RULES

    rules = {**RULES, **AGGREGATE_RULES}
    root = tree
    for node in reversed(list(tree.walk())):
        if node is not root and node.parent is None:
            continue  # inside a subtree a rule already replaced
        rule = rules.get(type(node))
        if rule is None and isinstance(node, exp.Anonymous):
            rule = NAMED_RULES.get(node.name.lower())
        if rule is None:
            continue
        replacement = rule(node)
        if replacement is None or replacement is node:
            continue
        if replacement.type is None or replacement.type.this == exp.DataType.Type.UNKNOWN:
            replacement.type = node.type
        if node is root:
            root = replacement
        else:
            node.replace(replacement)
    return root


# -- arithmetic ---------------------------------------------------------------------------------
def _divide(node: exp.Expr) -> exp.Expr | None:
    """DuckDB's `/` is a DOUBLE division (decimals too) that gives inf/-inf/NaN for a zero divisor;
    Spark's ANSI `/` keeps decimals and raises DIVIDE_BY_ZERO."""
    if is_kind(node.this, exp.DataType.Type.INTERVAL) or is_kind(node.expression, exp.DataType.Type.INTERVAL):
        return None
    left, right = as_double(node.this), as_double(node.expression)
    infinity = exp.cast(exp.Literal.string("Infinity"), exp.DataType.Type.DOUBLE)
    result = exp.Case(
        ifs=[
            exp.If(
                this=exp.EQ(this=right, expression=exp.Literal.number(0)),
                true=exp.Mul(this=left, expression=infinity),
            )
        ],
        default=call("TRY_DIVIDE", left.copy(), right.copy()),
    )
    return exp.Paren(this=result)


def _log(node: exp.Expr) -> exp.Expr | None:
    """DuckDB's one-argument `log` is base 10; Spark's is the natural logarithm."""
    if node.expression is None:
        return call("LOG10", node.this)
    return None


def _cast(node: exp.Expr) -> exp.Expr | None:
    """DuckDB rounds a DOUBLE (half to even) or a DECIMAL (half away from zero) cast to an integer;
    Spark truncates. Types Spark lacks are refused."""
    target = node.args["to"]
    if target.is_type(*_UNSIGNED_OR_HUGE) or target.is_type(*_NO_SPARK_TYPE):
        raise refuse(
            f"cast to {target.sql(SOURCE_DIALECT)}",
            "Spark has no such type",
            "cast to a type both backends have (BIGINT, DECIMAL(38, 0), VARCHAR, TIMESTAMP, ...)",
            node,
        )
    if target.is_type(*_INTEGERS):
        value = node.this
        if is_kind(value, *_FLOATS):
            node.set("this", call("RINT", value))
        elif is_kind(value, exp.DataType.Type.DECIMAL):
            node.set("this", call("ROUND", value))
    return None


# -- strings ------------------------------------------------------------------------------------
def _concat(node: exp.Expr) -> exp.Expr | None:
    """DuckDB's concat skips NULLs and converts any argument to text (lists: list_concat)."""
    parts = list(node.expressions)
    if any(is_kind(part, exp.DataType.Type.ARRAY) for part in parts):
        return _list_concat_of(parts)
    return call(
        "CONCAT",
        *(
            exp.Coalesce(
                this=part if is_kind(part, *exp.DataType.TEXT_TYPES) else exp.cast(part, "STRING"),
                expressions=[exp.Literal.string("")],
            )
            for part in parts
        ),
    )


def _concat_ws(node: exp.Expr) -> exp.Expr | None:
    separator, *parts = node.expressions
    return call(
        "CONCAT_WS",
        separator,
        *(
            part
            if is_kind(part, *exp.DataType.TEXT_TYPES, exp.DataType.Type.ARRAY)
            else exp.cast(part, "STRING")
            for part in parts
        ),
    )


def _list_concat(node: exp.Expr) -> exp.Expr | None:
    return _list_concat_of([node.this, *node.expressions])


def _list_concat_of(parts: list[exp.Expr]) -> exp.Expr:
    """DuckDB's list_concat reads a NULL list as empty; Spark's concat gives NULL."""
    return call("CONCAT", *(exp.Coalesce(this=part, expressions=[call("ARRAY")]) for part in parts))


def _length(node: exp.Expr) -> exp.Expr | None:
    """DuckDB's `len`/`length` of a list is its size; Spark's `length` is for text only."""
    if is_kind(node.this, exp.DataType.Type.ARRAY):
        return call("SIZE", node.this)
    return None


def _left(node: exp.Expr) -> exp.Expr | None:
    """DuckDB's left(s, -n) drops the last n characters; Spark's gives ''."""
    count = integer_literal(node.expression)
    if count is not None and count >= 0:
        return None
    text, n = node.this, node.expression
    length = exp.If(
        this=exp.LT(this=n, expression=exp.Literal.number(0)),
        true=call("GREATEST", exp.Add(this=call("LENGTH", text), expression=n.copy()), exp.Literal.number(0)),
        false=n.copy(),
    )
    return call("SUBSTRING", text.copy(), exp.Literal.number(1), length)


def _right(node: exp.Expr) -> exp.Expr | None:
    """DuckDB's right(s, -n) drops the first n characters; Spark's gives ''."""
    count = integer_literal(node.expression)
    if count is not None and count >= 0:
        return None
    text, n = node.this, node.expression
    return exp.If(
        this=exp.LT(this=n, expression=exp.Literal.number(0)),
        true=call("SUBSTRING", text, exp.Sub(this=exp.Literal.number(1), expression=atom(n))),
        false=call("RIGHT", text.copy(), n.copy()),
    )


def _substring(node: exp.Expr) -> exp.Expr | None:
    """DuckDB counts start 0 as the place before the first character (substring(s, 0, 2) is one
    character); Spark reads it as 1."""
    if integer_literal(node.args.get("start")) != 0 or node.args.get("length") is None:
        return None
    length = node.args["length"]
    return call(
        "SUBSTRING",
        node.this,
        exp.Literal.number(1),
        call("GREATEST", exp.Sub(this=atom(length), expression=exp.Literal.number(1)), exp.Literal.number(0)),
    )


def _like(node: exp.Expr) -> exp.Expr | None:
    """DuckDB's LIKE has no escape character; Spark's escapes with a backslash."""
    if isinstance(node.parent, exp.Escape):
        return None
    pattern = literal_text(node.expression)
    if pattern is not None and "\\" not in pattern:
        return None
    used = pattern or ""
    escape = next(char for char in "!#~^|\x01" if char not in used)
    return exp.Escape(this=node.copy(), expression=exp.Literal.string(escape))


def _refuse_pattern_operator(node: exp.Expr) -> exp.Expr | None:
    operator = "GLOB" if isinstance(node, exp.Glob) else "SIMILAR TO"
    raise refuse(operator, f"Spark has no {operator}", "write the pattern with LIKE or regexp_matches", node)


def _regexp_flags(node: exp.Expr, flags: exp.Expr | None, allowed: str) -> str:
    if flags is None:
        return ""
    text = literal_text(flags)
    if text is None or any(flag not in allowed for flag in text):
        raise refuse(
            f"regular expression options {flags.sql(SOURCE_DIALECT)}",
            "Spark takes no options argument; only constant 'i', 'c' and 'g' options are rewritten",
            "write the options into the pattern, e.g. '(?i)...'",
            node,
        )
    return text


def _with_case_flag(pattern: exp.Expr, flags: str, node: exp.Expr) -> exp.Expr:
    if "i" not in flags or "c" in flags.split("i")[-1]:
        return pattern
    text = literal_text(pattern)
    if text is None:
        raise refuse(
            "regular expression option 'i' on a computed pattern",
            "the option can only be written into a constant pattern",
            "write '(?i)' at the start of the pattern",
            node,
        )
    return exp.Literal.string(f"(?i){text}")


def _regexp_like(node: exp.Expr) -> exp.Expr | None:
    flags = _regexp_flags(node, node.args.get("flag"), "ic")
    return exp.RegexpLike(this=node.this, expression=_with_case_flag(node.expression, flags, node))


def _regexp_full_match(node: exp.Expr) -> exp.Expr | None:
    flags = _regexp_flags(node, node.args.get("options"), "ic")
    pattern = _with_case_flag(node.expression, flags, node)
    anchored = call("CONCAT", exp.Literal.string("\\A(?:"), pattern, exp.Literal.string(")\\z"))
    return exp.RegexpLike(this=node.this, expression=anchored)


def _regexp_replace(node: exp.Expr) -> exp.Expr | None:
    """DuckDB replaces the first match unless 'g' is given, and writes groups as \\1; Spark
    replaces every match and writes groups as $1."""
    flags = _regexp_flags(node, node.args.get("modifiers"), "igc")
    pattern = _with_case_flag(node.expression, flags, node)
    text = literal_text(pattern)
    replaces_all = "g" in flags or (text is not None and text.startswith("^") and "|" not in text)
    if not replaces_all:
        raise refuse(
            "regexp_replace without 'g'",
            "DuckDB replaces the first match only, and Spark has no first-match replace",
            "add the 'g' option if every match may be replaced, or anchor the pattern with '^'",
            node,
        )
    replacement = literal_text(node.args.get("replacement"))
    if replacement is None:
        raise refuse(
            "regexp_replace with a computed replacement",
            "DuckDB writes groups as \\1 and Spark as $1, which only a constant replacement can be rewritten for",
            "use a constant replacement text",
            node,
        )
    return call("REGEXP_REPLACE", node.this, pattern, exp.Literal.string(_java_replacement(replacement)))


def _java_replacement(text: str) -> str:
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        following = text[index + 1] if index + 1 < len(text) else ""
        if char == "\\" and following.isdigit():
            out.append(f"${following}")
            index += 2
        elif char == "\\" and following:
            out.append("\\\\" if following == "\\" else following)
            index += 2
        elif char == "$":
            out.append("\\$")
            index += 1
        else:
            out.append(char)
            index += 1
    return "".join(out)


def _format(node: exp.Expr) -> exp.Expr | None:
    raise refuse(
        "format(...)",
        "DuckDB's format uses {} placeholders, Spark's format_string printf ones",
        "use printf('%s ...', ...), which both backends read alike, or concat",
        node,
    )


def _hash(node: exp.Expr) -> exp.Expr | None:
    raise refuse(
        "hash(...)",
        "Spark's hash is a 32-bit murmur3 that ignores where the NULLs are, DuckDB's a 64-bit hash",
        "for a key, use md5(concat_ws('|', ...)) or sha256(...), which both backends compute alike",
        node,
    )


# -- lists --------------------------------------------------------------------------------------
def _element(node: exp.Expr, array: exp.Expr, index: exp.Expr) -> exp.Expr:
    """DuckDB's l[i] (1-based, negative from the end, NULL out of range or at 0); Spark's l[i] is
    0-based and raises out of range under ANSI."""
    position = integer_literal(index)
    if position == 0:
        return exp.Null()
    if position is None:
        index = exp.cast(exp.Nullif(this=index, expression=exp.Literal.number(0)), "INT")
    return call("TRY_ELEMENT_AT", array, index)


def _bracket(node: exp.Expr) -> exp.Expr | None:
    if len(node.expressions) != 1:
        return None
    (index,) = node.expressions
    if isinstance(index, exp.Slice):
        raise refuse(
            "list slice l[a:b]",
            "Spark has no slice syntax",
            "use list_slice's equal on both backends: a filter on the element positions, or array_slice",
            node,
        )
    if is_kind(node.this, exp.DataType.Type.MAP):
        return call("TRY_ELEMENT_AT", node.this, index)
    if is_kind(node.this, exp.DataType.Type.STRUCT) or (
        index.is_string and not is_kind(node.this, exp.DataType.Type.ARRAY)
    ):
        return None
    # sqlglot stores a constant index 0-based; a computed one as written.
    literal = integer_literal(index)
    duckdb_index = exp.Literal.number(literal + 1) if literal is not None else index
    return _element(node, node.this, duckdb_index)


def _list_extract(node: exp.Expr) -> exp.Expr | None:
    array, index = node.expressions
    return _element(node, array, index)


def _list_count(node: exp.Expr) -> exp.Expr | None:
    """DuckDB's list_count counts the non-NULL elements."""
    return call("SIZE", _without_nulls(node.expressions[0]))


def _without_nulls(array: exp.Expr) -> exp.Expr:
    return call(
        "FILTER", array, lambda_of("__e", exp.Not(this=exp.Is(this=exp.column("__e"), expression=exp.Null())))
    )


def _list_contains(node: exp.Expr) -> exp.Expr | None:
    """DuckDB's list_contains is false (Spark's NULL) when the list holds a NULL and no match."""
    return exp.ArrayContains(this=_without_nulls(node.this), expression=node.expression)


def _list_position(node: exp.Expr) -> exp.Expr | None:
    """Not found: NULL in DuckDB, 0 in Spark."""
    array, value = (node.this, node.expression) if not isinstance(node, exp.Anonymous) else node.expressions
    return exp.Nullif(this=call("ARRAY_POSITION", array, value), expression=exp.Literal.number(0))


def _list_distinct(node: exp.Expr) -> exp.Expr | None:
    """DuckDB's list_distinct drops NULL; Spark's array_distinct keeps one."""
    return call("ARRAY_DISTINCT", _without_nulls(node.this))


def _two_argument_lambda(node: exp.Expr) -> exp.Expr | None:
    for argument in node.iter_expressions():
        if isinstance(argument, exp.Lambda) and len(argument.expressions) > 1:
            raise refuse(
                "a list lambda with an index parameter",
                "DuckDB numbers the elements from 1, Spark from 0",
                "compute with the element alone, or add 1 to the index explicitly in both backends' terms",
                node,
            )
    return None


def _series(node: exp.Expr) -> exp.Expr | None:
    """DuckDB's range(a, b[, s]) excludes b and generate_series includes it, both empty when the
    bounds are the wrong way round; Spark's sequence includes its stop and fails on such bounds."""
    start = node.args.get("start") or exp.Literal.number(0)
    end = node.args["end"]
    step_node = node.args.get("step")
    step = integer_literal(step_node) if step_node is not None else 1
    if step is None or step == 0 or any(is_kind(part, *_TEMPORAL) for part in (start, end)):
        raise refuse(
            "range/generate_series with a computed, zero or interval step",
            "only constant integer steps are rewritten to Spark's sequence",
            "use a constant integer step",
            node,
        )
    start, end = exp.cast(start, "BIGINT"), exp.cast(end, "BIGINT")
    exclusive = bool(node.args.get("is_end_exclusive"))
    if isinstance(node.parent, exp.Table):
        return _series_table(node.parent, start, end, step, exclusive)
    if exclusive:
        stop: exp.Expr = (exp.Sub if step > 0 else exp.Add)(this=end.copy(), expression=exp.Literal.number(1))
        has_rows: exp.Expr = (exp.LT if step > 0 else exp.GT)(this=start.copy(), expression=end.copy())
    else:
        stop = end.copy()
        has_rows = (exp.LTE if step > 0 else exp.GTE)(this=start.copy(), expression=end.copy())
    arguments = [start, stop] + ([exp.cast(exp.Literal.number(step), "BIGINT")] if step != 1 else [])
    return exp.If(
        this=has_rows, true=call("SEQUENCE", *arguments), false=exp.cast(call("ARRAY"), "ARRAY<BIGINT>")
    )


def _series_table(table: exp.Table, start: exp.Expr, end: exp.Expr, step: int, exclusive: bool) -> exp.Expr:
    """`FROM range(a, b) t(i)`: Spark's range table function (end excluded, column `id`)."""
    if not exclusive:
        end = exp.Add(this=end, expression=exp.Literal.number(1 if step > 0 else -1))
    alias = table.args.get("alias")
    if not isinstance(alias, exp.TableAlias) or not alias.columns:
        name = "range" if exclusive else "generate_series"  # DuckDB's column name
        named = alias.this if isinstance(alias, exp.TableAlias) and alias.this else exp.to_identifier(name)
        table.set("alias", exp.TableAlias(this=named, columns=[exp.to_identifier(name)]))
    return call("RANGE", start, end, exp.Literal.number(step))


RULES: dict[type[exp.Expr], Rule] = {
    exp.Div: _divide,
    exp.Log: _log,
    exp.Cast: _cast,
    exp.TryCast: _cast,
    exp.Concat: _concat,
    exp.ConcatWs: _concat_ws,
    exp.ArrayConcat: _list_concat,
    exp.Length: _length,
    exp.Left: _left,
    exp.Right: _right,
    exp.Substring: _substring,
    exp.Like: _like,
    exp.ILike: _like,
    exp.Glob: _refuse_pattern_operator,
    exp.SimilarTo: _refuse_pattern_operator,
    exp.RegexpLike: _regexp_like,
    exp.RegexpFullMatch: _regexp_full_match,
    exp.RegexpReplace: _regexp_replace,
    exp.Bracket: _bracket,
    exp.ArrayContains: _list_contains,
    exp.ArrayPosition: _list_position,
    exp.ArrayDistinct: _list_distinct,
    exp.Transform: _two_argument_lambda,
    exp.ArrayFilter: _two_argument_lambda,
    exp.GenerateSeries: _series,
    exp.Format: _format,
    exp.Extract: _extract,
    exp.DayOfWeek: _part_function("dow"),
    exp.DayOfWeekIso: _part_function("isodow"),
    exp.Week: _part_function("week"),
    exp.Monthname: _month_name,
    exp.Dayname: _month_name,
    exp.DateDiff: _date_diff,
    exp.Sub: _date_minus_date,
    exp.Add: _date_minus_date,
    exp.DateAdd: _date_add,
    exp.TimestampTrunc: _date_trunc,
    exp.UnixToTime: _epoch_scaled,
    exp.TimeToUnix: _epoch,
    exp.TimeToStr: _strftime,
    exp.StrToTime: _strftime,
}

NAMED_RULES: dict[str, Rule] = {
    "hash": _hash,
    "format": _format,
    "list_count": _list_count,
    "list_extract": _list_extract,
    "array_extract": _list_extract,
    "list_element": _list_extract,
    "list_position": _list_position,
    "list_indexof": _list_position,
    "date_part": _date_part_call,
    "datepart": _date_part_call,
    "date_sub": _date_sub,
    "weekday": _named_part("dow"),
    "yearweek": _named_part("yearweek"),
    "isoyear": _named_part("isoyear"),
    "dayofyear": _named_part("doy"),
    "millisecond": _named_part("millisecond"),
    "microsecond": _named_part("microsecond"),
    "epoch_us": _epoch_us,
    "epoch_ns": _epoch_ns,
    "strlen": lambda node: call("OCTET_LENGTH", *node.expressions),
    "list_apply": lambda node: _two_argument_lambda(node) or call("TRANSFORM", *node.expressions),
    "array_apply": lambda node: _two_argument_lambda(node) or call("TRANSFORM", *node.expressions),
    "array_transform": lambda node: _two_argument_lambda(node) or call("TRANSFORM", *node.expressions),
}
