"""strata_dagster: strata models as Dagster assets on immutable, versioned DuckDB layers."""

from __future__ import annotations

from typing import Any

from strata_dagster.errors import StrataError

__all__ = [
    "StrataDagsterTranslator",
    "StrataDuckDBResource",
    "StrataError",
    "StrataGcPolicy",
    "StrataIOManager",
    "StrataProjectComponent",
    "StrataResource",
    "build_definitions",
    "strata_python_model",
]

# The Dagster layer loads on first use, so `import strata_dagster` (the CLI, the engine) never
# imports dagster.
_DAGSTER_NAMES = frozenset(name for name in __all__ if name != "StrataError")


def __dir__() -> list[str]:
    # dg finds components by listing the module registered as its entry point (this one).
    return sorted({*globals(), *__all__})


def __getattr__(name: str) -> Any:
    if name in _DAGSTER_NAMES:
        try:
            from strata_dagster import orchestration
        except AttributeError as error:  # else `from strata_dagster import x` hides the real cause
            raise ImportError(f"strata_dagster.orchestration failed to import: {error}") from error
        return getattr(orchestration, name)
    raise AttributeError(f"module 'strata_dagster' has no attribute {name!r}")
