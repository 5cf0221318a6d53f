"""The Dagster Component: `StrataProjectComponent` (a strata project in a dg project's defs.yaml)."""

from strata_dagster.orchestration.component.project import StrataProjectComponent

__all__ = ["StrataProjectComponent"]
