"""`strata_python_model`: an asset function returning a polars or pandas DataFrame, published by the
StrataIOManager as a snapshot behind `v_<name>`, with pins, like a SQL model."""

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import dagster as dg

from strata_dagster.orchestration import constants as c
from strata_dagster.orchestration.automation import stale_condition


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
    """

    def decorator(fn: Callable[..., Any]) -> dg.AssetsDefinition:
        model = name or fn.__name__
        return dg.asset(
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
            },
            **asset_kwargs,
        )(fn)

    return decorator
