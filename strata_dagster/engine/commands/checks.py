"""What the Dagster asset checks ask the engine about a model's live view on a branch.

- Pins (`unique`, `contract`) measured on the live view, read-only: the build gate already refused
  any snapshot that broke them, so a failure here means the warehouse changed behind the engine's
  back (an edited view, a dropped snapshot, a Python model's pins changed since its last build).
- Incremental equals full: `verify` (docs/architecture.md, R12) on the selected models that are
  published, with the figures of every differing partition for the check's metadata.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strata_dagster.backends.base import WarehouseError
from strata_dagster.backends.duckdb.pins import (
    ContractProblem,
    Duplicates,
    contract_problems,
    duplicate_keys,
    row_count,
)
from strata_dagster.backends.opening import open_live_session, open_session
from strata_dagster.compile.relations import DEFAULT_BRANCH, branch_schema, model_view
from strata_dagster.engine.commands.verify import ModelVerification, VerifyReport, verify_context
from strata_dagster.engine.context import load_context, select_models
from strata_dagster.language.definition import Project
from strata_dagster.sql.render import render

Contract = tuple[tuple[str, str, bool], ...]  # (column, type, is_not_null)
# Metadata stays readable (and small) for a model with hundreds of differing partitions.
MAX_PARTITION_FIGURES = 100


@dataclass(frozen=True)
class Pins:
    unique: tuple[str, ...] = ()
    contract: Contract = ()


def model_pins(project: Project, name: str) -> Pins:
    props = project.models[name].properties
    contract = tuple((column.name, column.type, column.is_not_null) for column in props.contract or ())
    return Pins(tuple(props.unique or ()), contract)


def is_verifiable(project: Project, name: str) -> bool:
    """Whether a model's live rows can differ from a full rebuild of its live inputs: incremental
    models (delta merges) and partitioned ones (partitions rebuilt apart). A replace model is one
    full build of its inputs; its inputs' checks catch what would make it differ."""
    props = project.models[name].properties
    return props.is_incremental or props.merge_strategy != "replace" or props.partitioned_by is not None


@dataclass(frozen=True)
class LivePins:
    """A model's pins measured on its live view (None: the model has no such pin, or `unreadable`
    says why its view could not be read)."""

    model: str
    relation: str  # e.g. `main.v_stg_orders`
    pins: Pins
    rows: int = 0
    duplicates: Duplicates | None = None
    contract_problems: tuple[ContractProblem, ...] | None = None
    is_published: bool = True
    unreadable: str | None = None

    def unique_metadata(self) -> dict[str, Any]:
        found = self.duplicates or Duplicates(self.pins.unique)
        return {
            "relation": self.relation,
            "rows": self.rows,
            "unique_columns": list(found.columns),
            "duplicate_keys": found.key_values,
            "rows_with_duplicate_keys": found.rows,
            "max_copies": found.max_copies,
            "sample_duplicate_keys": list(found.samples),
        }

    def contract_metadata(self) -> dict[str, Any]:
        problems = self.contract_problems or ()
        return {
            "relation": self.relation,
            "rows": self.rows,
            "columns_checked": len(self.pins.contract),
            "mismatches": len(problems),
            "missing_columns": [p.column for p in problems if p.kind == "missing"],
            "type_mismatches": {
                p.column: {"expected": p.expected, "actual": p.actual}
                for p in problems
                if p.kind in ("type", "unknown_type")
            },
            "null_violations": {p.column: p.null_rows for p in problems if p.kind == "nulls"},
            "problems": [p.message for p in problems],
        }


def check_live_pins(
    warehouse: Path | str, pins: Mapping[str, Pins], branch: str = DEFAULT_BRANCH, *, sample: int = 5
) -> dict[str, LivePins]:
    """Measure each model's `pins` on its live view on `branch`, read through the serving copy
    (never the writer's file: a check never holds up a run, nor waits for one)."""
    results = {}
    with open_live_session(Path(warehouse)) as session:
        for model, wanted in pins.items():
            view = model_view(model, branch)
            relation = render(view)
            if session.view_tables(branch_schema(branch), model) is None:
                results[model] = LivePins(model, relation, wanted, is_published=False)
                continue
            try:
                results[model] = LivePins(
                    model,
                    relation,
                    wanted,
                    row_count(session, view),
                    duplicate_keys(session, view, wanted.unique, sample=sample) if wanted.unique else None,
                    contract_problems(session, view, wanted.contract) if wanted.contract else None,
                )
            except WarehouseError as error:
                results[model] = LivePins(model, relation, wanted, unreadable=str(error))
    return results


@dataclass(frozen=True)
class LiveVerification:
    """`verify` of the published models among those asked for; the others are `unpublished`."""

    report: VerifyReport | None
    unpublished: tuple[str, ...]


def verify_published(
    project_dir: Path | str, warehouse: Path | str, models: Iterable[str], branch: str = DEFAULT_BRANCH
) -> LiveVerification:
    """Compare each published model of `models` on `branch` with a full rebuild (see `verify`):
    scratch tables in a transaction that is always rolled back, so the warehouse opens writable."""
    requested = tuple(models)
    if not requested:
        return LiveVerification(None, ())
    with open_session(Path(warehouse)) as session:
        context = load_context(session, Path(project_dir), {}, branch)
        selected = select_models(context.project, requested)
        schema = branch_schema(branch)
        published = tuple(name for name in selected if session.view_tables(schema, name) is not None)
        unpublished = tuple(name for name in selected if name not in published)
        if not published:
            return LiveVerification(None, unpublished)
        return LiveVerification(verify_context(session, context, published), unpublished)


def verification_metadata(model: ModelVerification) -> dict[str, Any]:
    """`as_metadata()` plus the figures of each differing partition (the first 100)."""
    metadata = model.as_metadata()
    if model.partitioned_by is not None:
        differing = [part for part in model.partitions if not part.is_equal]
        metadata["partition_figures"] = {
            part.partition or "NULL": part.figures.as_metadata() for part in differing[:MAX_PARTITION_FIGURES]
        }
        if len(differing) > MAX_PARTITION_FIGURES:
            metadata["partition_figures_shown"] = f"{MAX_PARTITION_FIGURES} of {len(differing)}"
    return metadata


def describe_difference(model: ModelVerification) -> str:
    """One line for a check's description."""
    if model.is_equal:
        history = f"; {model.figures.history_rows:,} history rows kept" if model.figures.history_rows else ""
        return f"`{model.model}` equals a full rebuild{history}"
    figures = model.figures
    parts = [
        f"row delta {figures.row_delta:+,}",
        f"{figures.hash_groups_only_in_full:,} hash group(s) only in full",
        f"{figures.hash_groups_only_in_incremental:,} only incrementally",
        f"{figures.hash_groups_with_count_mismatch:,} with another count",
    ]
    if figures.mismatched_totals:
        parts.append("totals of " + ", ".join(f"`{t.column}`" for t in figures.mismatched_totals) + " differ")
    if model.mismatched_partitions:
        shown: Sequence[str | None] = model.mismatched_partitions[:5]
        more = len(model.mismatched_partitions) - len(shown)
        parts.append(
            "in partition(s) "
            + ", ".join(key or "NULL" for key in shown)
            + (f" and {more} more" if more else "")
        )
    parts.extend(model.schema_differences)
    return f"`{model.model}` differs from a full rebuild: " + "; ".join(parts)
