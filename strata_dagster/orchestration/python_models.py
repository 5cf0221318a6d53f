"""`strata_python_model`: an asset function returning a polars or pandas DataFrame, published by the
StrataIOManager as a snapshot behind `v_<name>`, with pins, like a SQL model."""

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import dagster as dg

from strata_dagster.compile.relations import DEFAULT_BRANCH
from strata_dagster.orchestration import constants as c
from strata_dagster.orchestration.automation import stale_condition
from strata_dagster.orchestration.translator import model_relation


def strata_python_model(
    *,
    name: str | None = None,
    unique: Sequence[str] = (),
    contract: Mapping[str, str] | None = None,
    code_version: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    **asset_kwargs: Any,
) -> Callable[[Callable[..., Any]], dg.AssetsDefinition]:
    """Decorate a function returning a DataFrame to make it a Python model.

    `unique` and `contract` are the model's pins, checked against the new snapshot before it is
    published (a failure leaves the live view untouched): `contract={"order_id": "BIGINT not null"}`.
    `code_version` names the function's logic (bump it when the logic changes, so Dagster marks the
    model stale). Like SQL models, it gets the strata stale condition unless `automation_condition`
    says otherwise. Other keyword arguments go to `dagster.asset` (`ins`, `deps`, `group_name`, ...);
    inputs from strata models arrive as polars frames, or pandas ones when annotated `pd.DataFrame`.
    Its definition metadata names the live view it is published as (`dagster/table_name`, on the
    branch `build_definitions` is given) and the function's file and line (`dagster/code_references`).
    """

    def decorator(fn: Callable[..., Any]) -> dg.AssetsDefinition:
        model = name or fn.__name__
        asset = dg.asset(
            name=model,
            code_version=code_version,
            io_manager_key=c.STRATA_IO_MANAGER_KEY,
            pool=c.DUCKDB_POOL,
            kinds=set(asset_kwargs.pop("kinds", {"python", "duckdb"})),
            automation_condition=asset_kwargs.pop("automation_condition", stale_condition()),
            metadata={
                **(metadata or {}),
                c.MODEL_KEY: model,
                c.UNIQUE_KEY: list(unique),
                c.CONTRACT_KEY: dict(contract or {}),
                c.TABLE_NAME_KEY: model_relation(model, DEFAULT_BRANCH),
            },
            **asset_kwargs,
        )(fn)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", dg.BetaWarning)  # code references are beta in 1.13
            (referenced,) = dg.with_source_code_references([asset])
        assert isinstance(referenced, dg.AssetsDefinition)
        return referenced

    return decorator


def on_branch(asset: dg.AssetsDefinition, branch: str) -> dg.AssetsDefinition:
    """A Python model's asset naming the live view it publishes on `branch` (other assets as they are)."""

    def relocate(spec: dg.AssetSpec) -> dg.AssetSpec:
        model = spec.metadata.get(c.MODEL_KEY)
        if model is None:
            return spec
        return spec.replace_attributes(
            metadata={**spec.metadata, c.TABLE_NAME_KEY: model_relation(str(model), branch)}
        )

    if not any(c.MODEL_KEY in spec.metadata for spec in asset.specs):
        return asset  # a Python consumer, not a model
    return asset.map_asset_specs(relocate)
