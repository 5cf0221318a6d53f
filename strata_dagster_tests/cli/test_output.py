"""The command line's output (cli/output.py): a plain line is written as rich would print it,
without rich; anything else (styles, markup) is rich's."""

import io
import subprocess
import sys

import pytest
from rich.console import Console

from strata_dagster.cli.output import LazyConsole

LINES = (
    "strata run on branch main (/tmp/w.duckdb)",
    "  stg_orders                   reused         92,076 rows     0.00s  unchanged",
    "a line far wider than any terminal: " + "x" * 300,
    "brackets [bold]stay[/bold] as written, and so do :smile: and :memory:",
    "two\nlines",
    "",
    "unicode: naïve café ☕ 日本",
)


@pytest.mark.parametrize("text", LINES)
def test_a_plain_line_is_what_rich_prints(text, capsys):
    LazyConsole(highlight=False).print(text, markup=False, soft_wrap=True)
    plain = capsys.readouterr().out
    file = io.StringIO()
    Console(file=file, highlight=False, emoji=False).print(text, markup=False, soft_wrap=True)
    assert plain == file.getvalue()


def test_a_line_rich_rewrites_goes_through_rich(capsys):
    console = LazyConsole(highlight=False)
    console.print("a\ttab", markup=False, soft_wrap=True)
    console.print("[b]markup[/b]")
    assert capsys.readouterr().out == "a       tab\nmarkup\n"


PRINTS = """
import sys
from strata_dagster.cli.output import console, say
say("plain")
console.print("plain too", markup=False, soft_wrap=True)
print("rich" in sys.modules)
say("styled", style="red")
print("rich" in sys.modules)
"""


def test_plain_lines_import_no_rich():
    done = subprocess.run([sys.executable, "-c", PRINTS], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == ["plain", "plain too", "False", "styled", "True"]
