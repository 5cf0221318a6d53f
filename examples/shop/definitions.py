"""Dagster definitions for the shop example: `dagster dev` (see workspace.yaml) loads `defs`.

Every source and model of the .strata modules becomes an asset; `region_summary` shows a Python
model beside them: a function of a strata model (read as a polars frame) whose DataFrame becomes a
snapshot of its own, behind `main.v_region_summary`, with a `unique` pin.
"""

from pathlib import Path

from strata_dagster import build_definitions, strata_python_model

PROJECT = Path(__file__).resolve().parent


@strata_python_model(
    unique=["region"],
    code_version="1",
    group_name="python",
    description="Orders and revenue per customer region, computed in polars from orders_enriched.",
)
def region_summary(orders_enriched):  # a polars DataFrame (annotate `pd.DataFrame` for pandas)
    # Imported here, not at the top: every run's process loads this module, and polars takes
    # a second or so to import on a busy machine; only the run that computes this model needs it.
    import polars as pl

    return (
        orders_enriched.filter(pl.col("status").is_in(["paid", "shipped"]))
        .group_by("region")
        .agg(orders=pl.len(), revenue=pl.col("amount").sum())
        .sort("region")
    )


# The warehouse is $STRATA_WAREHOUSE, else examples/shop/warehouse.duckdb
# (create it with `strata sample-data examples/shop --rows 100000`).
# `strata_verify_schedule` runs the `strata_verify` job (incremental models against full rebuilds)
# at 3 AM UTC once turned on in the UI (Automation); it ships stopped.
defs = build_definitions(PROJECT, python_assets=[region_summary], verification_schedule="0 3 * * *")
