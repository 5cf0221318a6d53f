"""Where the repository's files are, for tests at any depth of strata_dagster_tests."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "strata_dagster_tests"
GOLDEN = TESTS / "golden"
EXAMPLES = REPO / "examples"
DOCS = REPO / "docs"
