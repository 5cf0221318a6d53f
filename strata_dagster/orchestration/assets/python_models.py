"""`strata_python_model`: an asset function returning a polars or pandas DataFrame, published by the
StrataIOManager as a snapshot behind `v_<name>`, with pins, like a SQL model."""

import functools
import inspect
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import dagster as dg

from strata_dagster.compile.relations import DEFAULT_BRANCH
from strata_dagster.engine.iceberg_publication import iceberg_table
from strata_dagster.orchestration import constants as c
from strata_dagster.orchestration.io.frames import parse_contract, with_content_version
from strata_dagster.orchestration.io.pandas_types import contract_frame_type
from strata_dagster.orchestration.naming import ProjectNames
from strata_dagster.orchestration.sensors.automation import stale_condition
from strata_dagster.orchestration.translator import model_relation


def strata_python_model(
    *,
    name: str | None = None,
    unique: Sequence[str] = (),
    contract: Mapping[str, str] | None = None,
    code_version: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    project: str | None = None,
    **asset_kwargs: Any,
) -> Callable[[Callable[..., Any]], dg.AssetsDefinition]:
    """Decorate a function returning a DataFrame to make it a Python model.

    `unique` and `contract` are the model's pins, checked against the new snapshot before it is
    published (a failure leaves the live view untouched): `contract={"order_id": "BIGINT not null"}`.
    A pandas frame is also checked against the contract by dagster-pandas before anything is
    written (the output's Dagster type). `code_version` names the function's logic (bump it when
    the logic changes, so Dagster marks the model stale); the data version is the frame's content.
    `project`: the `name` of the strata project it belongs to when a code location holds several
    (build_definitions' `name`, the component's). Like SQL models, it gets the strata stale
    condition unless `automation_condition` says otherwise. Other keyword arguments go to
    `dagster.asset` (`ins`, `deps`, `group_name`, ...); inputs from strata models arrive as polars
    frames, or pandas ones when annotated `pd.DataFrame`. Its definition metadata names the live
    view it is published as (`dagster/table_name`, on the branch `build_definitions` is given) and
    the function's file and line (`dagster/code_references`).
    """

    def decorator(fn: Callable[..., Any]) -> dg.AssetsDefinition:
        model = name or fn.__name__
        columns = parse_contract(dict(contract or {}))
        dagster_type = asset_kwargs.pop("dagster_type", None) or contract_frame_type(model, columns)

        @functools.wraps(fn)
        def content_versioned(*args: Any, **kwargs: Any) -> Any:
            return with_content_version(fn(*args, **kwargs))

        # Dagster reads the parameters (inputs, context) and the return type from the signature:
        # the function's, returning an Output of what it returns.
        signature = _signature(fn)
        returned = signature.return_annotation
        is_typed = returned is not inspect.Signature.empty and not isinstance(returned, str)
        output = dg.Output[returned] if is_typed else dg.Output  # type: ignore[valid-type]  # the Output of what the user's function returns, known at run time
        content_versioned.__signature__ = signature.replace(return_annotation=output)  # type: ignore[attr-defined]  # a function takes __signature__; typeshed does not list it
        content_versioned.__annotations__ = {**getattr(fn, "__annotations__", {}), "return": output}

        asset = dg.asset(
            name=model,
            code_version=code_version,
            io_manager_key=ProjectNames(project).io_manager_key,
            pool=c.DUCKDB_POOL,
            kinds=set(asset_kwargs.pop("kinds", {"python", "duckdb"})),
            automation_condition=asset_kwargs.pop("automation_condition", stale_condition()),
            metadata={
                **(metadata or {}),
                c.MODEL_KEY: model,
                c.UNIQUE_KEY: list(unique),
                c.CONTRACT_KEY: dict(contract or {}),
                c.TABLE_NAME_KEY: model_relation(model, DEFAULT_BRANCH),
                # Where the user's function is (Dagster's with_source_code_references would point
                # at the wrapper it calls).
                **_code_reference(fn),
            },
            dagster_type=dagster_type,  # None: Dagster's default
            **asset_kwargs,
        )(content_versioned)
        return asset

    return decorator


def _code_reference(fn: Callable[..., Any]) -> dict[str, dg.CodeReferencesMetadataValue]:
    """Where `fn` is declared (its first decorator's line), as Dagster's code references word it;
    nothing for a function without a source file (defined in a REPL)."""
    try:
        source, line = inspect.getsourcefile(fn), inspect.getsourcelines(fn)[1]
    except (OSError, TypeError):
        return {}
    if source is None:
        return {}
    reference = dg.LocalFileCodeReference(file_path=os.path.abspath(source), line_number=line)
    return {c.CODE_REFERENCES_KEY: dg.CodeReferencesMetadataValue(code_references=[reference])}


def _signature(fn: Callable[..., Any]) -> inspect.Signature:
    """`fn`'s signature, its annotations evaluated when they are strings and can be (`from
    __future__ import annotations`); as written otherwise."""
    try:
        return inspect.signature(fn, eval_str=True)
    except (NameError, SyntaxError, TypeError):
        return inspect.signature(fn)


def on_branch(asset: dg.AssetsDefinition, branch: str) -> dg.AssetsDefinition:
    """A Python model's asset naming the live view it publishes on `branch`, or its Iceberg table
    when publication to Iceberg is on (other assets as they are)."""

    def relocate(spec: dg.AssetSpec) -> dg.AssetSpec:
        model = spec.metadata.get(c.MODEL_KEY)
        if model is None:
            return spec
        table = iceberg_table(str(model), branch)
        if table is None:
            return spec.replace_attributes(
                metadata={**spec.metadata, c.TABLE_NAME_KEY: model_relation(str(model), branch)}
            )
        # Published to Iceberg: what other engines read it as, as for the project's models.
        return spec.replace_attributes(
            metadata={**spec.metadata, c.TABLE_NAME_KEY: table, c.ICEBERG_TABLE_KEY: table},
            kinds={*spec.kinds, c.ICEBERG_KIND},
        )

    if not any(c.MODEL_KEY in spec.metadata for spec in asset.specs):
        return asset  # a Python consumer, not a model
    return asset.map_asset_specs(relocate)
