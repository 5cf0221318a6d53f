"""The constructs of the dialect conformance table (docs/spark_dialect.md): each one a tiny strata
model `m` (with helper models where it needs a second relation) over the sources `orders` and
`customers`, or an engine statement written in DuckDB SQL over `raw.orders` / `raw.customers`.

`expect` is what the run must find: "same" (same rows on both engines), "refused" (E070 at
compile time) or "differs" (a known difference, documented). `probe` names the output column whose
expression the table shows; without it the table shows the whole statement.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal


@dataclass(frozen=True)
class Case:
    section: str
    construct: str
    body: str  # a strata model body (the lines inside `model m { ... }`), or DuckDB SQL when section is "engine"
    expect: str = "same"
    probe: str | None = "v"
    helpers: str = ""  # more models the case reads
    note: str = ""  # for "differs": what differs


ORDERS = (
    # order_id, customer_id, order_ts, updated_at, status, amount, channel, tags
    (1, 10, "2026-01-01 08:00:00", "2026-01-01 09:00:00", "paid", Decimal("10.50"), "web", ["gift", "promo"]),
    (2, 10, "2026-01-31 23:30:00", "2026-02-01 00:10:00", "paid", Decimal("3.00"), "store", []),
    (3, 20, "2026-03-01 00:15:00.250", "2026-03-02 00:00:00", "cancelled", Decimal("0.00"), None, None),
    (
        4,
        30,
        "2026-01-04 12:00:00",
        "2026-01-05 12:00:00",
        "shipped",
        Decimal("-7.25"),
        "web",
        ["promo", None],
    ),
    (5, None, None, None, None, None, "a\\b_c", ["x"]),
    (6, 20, "2025-12-29 00:00:00", "2025-12-29 00:00:00", "paid", Decimal("10.50"), "store", ["gift"]),
)
CUSTOMERS = (
    # customer_id, name, region, segment, signup_date
    (10, "Ana", "north", "retail", "2025-01-31"),
    (20, "Bo", "south", "business", "2024-02-29"),
    (40, "Cy", None, "retail", None),
    (30, "Di", "north", None, "2025-12-31"),
)


def _derive(
    construct: str, expression: str, expect: str = "same", note: str = "", source: str = "orders"
) -> Case:
    return Case("expressions", construct, f"from {source}\nderive v = {expression}", expect, note=note)


def _aggregate(
    construct: str, expression: str, expect: str = "same", note: str = "", group: str = ""
) -> Case:
    grouping = f"group {group}\n" if group else ""
    return Case(
        "aggregates", construct, f"from orders\n{grouping}aggregate v = {expression}", expect, note=note
    )


STEPS = (
    Case("steps", "from", "from orders", probe=None),
    Case("steps", "filter (pushed into the base)", "from orders\nfilter status <> 'cancelled'", probe=None),
    Case(
        "steps",
        "filter on a derived column",
        "from orders\nderive net = amount * 0.8\nfilter net > 1",
        probe=None,
    ),
    Case("steps", "let", "from orders\nlet v = cast(order_ts as date)"),
    Case("steps", "let replacing a column (* REPLACE)", "from orders\nlet amount = amount * 2", probe=None),
    Case(
        "steps",
        "derive replacing a column (* REPLACE)",
        "from orders\nderive status = upper(status)",
        probe=None,
    ),
    Case("steps", "select * exclude", "from orders\nselect * exclude (tags, updated_at)", probe=None),
    Case(
        "steps",
        "join inner ... on",
        "from orders\njoin inner customers on orders.customer_id = customers.customer_id\n"
        "select orders.order_id, customers.name as v",
    ),
    Case("steps", "join left ... using", "from orders\njoin left customers using (customer_id)", probe=None),
    Case(
        "steps", "join right ... using", "from orders\njoin right customers using (customer_id)", probe=None
    ),
    Case("steps", "join full ... using", "from orders\njoin full customers using (customer_id)", probe=None),
    Case("steps", "group + aggregate", "from orders\ngroup status\naggregate v = sum(amount), n = count(*)"),
    Case("steps", "group alone (distinct rows)", "from orders\ngroup status, channel", probe=None),
    Case(
        "steps",
        "filter after aggregate (HAVING)",
        "from orders\ngroup customer_id\naggregate v = count(*)\nfilter v > 1",
    ),
    Case(
        "steps",
        "select after aggregate",
        "from orders\ngroup customer_id\naggregate n = count(*)\nselect customer_id, n * 2 as v",
    ),
    *(
        Case(
            "steps",
            operator,
            f"from orders\nselect customer_id\n{operator} other",
            probe=None,
            helpers="model other {\n  from customers\n  select customer_id\n}",
        )
        for operator in ("union", "union all", "except", "except all", "intersect", "intersect all")
    ),
    Case("steps", "expand a list column", "from orders\nexpand tags", probe=None),
    Case("steps", "expand an expression", "from orders\nexpand string_split(status, 'i') as v"),
    Case(
        "steps",
        "window row_number in derive (order_by tie-breaker)",
        "from orders\nderive v = row_number() over (partition by status order by amount)\norder_by: [order_id]",
    ),
    Case(
        "steps",
        "window row_number over () (no order)",
        "from orders\nderive v = row_number() over ()\nselect v",
    ),
    Case(
        "steps",
        "window over NULLs (ASC and DESC orders)",
        "from orders\nderive v = row_number() over (order by channel, amount desc, order_id)",
    ),
    Case(
        "steps",
        "window sum, running",
        "from orders\nderive v = sum(amount) over (partition by customer_id order by order_id)",
    ),
    Case(
        "steps",
        "window lag with a default",
        "from orders\nderive v = lag(amount, 1, 0) over (order by order_id)",
    ),
    Case(
        "steps",
        "window in let, filtered after",
        "from orders\nlet v = rank() over (order by amount desc)\nfilter v <= 2",
    ),
)

EXPRESSIONS = (
    _derive("CASE", "case when amount > 5 then 'big' when amount is null then 'none' else 'small' end"),
    _derive("coalesce / nullif", "coalesce(nullif(channel, 'web'), 'other')"),
    _derive(
        "greatest / least (NULLs ignored)", "greatest(order_id, customer_id) - least(order_id, customer_id)"
    ),
    _derive("IN / BETWEEN", "status in ('paid', 'shipped') and order_id between 2 and 5"),
    _derive("IS DISTINCT FROM", "channel is distinct from 'web'"),
    _derive("integer division //", "order_id // 4"),
    _derive("modulo %", "order_id % 4"),
    _derive("division / of decimals (a DOUBLE in DuckDB)", "amount / 3"),
    _derive("division by zero (inf, -inf, NaN)", "amount / 0"),
    _derive("1/0", "1/0"),
    _derive("log(x) (base 10 in DuckDB)", "log(order_id * 10)"),
    _derive(
        "ln / exp / sqrt / power", "round(ln(order_id) + exp(1) + sqrt(order_id) + power(order_id, 2), 6)"
    ),
    _derive("round of a DECIMAL", "round(amount * 1.111, 2)"),
    _derive(
        "round of a DOUBLE at a binary tie",
        "round(cast(order_id as double) + 0.675, 2)",
        "differs",
        "DuckDB rounds the binary value (2.675 is 2.67499...: 2.67), Spark its shortest decimal text (2.68)",
    ),
    _derive("cast(decimal as int) (rounds in DuckDB)", "cast(amount as int)"),
    _derive(
        "cast(double as bigint) (rounds half to even in DuckDB)",
        "cast(cast(amount as double) + 0.5 as bigint)",
    ),
    _derive("cast(timestamp as date)", "cast(order_ts as date)"),
    _derive("cast(bigint as varchar)", "cast(order_id as varchar) || '#'"),
    _derive("try_cast", "try_cast(status as int)"),
    _derive(
        "cast(double as varchar), large exponent",
        "cast(cast(order_id as double) * 1e20 as varchar)",
        "differs",
        "DuckDB writes 1e+20, Spark 1.0E20",
    ),
    _derive("struct_pack and field access", "struct_pack(a := order_id, b := status).b"),
    _derive("upper / lower / length", "upper(status) || lower(channel) || length(status)"),
    _derive("len of a string", "len(status)"),
    _derive("concat (NULLs skipped, numbers as text)", "concat(status, '-', order_id, channel)"),
    _derive("|| (NULL propagates)", "status || '-' || channel"),
    _derive("concat_ws", "concat_ws('/', status, channel, order_id)"),
    _derive("substring from 0", "substring(status, 0, 3)"),
    _derive("substring", "substring(status, 2, 3) || substring(status, -2)"),
    _derive("left / right with negative counts", "left(status, -2) || '|' || right(status, -2)"),
    _derive("replace / trim / lpad / reverse", "reverse(lpad(trim(replace(status, 'a', ' ')), 8, '*'))"),
    _derive(
        "starts_with / contains / strpos",
        "starts_with(status, 'pa') or contains(status, 'ip') or strpos(status, 'c') = 1",
    ),
    _derive("LIKE with a backslash", "channel like 'a\\b%'"),
    _derive("ILIKE", "status ilike 'PA%'"),
    _derive("regexp_matches", "regexp_matches(status, 'a.d')"),
    _derive("regexp_matches with 'i'", "regexp_matches(status, '^PA', 'i')"),
    _derive("regexp_full_match", "regexp_full_match(status, '[a-z]+d')"),
    _derive("regexp_replace with 'g' and a group", "regexp_replace(status, '([aeiou])', '<\\1>', 'g')"),
    _derive("regexp_replace anchored", "regexp_replace(status, '^p', 'P')"),
    _derive("regexp_extract with a group", "regexp_extract(status, '(a)(i|y)', 2)"),
    _derive("split_part", "split_part(channel, 'e', 2)"),
    _derive("string_split (a literal separator)", "string_split(coalesce(channel, 'x.y'), '.')"),
    _derive("md5(concat_ws(...))", "md5(concat_ws('|', order_id, status))"),
    _derive("sha256", "sha256(status)"),
    _derive("strlen (bytes)", "strlen(status)"),
    _derive("len of a list", "len(tags)"),
    _derive("array_length", "array_length(tags)"),
    _derive("list_count (non-NULL elements)", "list_count(tags)"),
    _derive("list index l[1]", "tags[1]"),
    _derive("list index l[-1]", "tags[-1]"),
    _derive("list index out of range", "tags[5]"),
    _derive("list index computed", "tags[order_id - 3]"),
    _derive("list_extract", "list_extract(tags, 2)"),
    _derive("list_contains with NULL elements", "list_contains(tags, 'gift')"),
    _derive("list_position (not found: NULL)", "list_position(tags, 'promo')"),
    _derive("list_distinct (NULL dropped)", "list_sort(list_distinct(tags || tags))"),
    _derive("list_sort", "list_sort(tags)"),
    _derive("list_concat with a NULL list", "list_concat(tags, ['z'])"),
    _derive(
        "list_transform / list_filter lambdas",
        "list_filter(list_transform(tags, x -> upper(x)), x -> x <> 'GIFT')",
    ),
    _derive("array_to_string", "array_to_string(tags, '+')"),
    _derive("list literal", "[order_id, 2, 3]"),
    _derive("range(n)", "range(order_id)"),
    _derive("range(a, b, step)", "range(0, order_id + 5, 3)"),
    _derive("generate_series", "generate_series(order_id, 3)"),
)

DATES = (
    _derive("date_trunc month", "date_trunc('month', order_ts)"),
    _derive("date_trunc week of a date", "cast(date_trunc('week', cast(order_ts as date)) as date)"),
    _derive("extract / date_part", "extract(year from order_ts) * 100 + date_part('month', order_ts)"),
    _derive("extract(second) (whole seconds in DuckDB)", "extract(second from order_ts)"),
    _derive("dayofweek (Sunday 0 in DuckDB)", "dayofweek(order_ts)"),
    _derive("isodow", "isodow(order_ts)"),
    _derive("date_part('dow')", "date_part('dow', order_ts)"),
    _derive("weekday", "weekday(order_ts)"),
    _derive("week / yearweek (ISO)", "week(order_ts) * 1000000 + yearweek(order_ts)"),
    _derive("dayofyear / quarter", "dayofyear(order_ts) * 10 + quarter(order_ts)"),
    _derive("millisecond", "millisecond(order_ts)"),
    _derive("monthname / dayname", "monthname(order_ts) || ' ' || dayname(order_ts)"),
    _derive("last_day", "last_day(order_ts)"),
    _derive("strftime", "strftime(order_ts, '%Y-%m-%d %H:%M:%S %A %B')"),
    _derive("strptime", "strptime('2026-02-03 04:05', '%Y-%m-%d %H:%M')"),
    _derive("epoch", "epoch(order_ts)"),
    _derive("epoch_ms(timestamp)", "epoch_ms(order_ts)"),
    _derive("epoch_ms(integer)", "epoch_ms(order_id * 1000)"),
    _derive("epoch_us", "epoch_us(order_ts)"),
    _derive("to_timestamp(seconds)", "to_timestamp(order_id * 1.5)"),
    _derive(
        "date_diff('month') (boundaries crossed)",
        "date_diff('month', order_ts, updated_at + interval 40 day)",
    ),
    _derive("date_diff('day') of timestamps", "date_diff('day', order_ts, updated_at)"),
    _derive("date_diff('hour')", "date_diff('hour', order_ts, updated_at)"),
    _derive("date_diff('week')", "date_diff('week', order_ts, updated_at + interval 9 day)"),
    _derive("date_diff('year')", "date_diff('year', order_ts, updated_at + interval 3 day)"),
    _derive("date_sub('day') (whole days elapsed)", "date_sub('day', order_ts, updated_at)"),
    _derive("date - date (days)", "cast(updated_at as date) - cast(order_ts as date)"),
    _derive("date + integer", "cast(order_ts as date) + 1"),
    _derive("date + interval (a TIMESTAMP in DuckDB)", "cast(order_ts as date) + interval 1 month"),
    _derive("timestamp - interval", "order_ts - interval '10 minutes'"),
    _derive("timestamp literal comparison", "order_ts >= timestamp '2026-01-04 12:00:00'"),
    _derive("make_date", "make_date(2026, 2, order_id)"),
)

AGGREGATES = (
    _aggregate("count(*) / sum / min / max", "count(*) + sum(order_id) + min(order_id) * max(order_id)"),
    _aggregate("count(distinct)", "count(distinct customer_id)"),
    _aggregate("FILTER (WHERE)", "sum(amount) filter (where status = 'paid')"),
    _aggregate("avg of a DECIMAL (a DOUBLE in DuckDB)", "avg(amount)", group="status"),
    _aggregate("list(x ORDER BY y) keeps NULLs and order", "list(channel ORDER BY order_id)"),
    _aggregate("array_agg(x ORDER BY y DESC)", "array_agg(order_id ORDER BY amount DESC, order_id)"),
    _aggregate("list(x) of no rows (NULL)", "list(order_id) filter (where order_id > 100)"),
    _aggregate("list(x) keeps NULLs", "list_sort(list(customer_id))", group="status"),
    _aggregate("string_agg ORDER BY", "string_agg(status, ',' ORDER BY order_id)"),
    _aggregate("quantile_cont", "quantile_cont(amount, 0.25)"),
    _aggregate("quantile_cont, several", "quantile_cont(order_id, [0.1, 0.5])"),
    _aggregate("quantile_disc", "quantile_disc(order_id, 0.7)"),
    _aggregate("median", "median(order_id)"),
    _aggregate("arg_max (rows with a NULL value skipped)", "arg_max(channel, order_id)"),
    _aggregate("arg_min", "arg_min(status, amount)"),
    _aggregate("bool_and / count_if", "bool_and(order_id > 0) and count_if(status = 'paid') = 3"),
    _aggregate("stddev_samp", "round(stddev_samp(order_id), 9)"),
)

REFUSED = (
    _derive("hash(...)", "hash(order_id, status)", "refused"),
    _derive("regexp_replace without 'g'", "regexp_replace(status, 'a', 'A')", "refused"),
    _derive("date_sub('month')", "date_sub('month', order_ts, updated_at)", "refused"),
    _derive("cast to HUGEINT", "cast(order_id as hugeint)", "refused"),
    _derive("format with {} placeholders", "format('{}-{}', order_id, status)", "refused"),
    _derive("GLOB", "status glob 'p*'", "refused"),
    _derive("list slice l[a:b]", "tags[1:2]", "refused"),
    _derive("a DuckDB function Spark lacks", "list_aggregate(tags, 'count')", "refused"),
    _derive("strftime with an unportable directive", "strftime(order_ts, '%j')", "refused"),
    _derive("date_trunc('decade')", "date_trunc('decade', order_ts)", "refused"),
    _aggregate("quantile_cont of a timestamp", "quantile_cont(order_ts, 0.5)", "refused"),
    Case(
        "aggregates",
        "count(DISTINCT) OVER (...)",
        "from orders\nderive v = count(distinct status) over (partition by customer_id)",
        "refused",
    ),
)

ENGINE = (
    Case(
        "engine",
        "QUALIFY over SELECT *",
        "SELECT * FROM raw.orders QUALIFY row_number() OVER (PARTITION BY customer_id ORDER BY order_id) = 1",
        probe=None,
    ),
    Case(
        "engine",
        "UNION ALL BY NAME",
        "SELECT order_id, status FROM raw.orders UNION ALL BY NAME SELECT name AS status, customer_id FROM raw.customers",
        probe=None,
    ),
    Case("engine", "range(..) t(i) as a table", "SELECT i * 2 AS v FROM range(1, 4) t(i)"),
    Case("engine", "SELECT * EXCLUDE", "SELECT * EXCLUDE (tags) FROM raw.orders", probe=None),
    Case(
        "engine", "DISTINCT ON", "SELECT DISTINCT ON (customer_id) * FROM raw.orders", "refused", probe=None
    ),
)

CASES: tuple[Case, ...] = (*STEPS, *EXPRESSIONS, *DATES, *AGGREGATES, *REFUSED, *ENGINE)
