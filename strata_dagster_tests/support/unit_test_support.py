"""`test` blocks written from rows: what a build gave, as fixtures a unit test compares with."""

from strata_dagster.engine.commands.unit_tests import fixture_literal


def fixture(columns, rows) -> str:
    lines = ["(" + ", ".join(columns) + ")"]
    lines += ["(" + ", ".join(fixture_literal(value) for value in row) + ")" for row in rows]
    return "[\n    " + "\n    ".join(lines) + "\n  ]"


def strata_test(
    model: str, given: dict[str, tuple], columns, expected, previous=None, name="versions"
) -> str:
    """A test block of `model` giving each input's (columns, rows), expecting `expected` in
    `columns`; with `previous` (columns, rows), one incremental step."""
    inputs = "".join(f"  given {relation} {fixture(*table)}\n" for relation, table in given.items())
    state = "" if previous is None else f"  previous {fixture(*previous)}\n"
    return f"test {model} {name} {{\n{inputs}{state}  expect {fixture(columns, expected)}\n}}\n"
