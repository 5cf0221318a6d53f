"""Spark rewrite rules for dates and times (see rules for the driver): DuckDB's weekday
numbers, date parts, date_diff's boundary counting, epochs and strftime formats in Spark terms."""

from __future__ import annotations

from sqlglot import exp

from strata_dagster.backends.spark.dialect.support import (
    SOURCE_DIALECT,
    Rule,
    atom,
    call,
    integer_literal,
    is_kind,
    literal_text,
    refuse,
)

_TEMPORAL = (
    exp.DataType.Type.DATE,
    exp.DataType.Type.TIMESTAMP,
    exp.DataType.Type.TIMESTAMPTZ,
    exp.DataType.Type.TIMESTAMPLTZ,
    exp.DataType.Type.TIMESTAMPNTZ,
    exp.DataType.Type.TIME,
)
_NAIVE = (exp.DataType.Type.DATE, exp.DataType.Type.TIMESTAMP, exp.DataType.Type.TIMESTAMPNTZ)
_MICROS_PER = {
    "HOUR": 3_600_000_000,
    "MINUTE": 60_000_000,
    "SECOND": 1_000_000,
    "MILLISECOND": 1_000,
    "MICROSECOND": 1,
}
# DuckDB date part names (and their plurals and short forms) -> the canonical part.
_PARTS = {
    **{name: "year" for name in ("year", "years", "y", "yr", "yrs")},
    **{name: "quarter" for name in ("quarter", "quarters")},
    **{name: "month" for name in ("month", "months", "mon", "mons")},
    **{name: "week" for name in ("week", "weeks", "w", "weekofyear")},
    **{name: "day" for name in ("day", "days", "d", "dayofmonth")},
    **{name: "hour" for name in ("hour", "hours", "h", "hr", "hrs")},
    **{name: "minute" for name in ("minute", "minutes", "m", "min", "mins")},
    **{name: "second" for name in ("second", "seconds", "s", "sec", "secs")},
    **{name: "millisecond" for name in ("millisecond", "milliseconds", "ms", "msec", "msecs")},
    **{name: "microsecond" for name in ("microsecond", "microseconds", "us", "usec", "usecs")},
    "dayofweek": "dow",
    "dow": "dow",
    "weekday": "dow",
    "isodow": "isodow",
    "dayofyear": "doy",
    "doy": "doy",
    "isoyear": "isoyear",
    "yearweek": "yearweek",
    "epoch": "epoch",
}


# -- dates and times ----------------------------------------------------------------------------
def _timestamp(value: exp.Expr) -> exp.Expr:
    return exp.cast(value, "TIMESTAMP")


def _micros(value: exp.Expr) -> exp.Expr:
    return call("UNIX_MICROS", _timestamp(value))


def _naive(value: exp.Expr) -> exp.Expr:
    """A Spark TIMESTAMP (session time zone UTC) as the TIMESTAMP_NTZ DuckDB's TIMESTAMP maps to."""
    return exp.Cast(this=value, to=exp.DataType.build("TIMESTAMP_NTZ", dialect="spark"))


def date_part(part: str, value: exp.Expr, node: exp.Expr) -> exp.Expr:
    """DuckDB's date_part(part, value) in Spark terms."""
    canonical = _PARTS.get(part.lower())
    if canonical is None or is_kind(value, exp.DataType.Type.INTERVAL):
        raise refuse(
            f"date part '{part}'",
            "this part has no Spark equal here"
            if canonical is None
            else "parts of an interval differ in Spark",
            "use year, quarter, month, week, day, hour, minute, second, millisecond, microsecond, dow, isodow, doy, isoyear, yearweek or epoch of a date or timestamp",
            node,
        )
    simple = {
        "year": "YEAR",
        "quarter": "QUARTER",
        "month": "MONTH",
        "week": "WEEKOFYEAR",
        "day": "DAY",
        "hour": "HOUR",
        "minute": "MINUTE",
        "second": "SECOND",
        "doy": "DAYOFYEAR",
    }
    if canonical in simple:
        return call(simple[canonical], value)
    if canonical == "dow":  # DuckDB: Sunday 0 .. Saturday 6; Spark's dayofweek: Sunday 1 .. 7
        return exp.Paren(this=exp.Sub(this=call("DAYOFWEEK", value), expression=exp.Literal.number(1)))
    if canonical == "isodow":  # Monday 1 .. Sunday 7; Spark's weekday: Monday 0 .. 6
        return exp.Paren(this=exp.Add(this=call("WEEKDAY", value), expression=exp.Literal.number(1)))
    if canonical == "isoyear":
        return exp.Extract(this=exp.var("YEAROFWEEK"), expression=value)
    if canonical == "yearweek":
        year = exp.Extract(this=exp.var("YEAROFWEEK"), expression=value)
        return exp.Paren(
            this=exp.Add(
                this=exp.Mul(this=year, expression=exp.Literal.number(100)),
                expression=call("WEEKOFYEAR", value.copy()),
            )
        )
    if canonical == "epoch":  # seconds, with their fraction, as DOUBLE
        return exp.Paren(
            this=exp.Div(this=exp.cast(_micros(value), "DOUBLE"), expression=exp.Literal.number(1_000_000))
        )
    scale = 1_000 if canonical == "millisecond" else 1_000_000  # DuckDB counts the seconds in
    seconds = exp.Extract(this=exp.var("SECOND"), expression=value)
    return exp.cast(call("FLOOR", exp.Mul(this=seconds, expression=exp.Literal.number(scale))), "BIGINT")


def _extract(node: exp.Expr) -> exp.Expr | None:
    return date_part(node.this.name, node.expression, node)


def _date_part_call(node: exp.Expr) -> exp.Expr | None:
    part, value = node.expressions
    text = literal_text(part)
    if text is None:
        raise refuse("date_part with a computed part", "the part must be constant", "name the part", node)
    return date_part(text, value, node)


def _part_function(part: str) -> Rule:
    return lambda node: date_part(part, node.this if node.this is not None else node.expressions[0], node)


def _named_part(part: str) -> Rule:
    return lambda node: date_part(part, node.expressions[0], node)


def _month_name(node: exp.Expr) -> exp.Expr | None:
    """Spark's monthname and dayname abbreviate (Jan, Mon); DuckDB's spell out."""
    pattern = "MMMM" if isinstance(node, exp.Monthname) else "EEEE"
    return call("DATE_FORMAT", node.this, exp.Literal.string(pattern))


def _date_diff(node: exp.Expr) -> exp.Expr | None:
    """DuckDB's date_diff counts the unit boundaries crossed (Jan 31 to Mar 1 is 2 months); Spark's
    datediff(unit) counts whole units elapsed."""
    end, start = node.this, node.expression
    unit = (node.text("unit") or "DAY").upper()
    if unit in ("YEAR", "QUARTER", "MONTH"):
        years = exp.Sub(this=call("YEAR", end), expression=call("YEAR", start))
        if unit == "YEAR":
            return exp.Paren(this=years)
        per_year, part = (4, "QUARTER") if unit == "QUARTER" else (12, "MONTH")
        return exp.Paren(
            this=exp.Add(
                this=exp.Mul(this=exp.Paren(this=years), expression=exp.Literal.number(per_year)),
                expression=exp.Sub(this=call(part, end.copy()), expression=call(part, start.copy())),
            )
        )
    if unit in ("DAY", "WEEK"):
        days = call("DATEDIFF", exp.cast(end, "DATE"), exp.cast(start, "DATE"))
        return (
            days if unit == "DAY" else exp.Paren(this=exp.IntDiv(this=days, expression=exp.Literal.number(7)))
        )
    if unit in _MICROS_PER:
        size = exp.Literal.number(_MICROS_PER[unit])
        return exp.Paren(
            this=exp.Sub(
                this=_floor_div(_micros(end), size), expression=_floor_div(_micros(start), size.copy())
            )
        )
    raise refuse(
        f"date_diff('{unit.lower()}', ...)",
        "this unit has no Spark equal here",
        "use year, quarter, month, week, day, hour, minute, second, millisecond or microsecond",
        node,
    )


def _floor_div(value: exp.Expr, size: exp.Expr) -> exp.Expr:
    """floor(value / size) in exact integer arithmetic (DIV truncates toward zero)."""
    return exp.Paren(
        this=exp.IntDiv(
            this=exp.Paren(this=exp.Sub(this=value, expression=call("PMOD", value.copy(), size))),
            expression=size.copy(),
        )
    )


def _date_sub(node: exp.Expr) -> exp.Expr | None:
    """DuckDB's date_sub(part, a, b) counts whole parts elapsed, as Spark's timestampdiff does for
    fixed-length parts; for months and years the two differ at month ends."""
    part, start, end = node.expressions
    unit = (literal_text(part) or "").upper().rstrip("S")
    if unit not in ("DAY", "HOUR", "MINUTE", "SECOND", "MILLISECOND", "MICROSECOND"):
        raise refuse(
            f"date_sub({part.sql(SOURCE_DIALECT)}, ...)",
            "DuckDB and Spark count months, quarters and years elapsed differently at month ends",
            "use date_diff (boundaries crossed), which is rewritten for every part",
            node,
        )
    return call("TIMESTAMPDIFF", exp.var(unit), start, end)


def _date_minus_date(node: exp.Expr) -> exp.Expr | None:
    """DATE - DATE is a BIGINT count of days in DuckDB, an INTERVAL in Spark; DATE +/- INTERVAL is a
    TIMESTAMP in DuckDB, a DATE in Spark."""
    left, right = node.this, node.expression
    if (
        isinstance(node, exp.Sub)
        and is_kind(left, exp.DataType.Type.DATE)
        and is_kind(right, exp.DataType.Type.DATE)
    ):
        return call("DATEDIFF", left, right)
    if is_kind(left, exp.DataType.Type.DATE) and (
        isinstance(right, exp.Interval) or is_kind(right, exp.DataType.Type.INTERVAL)
    ):
        return _naive(exp.Paren(this=node.copy()))
    if (
        isinstance(node, exp.Add)
        and is_kind(right, exp.DataType.Type.DATE)
        and isinstance(left, exp.Interval)
    ):
        return _naive(exp.Paren(this=node.copy()))
    return None


def _date_add(node: exp.Expr) -> exp.Expr | None:
    """date_add(d, INTERVAL ...): Spark's date_add takes a day count."""
    value, amount = node.this, node.expression
    if not (isinstance(amount, exp.Interval) or is_kind(amount, exp.DataType.Type.INTERVAL)):
        return None
    total = exp.Add(this=atom(value), expression=amount)
    return _naive(exp.Paren(this=total)) if is_kind(value, *_NAIVE) else exp.Paren(this=total)


def _date_trunc(node: exp.Expr) -> exp.Expr | None:
    unit = (node.text("unit") or "").upper()
    if unit not in (
        "YEAR",
        "QUARTER",
        "MONTH",
        "WEEK",
        "DAY",
        "HOUR",
        "MINUTE",
        "SECOND",
        "MILLISECOND",
        "MICROSECOND",
    ):
        raise refuse(
            f"date_trunc('{unit.lower()}', ...)",
            "Spark's date_trunc has no such unit",
            "truncate to year, quarter, month, week, day, hour, minute, second, millisecond or microsecond",
            node,
        )
    truncated = call("DATE_TRUNC", exp.Literal.string(unit), node.this)
    return _naive(truncated) if is_kind(node.this, *_NAIVE) else truncated


def _epoch_scaled(node: exp.Expr) -> exp.Expr | None:
    """epoch_ms(timestamp) is milliseconds since 1970; epoch_ms(integer) and to_timestamp(seconds)
    are timestamps (sqlglot reads them all as one node)."""
    scale = integer_literal(node.args.get("scale"))
    value = node.this
    if scale == 3 and is_kind(value, *_TEMPORAL):
        return call("UNIX_MILLIS", _timestamp(value))
    if scale == 3:
        return _naive(call("TIMESTAMP_MILLIS", value))
    if scale is None:  # to_timestamp(seconds): a TIMESTAMPTZ, fraction kept
        micros = exp.cast(
            call("ROUND", exp.Mul(this=atom(value), expression=exp.Literal.number(1_000_000))), "BIGINT"
        )
        return call("TIMESTAMP_MICROS", micros)
    raise refuse("an epoch conversion", "this scale is not rewritten", "use epoch_ms or to_timestamp", node)


def _epoch(node: exp.Expr) -> exp.Expr | None:
    return date_part("epoch", node.this, node)


def _epoch_us(node: exp.Expr) -> exp.Expr | None:
    return _micros(node.expressions[0])


def _epoch_ns(node: exp.Expr) -> exp.Expr | None:
    return exp.Paren(this=exp.Mul(this=_micros(node.expressions[0]), expression=exp.Literal.number(1000)))


_STRFTIME_SAFE = frozenset("YmdHMSyBbAaIp%")


def _strftime(node: exp.Expr) -> exp.Expr | None:
    """Only formats whose every directive sqlglot maps to Spark's pattern letters alike, and whose
    literal text holds no letter (a Spark pattern letter unless quoted)."""
    text = literal_text(node.args.get("format"))
    if text is None or not _is_portable_format(text):
        raise refuse(
            "strftime/strptime with this format",
            "only constant formats of %Y %m %d %H %M %S %y %B %b %A %a %I %p, with no letters between them, "
            "are written alike for Spark",
            "use those directives, or compose the text with concat and the date part functions",
            node,
        )
    if isinstance(node, exp.StrToTime):
        return _naive(exp.StrToTime(this=node.this, format=node.args["format"]))
    return None


def _is_portable_format(text: str) -> bool:
    index = 0
    while index < len(text):
        char = text[index]
        if char == "%":
            if index + 1 >= len(text) or text[index + 1] not in _STRFTIME_SAFE:
                return False
            index += 2
            continue
        if char.isalpha() or char == "'":
            return False
        index += 1
    return True
