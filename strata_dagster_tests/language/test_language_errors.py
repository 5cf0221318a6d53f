"""Every compile-time error code, triggered by a small module, with its location."""

from pathlib import Path

import pytest

from strata_dagster.engine.run import run_project
from strata_dagster.errors import StrataError
from strata_dagster.language import load_project
from strata_dagster_tests.support.engine_support import execute, make_module_project
from strata_dagster_tests.support.helpers import compile_text, project_of

# (code, module text, expected line, expected column); positions are in m.strata.
CASES = [
    ("E001", "model m {\n  from orders\n  filer status = 'x'\n}\n", 3, 3),
    ("E001", "model m {\n  from orders\n", 2, 14),
    ("E001", "source s { table: raw.s }\nmodel m { from s } }\n", 2, 20),
    ("E002", "model m {\n  from orders\n  filter amount > \n}\n", 3, 17),
    ("E002", "model m {\n  from orders\n  filter amount > 1 as x\n}\n", 3, 10),
    ("E002", "model m {\n  from orders\n  derive x = (amount +)\n}\n", 3, 23),
    ("E002", "model m {\n  from orders\n  let d = (order_ts as date)\n}\n", 3, 24),
    ("E002", "model m {\n  from orders\n  derive x = amount + (amount as a)\n}\n", 3, 34),
    ("E002", "model m {\n  from orders\n  group (order_ts as d)\n  aggregate n = count(*)\n}\n", 3, 22),
    ("E001", "sourceorders { table: raw.orders }\nmodel m { from orders }\n", 1, 1),
    ("E001", "modelx {\n  from orders\n}\n", 1, 1),
    ("E001", "model m {\n  from orders\n  join left customers usingcustomer_id\n}\n", 3, 23),
    ("E006", "model m {\n  fromorders\n}\n", 2, 3),
    ("E007", "model m {\n  from orders\n  contract: {order_id: BIGINTLEFTNOT NULL}\n}\n", 3, 24),
    ("E007", "model m {\n  from orders\n  contract: {order_id: BIGINT LEFT}\n}\n", 3, 24),
    ("E003", "model orders { from customers }\n", 1, 7),
    ("E004", "model m {\n  from orderz\n}\n", 2, 3),
    ("E004", "model m {\n  from orders\n  join left custmers using (customer_id)\n}\n", 3, 3),
    ("E005", "model a { from b }\nmodel b { from a }\n", 1, 7),
    ("E006", "model m {\n  from orders\n  merge_stratgy: upsert\n}\n", 3, 3),
    ("E006", "model m {\n  from orders\n  description: 'a'\n  description: 'b'\n}\n", 4, 3),
    ("E007", "model m {\n  from orders\n  partitioned_by: week(order_ts)\n}\n", 3, 19),
    ("E007", "model m {\n  from orders\n  unique: [order_id, amount + 1]\n}\n", 3, 22),
    ("E007", "model m {\n  from orders\n  lateness: 'soon'\n}\n", 3, 13),
    ("E007", "source s {\n  start: 2025-13-01\n  partitioned_by: day(ts)\n}\nmodel m { from s }\n", 2, 10),
    ("E008", "model m {\n  join orders using (order_id)\n}\n", 2, 3),
    ("E008", "model m {\n  from orders\n  derive x = 1\n  let y = 2\n}\n", 4, 3),
    ("E008", "model m {\n  from orders\n  from customers\n}\n", 3, 3),
    ("E008", "model m {\n  from orders\n  join orders using (order_id)\n}\n", 3, 3),
    ("E009", "model m {\n  from orders\n  filter amout > 1\n}\n", 3, 10),
    ("E009", "model m {\n  from orders\n  derive x = 1 + orders.nope\n}\n", 3, 18),
    ("E009", "model m {\n  from orders\n  join left customers using (region)\n}\n", 3, 3),
    ("E009", "model m {\n  from orders\n  select order_id\n  filter amount > 0\n}\n", 4, 10),
    ("E009", "model m {\n  from orders\n  unique: [nope]\n}\n", 3, 11),
    (
        "E009",
        "model m {\n  from orders\n  join customers on orders.customer_id = customers.customer_id\n"
        "  derive x = customer_id\n}\n",
        4,
        14,
    ),
    ("E010", "model m {\n  from orders\n  select order_id\n  partitioned_by: day(order_ts)\n}\n", 4, 19),
    ("E011", "model m {\n  from orders\n  select order_id\n  union all customers\n}\n", 4, 3),
    ("E012", "source s {\n  partitioned_by: day(ts)\n}\nmodel m { from s }\n", 2, 3),
    ("E012", "source s {\n  table: raw.s\n  path: 'a.parquet'\n}\nmodel m { from s }\n", 3, 3),
    (
        "E012",
        "source s {\n  partitioned_by: day(ts)\n  start: 2025-01-01\n  versioning: append_only_partitions\n}\n"
        "model m { from s }\n",
        4,
        3,
    ),
    (
        "E014",
        "model m {\n  from orders\n  join customers on orders.customer_id = customers.customer_id\n}\n",
        1,
        7,
    ),
    ("E014", "model m {\n  from orders\n  select order_id, amount as order_id\n}\n", 3, 20),
    ("E014", "model m {\n  from orders\n  expand tags as status\n}\n", 3, 10),
    ("E015", "model m {\n  from orders\n  select amount * 2\n}\n", 3, 10),
    ("E015", "model m {\n  from orders\n  group cast(order_ts as date)\n}\n", 3, 9),
    (
        "E016",
        "model m {\n  from orders\n  let d = cast(order_ts as date)\n  filter d >= DATE '2025-02-17'\n"
        "  let month = cast(date_trunc('month', d) as date)\n  group month\n  aggregate n = count(*)\n"
        "  partitioned_by: month(month)\n}\n",
        4,
        10,
    ),
    (
        "E016",
        "model m {\n  from orders\n  let d = cast(order_ts as date)\n  filter d >= DATE '2025-02-17'\n"
        "  group d\n  aggregate n = count(*)\n  partitioned_by: month(d)\n}\n",
        4,
        10,
    ),
    ("E017", "model m {\n  from orders\n  materialize: view\n  unique: [order_id]\n}\n", 4, 11),
    ("E017", "model m {\n  from orders\n  materialize: view\n  partitioned_by: day(order_ts)\n}\n", 4, 19),
    ("E017", "model m {\n  from orders\n  materialize: view\n  incremental\n}\n", 4, 3),
    (
        "E017",
        "model m {\n  from orders\n  materialize: view\n  merge_strategy: upsert\n  merge_keys: [order_id]\n"
        "  cdc_column: updated_at\n}\n",
        4,
        19,
    ),
    (
        "E017",
        "model m {\n  from orders\n  materialize: view\n  contract: {order_id: BIGINT not null}\n}\n",
        4,
        24,
    ),
    ("E007", "model m {\n  from orders\n  materialize: vue\n}\n", 3, 16),
    ("E086", "model m {\n  from orders\n  merge_strategy: merge\n}\n", 3, 19),
    (
        "E087",
        "model m {\n  from orders\n  group customer_id\n  aggregate n = count(*)\n"
        "  merge_strategy: append\n  cdc_column: customer_id\n}\n",
        5,
        19,
    ),
    ("E088", "model m {\n  from orders\n  merge_strategy: append\n}\n", 3, 19),
    ("E088", "model m {\n  from orders\n  merge_strategy: append\n  cdc_column: changed_at\n}\n", 4, 15),
    (
        "E089",
        "model m {\n  from orders\n  merge_strategy: upsert\n  cdc_column: updated_at\n}\n",
        3,
        19,
    ),
    (
        "E089",
        "model m {\n  from orders\n  merge_strategy: append_new\n  cdc_column: updated_at\n  merge_keys: []\n}\n",
        5,
        15,
    ),
    (
        "E089",
        "model m {\n  from orders\n  merge_strategy: upsert\n  cdc_column: updated_at\n  merge_keys: [id]\n}\n",
        5,
        15,
    ),
    ("E065", "model m {\n  from orders\n  freshness: soon\n}\n", 3, 14),
    ("E065", "model m {\n  from orders\n  freshness: 30 seconds\n}\n", 3, 14),
    ("E065", "model m {\n  from orders\n  freshness: 0 days\n}\n", 3, 14),
]


@pytest.mark.parametrize(
    ("code", "text", "line", "column"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)]
)
def test_error_code_and_location(code, text, line, column):
    with pytest.raises(StrataError) as caught:
        compile_text(text)
    error = caught.value.errors[0]
    assert error.code == code, error.render()
    assert error.location is not None
    assert error.location.file == "m.strata" or code in ("E003",)
    assert (error.location.line, error.location.column) == (line, column), error.render()
    rendered = error.render()
    assert rendered.startswith(f"error[{code}]: ")
    assert f"--> {error.location}" in rendered


def test_duplicate_name_points_at_both_definitions():
    with pytest.raises(StrataError) as caught:
        compile_text("model orders { from customers }\n")
    error = caught.value
    assert error.code == "E003"
    assert "sources.strata" in error.message  # the first definition


def test_several_errors_are_reported_together():
    text = "model a {\n  from nope\n}\nmodel b {\n  from orders\n  merge_strategy: fancy\n}\n"
    with pytest.raises(StrataError) as caught:
        compile_text(text)
    assert [error.code for error in caught.value.errors] == ["E086"]  # module errors stop before linking
    text = "model a {\n  from orders\n  filter nope\n}\nmodel b {\n  from orders\n  select amount * 2\n}\n"
    with pytest.raises(StrataError) as caught:
        compile_text(text)
    assert sorted(error.code for error in caught.value.errors) == ["E009", "E015"]


def test_missing_project_folder(tmp_path):
    with pytest.raises(StrataError) as caught:
        load_project(tmp_path / "absent")
    assert caught.value.code == "E013"


def test_folder_without_modules(tmp_path):
    with pytest.raises(StrataError) as caught:
        load_project(tmp_path)
    assert caught.value.code == "E013"


def test_module_that_is_not_utf8(tmp_path):
    (tmp_path / "bad.strata").write_bytes(b"model m { from \xff }")
    with pytest.raises(StrataError) as caught:
        load_project(tmp_path)
    assert caught.value.code == "E013"
    assert caught.value.location is not None and caught.value.location.file.endswith("bad.strata")


def test_errors_name_the_file_in_a_project(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.strata").write_text("source s { table: raw.s }\n")
    (tmp_path / "b.strata").write_text("model m {\n  from s\n  merge_strategy: nope\n}\n")
    with pytest.raises(StrataError) as caught:
        load_project(tmp_path)
    error = caught.value
    assert error.code == "E086"
    assert Path(error.location.file).name == "b.strata"
    assert (error.location.line, error.location.column) == (3, 19)


def test_struct_field_of_a_derived_column_opens_a_stage():
    compiled = compile_text(
        "model m {\n  from orders\n  derive s = struct_pack(a := 1)\n  derive b = s.a\n}\n"
    )
    assert compiled.models["m"].columns[-2:] == ("s", "b")
    assert "__s1" in compiled.sql("m")


def test_whole_month_filters_are_fine_for_month_models():
    compiled = compile_text(
        "model m {\n  from orders\n  let d = cast(order_ts as date)\n"
        "  filter date_trunc('month', d) >= DATE '2025-02-01'\n"
        "  let month = cast(date_trunc('month', d) as date)\n  group month\n  aggregate n = count(*)\n"
        "  partitioned_by: month(month)\n}\n"
    )
    assert "m" in compiled.models


def test_window_over_ties_warns_w001_without_order_by():
    text = "model m {\n  from orders\n  derive rank = row_number() over (partition by customer_id order by order_ts)\n}\n"
    compiled = compile_text(text)
    assert [warning.code for warning in compiled.warnings] == ["W001"]
    assert "order_by" in compiled.warnings[0].hint


def test_order_by_adds_tie_breakers_to_windows():
    text = (
        "model m {\n  from orders\n  derive rank = row_number() over (partition by customer_id order by order_ts)\n"
        "  order_by: [order_ts, order_id]\n}\n"
    )
    compiled = compile_text(text)
    assert compiled.warnings == ()
    assert "ORDER BY order_ts, order_id" in compiled.sql("m", pretty=False)


def test_tie_breakers_are_written_as_the_window_sees_them():
    """A window is evaluated before the projection names its columns: an output column from one side
    of a join is qualified, a computed one is its expression, the window's own partition column and a
    window's result are left out."""
    text = (
        "model m {\n  from orders\n  join left customers on orders.customer_id = customers.customer_id\n"
        "  select orders.order_id, orders.customer_id, orders.order_ts,\n"
        "    coalesce(customers.region, 'unknown') as region,\n"
        "    row_number() over (partition by orders.customer_id order by orders.order_ts) as n\n"
        "  order_by: [customer_id, order_ts, region, n, order_id]\n}\n"
    )
    compiled = compile_text(text)
    assert compiled.warnings == ()
    assert (
        "PARTITION BY orders.customer_id ORDER BY orders.order_ts, "
        "COALESCE(customers.region, 'unknown'), orders.order_id)" in compiled.sql("m", pretty=False)
    )


@pytest.mark.parametrize(
    ("select", "order_by", "window", "rows", "expected"),
    [
        # Renamed: the window's SELECT only knows `order_id` (it was appended as `id`: E032).
        (
            "select order_id as id, rn",
            "[id]",
            "ROW_NUMBER() OVER (ORDER BY status, order_id) AS rn",
            "(2, 'a', 1.0), (1, 'a', 1.0), (3, 'a', 0.5)",
            [(1, 1), (2, 2), (3, 3)],
        ),
        # Computed: ordered by `amount * 2` (it was appended as `twice`: E032, a known issue until
        # the twentieth session); `tens`, computed from the window itself, is left out.
        (
            "select order_id as id, amount * 2 as twice, rn, rn * 10 as tens",
            "[twice, tens]",
            "ROW_NUMBER() OVER (ORDER BY status, amount * 2) AS rn",
            "(1, 'a', 3.0), (2, 'a', 1.0), (3, 'a', 2.0)",
            [(2, 1), (3, 2), (1, 3)],
        ),
    ],
    ids=["renamed", "computed"],
)
def test_a_tie_breaker_a_later_select_renames_or_computes_is_written_as_the_window_sees_it(
    tmp_path, select, order_by, window, rows, expected
):
    text = (
        "model m {\n  from orders\n  derive rn = row_number() over (order by status)\n"
        f"  {select}\n  order_by: {order_by}\n}}\n"
    )
    sql = compile_text(text).sql("m", pretty=False)
    assert window in sql, sql
    built = "source orders {\n  table: raw.orders\n}\n\n" + text
    project, warehouse = make_module_project(
        tmp_path,
        "m.strata",
        built,
        f"CREATE TABLE raw.orders AS SELECT * FROM (VALUES {rows}) t(order_id, status, amount)",
    )
    run_project(project, warehouse)
    assert execute(warehouse, "SELECT id, rn FROM main.v_m ORDER BY rn") == expected


def test_a_tie_breaker_joined_after_the_window_is_left_out_with_a_warning():
    """`region` comes from customers, joined after the window: it does not exist where the window
    is computed (it was appended there by name: E032). It is left out, and W001 names it."""
    text = (
        "model m {\n  from orders\n  derive rn = row_number() over (order by status)\n"
        "  join left customers using (customer_id)\n  select order_id, region, rn\n"
        "  order_by: [region, order_id]\n}\n"
    )
    compiled = compile_text(text)
    sql = compiled.sql("m", pretty=False)
    assert "ROW_NUMBER() OVER (ORDER BY status, order_id) AS rn" in sql, sql
    (warning,) = compiled.warnings
    assert warning.code == "W001" and "`region` come from a relation joined after" in warning.message


def test_window_ordered_by_the_unique_key_is_deterministic():
    text = "model m {\n  from orders\n  derive rank = row_number() over (order by order_id)\n  unique: [order_id]\n}\n"
    assert compile_text(text).warnings == ()


def test_a_keyword_glued_to_a_name_is_named_with_the_fix():
    with pytest.raises(StrataError) as caught:
        compile_text("sourceorders { table: raw.orders }\n")
    assert caught.value.code == "E001"
    assert "`source orders`" in caught.value.render()


def test_types_and_casts_that_are_sql_still_compile():
    casts = compile_text(
        "model m {\n  from orders\n  let d = cast(order_ts as date)\n  derive n = try_cast(amount as int)\n"
        "  select order_id as id, d, n\n"
        "  contract: {id: BIGINT not null, d: DATE, n: INTEGER}\n}\n"
    )
    assert "CAST(order_ts AS DATE)" in casts.sql("m") and "TRY_CAST(amount AS INT)" in casts.sql("m")
    typed = compile_text(
        "model m {\n  from orders\n  select order_id, amount, tags\n"
        "  contract: {order_id: bigint NOT NULL, amount: DECIMAL(18, 2), tags: VARCHAR[]}\n}\n"
    )
    contract = typed.project.models["m"].properties.contract
    assert [(column.name, column.type, column.is_not_null) for column in contract] == [
        ("order_id", "BIGINT", True),
        ("amount", "DECIMAL(18, 2)", False),
        ("tags", "VARCHAR[]", False),
    ]


# The `owners` property: emails or `team:name`, Dagster's rule for asset owners.


def test_owners_are_emails_and_teams_bare_or_quoted():
    project = project_of(
        "model m {\n  from orders\n  owners: [ana@shop.example, 'team:finance', team:ops, 'data-eng@x.co']\n}\n"
    )
    assert project.models["m"].properties.owners == (
        "ana@shop.example",
        "team:finance",
        "team:ops",
        "data-eng@x.co",
    )
    assert project_of("model m {\n  from orders\n  owners: 'team:x'\n}\n").models["m"].properties.owners == (
        "team:x",
    )


@pytest.mark.parametrize(
    ("value", "column"),
    [
        ("[ana]", 12),  # neither an email nor a team
        ("[ana@shop.example, 'team:']", 30),  # a team without a name
        ("[ana@localhost]", 12),  # Dagster wants a dotted domain
        ("[ana@shop.example, ana@shop.example]", 30),  # twice
        ("finance", 11),
    ],
)
def test_a_bad_owner_is_e007_at_its_position(value, column):
    with pytest.raises(StrataError) as caught:
        project_of(f"model m {{\n  from orders\n  owners: {value}\n}}\n")
    assert caught.value.code == "E007"
    assert (caught.value.location.line, caught.value.location.column) == (3, column)


def test_owners_without_a_value_or_twice_are_coded():
    with pytest.raises(StrataError) as caught:
        project_of("model m {\n  from orders\n  owners\n}\n")
    assert caught.value.code == "E007"
    with pytest.raises(StrataError) as caught:
        project_of("model m {\n  from orders\n  owners: ['team:a']\n  owners: ['team:b']\n}\n")
    assert caught.value.code == "E006"
