"""The shop's Python model for the dg project (defs.yaml's `python_models`); the same model as
`region_summary` in ../definitions.py, the example for Python users of build_definitions."""

from strata_dagster import strata_python_model


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
