"""The asset jobs of a project: one per partitions definition (a run cannot mix them), and the job
observing its sources; the stale sensor launches their runs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import dagster as dg

from strata_dagster.orchestration.naming import ProjectNames


@dataclass(frozen=True)
class AssetJobs:
    """The jobs, the job of every materializable asset, and the sources the observe job observes."""

    jobs: list[dg.UnresolvedAssetJobDefinition]
    job_of: dict[dg.AssetKey, str]
    observable: list[dg.AssetKey]
    observe_job: dg.UnresolvedAssetJobDefinition


def build_asset_jobs(
    assets: Sequence[dg.AssetsDefinition | dg.SourceAsset],
    names: ProjectNames,
    executor: dg.ExecutorDefinition,
) -> AssetJobs:
    """One asset job per partitions definition: the unpartitioned models with the unpartitioned
    sources, and each distinct daily or monthly partitioning; and the observe job."""
    groups: dict[str, list[dg.AssetKey]] = {}
    job_names: dict[str, str] = {}
    job_of: dict[dg.AssetKey, str] = {}
    observable: list[dg.AssetKey] = []
    for item in assets:
        partitions_def = item.partitions_def
        if isinstance(item, dg.SourceAsset):
            if partitions_def is None:  # partitioned sources are observed through their companion
                observable.append(item.key)
                groups.setdefault("", []).append(item.key)
            continue
        identity = "" if partitions_def is None else repr(partitions_def)
        for key in (spec.key for spec in item.specs):  # in the order the models build
            groups.setdefault(identity, []).append(key)
            if identity not in job_names:
                job_names[identity] = (
                    names.unpartitioned_job if not identity else names.partitions_job(key.path[-1])
                )
            job_of[key] = job_names[identity]
    job_names.setdefault("", names.unpartitioned_job)
    jobs = [
        dg.define_asset_job(
            job_names[identity],
            selection=dg.AssetSelection.assets(*keys),
            description=f"Strata assets of one partitioning; {names.stale_sensor} launches its runs.",
            executor_def=executor,
        )
        for identity, keys in groups.items()
    ]
    observe_job = dg.define_asset_job(
        names.observe_job,
        selection=dg.AssetSelection.assets(*observable),
        description=f"Observes the strata sources; {names.stale_sensor} launches it when a source changed.",
        executor_def=executor,
    )
    return AssetJobs(jobs, job_of, observable, observe_job)
